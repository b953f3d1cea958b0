//===- attnc.cpp - The attnc command-line driver -------------------------===//
//
//   attnc compile FILE.attn [--variant NAME] [--emit=ast|attn] [-o OUT]
//   attnc --help | --version
//
// Each subcommand parses its own options; a new stage is a new --emit value.
//
//===----------------------------------------------------------------------===//
#include "Check.h"

#include "attnc/Analysis/MaskAnalysis.h"
#include "attnc/Codegen/AttnPipeline.h"
#include "attnc/Codegen/CpuBackend.h"
#include "attnc/Codegen/GpuBackend.h"
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/VariantInfo.h"
#include "attnc/Driver/CachedGpuCompile.h"
#include "attnc/Frontend/Parser.h"
#include "attnc/Frontend/Sema.h"
#include "attnc/MLIRGen/MLIRGen.h"
#include "attnc/runtime/FileIO.h"
#include "attnc/runtime/Parse.h"

#include "attn/AttnDialect.h"

#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

#include <cerrno>
#include <climits>
#include <cstring>
#include <algorithm>
#include <array>
#include <fstream>
#include <map>
#include <tuple>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace {

const char *kUsage = R"(attnc - the attention-variant compiler

usage:
  attnc compile FILE.attn [options]   compile variants and print a stage
  attnc check FILE.attn [options]     run a variant against the fp64 reference
                                      (attnc check --help)
  attnc bench FILE.attn [options]     time a variant (attnc bench --help)
  attnc tune RECORDS... [-o FILE]     choose tile configurations from
                                      attnc-run --tune's records
                                      (attnc tune --help)
  attnc --help                        show this help
  attnc --version                     show the version

compile options:
  --emit=STAGE      what to print:
                      ast     the typed syntax tree
                      attn    the attn dialect, verified and canonicalized,
                              with each variant's score_grad (score_mod's
                              derivative) built (the default)
                      mask    the mask analysis and a grid of tile classes
                      info    the signature and modifier program the runtime
                              reads (the fp64 reference runs it; its grad
                              section is score_grad)
                      tiled   the tiled flash program (the flash dialect:
                              the algorithm over tiles, for the kernel
                              form --target gets)
                      cpu     the CPU program (scf/vector/memref)
                      llvm    LLVM IR for the host, optimized (--target=cpu)
                      gpu     the GPU program (gpu dialect)
                      nvvm    the GPU program lowered to the NVVM dialect
                      ptx     PTX from LLVM's NVPTX backend (--target=sm_XX)
                      package a kernel package for the runtime (JSON: the
                              variants' programs and PTX per target, dtype
                              and head dims; docs/runtime.md)
  --backward        with --emit=gpu|nvvm|ptx: the GPU backward program
                    (<kernel>_bwd_q, <kernel>_bwd_kv; docs/backward.md);
                    with --emit=tiled|cpu|llvm: the backward program;
                    with --emit=package: the backward's kernels too, one
                    per target, dtype and head dims
  --backward-stages N
                    the tensor-core backward's K/V stages in _bwd_q: 2
                    (default, where they fit the target's shared memory)
                    or 1 (each tile's copy waited for before its products)
  --dropout         kernels that apply attention dropout (docs/dropout.md;
                    p, seed and offset are run-time arguments)
  --key-offsets     kernels that read each sequence's first key position
                    (kvOffsets: a key block of a longer sequence; without
                    it key r is at position r and costs nothing)
  --key-offsets=both
                    with --emit=package: each kernel with and without key
                    offsets (the runtime picks the one a call needs)
  --target=T        cpu (default), or sm_80, sm_86, sm_89, sm_90, sm_90a for
                    the GPU stages (tensor-core forms for f16/bf16: wgmma
                    on sm_90a where the head dims are multiples of 64,
                    mma.sync elsewhere; SIMT for f32; emulated in CI,
                    validated on an H100); a comma
                    list for --emit=package (default sm_80,sm_90,sm_90a)
  --dtypes=LIST --head-dims=LIST
                    what --emit=package compiles: dtypes (default
                    f32,f16,bf16) and head dims, each D or Dqk:Dv (default
                    64,128)
  --tuning=FILE     --emit=package: tiles from `attnc tune`'s file where it
                    has a choice for the target, dtype and head dims
  --tile-candidates --emit=package: every tile configuration the tuner
                    times, per target, dtype and head dims (for
                    attnc-run --tune)
  --dtype T --head-dim N --v-head-dim N --block-m N --block-n N --warps N
                    kernel configuration (f32, 64, the head dim, 64, 64);
                    on the GPU,
                    64 x 64 with no --warps means the configuration table's
                    tiles for the target and head dims (docs/kernels.md)
  --form NAME       the forward's kernel form, instead of the first that
                    takes the request (docs/kernels.md): simt, mma-sync,
                    wgmma, or wgmma-persistent (sm_90a's warp-specialized
                    kernel with one block per SM taking work items a grid
                    apart, the stages' ring going on from one item to the
                    next); a target or dtype the form does not take is an
                    error
  --stages N        K/V pipeline stages of the tensor-core forms (default:
                    the form's; mma.sync has 2; sm_90a's wgmma 3 where they
                    fit, which overlaps a tile's softmax with the previous
                    tile's PV, 2 waiting for each product in turn); a form
                    that cannot have N is not chosen
  --q-len N --kv-len N --set NAME=VALUE
                    the problem the mask grid is drawn for (256, 256)
  --variant NAME    only this variant (default: every variant in the file)
  -o FILE           write to FILE instead of standard output
  -O0               do not canonicalize the attn IR
  --debug-locs      print source locations in the IR

FILE may be '-' to read standard input. Errors are reported as
file:line:col: error: message, with the source line and a caret, and the
exit status is 1.
)";

int usageError(const std::string &msg) {
  std::cerr << "attnc: error: " << msg << "\n"
            << "run 'attnc --help' for usage\n";
  return 2;
}

bool readFile(const std::string &path, std::string &out, std::string &err) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    out = ss.str();
    return true;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    err = "cannot read '" + path + "': " + std::strerror(errno);
    return false;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  out = ss.str();
  return true;
}

struct CompileOptions {
  std::string input;
  std::string emit = "attn";
  std::string target = "cpu";
  attnc::rt::KernelSpec spec;
  int64_t qLen = 256, kvLen = 256;
  std::map<std::string, int64_t> sets;
  std::string variant;
  std::string output;
  bool canonicalize = true;
  bool debugLocs = false;
  std::string dtypes = "f32,f16,bf16", headDims = "64,128";
  std::string tuning;          // --tuning FILE (attnc tune's output)
  bool tileCandidates = false; // --tile-candidates
  bool bothKeyOffsets = false; // --key-offsets=both: packages hold either kind
  bool backward = false;       // --backward: the GPU stages' backward program
  int64_t backwardStages = 0;  // --backward-stages N: _bwd_q's K/V stages
};

std::vector<std::string> splitList(const std::string &s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty())
      out.push_back(item);
  return out;
}

/// --emit=package: every variant x target x dtype x head dims, one file.
int emitPackage(mlir::ModuleOp module, const CompileOptions &o,
                const std::string &source, std::ostream &os) {
  namespace rt = attnc::rt;
  std::vector<std::string> targets = splitList(o.target);
  std::vector<rt::DType> dtypes;
  for (const std::string &d : splitList(o.dtypes)) {
    auto t = rt::parseDType(d);
    if (!t || (*t != rt::DType::F32 && *t != rt::DType::F16 &&
               *t != rt::DType::BF16))
      return usageError("--dtypes: '" + d + "' is not f32, f16 or bf16");
    dtypes.push_back(*t);
  }
  std::vector<std::pair<int64_t, int64_t>> dims;
  for (const std::string &d : splitList(o.headDims)) {
    size_t colon = d.find(':');
    int64_t a = 0, b = 0;
    bool ok = attnc::rt::parseInt(d.substr(0, colon), 8, 256, a);
    b = a;
    if (ok && colon != std::string::npos)
      ok = attnc::rt::parseInt(d.substr(colon + 1), 8, 256, b);
    if (!ok || a % 8 || b % 8)
      return usageError("--head-dims: '" + d +
                        "' is not D or Dqk:Dv with multiples of 8 up to 256");
    dims.push_back({a, b});
  }
  if (targets.empty() || dtypes.empty() || dims.empty())
    return usageError("--emit=package needs at least one target, dtype and "
                      "head dim");
  rt::TuningTable tuning;
  if (!o.tuning.empty())
    if (rt::Status s = rt::TuningTable::read(o.tuning, tuning); !s) {
      std::cerr << "attnc: error: " << s.message() << "\n";
      return 1;
    }
  rt::Package pkg;
  pkg.compiler = attnc::compilerIdentity();
  // The source's file name only: a package does not carry the builder's
  // folders.
  pkg.source = source.substr(source.find_last_of('/') + 1);
  pkg.tileCandidates = o.tileCandidates;
  // Kernels compiled before (by this tool, a Session or a test) come from
  // the kernel cache, as they do for a Session (ATTNC_KERNEL_CACHE=0: off).
  std::shared_ptr<rt::KernelCache> cache = attnc::defaultKernelCache();
  for (auto v : module.getOps<mlir::attn::VariantOp>()) {
    rt::PackageVariant pv;
    if (rt::Status s = rt::VariantInfo::parse(
            attnc::printVariantInfo(v, attnc::analyzeMask(v)), pv.info);
        !s) {
      std::cerr << "attnc: error: internal error: " << s.message() << "\n";
      return 1;
    }
    std::vector<bool> offsetKinds = {o.spec.keyOffsets};
    if (o.bothKeyOffsets)
      offsetKinds = {false, true};
    for (const std::string &t : targets)
      for (rt::DType dt : dtypes)
        for (auto [d, dv] : dims)
        for (bool keyOffsets : offsetKinds) {
          rt::KernelSpec spec = o.spec;
          spec.keyOffsets = keyOffsets;
          spec.dtype = dt;
          spec.headDim = d;
          spec.vHeadDim = dv;
          // One kernel per (target, dtype, dims): the tuning file's
          // configuration or the table's; with --tile-candidates, every
          // configuration the tuner times (the table's first, which the
          // runtime picks).
          std::vector<rt::KernelSpec> specs;
          if (o.tileCandidates)
            if (attnc::FormChoice c = attnc::formFor(spec, t, attnc::Direction::Forward))
              specs = c.form->tileCandidates(spec, t);
          if (specs.empty()) {
            rt::KernelSpec chosen;
            if (rt::Status s = attnc::applyTuning(spec, t, tuning, chosen); !s) {
              std::cerr << "attnc: error: " << o.tuning << ": " << s.message()
                        << "\n";
              return 1;
            }
            specs.push_back(chosen);
          }
          for (const rt::KernelSpec &one : specs) {
            rt::GpuKernelImage img;
            if (rt::Status s =
                    attnc::compileForGpuCached(cache.get(), v, one, t, img);
                !s) {
              std::cerr << "attnc: error: " << s.message() << "\n";
              return 1;
            }
            pv.kernels.push_back(std::move(img));
          }
          if (o.backward) {
            // The backward's tiles are its own (its form's).
            rt::GpuBackwardImage img;
            rt::KernelSpec bspec = spec;
            bspec.stages = o.backwardStages;
            if (rt::Status s = attnc::compileBackwardForGpuCached(
                    cache.get(), v, bspec, t, img);
                !s) {
              std::cerr << "attnc: error: " << s.message() << "\n";
              return 1;
            }
            pv.backward.push_back(std::move(img));
          }
        }
    pkg.variants.push_back(std::move(pv));
  }
  os << pkg.serialize();
  return 0;
}

/// Prints the mask analysis of each variant and its tile classes for the
/// problem given on the command line.
void printMaskGrid(mlir::attn::VariantOp v, const CompileOptions &o,
                   std::ostream &os) {
  attnc::MaskAnalysis m = attnc::analyzeMask(v);
  os << "variant @" << v.getSymName().str() << "\n";
  os << "  mask: " << m.describe() << "\n";
  int64_t bm = o.spec.blockM, bn = o.spec.blockN;
  os << "  tiles for Lq=" << o.qLen << " Lkv=" << o.kvLen << " (block " << bm
     << "x" << bn << ", queries at the end of the keys)";
  for (auto &[k, val] : o.sets)
    os << " " << k << "=" << val;
  os << ":  F full, P partial, . empty\n";
  int64_t q0 = o.kvLen - o.qLen;
  std::map<std::string, int64_t> known = o.sets;
  known.insert({{"Q", o.qLen}, {"KV", o.kvLen}}); // B, H, HKV: not given
  std::array<int64_t, 3> counts{0, 0, 0};
  for (int64_t qt = 0; qt * bm < o.qLen; ++qt) {
    os << "    ";
    for (int64_t kt = 0; kt * bn < o.kvLen; ++kt) {
      int64_t qlo = q0 + qt * bm, qhi = q0 + std::min(o.qLen, (qt + 1) * bm) - 1;
      int64_t klo = kt * bn, khi = std::min(o.kvLen, (kt + 1) * bn) - 1;
      auto c = attnc::classifyTile(m, known, 0, 0, qlo, qhi, klo, khi);
      counts[c]++;
      os << (c == attnc::rt::abi::kFull      ? 'F'
             : c == attnc::rt::abi::kPartial ? 'P'
                                             : '.');
    }
    os << "\n";
  }
  os << "  " << counts[2] << " full, " << counts[1] << " partial, " << counts[0]
     << " empty\n";
}

int emitLaterStage(mlir::ModuleOp module, const CompileOptions &o,
                   std::ostream &os) {
  for (auto v : module.getOps<mlir::attn::VariantOp>()) {
    if (o.emit == "mask") {
      printMaskGrid(v, o, os);
      continue;
    }
    if (o.emit == "info") {
      os << attnc::printVariantInfo(v, attnc::analyzeMask(v));
      continue;
    }
    attnc::FlashConfig config;
    config.spec = o.spec;
    if (o.backward)
      config.spec.stages = o.backwardStages;
    if (o.emit == "tiled") {
      // The tiled program of the form the request gets on the target.
      std::string error;
      auto m = attnc::buildFlashModule(
          v, config, o.target,
          o.backward ? attnc::Direction::Backward : attnc::Direction::Forward,
          error);
      if (!m) {
        std::cerr << "attnc: error: " << error << "\n";
        return 1;
      }
      std::string s;
      llvm::raw_string_ostream rso(s);
      m->print(rso);
      os << s;
      continue;
    }
    if (o.emit == "gpu" || o.emit == "nvvm" || o.emit == "ptx") {
      std::string error;
      auto m = o.backward
                   ? attnc::buildGpuBackwardModule(v, config, o.target, error)
                   : attnc::buildGpuModule(v, config, o.target, error);
      if (!m) {
        std::cerr << "attnc: error: " << error << "\n";
        return 1;
      }
      if (o.emit != "gpu" && mlir::failed(attnc::lowerToNVVM(*m, o.target))) {
        std::cerr << "attnc: error: lowering to NVVM failed\n";
        return 1;
      }
      if (o.emit == "ptx") {
        std::string ptx = attnc::emitPTX(*m, error);
        if (ptx.empty()) {
          std::cerr << "attnc: error: " << error << "\n";
          return 1;
        }
        os << ptx;
        continue;
      }
      std::string s;
      llvm::raw_string_ostream rso(s);
      m->print(rso);
      os << s;
      continue;
    }
    // The same vector width the JIT uses for this host (--emit=tiled shows
    // 8-wide vectors unless --vector-width says otherwise, for stable tests).
    config.vectorWidth = o.emit == "llvm" && o.spec.blockN % attnc::hostVectorWidth() == 0
                             ? attnc::hostVectorWidth()
                             : 8;
    std::string error;
    auto tiled = o.backward
                     ? attnc::buildBackwardTiledModule(v, config, error)
                     : attnc::buildTiledModule(v, config, error);
    if (!tiled) {
      std::cerr << "attnc: error: " << error << "\n";
      return 1;
    }
    if (o.emit == "cpu") {
      std::string s;
      llvm::raw_string_ostream rso(s);
      tiled->print(rso);
      os << s;
      continue;
    }
    if (mlir::failed(attnc::lowerToLLVMDialect(*tiled))) {
      std::cerr << "attnc: error: lowering to LLVM failed\n";
      return 1;
    }
    std::string ir = attnc::emitHostLLVMIR(*tiled, error);
    if (ir.empty()) {
      std::cerr << "attnc: error: " << error << "\n";
      return 1;
    }
    os << ir;
  }
  return 0;
}

int emitStage(attnc::Module &module, attnc::DiagnosticEngine &diag,
              const CompileOptions &o, const std::string &name,
              std::ostream &os);

int runCompile(const std::vector<std::string> &args) {
  CompileOptions o;
  bool vHeadDimGiven = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    auto value = [&](const std::string &flag, std::string &dst) -> bool {
      if (a.rfind(flag + "=", 0) == 0) {
        dst = a.substr(flag.size() + 1);
        return true;
      }
      if (a == flag && i + 1 < args.size()) {
        dst = args[++i];
        return true;
      }
      return false;
    };
    if (value("--emit", o.emit) || value("--variant", o.variant) ||
        value("-o", o.output) || value("--target", o.target) ||
        value("--dtypes", o.dtypes) || value("--head-dims", o.headDims) ||
        value("--tuning", o.tuning))
      continue;
    if (a == "--tile-candidates") {
      o.tileCandidates = true;
      continue;
    }
    if (a == "--backward") {
      o.backward = true;
      continue;
    }
    if (a == "--dropout") {
      o.spec.dropout = true;
      continue;
    }
    if (a == "--key-offsets") {
      o.spec.keyOffsets = true;
      continue;
    }
    if (a == "--key-offsets=both") {
      o.bothKeyOffsets = true;
      continue;
    }
    std::string num;
    auto intValue = [&](const std::string &flag, int64_t &dst, int64_t lo,
                        int64_t hi) -> int {
      if (!value(flag, num))
        return 0;
      int64_t v = 0;
      if (!attnc::rt::parseInt(num, lo, hi, v))
        return -1;
      dst = v;
      return 1;
    };
    int r = 0;
    for (auto [flag, dst, lo, hi] :
         {std::tuple{"--head-dim", &o.spec.headDim, 8, 256},
          std::tuple{"--v-head-dim", &o.spec.vHeadDim, 8, 256},
          std::tuple{"--block-m", &o.spec.blockM, 1, 256},
          std::tuple{"--block-n", &o.spec.blockN, 8, 1024},
          std::tuple{"--warps", &o.spec.warps, 1, 16},
          std::tuple{"--stages", &o.spec.stages, 2, 8},
          std::tuple{"--backward-stages", &o.backwardStages, 1, 2},
          std::tuple{"--q-len", &o.qLen, 1, 1 << 20},
          std::tuple{"--kv-len", &o.kvLen, 1, 1 << 20}}) {
      r = intValue(flag, *dst, lo, hi);
      if (r < 0)
        return usageError(std::string("invalid value '") + num + "' for " +
                          flag);
      if (r > 0) {
        vHeadDimGiven |= dst == &o.spec.vHeadDim;
        break;
      }
    }
    if (r > 0)
      continue;
    if (value("--form", num)) {
      bool known = false;
      std::string names;
      for (const attnc::KernelForm *f : attnc::kernelForms())
        if (f->direction() == attnc::Direction::Forward && f->name() != "cpu") {
          known |= f->name() == num;
          names += (names.empty() ? "" : ", ") + f->name().str();
        }
      if (!known)
        return usageError("--form must be one of " + names + ", got '" + num +
                          "'");
      o.spec.form = num;
      continue;
    }
    if (value("--dtype", num)) {
      auto t = attnc::rt::parseDType(num);
      if (!t || (*t != attnc::rt::DType::F32 && *t != attnc::rt::DType::F16 &&
                 *t != attnc::rt::DType::BF16))
        return usageError("--dtype must be f32, f16 or bf16");
      o.spec.dtype = *t;
      continue;
    }
    if (value("--set", num)) {
      size_t eq = num.find('=');
      int64_t v = 0;
      std::string rhs = eq == std::string::npos ? "" : num.substr(eq + 1);
      if (rhs == "true" || rhs == "false")
        v = rhs == "true"; // bool scalars
      else if (eq == std::string::npos || eq == 0 ||
               !attnc::rt::parseInt(rhs, INT32_MIN, INT32_MAX, v))
        return usageError("--set expects NAME=INTEGER (an i32) or NAME=true|"
                          "false for the mask grid, got '" + num + "'");
      o.sets[num.substr(0, eq)] = v;
      continue;
    }
    if (a == "-O0")
      o.canonicalize = false;
    else if (a == "--debug-locs")
      o.debugLocs = true;
    else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else if (!a.empty() && a[0] == '-' && a != "-")
      return usageError("unknown option '" + a + "' for 'compile'");
    else if (o.input.empty())
      o.input = a;
    else
      return usageError("more than one input file ('" + o.input + "' and '" +
                        a + "')");
  }
  if (o.input.empty())
    return usageError("'compile' needs an input file");
  // Dv defaults to Dqk, for every stage.
  if (!vHeadDimGiven)
    o.spec.vHeadDim = o.spec.headDim;
  static const char *kStages[] = {"ast",  "attn", "mask", "info",
                                  "tiled", "cpu", "llvm", "gpu",  "nvvm",
                                  "ptx",  "package"};
  if (std::find(std::begin(kStages), std::end(kStages), o.emit) ==
      std::end(kStages))
    return usageError("unknown --emit stage '" + o.emit +
                      "' (expected ast, attn, mask, info, tiled, llvm, gpu, "
                      "nvvm, ptx or package)");
  bool gpuStage = o.emit == "gpu" || o.emit == "nvvm" || o.emit == "ptx";
  if (o.backward && !gpuStage && o.emit != "package" && o.emit != "tiled" &&
      o.emit != "cpu" && o.emit != "llvm")
    return usageError("--backward is for --emit=tiled, cpu, llvm, gpu, nvvm, "
                      "ptx or package");
  if ((!o.tuning.empty() || o.tileCandidates) && o.emit != "package")
    return usageError("--tuning and --tile-candidates are for --emit=package");
  if (o.bothKeyOffsets && o.emit != "package")
    return usageError("--key-offsets=both is for --emit=package (one kernel "
                      "has key offsets or not: --key-offsets)");
  if (!o.tuning.empty() && o.tileCandidates)
    return usageError("--tile-candidates packages every configuration; "
                      "--tuning picks one: choose one");
  if (o.emit == "package") {
    if (o.target == "cpu")
      o.target = "sm_80,sm_90,sm_90a";
    for (const std::string &t : splitList(o.target))
      if (!attnc::isGpuTarget(t))
        return usageError("unknown --target '" + t +
                          "' for a package (expected sm_80, sm_86, sm_89, sm_90 "
                          "or sm_90a)");
  } else if (o.target != "cpu" && !attnc::isGpuTarget(o.target))
    return usageError("unknown --target '" + o.target +
                      "' (expected cpu, sm_80, sm_86, sm_89, sm_90 or sm_90a)");
  if (gpuStage && o.target == "cpu")
    o.target = "sm_80";
  if (o.emit == "llvm" && o.target != "cpu")
    return usageError("--emit=llvm is the host CPU's LLVM IR; for " +
                      o.target + " use --emit=nvvm or --emit=ptx");
  if ((o.emit == "cpu") && o.target != "cpu")
    return usageError("--emit=cpu is the CPU program; for " + o.target +
                      " use --emit=gpu");

  std::string text, err;
  if (!readFile(o.input, text, err)) {
    std::cerr << "attnc: error: " << err << "\n";
    return 1;
  }
  std::string name = o.input == "-" ? "<stdin>" : o.input;
  attnc::SourceFile file(name, std::move(text));
  attnc::DiagnosticEngine diag(file);
  attnc::Module module;
  if (!attnc::parseAndCheck(file, diag, module)) {
    diag.print(std::cerr);
    return 1;
  }
  if (!o.variant.empty() && !module.findVariant(o.variant)) {
    std::string names;
    for (const attnc::Variant &v : module.variants)
      names += (names.empty() ? "" : ", ") + v.name;
    std::cerr << "attnc: error: no variant named '" << o.variant << "' in '"
              << name << "'"
              << (names.empty() ? " (it defines none)"
                                : " (it defines: " + names + ")")
              << "\n";
    return 1;
  }

  // PTX and LLVM IR are one module per file: several variants would make
  // an invalid concatenation.
  if ((o.emit == "ptx" || o.emit == "llvm") && o.variant.empty() &&
      module.variants.size() > 1) {
    std::string names;
    for (const attnc::Variant &v : module.variants)
      names += (names.empty() ? "" : ", ") + v.name;
    std::cerr << "attnc: error: --emit=" << o.emit << " writes one module, "
              << "but '" << name << "' defines " << module.variants.size()
              << " variants (" << names << "); choose one with --variant, or "
              << "use --emit=package for all of them\n";
    return 1;
  }

  // -o FILE: everything is written to memory first and FILE replaced only
  // when the compile succeeded (an existing FILE survives a failure).
  std::ostringstream buffered;
  bool toFile = !o.output.empty() && o.output != "-";
  std::ostream *os = toFile ? static_cast<std::ostream *>(&buffered) : &std::cout;
  int status = emitStage(module, diag, o, name, *os);
  if (status == 0 && toFile)
    if (attnc::rt::Status s = attnc::rt::writeFileAtomic(o.output, buffered.str()); !s) {
      std::cerr << "attnc: error: " << s.message() << "\n";
      return 1;
    }
  return status;
}

/// Emits the requested stage of a checked module to `os`; 0 on success.
int emitStage(attnc::Module &module, attnc::DiagnosticEngine &diag,
              const CompileOptions &o, const std::string &name,
              std::ostream &os_) {
  std::ostream *os = &os_;

  if (o.emit == "ast") {
    if (!o.variant.empty()) {
      attnc::Module one;
      for (attnc::Variant &v : module.variants)
        if (v.name == o.variant)
          one.variants.push_back(std::move(v));
      attnc::printAST(one, *os);
    } else {
      attnc::printAST(module, *os);
    }
    return 0;
  }

  mlir::MLIRContext ctx;
  auto ir = attnc::emitAttn(ctx, module, name, o.variant);
  if (!ir || mlir::failed(mlir::verify(*ir))) {
    std::cerr << "attnc: error: internal error: the generated attn IR does "
                 "not verify\n";
    return 1;
  }
  std::string error;
  if (mlir::failed(attnc::runAttnPipeline(*ir, o.canonicalize, error))) {
    std::cerr << "attnc: error: internal error: " << error << "\n";
    return 1;
  }
  if (!attnc::checkModifierSizes(*ir, module, diag)) {
    diag.print(std::cerr);
    return 1;
  }
  if (o.emit == "package")
    return emitPackage(*ir, o, name, *os);
  if (o.emit != "attn")
    return emitLaterStage(*ir, o, *os);
  mlir::OpPrintingFlags flags;
  if (o.debugLocs)
    flags.enableDebugInfo(/*enable=*/true, /*prettyForm=*/true);
  std::string printed;
  llvm::raw_string_ostream rso(printed);
  ir->print(rso, flags);
  *os << printed;
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string &cmd = args[0];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (cmd == "--version") {
    std::cout << attnc::compilerIdentity() << "\n";
    return 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  int status;
  if (cmd == "compile")
    status = runCompile(rest);
  else if (cmd == "check")
    status = attnc::tools::runCheck(rest);
  else if (cmd == "bench")
    status = attnc::tools::runBench(rest);
  else if (cmd == "tune")
    status = attnc::tools::runTune(rest);
  else
    return usageError("unknown command '" + cmd + "'");
  // What went to standard output must have arrived (a full disk, a closed
  // pipe): otherwise the run failed.
  if (!std::cout.flush()) {
    std::cerr << "attnc: error: writing to standard output failed\n";
    return 1;
  }
  return status;
}
