//===- CachedGpuCompile.h - GPU kernels through the kernel cache -*- C++ -*-=//
//
// One compile path for every caller that may reuse a kernel compiled
// before (Session::compileGpu and compileGpuBackward, `attnc compile
// --emit=package`): the key is everything the PTX depends on, a hit is the
// stored image, a miss compiles and stores it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_CACHEDGPUCOMPILE_H
#define ATTNC_DRIVER_CACHEDGPUCOMPILE_H

#include "attn/AttnDialect.h"
#include "attnc/runtime/KernelCache.h"
#include "attnc/runtime/Package.h"

#include <memory>
#include <string>

namespace attnc {

/// "attnc VERSION (LLVM/MLIR VERSION)": packages' `compiler` field.
const char *compilerIdentity();

/// The kernel cache callers get unless they choose one: the default folder
/// (KernelCache's), or none where ATTNC_KERNEL_CACHE=0.
std::shared_ptr<rt::KernelCache> defaultKernelCache();

/// compileForGpu through `cache` (null: no cache). The key holds the
/// compiler, the code generator's sources' hash, the target, the
/// configuration and the variant's canonical IR (no locations); an entry
/// is a one-kernel package, so its checks apply when it is read back. A
/// cache that cannot be written is not an error. `hit`, when given, says
/// whether the image came from the cache.
rt::Status compileForGpuCached(rt::KernelCache *cache,
                               mlir::attn::VariantOp variant,
                               const rt::KernelSpec &spec,
                               const std::string &target,
                               rt::GpuKernelImage &out, bool *hit = nullptr);

/// compileBackwardForGpu through `cache`, as compileForGpuCached: the key
/// also says "backward", and an entry is a package whose variant holds the
/// one backward image.
rt::Status compileBackwardForGpuCached(rt::KernelCache *cache,
                                       mlir::attn::VariantOp variant,
                                       const rt::KernelSpec &spec,
                                       const std::string &target,
                                       rt::GpuBackwardImage &out,
                                       bool *hit = nullptr);

} // namespace attnc

#endif
