//===- MaskFacts.h - score_mod under the mask's facts -----------*- C++ -*-===//
//
// -attn-mask-facts as a function (the backends run it on their copy of a
// variant, never on the one the runtime's modifier program and the fp64
// reference are made from): where every kept score has q >= kv (mask_mod
// is a conjunction with q >= kv or q > kv), |q - kv| in score_mod and
// score_grad becomes q - kv; likewise kv - q for kv >= q. A masked score's
// value is never used, so the kernels compute the same attention; alibi's
// form (one FMA per diagonal) then serves a distance's |q - kv| too.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_MASKFACTS_H
#define ATTNC_CODEGEN_MASKFACTS_H

#include "attn/AttnDialect.h"

namespace attnc {

/// Rewrites `variant`'s modifiers under its mask's facts; the number of
/// absolute values replaced.
int simplifyUnderMask(mlir::attn::VariantOp variant);

} // namespace attnc

#endif
