//===- SplitPlan.h - How many pieces each sequence's keys go in -*- C++ -*-===//
//
// Split-KV: when a launch has fewer work items (b, query-head group, Q
// tile) than the machine has workers (cores, SMs), as in decode, each
// item's KV tiles are cut into S splits processed in parallel; each writes
// a partial output and LSE, and a merge combines them exactly
// (KernelABI.h). The planner picks S from the batch; a caller may force it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SPLITPLAN_H
#define ATTNC_RUNTIME_SPLITPLAN_H

#include "attnc/runtime/Status.h"

#include <cstdint>

namespace attnc::rt {

struct SplitPlan {
  int64_t splits = 1;        // S: 1 means no split and no merge
  int64_t tilesPerSplit = 0; // KV tiles each split visits (the last may be
                             // short, and a short sequence's late splits
                             // empty)
};

/// The fewest KV tiles a planned split gets: below it the partial rows and
/// the merge cost more than the parallelism gains.
inline constexpr int64_t kMinTilesPerSplit = 4;

/// Plans the splits of a launch of `items` work items over at most
/// `kvTiles` KV tiles each (the longest sequence's), for `workers` cores
/// or SMs. `request` > 0 forces that many splits (1: never split; up to
/// abi::kMaxSplits, some of them empty when there are fewer tiles); 0 lets
/// the planner choose: no split once the items fill 80% of the workers,
/// else the fewest splits (each of at least kMinTilesPerSplit tiles) whose
/// wave efficiency (blocks / (waves x workers)) is within 85% of the best
/// count's. A GPU's workers are its SMs (one block each), a CPU's its
/// threads.
Status planSplits(int64_t items, int64_t kvTiles, int64_t workers,
                  int64_t request, SplitPlan &out);

} // namespace attnc::rt

#endif
