//===- ScoreModDerivative.h - score_mod's reverse-mode derivative -*- C++ -*-===//
//
// The backward pass needs, for every kept (query, key) pair, the gradient
// dS flowing into score_mod's result pushed back to its inputs: to `score`
// (for dQ and dK) and to every float parameter it read (a bias table, ALiBi
// slopes, a float scalar). buildScoreGrad differentiates score_mod's region
// in reverse mode and stores the result in the variant's `score_grad`
// region (see AttnOps.td): it recomputes the forward values it needs,
// yields dy * d score_mod / d score and accumulates dy * d score_mod / d p
// into each float parameter p with attn.accumulate.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_AUTODIFF_SCOREMODDERIVATIVE_H
#define ATTNC_AUTODIFF_SCOREMODDERIVATIVE_H

#include "attn/AttnDialect.h"

namespace attnc {

/// Builds (or rebuilds) `v`'s score_grad region. Fails, with an error at
/// the op, only on a float op it has no rule for.
mlir::LogicalResult buildScoreGrad(mlir::attn::VariantOp v);

} // namespace attnc

#endif
