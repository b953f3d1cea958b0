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

/// `compile` through `cache`: an entry holds the one image, in `images`
/// (the variant's forward kernels or its backward ones), and nothing else.
template <typename Image>
rt::Status compileCached(rt::KernelCache *cache, mlir::attn::VariantOp variant,
                         const rt::KernelSpec &spec, const std::string &target,
                         const char *direction,
                         std::vector<Image> rt::PackageVariant::*images,
                         rt::Status (*compile)(mlir::attn::VariantOp,
                                               const rt::KernelSpec &,
                                               const std::string &, Image &),
                         Image &out, bool *hit) {
  if (hit)
    *hit = false;
  if (!cache)
    return compile(variant, spec, target, out);
  std::string key = kernelKey(direction, variant, spec, target);
  if (auto pv = lookupEntry(*cache, key);
      pv && pv->kernels.size() + pv->backward.size() == 1 &&
      ((*pv).*images).size() == 1) {
    out = std::move(((*pv).*images)[0]);
    if (hit)
      *hit = true;
    return rt::Status::ok();
  }
  if (rt::Status s = compile(variant, spec, target, out); !s)
    return s;
  rt::PackageVariant pv;
  (pv.*images).push_back(out);
  return storeEntry(*cache, key, variant, std::move(pv));
}

} // namespace

rt::Status compileForGpuCached(rt::KernelCache *cache,
                               mlir::attn::VariantOp variant,
                               const rt::KernelSpec &spec,
                               const std::string &target,
                               rt::GpuKernelImage &out, bool *hit) {
  // The forward's key has no direction line (entries stored before the
  // backward was cached keep their keys).
  return compileCached(cache, variant, spec, target, "",
                       &rt::PackageVariant::kernels, &compileForGpu, out, hit);
}

rt::Status compileBackwardForGpuCached(rt::KernelCache *cache,
                                       mlir::attn::VariantOp variant,
                                       const rt::KernelSpec &spec,
                                       const std::string &target,
                                       rt::GpuBackwardImage &out, bool *hit) {
  return compileCached(cache, variant, spec, target, "backward\n",
                       &rt::PackageVariant::backward, &compileBackwardForGpu,
                       out, hit);
}

} // namespace attnc
