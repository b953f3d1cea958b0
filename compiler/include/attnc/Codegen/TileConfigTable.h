//===- TileConfigTable.h - GPU targets and tuned tile choices ---*- C++ -*-===//
//
// What the GPU forms share about targets (which exist, their shared
// memory), whether a request leaves the tiles to the form's table, and a
// tuning file's choice for a request (attnc tune). Each form's own table,
// candidates and launch facts are the form's (KernelForm.h).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_TILECONFIGTABLE_H
#define ATTNC_CODEGEN_TILECONFIGTABLE_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Tuning.h"

#include <string>

namespace attnc {

/// `sm_80`, `sm_86`, `sm_89`, `sm_90`, `sm_90a`: the targets the NVPTX
/// path accepts (sm_90a: sm_90's architecture-specific features, wgmma;
/// its kernels load on compute capability 9.0 only).
bool isGpuTarget(const std::string &target);
/// The compute capability a target's kernels need (90 for sm_90a too).
int gpuArch(const std::string &target);

/// The opt-in dynamic shared memory per block of a target's devices.
int64_t gpuSharedOptIn(const std::string &target);

/// Whether a request leaves the tiles to the form's table (KernelSpec's
/// defaults: 64 x 64, warps 0).
bool requestsDefaultTiles(const rt::KernelSpec &spec);

/// A request for the defaults becomes the tuning file's choice for its
/// shape class, when the file has one; any other request is returned as
/// is. A choice that the form the request gets does not build as given on
/// the target (tiles and stages) is an error naming the file's entry.
rt::Status applyTuning(const rt::KernelSpec &requested,
                       const std::string &target,
                       const rt::TuningTable &tuning, rt::KernelSpec &out);

} // namespace attnc

#endif
