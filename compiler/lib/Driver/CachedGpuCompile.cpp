//===- CachedGpuCompile.cpp - GPU kernels through the kernel cache --------===//
#include "attnc/Driver/CachedGpuCompile.h"

#include "attnc/Codegen/GpuBackend.h"
#include "attnc/Codegen/VariantInfo.h"

#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>

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

rt::Status compileForGpuCached(rt::KernelCache *cache,
                               mlir::attn::VariantOp variant,
                               const rt::KernelSpec &spec,
                               const std::string &target,
                               rt::GpuKernelImage &out, bool *hit) {
  if (hit)
    *hit = false;
  if (!cache)
    return compileForGpu(variant, spec, target, out);
  std::string key;
  {
    llvm::raw_string_ostream os(key);
    os << "attnc-gpu-kernel v1\ncompiler " << compilerIdentity() << "\ncodegen "
       << ATTNC_CODEGEN_ID << "\ntarget " << target << "\ndtype "
       << rt::dtypeName(spec.dtype) << " d " << spec.headDim << " dv "
       << spec.vHeadDim << " m " << spec.blockM << " n " << spec.blockN << " w "
       << spec.warps << " s " << spec.stages << " form '" << spec.form << "'"
       << (spec.dropout ? " dropout" : "")
       << (spec.keyOffsets ? " key-offsets" : "") << "\n";
    variant->print(os, mlir::OpPrintingFlags().enableDebugInfo(false));
  }
  if (auto stored = cache->lookup(key)) {
    rt::Package p;
    if (rt::Package::parse(*stored, "the kernel cache", p).isOk() &&
        p.variants.size() == 1 && p.variants[0].kernels.size() == 1) {
      out = p.variants[0].kernels[0];
      if (hit)
        *hit = true;
      return rt::Status::ok();
    }
  }
  if (rt::Status s = compileForGpu(variant, spec, target, out); !s)
    return s;
  rt::Package p;
  p.compiler = compilerIdentity();
  rt::PackageVariant pv;
  if (rt::Status s = rt::VariantInfo::parse(
          printVariantInfo(variant, analyzeMask(variant)), pv.info);
      !s)
    return s;
  pv.kernels.push_back(out);
  p.variants.push_back(std::move(pv));
  (void)cache->store(key, p.serialize());
  return rt::Status::ok();
}

} // namespace attnc
