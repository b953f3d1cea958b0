//===- TensorCoreForward.h - The tensor-core forward's builder -*- C++ -*-===//
//
// The forward kernels on tensor cores are built by one builder
// (MmaSyncKernel.cpp) for two forms: the mma.sync form (sm_80+) and the
// wgmma form (sm_90a, WgmmaForm.cpp), which differ in how the two products
// are issued and where Q lives. What the forms' launch facts need of it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_TENSORCOREFORWARD_H
#define ATTNC_CODEGEN_NVIDIA_TENSORCOREFORWARD_H

#include "attnc/Codegen/KernelForm.h"

namespace attnc {

/// Marks a gpu.func whose last parameters before the flag are K's and V's
/// tensor maps (KernelABI.h): GpuBackend.cpp makes them byval grid
/// constants once the function is an llvm.func.
inline constexpr llvm::StringLiteral kKvTensorMapsAttr = "attnc.kv_tensor_maps";

/// Dynamic shared memory per block (bytes), warps per block and one full
/// tile's work of the tensor-core forward for `s` (wgmma: the sm_90a form).
int64_t tensorCoreSharedBytes(const rt::KernelSpec &s, bool wgmma);
int64_t tensorCoreWarps(const rt::KernelSpec &s, bool wgmma);
rt::TileWork tensorCoreWork(const rt::KernelSpec &s, bool wgmma);

/// Lowers a forward flash.kernel into `container` (a gpu.module) with the
/// tensor-core builder, and erases it. `persistent` (the warp-specialized
/// wgmma form only): each block takes work items a grid apart.
mlir::LogicalResult lowerTensorCoreForward(mlir::flash::KernelOp kernel,
                                           const MaskAnalysis &mask,
                                           mlir::Operation *container,
                                           bool wgmma, bool persistent = false);

} // namespace attnc

#endif
