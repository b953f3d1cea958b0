//===- CachedGpuCompile.cpp - GPU kernels through the kernel cache --------===//
#include "attnc/Driver/CachedGpuCompile.h"

#include "attnc/Codegen/GpuBackend.h"
#include "attnc/Codegen/VariantInfo.h"

#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <optional>

#include "attnc/CodegenId.h"

namespace attnc {

const char *compilerIdentity() {
  return "attnc " ATTNC_VERSION " (LLVM/MLIR " ATTNC_LLVM_VERSION ")";
}

std::shared_ptr<rt::KernelCache> defaultKernelCache() {
  const char *env = std::getenv("ATTNC_KERNEL_CACHE");
  if (env && std::string(env) == "0")
    return nullptr;
  return std::make_shared<rt::KernelCache>();
}

namespace {

/// Everything a kernel's PTX depends on: the compiler, the code
/// generator's sources, the direction, the target, the configuration and
/// the variant's canonical IR (no locations).
std::string kernelKey(const char *direction, mlir::attn::VariantOp variant,
                      const rt::KernelSpec &spec, const std::string &target) {
  std::string key;
  llvm::raw_string_ostream os(key);
  os << "attnc-gpu-kernel v1\ncompiler " << compilerIdentity() << "\ncodegen "
     << ATTNC_CODEGEN_ID << "\n"
     << direction << "target " << target << "\ndtype "
     << rt::dtypeName(spec.dtype) << " d " << spec.headDim << " dv "
     << spec.vHeadDim << " m " << spec.blockM << " n " << spec.blockN << " w "
     << spec.warps << " s " << spec.stages << " form '" << spec.form << "'"
     << (spec.dropout ? " dropout" : "")
     << (spec.keyOffsets ? " key-offsets" : "") << "\n";
  variant->print(os, mlir::OpPrintingFlags().enableDebugInfo(false));
  return key;
}

/// A cache entry: a package of the variant and one image, so the package
/// reader's checks apply when it is read back.
rt::Status storeEntry(rt::KernelCache &cache, const std::string &key,
                      mlir::attn::VariantOp variant, rt::PackageVariant pv) {
  rt::Package p;
  p.compiler = compilerIdentity();
  if (rt::Status s = rt::VariantInfo::parse(
          printVariantInfo(variant, analyzeMask(variant)), pv.info);
      !s)
    return s;
  p.variants.push_back(std::move(pv));
  (void)cache.store(key, p.serialize()); // a cache not written: no error
  return rt::Status::ok();
}

std::optional<rt::PackageVariant> lookupEntry(rt::KernelCache &cache,
                                              const std::string &key) {
  auto stored = cache.lookup(key);
  rt::Package p;
  if (!stored || !rt::Package::parse(*stored, "the kernel cache", p).isOk() ||
      p.variants.size() != 1)
    return std::nullopt;
  return std::move(p.variants[0]);
}

} // namespace

rt::Status compileForGpuCached(rt::KernelCache *cache,
                               mlir::attn::VariantOp variant,
                               const rt::KernelSpec &spec,
                               const std::string &target,
                               rt::GpuKernelImage &out, bool *hit) {
  if (hit)
    *hit = false;
  if (!cache)
    return compileForGpu(variant, spec, target, out);
  // The forward's key has no direction line (entries stored before the
  // backward was cached keep their keys).
  std::string key = kernelKey("", variant, spec, target);
  if (auto pv = lookupEntry(*cache, key);
      pv && pv->kernels.size() == 1 && pv->backward.empty()) {
    out = std::move(pv->kernels[0]);
    if (hit)
      *hit = true;
    return rt::Status::ok();
  }
  if (rt::Status s = compileForGpu(variant, spec, target, out); !s)
    return s;
  rt::PackageVariant pv;
  pv.kernels.push_back(out);
  return storeEntry(*cache, key, variant, std::move(pv));
}

rt::Status compileBackwardForGpuCached(rt::KernelCache *cache,
                                       mlir::attn::VariantOp variant,
                                       const rt::KernelSpec &spec,
                                       const std::string &target,
                                       rt::GpuBackwardImage &out, bool *hit) {
  if (hit)
    *hit = false;
  if (!cache)
    return compileBackwardForGpu(variant, spec, target, out);
  std::string key = kernelKey("backward\n", variant, spec, target);
  if (auto pv = lookupEntry(*cache, key);
      pv && pv->kernels.empty() && pv->backward.size() == 1) {
    out = std::move(pv->backward[0]);
    if (hit)
      *hit = true;
    return rt::Status::ok();
  }
  if (rt::Status s = compileBackwardForGpu(variant, spec, target, out); !s)
    return s;
  rt::PackageVariant pv;
  pv.backward.push_back(out);
  return storeEntry(*cache, key, variant, std::move(pv));
}

} // namespace attnc
