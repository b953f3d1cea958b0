//===- GpuBackend.h - The tiled program to PTX (SIMT form) -----*- C++ -*-===//
#ifndef ATTNC_CODEGEN_GPUBACKEND_H
#define ATTNC_CODEGEN_GPUBACKEND_H

#include "attnc/Codegen/FlashProgram.h"
#include "attnc/runtime/Package.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace attnc {

/// `sm_80`, `sm_86`, `sm_89`, `sm_90`: the targets the NVPTX path accepts.
bool isGpuTarget(const std::string &target);

/// The configuration the GPU kernel for `target` is built with for a
/// requested one. The tensor-core form (f16/bf16, head dims multiples of
/// 16 up to 256): block_m, block_n and warps from the configuration table
/// when the request is KernelSpec's defaults (64 x 64, warps 0), else as
/// requested; block_n shrinks until the stages fit the target's opt-in
/// shared memory. The SIMT form: the KV tile shrinks so that the K^T and V
/// tiles (f32) fit 48 KB of static shared memory.
rt::KernelSpec gpuSpec(const rt::KernelSpec &requested,
                       const std::string &target);
int64_t gpuThreads(const rt::KernelSpec &spec);
/// Static shared memory per block (the SIMT form).
int64_t gpuSharedBytes(const rt::KernelSpec &spec);
/// Dynamic shared memory per block (the tensor-core form): the launcher
/// opts in with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
int64_t gpuDynamicSharedBytes(const rt::KernelSpec &spec);

/// The kernel's name, carrying its configuration: variant, dtype, head
/// dims, block_m, block_n, warps and pipeline stages, e.g.
/// `attnc_causal_bf16_d128v128_m64n48w2s1`.
std::string gpuKernelName(llvm::StringRef variant, const rt::KernelSpec &spec);

/// A module holding the variant and `gpu.module @attnc_kernels` with the
/// kernel named by gpuKernelName(gpuSpec(config.spec, target)) (and its
/// block-mask builder, `<name>_block_mask`, for data-dependent masks)
/// (`attnc compile --emit=gpu`).
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

} // namespace attnc

#endif
