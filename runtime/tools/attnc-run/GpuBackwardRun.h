//===- GpuBackwardRun.h - attnc-run --backward ------------------*- C++ -*-===//
//
// The backward's kernels of a package (attnc compile --emit=package
// --backward) on the CUDA device: checked against the fp64 backward, or
// timed (--bench).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TOOLS_GPUBACKWARDRUN_H
#define ATTNC_TOOLS_GPUBACKWARDRUN_H

#include "Options.h"

#include "attnc/runtime/Package.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <vector>

namespace attnc::tools {

/// Each shape: the packaged forward for O and LSE, then the packaged
/// backward (dq, dk, dv in the kernel's dtype), compared with the fp64
/// backward as `attnc check --backward` compares (Parity.h); prints the
/// rows and returns the number of failures.
int runGpuBackwardCheck(const rt::cuda::Context &ctx,
                        const std::vector<const rt::PackageVariant *> &variants,
                        const Options &o, const std::vector<Shape> &shapes);

/// Times the backward (both kernels and, for data masks, the block mask,
/// as GpuBackwardKernel::run does per call, with its allocation and wait)
/// with CUDA events after one forward: o.warmup calls, then o.iters timed
/// one by one. TFLOP/s count 2 (3 Dqk + 2 Dv) per (query, key) pair (S,
/// dP, dV, dK, dQ: 2.5x the forward's for Dqk = Dv), dense and scaled by
/// the mask's density. No time is reported for gradients that are not all
/// finite (the fp64 comparison is the check mode's). One JSON object per
/// row with o.json.
int runGpuBackwardBench(const rt::cuda::Context &ctx,
                        const std::vector<const rt::PackageVariant *> &variants,
                        const Options &o, const std::vector<Shape> &shapes);

} // namespace attnc::tools

#endif
