//===- GpuBackend.h - The tiled program to PTX (SIMT form) -----*- C++ -*-===//
#ifndef ATTNC_CODEGEN_GPUBACKEND_H
#define ATTNC_CODEGEN_GPUBACKEND_H

#include "attnc/Codegen/FlashProgram.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "attnc/runtime/Backward.h"
#include "attnc/runtime/Package.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace attnc {

/// A module holding the variant and `gpu.module @attnc_kernels` with the
/// forward program of the form the request gets on `target` (formFor): the
/// kernel named kernelName(...), its merge and, for data-dependent masks,
/// its block-mask builder (`attnc compile --emit=gpu`).
mlir::OwningOpRef<mlir::ModuleOp>
buildGpuModule(mlir::attn::VariantOp variant, const FlashConfig &config,
               const std::string &target, std::string &error);

/// Lowers it in place to the NVVM dialect (`--emit=nvvm`).
mlir::LogicalResult lowerToNVVM(mlir::ModuleOp module, const std::string &chip);

/// Serializes the NVVM module to PTX with LLVM's NVPTX backend (`--emit=ptx`).
std::string emitPTX(mlir::ModuleOp nvvmModule, std::string &error);

/// Compiles `variant` for `target` (sm_XX) down to PTX and describes it for
/// the runtime's launcher (`--emit=package`, `attnc check --backend cuda`).
rt::Status compileForGpu(mlir::attn::VariantOp variant,
                         const rt::KernelSpec &spec, const std::string &target,
                         rt::GpuKernelImage &out);

/// The backward's module: `gpu.module @attnc_kernels` with the backward
/// program of the backward form the request gets on `target`
/// (`attnc compile --emit=gpu --backward`).
mlir::OwningOpRef<mlir::ModuleOp>
buildGpuBackwardModule(mlir::attn::VariantOp variant, const FlashConfig &config,
                       const std::string &target, std::string &error);

/// The backward pass of `variant` (which needs its score_grad region) for
/// `target`, down to PTX, described for cuda::GpuBackwardKernel.
rt::Status compileBackwardForGpu(mlir::attn::VariantOp variant,
                                 const rt::KernelSpec &spec,
                                 const std::string &target,
                                 rt::GpuBackwardImage &out);

} // namespace attnc

#endif
