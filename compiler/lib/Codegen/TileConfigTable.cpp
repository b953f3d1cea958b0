//===- TileConfigTable.cpp - GPU targets and tuned tile choices ----------===//
//
// The GPU targets and their shared memory, and a tuning file's choice for
// a request (the forms' own tables are in their files).
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/TileConfigTable.h"
#include "attnc/Codegen/KernelForm.h"

#include <fmt/format.h>
#include <cstdlib>

namespace attnc {

bool isGpuTarget(const std::string &t) {
  return t == "sm_80" || t == "sm_86" || t == "sm_89" || t == "sm_90" ||
         t == "sm_90a";
}

int gpuArch(const std::string &t) {
  if (!isGpuTarget(t))
    return 0;
  return std::atoi(t.c_str() + 3);
}

int64_t gpuSharedOptIn(const std::string &target) {
  // cudaDevAttrMaxSharedMemoryPerBlockOptin: 163 KB on sm_80, 99 KB on
  // sm_86/sm_89, 227 KB on sm_90.
  if (target == "sm_80")
    return 166912;
  if (gpuArch(target) == 90)
    return 232448;
  return 101376;
}

bool requestsDefaultTiles(const rt::KernelSpec &s) {
  rt::KernelSpec d;
  return s.blockM == d.blockM && s.blockN == d.blockN && s.warps == d.warps;
}

rt::Status applyTuning(const rt::KernelSpec &requested,
                       const std::string &target,
                       const rt::TuningTable &tuning, rt::KernelSpec &out) {
  out = requested;
  if (!requestsDefaultTiles(requested))
    return rt::Status::ok();
  rt::ShapeClass shape{target, requested.dtype, requested.headDim,
                       requested.vHeadDim};
  const rt::TuningChoice *c = tuning.find(shape);
  if (!c)
    return rt::Status::ok();
  rt::KernelSpec tuned = requested;
  tuned.blockM = c->config.blockM;
  tuned.blockN = c->config.blockN;
  tuned.warps = c->config.warps;
  tuned.stages = c->config.stages;
  FormChoice built = formFor(tuned, target, Direction::Forward);
  if (!built || !built.form->accepts(tuned, target) ||
      built.spec.blockN != tuned.blockN ||
      built.form->tileConfig(tuned).stages != c->config.stages)
    return rt::Status::invalidArgument(fmt::format(
        "the tuning file's choice for {} ({}) is not a tensor-core "
        "configuration that fits {}",
        shape.describe(), c->config.name(), target));
  out = tuned;
  return rt::Status::ok();
}

} // namespace attnc
