//===- Session.cpp - Parse, check, lower and compile a .attn file --------===//
#include "attnc/Driver/Session.h"
#include "attnc/Codegen/AttnPipeline.h"
#include "attnc/Driver/CachedGpuCompile.h"

#include "attnc/Codegen/CpuBackend.h"
#include "attnc/Codegen/GpuBackend.h"
#include "attnc/Codegen/VariantInfo.h"
#include "attnc/Frontend/Sema.h"
#include "attnc/MLIRGen/MLIRGen.h"

#include "mlir/IR/Verifier.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

namespace attnc {

// A Session is safe to share between threads: its MLIR context and module
// are not, so every entry point that reads or compiles into them holds `mu`
// (compiles of one Session run one at a time; distinct Sessions in parallel).
struct Session::Impl {
  std::mutex mu;
  mlir::MLIRContext ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<std::string> names;
  std::shared_ptr<rt::KernelCache> cache;
  bool cacheChosen = false;
  /// The cache this Session compiles through: the one set, else the
  /// default (chosen on first use; null: none). Called under `mu`.
  rt::KernelCache *kernelCache() {
    if (!cacheChosen) {
      cache = defaultKernelCache();
      cacheChosen = true;
    }
    return cache.get();
  }
  mlir::attn::VariantOp find(const std::string &n) {
    for (auto v : module->getOps<mlir::attn::VariantOp>())
      if (v.getSymName() == n)
        return v;
    return {};
  }
};

Session::~Session() = default;

rt::Status Session::load(const std::string &path, std::string &diagnostics,
                         std::unique_ptr<Session> &out) {
  std::string text;
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      return rt::Status::notFound("cannot read '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
  }
  return loadSource(path == "-" ? "<stdin>" : path, std::move(text),
                    diagnostics, out);
}

rt::Status Session::loadSource(const std::string &name, std::string text,
                               std::string &diagnostics,
                               std::unique_ptr<Session> &out) {
  SourceFile file(name, std::move(text));
  DiagnosticEngine diag(file);
  Module ast;
  if (!parseAndCheck(file, diag, ast)) {
    std::ostringstream os;
    diag.print(os);
    diagnostics = os.str();
    return rt::Status::invalidArgument("'" + name + "' has errors");
  }
  auto s = std::unique_ptr<Session>(new Session());
  s->impl_ = std::make_unique<Impl>();
  s->impl_->module = emitAttn(s->impl_->ctx, ast, name);
  if (!s->impl_->module || mlir::failed(mlir::verify(*s->impl_->module)))
    return rt::Status::internal("the generated attn IR does not verify");
  std::string error;
  if (mlir::failed(runAttnPipeline(*s->impl_->module, true, error)))
    return rt::Status::internal(error);
  if (!checkModifierSizes(*s->impl_->module, ast, diag)) {
    std::ostringstream os;
    diag.print(os);
    diagnostics = os.str();
    return rt::Status::invalidArgument("'" + name + "' has errors");
  }
  for (const Variant &v : ast.variants)
    s->impl_->names.push_back(v.name);
  out = std::move(s);
  return rt::Status::ok();
}

const std::vector<std::string> &Session::variants() const {
  return impl_->names;
}

rt::Status Session::info(const std::string &variant,
                         rt::VariantInfo &out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return infoLocked(variant, out);
}

rt::Status Session::infoLocked(const std::string &variant,
                               rt::VariantInfo &out) const {
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  return rt::VariantInfo::parse(printVariantInfo(v, analyzeMask(v)), out);
}

rt::Status Session::compileCpu(const std::string &variant,
                               const rt::KernelSpec &spec,
                               std::unique_ptr<rt::CpuKernel> &out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  return compileForCpu(v, spec, out);
}

rt::Status Session::compileCpuBackward(const std::string &variant,
                               const rt::KernelSpec &spec,
                               std::unique_ptr<rt::CpuBackwardKernel> &out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  return compileBackwardForCpu(v, spec, out);
}

rt::Status Session::compileGpuBackward(const std::string &variant,
                                       const rt::KernelSpec &spec,
                                       const std::string &target,
                                       rt::GpuBackwardImage &out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  return compileBackwardForGpuCached(impl_->kernelCache(), v, spec, target,
                                     out);
}

void Session::setKernelCache(std::shared_ptr<rt::KernelCache> cache) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->cache = std::move(cache);
  impl_->cacheChosen = true;
}

const char *Session::compilerId() { return compilerIdentity(); }

std::string gpuTargetFor(int cc) {
  // Compute capability 9.0 gets sm_90a (the wgmma form); a later device
  // runs sm_90's PTX, JIT-compiled forward.
  if (cc == 90)
    return "sm_90a";
  if (cc >= 90)
    return "sm_90";
  if (cc >= 89)
    return "sm_89";
  if (cc >= 86)
    return "sm_86";
  return "sm_80";
}

rt::Status Session::compileGpu(const std::string &variant,
                               const rt::KernelSpec &spec,
                               const std::string &target,
                               rt::GpuKernelImage &out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  return compileForGpuCached(impl_->kernelCache(), v, spec, target, out);
}

rt::Status Session::countTiles(const std::string &variant,
                               const rt::KernelSpec &spec, int64_t heads,
                               int64_t qLen, const std::vector<int32_t> &kvLen,
                               const std::vector<int32_t> &qPos0,
                               const std::map<std::string, int64_t> &scalars,
                               std::array<int64_t, 3> &counts) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  MaskAnalysis m = analyzeMask(v);
  if (m.kind == rt::MaskKind::Data)
    return rt::Status::invalidArgument(
        "variant '" + variant + "' has a data-dependent mask: count the "
        "tiles of its BlockMask instead");
  // The sizes this call knows (the KV capacity and HKV are not given:
  // atoms that read them count as partial).
  std::map<std::string, int64_t> known = scalars;
  known.insert({{"B", int64_t(kvLen.size())}, {"H", heads}, {"Q", qLen}});
  counts = {0, 0, 0};
  for (size_t b = 0; b < kvLen.size(); ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t qt = 0; qt * spec.blockM < qLen; ++qt) {
        int64_t qlo = qPos0[b] + qt * spec.blockM;
        int64_t qhi = qPos0[b] + std::min(qLen, (qt + 1) * spec.blockM) - 1;
        for (int64_t kt = 0; kt * spec.blockN < kvLen[b]; ++kt) {
          int64_t klo = kt * spec.blockN;
          int64_t khi = std::min<int64_t>(kvLen[b], klo + spec.blockN) - 1;
          counts[classifyTile(m, known, int64_t(b), h, qlo, qhi, klo, khi)]++;
        }
      }
  return rt::Status::ok();
}

rt::Status Session::classifyBlock(const std::string &variant,
                                  const std::map<std::string, int64_t> &sizes,
                                  int64_t batch, int64_t heads, int64_t qlo,
                                  int64_t qhi, int64_t klo, int64_t khi,
                                  rt::abi::TileClass &out) const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto v = impl_->find(variant);
  if (!v)
    return rt::Status::notFound("no variant named '" + variant + "'");
  if (batch < 1 || heads < 1 || qlo > qhi || klo > khi || qlo < 0 || klo < 0)
    return rt::Status::invalidArgument(
        "classifyBlock: expected batch, heads >= 1 and non-empty, "
        "non-negative ranges, got batch " + std::to_string(batch) + " heads " +
        std::to_string(heads) + " q [" + std::to_string(qlo) + ", " +
        std::to_string(qhi) + "] kv [" + std::to_string(klo) + ", " +
        std::to_string(khi) + "]");
  MaskAnalysis m = analyzeMask(v);
  if (m.kind == rt::MaskKind::Data) {
    out = rt::abi::kPartial;
    return rt::Status::ok();
  }
  bool any = false, all = true;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t h = 0; h < heads; ++h) {
      rt::abi::TileClass c = classifyTile(m, sizes, b, h, qlo, qhi, klo, khi);
      any |= c != rt::abi::kEmpty;
      all &= c == rt::abi::kFull;
    }
  out = !any ? rt::abi::kEmpty : all ? rt::abi::kFull : rt::abi::kPartial;
  return rt::Status::ok();
}

} // namespace attnc
