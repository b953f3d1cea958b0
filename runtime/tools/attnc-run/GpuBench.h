//===- GpuBench.h - attnc-run --bench: timing packaged kernels --*- C++ -*-===//
#ifndef ATTNC_TOOLS_GPUBENCH_H
#define ATTNC_TOOLS_GPUBENCH_H

#include "Options.h"

#include "attnc/runtime/Package.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <functional>
#include <vector>

namespace attnc::tools {

/// The fraction of (query, key) pairs the mask keeps, sampled with the
/// fp64 interpreter on at most 256 x 256 pairs of sequence 0, head 0.
double maskDensity(const rt::VariantInfo &v, const rt::Problem &p);

/// Mirrors `host` onto the device and times `k` on it with CUDA events:
/// `warmup` launches, then `iters` timed one by one; `ms` comes back
/// sorted. The outputs stay on the device (mirror.downloadOutputs).
/// A data-dependent mask's block mask is built once before the timed
/// launches, as a caller reusing it across layers would (FlexAttention's
/// create_block_mask is timed apart too); its build time, host wall clock
/// with the device synchronized, goes to `blockMaskMs` (0 without one).
rt::Status timeKernel(const rt::cuda::Context &ctx,
                      const rt::cuda::GpuKernel &k,
                      const rt::AttentionArgs &host, int warmup, int iters,
                      rt::cuda::DeviceMirror &mirror, std::vector<float> &ms,
                      double &blockMaskMs);

/// Times `call` with CUDA events on the null stream, `iters` calls one by
/// one (the caller warms up); `ms` comes back sorted.
rt::Status timeCalls(const rt::cuda::Context &ctx, int iters,
                     const std::function<rt::Status()> &call,
                     std::vector<float> &ms);

/// Times each variant's kernel over `shapes` with CUDA events (o.warmup
/// launches, then o.iters, each timed alone: median, min, max) and prints
/// a table or, with o.json, one JSON object per row. With o.output, the
/// output of the last shape is written there (f32 .npy, for cross-checks).
/// Without `lse` the calls ask for no LSE (inference's calls).
int runGpuBench(const rt::cuda::Context &ctx,
                const std::vector<const rt::PackageVariant *> &variants,
                const Options &o, const std::vector<Shape> &shapes,
                bool lse = true);

} // namespace attnc::tools

#endif
