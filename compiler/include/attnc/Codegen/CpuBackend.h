//===- CpuBackend.h - Compile variants for the host CPU ---------*- C++ -*-===//
#ifndef ATTNC_CODEGEN_CPUBACKEND_H
#define ATTNC_CODEGEN_CPUBACKEND_H

#include "attnc/Codegen/FlashProgram.h"
#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Backward.h"

#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>

namespace attnc {

/// f32 lanes of the host's widest vector registers we use (16 with
/// AVX-512, else 8).
int64_t hostVectorWidth();

/// The tiled program for one variant: a new module holding `@kernel` (and
/// `@kernel_block_mask` for data-dependent masks).
mlir::OwningOpRef<mlir::ModuleOp>
buildTiledModule(mlir::attn::VariantOp variant, const FlashConfig &config,
                 std::string &error);

/// The CPU backward program for one variant (which needs its score_grad
/// region): a new module holding `@kernel_bwd_kv`, `@kernel_bwd_q` (and
/// `@kernel_block_mask` for data-dependent masks).
mlir::OwningOpRef<mlir::ModuleOp>
buildBackwardTiledModule(mlir::attn::VariantOp variant,
                         const FlashConfig &config, std::string &error);

/// Replaces exp/log/tanh (and exp2/log2, unless `hardwareExp2Log2`: the
/// GPU has ex2/lg2 instructions) by polynomial approximations.
mlir::LogicalResult approximateMath(mlir::ModuleOp module,
                                    bool hardwareExp2Log2 = false);

/// Lowers the tiled program to the LLVM dialect (scf/vector/memref/math/arith
/// -> llvm), with polynomial approximations for exp2/exp/log/tanh so that
/// the softmax and the modifiers vectorize.
mlir::LogicalResult lowerToLLVMDialect(mlir::ModuleOp module);

/// LLVM IR for the host, optimized at -O3 (`attnc compile --emit=llvm`).
std::string emitHostLLVMIR(mlir::ModuleOp llvmDialectModule, std::string &error);

/// Compiles `variant` for the host CPU and JIT-links it.
rt::Status compileForCpu(mlir::attn::VariantOp variant,
                         const rt::KernelSpec &spec,
                         std::unique_ptr<rt::CpuKernel> &out);

/// Compiles the backward pass of `variant` (which needs its score_grad
/// region) for the host CPU and JIT-links it.
rt::Status compileBackwardForCpu(mlir::attn::VariantOp variant,
                                 const rt::KernelSpec &spec,
                                 std::unique_ptr<rt::CpuBackwardKernel> &out);

} // namespace attnc

#endif
