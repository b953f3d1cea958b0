//===- GridDependency.cpp - griddepcontrol and the dependent's check -----===//
//
// griddepcontrol.launch_dependents (a hint: the emulator runs a dependent
// after the grid ahead of it anyway) and griddepcontrol.wait (marks the
// warp: from here it may touch what the grid ahead wrote), sm_90 and
// later; the byte ranges that grid wrote (GridDependency.h).
//
//===----------------------------------------------------------------------===//
#include "Decode.h"
#include "Machine.h"

#include <algorithm>

namespace attnc::emu {

void GridWrites::gather(std::vector<Range> &log) {
  ranges_.insert(ranges_.end(), log.begin(), log.end());
  log.clear();
}

void GridWrites::finish() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<Range> merged;
  for (const Range &r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  ranges_ = std::move(merged);
}

bool GridWrites::overlaps(uint64_t addr, uint64_t n) const {
  // The first range ending after addr.
  auto it =
      std::upper_bound(ranges_.begin(), ranges_.end(), addr,
                       [](uint64_t a, const Range &r) { return a < r.second; });
  return it != ranges_.end() && it->first < addr + n;
}

namespace {
void gridWait(Cta &, Warp &w, const Instr &, uint32_t) { w.gridWaited = true; }
void launchDependents(Cta &, Warp &, const Instr &, uint32_t) {}
} // namespace

bool bindGridDependency(Decoder &d, const SynInstr &s, Instr &in,
                        std::string &err) {
  std::vector<std::string> p = splitOpcode(s.opcode);
  if (p[0] != "griddepcontrol")
    return false;
  if (d.target() < 90) {
    err = "griddepcontrol needs .target sm_90 or later";
    return true;
  }
  if (p.size() != 2 || !s.ops.empty() ||
      (p[1] != "wait" && p[1] != "launch_dependents")) {
    err = "expected griddepcontrol.wait or griddepcontrol.launch_dependents "
          "(no operands)";
    return true;
  }
  in.fn = p[1] == "wait" ? gridWait : launchDependents;
  return true;
}

} // namespace attnc::emu
