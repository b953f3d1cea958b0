//===- TiledProgram.h - The flash algorithm, written once ------*- C++ -*-===//
//
// Builds the tile-level program of a variant's kernels in the `flash`
// dialect: the forward (the visited-tile loop, QK^T, the modifiers, the
// online softmax in one unit convention, P V and the epilogue) and the
// backward's two kernels (P recomputed from the LSE, dP, dS, score_grad,
// dQ, dK, dV). Every kernel form lowers this IR (KernelForm.h); nothing
// else writes the algorithm.
//
// The softmax's convention: the running maximum m is in the scores' own
// units (after the modifiers), and exponentials are taken in base 2,
// p = 2^((s - m) log2(e)), the difference first (exact near the maximum at
// any magnitude; one FMA, s log2(e) - round(m log2(e)), is not); LSE = m +
// ln(l), -inf (and O = 0) for a row with no key. A form may take the
// scale in the exponents instead (FlashConfig::scaleInExponent): for an
// identity score_mod, m is then over the unscaled products and the
// factor is |scale| log2(e) (flash.score_scale). And it may keep the sums
// l in its accumulator (FlashConfig::sumsInAccumulator): a column of ones
// beside V, so that P V adds each row's sum of the same rounded P that
// weights O (a tensor core's MMA per 16 keys instead of an add per score).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TILED_TILEDPROGRAM_H
#define ATTNC_TILED_TILEDPROGRAM_H

#include "attn/AttnDialect.h"
#include "flash/FlashDialect.h"
#include "attnc/runtime/Attention.h"

#include "mlir/IR/BuiltinOps.h"

namespace attnc {

/// A kernel's configuration as a form builds it.
struct FlashConfig {
  rt::KernelSpec spec;
  int64_t vectorWidth = 8; // f32 lanes of the target's SIMD registers (CPU)
  /// The form takes the softmax scale in the forward's exponents where the
  /// score_mod is the identity (KernelForm::takesScaleInExponent).
  bool scaleInExponent = false;
  /// The form's forward keeps the softmax's sums as a column of its
  /// accumulator, P [V | 1] (KernelForm::takesSumsInAccumulator).
  bool sumsInAccumulator = false;
  /// The backward's accumulates of a query go to `_bwd_q`, the others to
  /// `_bwd_kv` (KernelForm::sumsQueryGradsInQueryKernel); else all to
  /// `_bwd_kv`.
  bool queryGradsInQueryKernel = false;
};

/// Whether `variant`'s score_mod returns the score unchanged.
bool scoreModIsIdentity(mlir::attn::VariantOp variant);

/// The forward kernel `name` of `variant` for the form named `form`.
mlir::flash::KernelOp buildForwardKernel(mlir::ModuleOp module,
                                         mlir::attn::VariantOp variant,
                                         llvm::StringRef form,
                                         const FlashConfig &config,
                                         llvm::StringRef name);

/// The backward's kernels `<name>_bwd_q` and `<name>_bwd_kv` (the variant
/// needs its score_grad region).
std::pair<mlir::flash::KernelOp, mlir::flash::KernelOp>
buildBackwardKernels(mlir::ModuleOp module, mlir::attn::VariantOp variant,
                     llvm::StringRef form, const FlashConfig &config,
                     llvm::StringRef name);

/// The configuration a flash.kernel records.
FlashConfig configOf(mlir::flash::KernelOp kernel);

/// The variant a flash.kernel is of.
mlir::attn::VariantOp variantOf(mlir::flash::KernelOp kernel);

} // namespace attnc

#endif
