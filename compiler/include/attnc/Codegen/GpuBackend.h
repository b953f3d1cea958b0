//===- GpuBackend.h - The tiled program to PTX (SIMT form) -----*- C++ -*-===//
#ifndef ATTNC_CODEGEN_GPUBACKEND_H
#define ATTNC_CODEGEN_GPUBACKEND_H

#include "attnc/Codegen/FlashProgram.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace attnc {

/// `sm_80`, `sm_86`, `sm_89`, `sm_90`: the targets the NVPTX path accepts.
bool isGpuTarget(const std::string &target);

/// A module holding the variant and `gpu.module @attnc_kernels` with the
/// SIMT kernel `@kernel` (`attnc compile --emit=gpu`).
mlir::OwningOpRef<mlir::ModuleOp>
buildGpuModule(mlir::attn::VariantOp variant, const FlashConfig &config,
               std::string &error);

/// Lowers it in place to the NVVM dialect (`--emit=nvvm`).
mlir::LogicalResult lowerToNVVM(mlir::ModuleOp module, const std::string &chip);

/// Serializes the NVVM module to PTX with LLVM's NVPTX backend (`--emit=ptx`).
std::string emitPTX(mlir::ModuleOp nvvmModule, std::string &error);

} // namespace attnc

#endif
