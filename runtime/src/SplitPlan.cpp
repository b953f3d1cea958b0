//===- SplitPlan.cpp - The split-KV planner ------------------------------===//
#include "attnc/runtime/SplitPlan.h"
#include "attnc/runtime/KernelABI.h"

#include <fmt/format.h>

#include <algorithm>

namespace attnc::rt {

Status planSplits(int64_t items, int64_t kvTiles, int64_t workers,
                  int64_t request, SplitPlan &out) {
  if (request < 0 || request > abi::kMaxSplits)
    return Status::invalidArgument(fmt::format(
        "'numSplits' must be 0 (the planner's choice) or 1 to {}, got {}",
        abi::kMaxSplits, request));
  kvTiles = std::max<int64_t>(kvTiles, 1);
  out = SplitPlan();
  if (request > 0) {
    out.splits = request;
  } else if (items > 0 && items < workers) {
    int64_t want = (2 * workers + items - 1) / items;
    int64_t most = std::max<int64_t>(kvTiles / kMinTilesPerSplit, 1);
    out.splits = std::clamp<int64_t>(std::min(want, most), 1, abi::kMaxSplits);
  }
  out.tilesPerSplit = (kvTiles + out.splits - 1) / out.splits;
  // A planned split count never leaves a split with no tile at all.
  if (request == 0)
    out.splits = (kvTiles + out.tilesPerSplit - 1) / out.tilesPerSplit;
  return Status::ok();
}

} // namespace attnc::rt
