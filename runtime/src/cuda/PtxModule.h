//===- PtxModule.h - Loading PTX and launching its entries ------*- C++ -*-===//
//
// Internal to the CUDA launchers (GpuKernel, GpuBackwardKernel): the target
// check, the driver's JIT with its error log, entries by name, and a launch
// of one block per work item over grids of at most 2^31 - 1 blocks.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SRC_CUDA_PTXMODULE_H
#define ATTNC_RUNTIME_SRC_CUDA_PTXMODULE_H

#include "../KernelOperands.h"
#include "KvTensorMaps.h"
#include "attnc/runtime/cuda/CudaDriver.h"

#include <string>
#include <vector>

namespace attnc::rt::cuda::ptx {

/// Threads per block of the block-mask builders.
inline constexpr int64_t kMaskBuilderThreads = 64;

/// Refuses a target (sm_XX) the context's device cannot run; `what` names
/// the kernel in messages.
Status checkTarget(const Context &ctx, const std::string &target,
                   const std::string &what);

/// JIT-compiles `ptx` into `out`; a failure carries the driver's log.
Status loadPtx(const Context &ctx, const std::string &ptx,
               const std::string &what, const std::string &target,
               CUmodule &out);

/// The entry `name` of `module`; `role` names it in messages ("kernel",
/// "merge entry", ...). An empty name (an optional entry the image does
/// not have, such as a block-mask builder) gives a null `out`.
Status getEntry(const Context &ctx, CUmodule module, const std::string &name,
                const char *role, CUfunction &out);

/// Checks that an entry takes `memrefs` memref operands (5 eight-byte words
/// each) and one i64, as this runtime passes them (and, with `kvMaps`, the
/// K/V tensor maps and their flag after it: KvTensorMaps.h).
Status checkEntryParams(const std::vector<int> &sizes, size_t memrefs,
                        const std::string &name, bool kvMaps = false);

/// Launches `fn` with one block of `threads` per work item in [0, items)
/// (the i64 operand after the memrefs is the grid's first item; `kvMaps`,
/// when given, follow it); with `blocks` > 0 (a persistent kernel, which
/// takes items a grid apart), min(items, blocks) blocks from item 0.
/// `dependent`: as a programmatic dependent of the kernel ahead of it on
/// the stream (cuLaunchKernelEx; the kernel must wait for that one with
/// griddepcontrol.wait before reading its output; dependentLaunches).
Status launchItems(const Context &ctx, CUfunction fn,
                   std::vector<rt::detail::MemrefDesc> descs, int64_t items,
                   unsigned threads, unsigned dynamicShared, CUstream stream,
                   const KvTensorMaps *kvMaps = nullptr, int64_t blocks = 0,
                   bool dependent = false);

/// Whether kernels that wait for the grid ahead (griddepcontrol.wait) are
/// launched as its programmatic dependents on this device: compute
/// capability 9.0 or later, a driver with cuLaunchKernelEx, and not
/// ATTNC_PDL=0 (the A/B on the same kernels; docs/runtime.md). Read when
/// the kernel is loaded.
bool dependentLaunches(const Context &ctx);

/// A persistent kernel's grid on this device: one block per SM (the forms
/// that are persistent occupy an SM's register file), or 0 (one block per
/// item) where ATTNC_GRID=items asks for that (the A/B of the two grids
/// on the same kernel; docs/runtime.md). Read when the kernel is loaded.
int64_t persistentBlocks(const Context &ctx);

} // namespace attnc::rt::cuda::ptx

#endif
