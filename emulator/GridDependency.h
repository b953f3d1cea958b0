//===- GridDependency.h - Programmatic dependent launches (PDL) ----------===//
//
// A launch with CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION may
// start before the kernel ahead of it on its stream has finished (once
// every block of that kernel ran griddepcontrol.launch_dependents or
// exited); its threads may rely on that kernel's memory only after
// griddepcontrol.wait (PTX ISA: the wait returns once the prerequisite
// grids completed and their memory operations are visible). The emulator
// runs the two one after the other, a schedule a device may take, so a
// dependent that reads the kernel's output without waiting would pass here
// and fail on silicon. So it records the bytes the kernel ahead writes and
// faults on any global access of them by a warp of the dependent before
// that warp's griddepcontrol.wait (a warp waits when any of its lanes runs
// the instruction; kernels run it uniformly).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_GRIDDEPENDENCY_H
#define ATTNC_EMU_GRIDDEPENDENCY_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnc::emu {

/// Byte ranges [begin, end) of global memory a grid wrote.
class GridWrites {
public:
  using Range = std::pair<uint64_t, uint64_t>;
  /// While the grid runs, per host worker (adjacent writes coalesce).
  static void note(std::vector<Range> &log, uint64_t addr, uint64_t n) {
    if (!log.empty() && log.back().second == addr)
      log.back().second = addr + n;
    else
      log.emplace_back(addr, addr + n);
  }
  /// After it: the workers' logs, sorted and merged.
  void gather(std::vector<Range> &log);
  void finish();
  bool overlaps(uint64_t addr, uint64_t n) const;
  bool empty() const { return ranges_.empty(); }

  std::string kernel; // the grid that wrote them

private:
  std::vector<Range> ranges_;
};

} // namespace attnc::emu

#endif
