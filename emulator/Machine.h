//===- Machine.h - The state of a running CTA: warps, lanes, memories ----===//
//
// A CTA is a set of warps of 32 lanes. Each lane has its own program
// counter (independent thread scheduling); the scheduler (Cta.cpp) runs the
// lanes of a warp that share the lowest program counter together, and
// handlers execute one instruction for a mask of lanes. Registers are kept
// lane-minor (slot * 32 + lane). Shared memory carries shadows: which bytes
// were ever written (reads of others are reported), and which warp last
// wrote or read each 2-byte granule since the last barrier (races between
// warps are reported).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_MACHINE_H
#define ATTNC_EMU_MACHINE_H

#include "GridDependency.h"
#include "Program.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::emu {

// The CUDA error codes a faulting launch returns.
constexpr int kErrIllegalAddress = 700;
constexpr int kErrLaunchTimeout = 702;
constexpr int kErrIllegalInstruction = 715;
constexpr int kErrMisaligned = 716;
constexpr int kErrLaunchFailed = 719;

/// A fault of the kernel: thrown by handlers, reported by the launch.
struct Fault {
  int code;
  std::string what;
};

/// A device allocation (host memory with known bounds).
struct Allocation {
  uint64_t base = 0, size = 0, id = 0;
};

/// The allocations live during a launch, sorted by base.
struct MemoryMap {
  std::vector<Allocation> allocs;
  /// The allocation holding [addr, addr + n), or null.
  const Allocation *find(uint64_t addr, uint64_t n) const;
  /// "12 bytes past the end of allocation #3 (0x..., 4096 bytes)".
  std::string describe(uint64_t addr, uint64_t n) const;
};

/// Generic addresses of the kernel's parameters (cvta.param; what a
/// tensor-map operand names): a window no host pointer reaches.
constexpr uint64_t kParamWindow = 0xC000000000000000ull;

struct LaunchShape {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t dynamicShared = 0;
};

/// A cp.async issued but not yet retired by a wait: the bytes were read at
/// issue; they land in shared memory when the wait retires their group.
struct PendingCopy {
  uint32_t dst = 0;
  uint32_t group = 0;
  uint8_t n = 0;
  uint8_t lane = 0;
  uint8_t bytes[16];
};

/// A wgmma.mma_async issued and not yet retired by wgmma.wait_group
/// (ExecWarpgroup.cpp): its result, computed from the operands at issue,
/// lands in the accumulator registers when its group retires; until then
/// those registers hold poison (all-ones: NaN) and the shared bytes it read
/// must not be written.
struct PendingMma {
  const Instr *in = nullptr;
  uint32_t group = 0;         // its commit group (0: not committed yet)
  std::vector<int32_t> dest;  // accumulator slots, per thread
  std::vector<uint32_t> value; // [warp of 4][lane][dest] bits
  std::vector<std::pair<uint32_t, uint32_t>> reads; // shared [begin, end)
};

/// The state of 4 consecutive warps issuing wgmma together.
struct WarpgroupState {
  bool fenced = false;   // a wgmma.fence since the last wgmma.wait_group
  uint32_t groups = 0;   // groups committed so far
  std::vector<PendingMma> mmas;
};

/// An mbarrier object in shared memory (ExecAsync.cpp): a phase completes
/// once `pending` arrivals have come and the transaction count is back to
/// zero; then the next phase expects `count` arrivals.
struct MBarrier {
  uint32_t addr = 0;
  uint32_t count = 0;   // arrivals per phase (init; arrive_drop lowers it)
  uint32_t pending = 0; // arrivals the current phase still needs
  uint32_t drops = 0;   // arrive_drop's in this phase: the next count's cut
  int64_t tx = 0;       // transaction bytes expected minus completed
  uint32_t phase = 0;   // phases completed
  int initLine = 0;     // the PTX line of its mbarrier.init
};

/// A TMA load issued and not landed: 16-byte chunks of the box, already at
/// their (swizzled) shared addresses, read from global memory at issue;
/// they land, and complete `bytes` of transactions on the mbarrier at
/// `mbar`, when no warp can run (the latest a device could).
struct PendingBulk {
  const Instr *in = nullptr;
  int warp = 0, lane = 0;
  uint32_t mbar = 0, bytes = 0;
  std::vector<uint32_t> chunks; // shared addresses
  std::vector<uint8_t> data;    // 16 bytes per chunk
};

/// A hardware barrier (bar.sync / bar.arrive with an id, 0..15): threads
/// arrived in its current round and the count they expect.
struct NamedBarrier {
  uint32_t arrived = 0, expected = 0;
  const Instr *first = nullptr;
  int firstWarp = 0, firstLane = 0;
};

struct Warp {
  int id = 0;
  bool atWarpgroup = false; // every lane waits at a warpgroup instruction
  uint32_t exists = 0;    // lanes that are threads of the CTA
  uint32_t exited = 0;
  uint32_t atBarrier = 0; // waiting at bar.sync (pc at the barrier)
  uint32_t waiting = 0;   // waiting at a collective (pc at it)
  uint32_t parked = 0;    // waiting at mbarrier.try_wait (pc at it)
  uint8_t barrierId[32] = {}; // the barrier a lane in atBarrier waits at
  int32_t pc[32] = {};
  uint64_t *regs = nullptr; // slots * 32
  uint8_t *local = nullptr; // 32 * localBytes
  std::vector<PendingCopy> pending[32];
  uint32_t openGroup[32] = {}; // the group new cp.async copies join
  bool gridWaited = false;     // ran griddepcontrol.wait (GridDependency.h)
};

struct Cta {
  const Kernel *k = nullptr;
  const LaunchShape *shape = nullptr;
  const MemoryMap *mem = nullptr;
  const uint8_t *params = nullptr;
  uint32_t ctaid[3] = {0, 0, 0};
  int numThreads = 0;
  std::vector<Warp> warps;
  std::vector<uint64_t> regStore;
  std::vector<uint8_t> localStore;
  // Shared memory and its shadows.
  uint32_t sharedBytes = 0;
  std::vector<uint8_t> shared;
  std::vector<uint8_t> sharedInit; // per byte: 0 never written, 1 written, 2 cp.async in flight
  std::vector<uint32_t> wtag;      // per 2-byte granule: epoch << 6 | writer warp
  std::vector<uint32_t> repoch, rmask; // per granule: epoch of the reads, reader warps
  uint32_t epoch = 1;              // barriers completed (never reset: tags stay valid)
  // The async proxy (wgmma's shared operands): per 2-byte granule, the
  // thread (+1) that last wrote it through the generic proxy and that
  // thread's count of fence.proxy.async at the time; per thread, that
  // count. A granule the async proxy reads must have been fenced since.
  std::vector<uint32_t> genericWriter, genericFence, proxyFences;
  std::vector<WarpgroupState> warpgroups;
  size_t mmasInFlight = 0;
  // The async machinery (ExecAsync.cpp): mbarrier objects, TMA loads in
  // flight (oldest first), the 16 hardware barriers, and per warpgroup the
  // register count: the launch's (.maxnreg) until setmaxnreg sets one (0:
  // unknown, a kernel without setmaxnreg).
  std::vector<MBarrier> mbarriers;
  std::vector<PendingBulk> bulks;
  NamedBarrier barriers[16];
  std::vector<uint32_t> maxnreg;
  bool racecheck = true;
  uint64_t steps = 0, maxSteps = 0;
  const Allocation *lastAlloc = nullptr; // global lookups hit the same allocation
  // Programmatic dependent launches (GridDependency.h): the global bytes
  // this grid writes, recorded when a dependent follows it; the bytes the
  // grid this one depends on wrote, which a warp may touch only after its
  // griddepcontrol.wait. With either, global accesses take the checked
  // path (lastAlloc stays null).
  std::vector<std::pair<uint64_t, uint64_t>> *writeLog = nullptr;
  const GridWrites *prerequisite = nullptr;

  /// Sets up the CTA's warps for `shape` (storage reused between CTAs).
  void init(const Kernel &kernel, const LaunchShape &s, const MemoryMap &m,
            const uint8_t *paramBuf, bool race, uint64_t stepLimit);
  /// Runs CTA (x, y, z) to completion; throws Fault.
  void run(uint32_t x, uint32_t y, uint32_t z);

  [[noreturn]] void fault(const Warp &w, const Instr &in, int lane, int code,
                          const std::string &what) const;
  std::string where(const Warp &w, const Instr &in, int lane) const;
  std::string threadName(int warp, int lane) const;

  // Memory accesses with memcheck: bounds, alignment, shadows.
  void globalRead(const Warp &w, const Instr &in, int lane, uint64_t addr,
                  uint32_t n, void *dst, uint32_t align);
  void globalWrite(const Warp &w, const Instr &in, int lane, uint64_t addr,
                   uint32_t n, const void *src, uint32_t align);
  uint8_t *globalPtr(const Warp &w, const Instr &in, int lane, uint64_t addr,
                     uint32_t n, uint32_t align, bool write);
  void sharedRead(const Warp &w, const Instr &in, int lane, uint64_t addr,
                  uint32_t n, void *dst, uint32_t align);
  void sharedWrite(const Warp &w, const Instr &in, int lane, uint64_t addr,
                   uint32_t n, const void *src, uint32_t align);
  /// cp.async issue: the destination is checked and marked in flight.
  void sharedReserve(const Warp &w, const Instr &in, int lane, uint64_t addr,
                     uint32_t n, uint32_t align);
  /// cp.async retire: the bytes land (a write by warp `w`).
  void sharedLand(const Warp &w, const PendingCopy &c);
  /// Faults if [addr, addr + n) is read by a wgmma.mma_async in flight
  /// (`what`: "write", "cp.async write").
  void checkInFlightReads(const Warp &w, const Instr &in, int lane, uint64_t addr,
                          uint32_t n, const char *what) const;
  /// A read of [addr, addr + n) by the async proxy (wgmma's operands):
  /// bounds, written bytes, fence.proxy.async after generic writes, races.
  void checkAsyncRead(const Warp &w, const Instr &in, uint32_t addr, uint32_t n);
  /// Runs the warpgroup instruction every warp of some warpgroup waits at
  /// (ExecWarpgroup.cpp); false when none is ready.
  bool releaseWarpgroups();
  uint8_t *localPtr(const Warp &w, const Instr &in, int lane, uint64_t addr,
                    uint32_t n, uint32_t align);
  /// Why shared byte `addr` may not be read: " was never written", ...
  std::string unwrittenReason(uint64_t addr) const;
  /// Faults unless [addr, addr + n) is aligned and within shared memory.
  void checkShared(const Warp &w, const Instr &in, int lane, uint64_t addr,
                   uint32_t n, uint32_t align, const char *what) const;

  // mbarriers and TMA (ExecAsync.cpp).
  /// The initialized mbarrier at `addr`, or null.
  MBarrier *mbarrierAt(uint32_t addr);
  /// The mbarrier at `addr`; faults when none is initialized there.
  MBarrier &mbarrier(const Warp &w, const Instr &in, int lane, uint64_t addr);
  /// Completes `tx` bytes of transactions (negative: expects them) and
  /// `arrivals` arrivals on `b`; completes its phase when both are done.
  void mbarrierUpdate(const Warp &w, const Instr &in, int lane, MBarrier &b,
                      int64_t tx, uint32_t arrivals);
  /// The lanes of `m` whose wait at mbarrier.try_wait/test_wait is over
  /// (their predicate set; a poll sets the others' to false).
  uint32_t mbarrierWait(Warp &w, const Instr &in, uint32_t m);
  /// Lands the oldest TMA load in flight; false when none is.
  bool landBulk();
  /// "mbarrier at 0x40 (phase 3: 1 of 2 arrivals and 16 bytes missing)".
  std::string describeMbarrier(uint32_t addr) const;

private:
  enum class RunResult { Idle, Ran, Polled };
  RunResult runWarp(Warp &w);
  /// Threads `m` of warp `w` arrive at the hardware barrier of `in`
  /// (bar.sync parks them first; bar.arrive does not).
  void arriveBarrier(Warp &w, const Instr &in, uint32_t m);
  void releaseBarrier(uint32_t id);
  [[noreturn]] void deadlock() const;
  [[noreturn]] void deadlockAligned(const Warp &w, const Instr &in,
                                    uint32_t exited) const;
};

// ---- helpers for handlers ----
inline uint64_t &slot(Warp &w, int32_t s, int lane) {
  return w.regs[static_cast<size_t>(s) * 32 + lane];
}
inline uint64_t slot(const Warp &w, int32_t s, int lane) {
  return w.regs[static_cast<size_t>(s) * 32 + lane];
}
template <typename F> inline void forLanes(uint32_t mask, F f) {
  if (mask == 0xffffffffu) {
    for (int l = 0; l < 32; ++l)
      f(l);
  } else {
    while (mask) {
      int l = __builtin_ctz(mask);
      mask &= mask - 1;
      f(l);
    }
  }
}
/// The effective address of an Addr operand for `lane`.
inline uint64_t address(const Warp &w, const Operand &o, int lane) {
  uint64_t a = (o.base >= 0 ? slot(w, o.base, lane) : 0) + static_cast<uint64_t>(o.off);
  return o.addr32 ? uint32_t(a) : a;
}

// Binders: each recognizes its opcodes, fills `in` (handler, control kind,
// types, operands already resolved) or sets `error`. They return false
// when the opcode is not theirs.
struct SynInstr;
class Decoder;
bool bindAlu(Decoder &d, const SynInstr &s, Instr &in, std::string &error);
bool bindConvert(Decoder &d, const SynInstr &s, Instr &in, std::string &error);
bool bindMemory(Decoder &d, const SynInstr &s, Instr &in, std::string &error);
bool bindWarp(Decoder &d, const SynInstr &s, Instr &in, std::string &error);
bool bindWarpgroup(Decoder &d, const SynInstr &s, Instr &in, std::string &error);
bool bindAsync(Decoder &d, const SynInstr &s, Instr &in, std::string &error);
bool bindGridDependency(Decoder &d, const SynInstr &s, Instr &in,
                        std::string &error);
/// TMA loads issued by every launch since the last call that cleared them.
uint64_t tmaLoadsIssued(bool clear);
/// False while the warpgroup instruction `in` of warpgroup `group` must
/// wait (setmaxnreg.inc without room in the register file).
bool warpgroupReady(const Cta &c, const Instr &in, size_t group);
/// A bit per wgmma operand layout executed (bit 8 operand + 4 MN-major +
/// swizzle: 0 none, 1 32B, 2 64B, 3 128B; operand 0 A, 1 B; bit 16: A
/// from registers), since the last call that cleared them.
uint32_t wgmmaLayoutsSeen(bool clear);

} // namespace attnc::emu

#endif
