//===- FlashProgram.h - The tiled flash-attention program ------*- C++ -*-===//
//
// Turns a variant and a kernel configuration into functions over work
// items (b, h, Q tile): loops over only the non-empty KV tiles, QK^T x
// scale, score_mod on every visited tile, mask_mod only on partial tiles
// and sequence tails, online softmax with fp32 running max and sum, P.V,
// and an epilogue writing O and the natural-log LSE; and the backward's
// two kernels. A kernel form (KernelForm.h) builds the kernels; these
// add what every form's program has beside them. The calling convention
// is runtime/include/attnc/runtime/KernelABI.h.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_FLASHPROGRAM_H
#define ATTNC_CODEGEN_FLASHPROGRAM_H

#include "attnc/Analysis/MaskAnalysis.h"
#include "attnc/Tiled/TiledProgram.h"
#include "attnc/runtime/Attention.h"

#include "mlir/IR/BuiltinOps.h"

namespace attnc {

class KernelForm;

/// A kernel's direction: the forward, or the backward's kernels.
enum class Direction { Forward, Backward };

/// Adds the forward program of `form` for `config` (configured by the
/// form) to `container` (the module on the CPU, a gpu.module inside
/// `parent` on a GPU): the kernel `<name>`, the split-KV merge
/// `<name>_merge` and, for data-dependent masks, the block-mask builder
/// `<name>_block_mask`.
mlir::LogicalResult buildForwardProgram(const KernelForm &form,
                                        mlir::Operation *container,
                                        mlir::ModuleOp parent,
                                        mlir::attn::VariantOp variant,
                                        const MaskAnalysis &mask,
                                        const FlashConfig &config,
                                        llvm::StringRef name);

/// Adds the backward program of `form` (a backward form) for `config`:
/// `<name>_bwd_q`, `<name>_bwd_kv` and, for data-dependent masks,
/// `<name>_block_mask`. The variant needs its score_grad region
/// (runAttnPipeline builds it).
mlir::LogicalResult buildBackwardProgram(const KernelForm &form,
                                         mlir::Operation *container,
                                         mlir::ModuleOp parent,
                                         mlir::attn::VariantOp variant,
                                         const MaskAnalysis &mask,
                                         const FlashConfig &config,
                                         llvm::StringRef name);

/// A module holding a copy of the variant and its tiled program (flash
/// kernels) of `direction` for the form the request gets on `target`
/// (`attnc compile --emit=tiled`).
mlir::OwningOpRef<mlir::ModuleOp>
buildFlashModule(mlir::attn::VariantOp variant, const FlashConfig &config,
                 llvm::StringRef target, Direction direction,
                 std::string &error);

/// Lowers every flash.kernel of the form named `form` in `module` (the
/// -convert-flash-to-<form> passes), with what goes beside each kernel:
/// the merge, the block-mask builder.
mlir::LogicalResult lowerFlashKernels(mlir::ModuleOp module,
                                      llvm::StringRef form);

} // namespace attnc

#endif
