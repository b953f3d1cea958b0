//===- CpuLaunch.h - Running JIT-compiled entry points on host threads -*- C++ -*-===//
//
// Internal to the runtime: the thread pool loop every CPU entry point
// (forward, merge, block-mask builder, backward) is launched with.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SRC_CPULAUNCH_H
#define ATTNC_RUNTIME_SRC_CPULAUNCH_H

#include "KernelOperands.h"

#include <functional>

namespace attnc::rt::detail {

/// A host operand; empty ones get a valid address all the same.
MemrefDesc descOf(const void *p, int64_t n);

/// The threads a launch of `items` work items uses (`threads` 0: every
/// core): at least 1, at most `items`.
int launchWorkers(int64_t items, int threads);

/// Calls `fn` (MLIR's packed convention: 5 pointers per memref operand,
/// then the item range) once per work item in [0, items), spread over
/// launchWorkers(items, threads) threads that take items as they free up.
/// `perThread(t, operands)`, when given, adjusts thread t's copy of the
/// operands (a buffer of its own) before its first item.
void launchItems(void (*fn)(void **), const std::vector<MemrefDesc> &operands,
                 int64_t items, int threads,
                 const std::function<void(int, std::vector<MemrefDesc> &)>
                     &perThread = {});

/// Fills `bm` (sized by initBlockMask) with the classes the block-mask
/// builder entry `builder` computes for this call.
void fillBlockMask(void (*builder)(void **), const VariantInfo &v,
                   const KernelSpec &spec, const AttentionArgs &a,
                   const Problem &p, BlockMask &bm);

} // namespace attnc::rt::detail

#endif
