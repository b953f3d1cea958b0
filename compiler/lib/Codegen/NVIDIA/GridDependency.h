//===- GridDependency.h - The split-KV merge as a dependent launch -*- C++
//-*-===//
//
// On sm_90 and later a kernel may be launched as a programmatic dependent
// of the kernel ahead of it on its stream (PDL: the runtime's
// cuLaunchKernelEx with programmatic stream serialization), so that its
// launch and prologue overlap that kernel's last blocks. The split-KV
// merge is one: the forward kernel triggers its dependents as it starts
// (griddepcontrol.launch_dependents; the merge's blocks are scheduled only
// once every block of the kernel ran it, so none waits behind them), and
// the merge reads its parameters and the problem's sizes, then waits
// (griddepcontrol.wait) before its first read of the partial rows.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_GRIDDEPENDENCY_H
#define ATTNC_CODEGEN_NVIDIA_GRIDDEPENDENCY_H

#include "mlir/IR/BuiltinOps.h"

#include <string>

namespace attnc {

/// For a chip of sm_90 or later, in every gpu.module of `module`: the
/// trigger at the start of each kernel `K` that has a `K_merge`, and in
/// `K_merge` the wait before the first operation that reads its partial
/// rows (its first two arguments). Nothing below sm_90.
void addGridDependencyControl(mlir::ModuleOp module, const std::string &chip);

} // namespace attnc

#endif
