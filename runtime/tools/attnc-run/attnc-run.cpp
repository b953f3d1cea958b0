//===- attnc-run.cpp - Run a kernel package on the GPU (runtime only) ----===//
//
//   attnc-run PACKAGE --list
//   attnc-run PACKAGE [--variant NAME] [--suite | shape options]
//   attnc-run PACKAGE --bench [--sweep T1,T2,...] [shape options] [--json]
//   attnc-run PACKAGE --backward [--bench] [--suite | shape options]
//   attnc-run CANDIDATES --tune [--sweep ...] [shape options] [--records F]
//
// Links the runtime alone: no LLVM, no compiler. Each case runs on the
// CUDA device and on the fp64 reference (the package carries the modifier
// program), and is compared as `attnc check` does.
//
//===----------------------------------------------------------------------===//
#include "GpuBackwardRun.h"
#include "GpuBench.h"
#include "GpuTune.h"
#include "Options.h"
#include "Parity.h"

#include "attnc/runtime/Package.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <fmt/format.h>

#include "attnc/runtime/FileIO.h"

#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

using namespace attnc;
using namespace attnc::tools;

namespace {

const char *kUsage = R"(usage: attnc-run PACKAGE [options]

Runs the variants of a kernel package (attnc compile --emit=package) on the
first CUDA device and checks them against the fp64 reference, printing
case | max_abs | mean_abs | tolerance | PASS/FAIL. Needs no compiler.

  --list                  the package's variants and kernels, then exit
  --device-info           the device found (or why none), then exit; needs
                          no package
  --variant NAME          one variant (default: every variant)
  --matrix                the GPU parity matrix: {f32, f16, bf16} x head
                          dims {64, 80, 128, 64:32} x {prefill, decode,
                          chunk} x {MHA 8/8, GQA 8/2, MQA 8/1}, with lengths
                          (1, 77, 129, 1000, ...), layouts and ragged
                          batches in rotation (docs/check.md)
  --suite                 the matrix {MHA 8/8, GQA 8/2, MQA 8/1} x {prefill,
                          decode, chunk} x {f32, f16, bf16}, plus GQA 6:1,
                          D=80, Dv != Dqk and BSHD cases
  --batch N --heads N --kv-heads N --q-len N --kv-len N
  --head-dim N --v-head-dim N --dtype f32|f16|bf16 --layout ORDER --pad N
  --kv-lens L1,L2,...     per-sequence KV lengths (a ragged batch; one per
                          --batch entry, each <= --kv-len)
  --q-offsets P[,P2,...]  absolute position of each sequence's first query
                          (one for all, or one per --batch entry; default:
                          the end of its keys). With them --q-len may
                          exceed --kv-len (FlexAttention's convention: 0)
  --kv-offsets P[,P2,...] absolute position of each sequence's first key
                          (one for all, or one per --batch entry; default
                          0): the keys are a block of a longer sequence
  --head-offset N --head-count N
                          the query heads are heads N.. of a model with
                          --head-count of them (default: offset + heads),
                          as the modifiers see them (a head-parallel shard)
  --page-size N           K and V in a pool of N-row pages through a page
                          table, pages shuffled, spare pages NaN
  --splits N              split each sequence's keys in N parts, merged by
                          LSE (default: the planner's choice for the
                          device's SMs; 1: never)
  --mode prefill|decode|chunk --seed N --set NAME=VALUE --checked
  --input NAME=FILE.npy   q, k, v or a capture from a file
  --bench                 time instead of check: CUDA events, --warmup N
                          (default 200) launches, then --iters N (default
                          500) timed one by one; ms median/min/max, TFLOP/s
                          (dense, and useful: scaled by the sampled mask
                          density), K+V GB/s, device memory in use; --json
                          for one object per row; --output FILE.npy writes
                          the (last) output for cross-checks. A data-
                          dependent mask's block mask is built once, before
                          the timed launches (its ms in --json)
  --no-lse                with --bench: calls without the LSE (inference:
                          the tensor-core forward then skips the LSE's f32
                          sums; "lse": false in --json)
  --only DT:D[:DV],...    with --matrix or --suite: only the cases of these
                          dtypes and head dims (each must be one of the
                          list's; e.g. --only bf16:64,f16:128:128)
  --sweep T1,T2,...       with --bench or --tune: sequence lengths (prefill
                          Lq = Lkv = T; decode Lkv = T)
  --backward              the backward's kernels (a package from attnc
                          compile --emit=package --backward): each case
                          runs the packaged forward, then the backward,
                          and compares dq, dk, dv and the parameters'
                          gradients with the fp64 backward as attnc check
                          --backward does; with --bench, times the
                          backward (each call with its per-call device
                          allocation and wait; TFLOP/s count 2 (3 Dqk +
                          2 Dv) per pair); no time for gradients that are
                          not all finite.
                          Not with --page-size or --splits
  --tune                  time every tile configuration the package has for
                          the shape's dtype and head dims (a package from
                          attnc compile --emit=package --tile-candidates),
                          each checked against the fp64 reference first;
                          one JSON record per (kernel, shape) for
                          `attnc tune`; --warmup (default 50), --iters
                          (default 100)
  --records FILE          with --tune: write the records there (atomically)
                          instead of to standard output

Exit status: 0 all passed, 1 a case failed, 2 usage or package error,
3 no CUDA driver or device (nothing was run).
)";

constexpr int kNoDevice = 3;

/// A kernel's dtype and head dims, as --only names them.
struct CaseKernel {
  rt::DType dtype;
  int64_t headDim, vHeadDim;
};

/// "bf16:64,f16:128:64" (Dv defaults to D); false with `err` on bad text.
bool parseOnly(const std::string &text, std::vector<CaseKernel> &out,
               std::string &err) {
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    std::vector<std::string> f;
    std::stringstream parts(item);
    for (std::string x; std::getline(parts, x, ':');)
      f.push_back(x);
    auto dt = f.empty() ? std::nullopt : rt::parseDType(f[0]);
    int64_t d = 0, dv = 0;
    auto dim = [](const std::string &x, int64_t &v) {
      char *end = nullptr;
      long long n = std::strtoll(x.c_str(), &end, 10);
      if (x.empty() || *end || n < 1 || n > 1024)
        return false;
      v = n;
      return true;
    };
    bool ok = dt && (f.size() == 2 || f.size() == 3) && dim(f[1], d);
    dv = d;
    if (ok && f.size() == 3)
      ok = dim(f[2], dv);
    if (!ok) {
      err = "--only expects DTYPE:D[:DV] items (f32, f16 or bf16; head dims "
            "in [1, 1024]), got '" +
            item + "'";
      return false;
    }
    out.push_back({*dt, d, dv});
  }
  if (out.empty() || text.back() == ',') {
    err = "--only needs DTYPE:D[:DV] items separated by commas, got '" + text +
          "'";
    return false;
  }
  return true;
}

/// The cases of `shapes` whose kernel is one of `only` (all when empty);
/// an item that keeps no case is an error.
bool keepOnly(std::vector<Shape> &shapes, const std::vector<CaseKernel> &only,
              std::string &err) {
  if (only.empty())
    return true;
  std::vector<Shape> kept;
  std::vector<bool> used(only.size(), false);
  for (Shape &s : shapes) {
    s.resolve();
    bool keep = false;
    for (size_t i = 0; i < only.size(); ++i)
      if (only[i].dtype == s.dtype && only[i].headDim == s.headDim &&
          only[i].vHeadDim == s.vHeadDim)
        keep = used[i] = true;
    if (keep)
      kept.push_back(s);
  }
  for (size_t i = 0; i < only.size(); ++i)
    if (!used[i]) {
      err = fmt::format("--only {}:{}:{} matches no case of the list",
                        rt::dtypeName(only[i].dtype), only[i].headDim,
                        only[i].vHeadDim);
      return false;
    }
  shapes = std::move(kept);
  return true;
}

} // namespace

static int runTool(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  bool list = false, deviceInfo = false, bench = false, tune = false,
       backward = false, warmupSet = false, itersSet = false, noLse = false;
  std::string sweepText, recordsPath, onlyText;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "--list")
      list = true;
    else if (a == "--device-info")
      deviceInfo = true;
    else if (a == "--bench")
      bench = true;
    else if (a == "--tune")
      tune = true;
    else if (a == "--backward")
      backward = true;
    else if (a == "--no-lse")
      noLse = true;
    else if (a == "--records" || a == "--only" || a == "--sweep") {
      if (i + 1 >= args.size())
        return usage("attnc-run", "option '" + a + "' needs a value");
      std::string &to = a == "--records" ? recordsPath
                        : a == "--only"  ? onlyText
                                         : sweepText;
      to = args[++i];
    } else if (a.rfind("--records=", 0) == 0)
      recordsPath = a.substr(10);
    else if (a.rfind("--only=", 0) == 0)
      onlyText = a.substr(7);
    else if (a.rfind("--sweep=", 0) == 0)
      sweepText = a.substr(8);
    else {
      warmupSet |= a.rfind("--warmup", 0) == 0;
      itersSet |= a.rfind("--iters", 0) == 0;
      rest.push_back(a);
    }
  }
  if (deviceInfo) {
    std::unique_ptr<rt::cuda::Context> ctx;
    if (rt::Status s = rt::cuda::Context::open(ctx); !s) {
      std::cout << s.message() << "\n";
      return kNoDevice;
    }
    std::cout << ctx->device().name() << " (sm_"
              << ctx->device().computeCapability() << "), driver "
              << ctx->driver().version() << "\n";
    return 0;
  }
  Options o;
  std::string err;
  if (!o.parse(rest, err))
    return usage("attnc-run", err);
  if (o.help) {
    std::cout << kUsage;
    return 0;
  }
  if (o.positional.size() != 1)
    return usage("attnc-run", "expected exactly one package file");
  if (!sweepText.empty() && !bench && !tune)
    return usage("attnc-run", "--sweep is for --bench and --tune");
  if (noLse && (!bench || backward))
    return usage("attnc-run", "--no-lse is for --bench of the forward");
  if (backward && tune)
    return usage("attnc-run", "--tune is for the forward kernels");
  if (bench && tune)
    return usage("attnc-run", "--bench and --tune are two runs: choose one");
  if (!recordsPath.empty() && !tune)
    return usage("attnc-run", "--records is for --tune");
  std::vector<int64_t> sweep;
  if (!sweepText.empty() && (sweep = parseSweep(sweepText, err)).empty())
    return usage("attnc-run", err);
  std::vector<CaseKernel> only;
  if (!onlyText.empty() && (bench || tune || !(o.matrix || o.suite)))
    return usage("attnc-run",
                 "--only is for the checks of --matrix and --suite");
  if (!onlyText.empty() && !parseOnly(onlyText, only, err))
    return usage("attnc-run", err);
  // The checks' cases: the shape given, or the list's (those of --only).
  std::vector<Shape> cases =
      shapesFor(o.matrix, o.suite, o.shape,
                {rt::DType::F32, rt::DType::F16, rt::DType::BF16});
  if (!keepOnly(cases, only, err))
    return usage("attnc-run", err);
  // The GPU protocol's defaults (the CPU tools' are 3 and 10).
  if (bench && !warmupSet)
    o.warmup = 200;
  if (bench && !itersSet)
    o.iters = 500;
  if (tune && !warmupSet)
    o.warmup = 50;
  if (tune && !itersSet)
    o.iters = 100;
  rt::Package pkg;
  if (rt::Status s = rt::Package::read(o.positional[0], pkg); !s) {
    std::cerr << "attnc-run: error: " << s.message() << "\n";
    return 2;
  }
  if (list) {
    std::cout << o.positional[0] << ": " << pkg.compiler << ", from "
              << pkg.source << "\n";
    for (const rt::PackageVariant &v : pkg.variants) {
      for (const rt::GpuKernelImage &k : v.kernels)
        std::cout << fmt::format("  {:<20} {:<6} {:<5} {:>4} threads {:>6} B "
                                 "smem  {}\n",
                                 v.info.name, k.target, rt::dtypeName(k.spec.dtype),
                                 k.threads, k.sharedBytes + k.dynamicSharedBytes,
                                 k.kernel);
      for (const rt::GpuBackwardImage &k : v.backward)
        std::cout << fmt::format("  {:<20} {:<6} {:<5} {:>4} threads {:>6} B "
                                 "smem  {} (+ _bwd_kv)\n",
                                 v.info.name, k.target, rt::dtypeName(k.spec.dtype),
                                 k.queryThreads,
                                 k.querySharedBytes + k.queryDynamicSharedBytes,
                                 k.query);
    }
    return 0;
  }
  std::vector<const rt::PackageVariant *> variants;
  for (const rt::PackageVariant &v : pkg.variants)
    if (o.variant.empty() || v.info.name == o.variant)
      variants.push_back(&v);
  if (variants.empty()) {
    std::cerr << "attnc-run: error: the package has no variant '" << o.variant
              << "'\n";
    return 2;
  }
  std::unique_ptr<rt::cuda::Context> ctx;
  if (rt::Status s = rt::cuda::Context::open(ctx); !s) {
    std::cerr << "attnc-run: " << s.message() << "; nothing was run\n";
    return kNoDevice;
  }
  int cc = ctx->device().computeCapability();
  std::cerr << "attnc-run: " << ctx->device().name() << " (sm_" << cc
            << "), driver " << ctx->driver().version() << "\n";

  if (backward && bench)
    return runGpuBackwardBench(*ctx, variants, o, sweepShapes(o.shape, sweep));
  if (backward)
    return runGpuBackwardCheck(*ctx, variants, o, cases) ? 1 : 0;
  if (bench)
    return runGpuBench(*ctx, variants, o, sweepShapes(o.shape, sweep), !noLse);
  if (tune) {
    if (recordsPath.empty())
      return runGpuTune(*ctx, variants, o, sweepShapes(o.shape, sweep),
                        std::cout);
    std::ostringstream records;
    int status =
        runGpuTune(*ctx, variants, o, sweepShapes(o.shape, sweep), records);
    if (rt::Status s = rt::writeFileAtomic(recordsPath, records.str()); !s) {
      std::cerr << "attnc-run: error: " << s.message() << "\n";
      return 1;
    }
    return status;
  }

  using Key = std::tuple<const rt::PackageVariant *, rt::DType, int64_t,
                         int64_t, bool>;
  std::map<Key, std::unique_ptr<rt::cuda::GpuKernel>> kernels;
  std::vector<Row> rows;
  for (const rt::PackageVariant *v : variants) {
    for (Shape s : cases) {
      s.resolve();
      std::string name = v->info.name + " " + s.describe();
      Key key{v, s.dtype, s.headDim, s.vHeadDim, s.needs().keyOffsets};
      auto it = kernels.find(key);
      if (it == kernels.end()) {
        const rt::GpuKernelImage *image = nullptr;
        std::unique_ptr<rt::cuda::GpuKernel> k;
        rt::Status st = rt::selectKernel(*v, cc, s.dtype, s.headDim,
                                         s.vHeadDim, image, s.needs());
        if (st)
          st = rt::cuda::GpuKernel::load(*ctx, v->info, *image, k);
        if (!st) {
          rows.push_back(failedRow(name, s.dtype, st.message()));
          continue;
        }
        it = kernels.emplace(key, std::move(k)).first;
      }
      Inputs in;
      rt::Status st = makeInputs(v->info, s, o.sets, o.inputs, in);
      if (st)
        st = rt::cuda::runFromHost(*ctx, *it->second, in.args);
      rows.push_back(st ? compareWithReference(v->info, name, in, o.checked)
                        : failedRow(name, s.dtype, st.message()));
    }
  }
  return printRows(rows) ? 1 : 0;
}

int main(int argc, char **argv) {
  int status = runTool(argc, argv);
  // What went to standard output must have arrived (a full disk, a closed
  // pipe): otherwise the run failed.
  if (!std::cout.flush()) {
    std::cerr << "attnc-run: error: writing to standard output failed\n";
    return 1;
  }
  return status;
}
