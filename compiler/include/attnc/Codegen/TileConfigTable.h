//===- TileConfigTable.h - GPU kernel configurations per shape --*- C++ -*-===//
//
// Which tile configuration a GPU kernel is built with: the configuration
// table (per head-dim class, chosen from ptxas's figures), a tuning file's
// winner for the shape class where one is given (attnc tune), the
// candidates the tuner times, and what a configuration needs at launch
// (threads, shared memory) and is named.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_TILECONFIGTABLE_H
#define ATTNC_CODEGEN_TILECONFIGTABLE_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Tuning.h"

#include "llvm/ADT/StringRef.h"

#include <string>
#include <vector>

namespace attnc {

/// `sm_80`, `sm_86`, `sm_89`, `sm_90`: the targets the NVPTX path accepts.
bool isGpuTarget(const std::string &target);

/// The opt-in dynamic shared memory per block of a target's devices.
int64_t gpuSharedOptIn(const std::string &target);

/// Whether a request leaves the tiles to the table (KernelSpec's defaults:
/// 64 x 64, warps 0).
bool requestsDefaultTiles(const rt::KernelSpec &spec);

/// The configuration the GPU kernel for `target` is built with for a
/// requested one. The tensor-core form (f16/bf16, head dims multiples of
/// 16 up to 256): block_m, block_n and warps from the configuration table
/// when the request is the defaults, else as requested; block_n shrinks
/// until the stages fit the target's opt-in shared memory. The SIMT form:
/// the KV tile shrinks so that the K^T and V tiles (f32) fit 48 KB of
/// static shared memory.
rt::KernelSpec gpuSpec(const rt::KernelSpec &requested,
                       const std::string &target);

/// A request for the defaults becomes the tuning file's choice for its
/// shape class, when the file has one; any other request is returned as
/// is. A choice that is not a tensor-core configuration fitting the
/// target is an error naming the file's entry.
rt::Status applyTuning(const rt::KernelSpec &requested,
                       const std::string &target,
                       const rt::TuningTable &tuning, rt::KernelSpec &out);

/// The configurations `attnc-run --tune` times for a request's shape class
/// on `target`: the table's first, then every other tensor-core
/// configuration of block_m 64 (4 warps) or 128 (8 warps of one m-tile,
/// or 4 of two) and block_n 32, 64 or 128 that fits the target, each
/// once. Empty for shapes the tensor-core form does not take.
std::vector<rt::KernelSpec> gpuTileCandidates(const rt::KernelSpec &request,
                                              const std::string &target);

int64_t gpuThreads(const rt::KernelSpec &spec);
/// Static shared memory per block (the SIMT form).
int64_t gpuSharedBytes(const rt::KernelSpec &spec);
/// Dynamic shared memory per block (the tensor-core form): the launcher
/// opts in with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
int64_t gpuDynamicSharedBytes(const rt::KernelSpec &spec);
/// The tile configuration as kernel names and tuning records carry it.
rt::TileConfig gpuTileConfig(const rt::KernelSpec &spec);

/// The kernel's name, carrying its configuration: variant, dtype, head
/// dims, block_m, block_n, warps and pipeline stages, e.g.
/// `attnc_causal_bf16_d128v128_m128n32w8s2`.
std::string gpuKernelName(llvm::StringRef variant, const rt::KernelSpec &spec);

} // namespace attnc

#endif
