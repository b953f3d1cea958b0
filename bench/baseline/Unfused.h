//===- Unfused.h - The unfused CPU baseline: what users write without us ===//
//
// S = Q K^T x scale with OpenBLAS (all B x H score matrices at once, as an
// eager framework materializes them), the variant's modifiers element by
// element in C++, a row softmax, and O = P V with OpenBLAS. Hand-written for
// the benchmarked variants only; f32, BHSD, prefill.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_BENCH_UNFUSED_H
#define ATTNC_BENCH_UNFUSED_H

#include "attnc/runtime/Attention.h"

#include <string>

namespace attnc::bench {

/// True if the baseline has a hand-written version of `variant`.
bool hasUnfusedBaseline(const std::string &variant);

/// Runs the unfused baseline over `args` (same inputs as the fused kernel).
rt::Status runUnfused(const std::string &variant, const rt::AttentionArgs &args,
                      int threads);

} // namespace attnc::bench

#endif
