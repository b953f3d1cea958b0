//===- BackwardCall.h - Validating a backward call --------------*- C++ -*-===//
//
// Internal to the runtime: the checks every backward launcher (CPU, CUDA)
// makes before anything runs, so that both refuse the same calls with the
// same messages.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SRC_BACKWARDCALL_H
#define ATTNC_RUNTIME_SRC_BACKWARDCALL_H

#include "attnc/runtime/Backward.h"

namespace attnc::rt::detail {

/// Resolves the forward call of `a` into `p` and checks the rest: the
/// forward's LSE, no pages, no caller block mask, the captures' values, dO
/// ([B, Hq, Lq, Dv] of the kernel's dtype), dq, dk and dv (q's, k's and
/// v's shapes; a float dtype, or `gradDType` when given), and dLse when
/// given ([B, Hq, Lq] f32).
Status checkBackwardCall(const VariantInfo &v, const KernelSpec &spec,
                         const BackwardArgs &a, Problem &p,
                         const DType *gradDType = nullptr);

/// The float parameters' gradients as one buffer (KernelABI.h): where each
/// starts, and the total; `layout` sized by zeroParamGradients.
int64_t paramGradientLayout(const ParamGradients &layout,
                            std::vector<int64_t> &base);

} // namespace attnc::rt::detail

#endif
