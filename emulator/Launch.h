//===- Launch.h - Running a grid of CTAs on the host's cores --------------===//
#ifndef ATTNC_EMU_LAUNCH_H
#define ATTNC_EMU_LAUNCH_H

#include "Machine.h"

#include <string>

namespace attnc::emu {

struct LaunchOptions {
  int threads = 0;          // host threads (0: one per core)
  bool racecheck = true;    // shared-memory race detection
  uint64_t maxSteps = uint64_t(1) << 34; // warp instructions per CTA
};

/// From $ATTNC_EMU_THREADS, $ATTNC_EMU_RACECHECK (0 disables),
/// $ATTNC_EMU_MAX_STEPS.
LaunchOptions launchOptionsFromEnv();

/// Checks a launch shape against the kernel (threads, block, shared
/// memory): 0, or CUDA_ERROR_INVALID_VALUE with `report` saying why.
int checkLaunch(const Kernel &k, const LaunchShape &s, std::string &report);

/// A programmatic dependent launch's checks (GridDependency.h): the bytes
/// the grid ahead wrote, which this grid's warps may touch only after
/// griddepcontrol.wait; where to record the bytes this grid writes (a
/// dependent follows it).
struct GridDependencyChecks {
  const GridWrites *prerequisite = nullptr;
  GridWrites *record = nullptr;
};

/// Checks the launch shape against the kernel (threads, shared memory),
/// lays out the parameters from `params` (one pointer per parameter, as
/// cuLaunchKernel takes them) and runs every CTA. Returns 0, or the CUDA
/// error code with `report` saying what happened where.
int launch(const Kernel &k, const LaunchShape &s, void **params,
           const MemoryMap &mem, const LaunchOptions &opts, std::string &report,
           GridDependencyChecks grid = {});

} // namespace attnc::emu

#endif
