//===- GpuTune.h - attnc-run --tune: timing tile candidates -----*- C++ -*-===//
#ifndef ATTNC_TOOLS_GPUTUNE_H
#define ATTNC_TOOLS_GPUTUNE_H

#include "Options.h"

#include "attnc/runtime/Package.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <ostream>
#include <vector>

namespace attnc::tools {

/// For each variant and shape, every kernel of the package for the shape's
/// dtype and head dims and the device's target (a package built with
/// `attnc compile --emit=package --tile-candidates` holds one per tile
/// configuration): first checked against the fp64 reference on a small
/// problem of the same dtype, head dims and mode, then timed on the shape
/// as --bench times (o.warmup, o.iters). Writes one rt::TuningRecord per
/// (kernel, shape) to `records` as a JSON line (`attnc tune` reads them)
/// and a summary to standard error. Returns 1 when a kernel failed.
int runGpuTune(const rt::cuda::Context &ctx,
               const std::vector<const rt::PackageVariant *> &variants,
               const Options &o, const std::vector<Shape> &shapes,
               std::ostream &records);

} // namespace attnc::tools

#endif
