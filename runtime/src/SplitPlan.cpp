//===- SplitPlan.cpp - The split-KV planner ------------------------------===//
#include "attnc/runtime/SplitPlan.h"
#include "attnc/runtime/KernelABI.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

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
  } else if (items > 0 && 5 * items < 4 * workers) {
    // Wave efficiency (FlashAttention's heuristic): S splits make
    // items * S blocks, ceil(items * S / workers) waves of which the last
    // may be partly idle. Take the fewest splits within 85% of the best
    // efficiency, among counts that shorten the splits (S whose
    // ceil(kvTiles / S) equals S - 1's only adds merges).
    int64_t most = std::clamp<int64_t>(kvTiles / kMinTilesPerSplit, 1,
                                       abi::kMaxSplits);
    auto efficiency = [&](int64_t s) {
      double waves = double(items * s) / double(workers);
      return waves / std::ceil(waves);
    };
    auto shortens = [&](int64_t s) {
      return s == 1 ||
             (kvTiles + s - 1) / s != (kvTiles + s - 2) / (s - 1);
    };
    double best = 0;
    for (int64_t s = 1; s <= most; ++s)
      if (shortens(s))
        best = std::max(best, efficiency(s));
    for (int64_t s = 1; s <= most; ++s)
      if (shortens(s) && efficiency(s) >= 0.85 * best) {
        out.splits = s;
        break;
      }
  }
  out.tilesPerSplit = (kvTiles + out.splits - 1) / out.splits;
  // A planned split count never leaves a split with no tile at all.
  if (request == 0)
    out.splits = (kvTiles + out.tilesPerSplit - 1) / out.tilesPerSplit;
  return Status::ok();
}

} // namespace attnc::rt
