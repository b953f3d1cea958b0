//===- Cta.cpp - Scheduling the lanes of a CTA: warps, barriers, deadlock -===//
//
// Each lane has its own program counter. A warp runs the lanes that share
// the lowest program counter among those that can run, as one group, until
// they branch apart, meet other lanes, or stop at a barrier, a collective
// or an mbarrier wait. A collective runs once every lane of its member mask
// has arrived; a hardware barrier completes once as many threads as it
// counts have arrived (bar.sync waits, bar.arrive does not); a thread
// parked at mbarrier.try_wait retries once some mbarrier phase completes.
// TMA loads land when no warp can run, one at a time, oldest first: the
// latest a device could deliver them, so a missing wait shows. When nothing
// can run, land or complete, the CTA is deadlocked: that is reported with
// the lines, threads and mbarriers involved, never waited on.
//
//===----------------------------------------------------------------------===//
#include "Machine.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <map>

namespace attnc::emu {

std::string Cta::threadName(int warp, int lane) const {
  int tid = warp * 32 + lane;
  int bx = static_cast<int>(shape->block[0]), by = static_cast<int>(shape->block[1]);
  return "(" + std::to_string(tid % bx) + ", " + std::to_string((tid / bx) % by) +
         ", " + std::to_string(tid / (bx * by)) + ")";
}

std::string Cta::where(const Warp &w, const Instr &in, int lane) const {
  size_t pc = static_cast<size_t>(&in - k->code.data());
  std::string text = pc < k->text.size() ? k->text[pc] : "";
  return "    in kernel " + k->name + ", PTX line " + std::to_string(in.line) +
         ": " + text + "\n    CTA (" + std::to_string(ctaid[0]) + ", " +
         std::to_string(ctaid[1]) + ", " + std::to_string(ctaid[2]) +
         "), thread " + threadName(w.id, lane) + " (warp " + std::to_string(w.id) +
         ", lane " + std::to_string(lane) + ")";
}

void Cta::fault(const Warp &w, const Instr &in, int lane, int code,
                const std::string &what) const {
  throw Fault{code, what + "\n" + where(w, in, lane)};
}

void Cta::init(const Kernel &kernel, const LaunchShape &s, const MemoryMap &m,
               const uint8_t *paramBuf, bool race, uint64_t stepLimit) {
  k = &kernel;
  shape = &s;
  mem = &m;
  params = paramBuf;
  racecheck = race;
  maxSteps = stepLimit;
  numThreads = static_cast<int>(s.block[0] * s.block[1] * s.block[2]);
  int nw = (numThreads + 31) / 32;
  warps.assign(static_cast<size_t>(nw), Warp());
  size_t slots = static_cast<size_t>(kernel.numSlots);
  regStore.assign(static_cast<size_t>(nw) * slots * 32, 0);
  localStore.assign(static_cast<size_t>(nw) * 32 * kernel.localBytes, 0);
  sharedBytes = s.dynamicShared ? kernel.dynamicSharedBase + s.dynamicShared
                                : kernel.staticShared;
  shared.assign(sharedBytes, 0);
  sharedInit.assign(sharedBytes, 0);
  size_t granules = (sharedBytes + 1) / 2 + 1;
  wtag.assign(granules, 0);
  repoch.assign(granules, 0);
  rmask.assign(granules, 0);
  genericWriter.assign(granules, 0);
  genericFence.assign(granules, 0);
  proxyFences.assign(static_cast<size_t>(nw) * 32, 0);
  warpgroups.assign(static_cast<size_t>((nw + 3) / 4), WarpgroupState());
  maxnreg.assign(warpgroups.size(), uint32_t(kernel.launchRegisters()));
  for (int i = 0; i < nw; ++i) {
    Warp &w = warps[static_cast<size_t>(i)];
    w.id = i;
    int n = std::min(32, numThreads - 32 * i);
    w.exists = n == 32 ? 0xffffffffu : ((1u << n) - 1);
    w.regs = regStore.data() + static_cast<size_t>(i) * slots * 32;
    w.local = localStore.data() + static_cast<size_t>(i) * 32 * kernel.localBytes;
  }
}

void Cta::run(uint32_t x, uint32_t y, uint32_t z) {
  ctaid[0] = x;
  ctaid[1] = y;
  ctaid[2] = z;
  ++epoch; // the previous CTA's shared-memory tags are stale
  std::fill(sharedInit.begin(), sharedInit.end(), 0);
  std::fill(genericWriter.begin(), genericWriter.end(), 0);
  std::fill(proxyFences.begin(), proxyFences.end(), 0);
  for (WarpgroupState &g : warpgroups)
    g = WarpgroupState();
  mmasInFlight = 0;
  mbarriers.clear();
  bulks.clear();
  for (NamedBarrier &b : barriers)
    b = NamedBarrier();
  std::fill(maxnreg.begin(), maxnreg.end(), uint32_t(k->launchRegisters()));
  // Registers and local memory start as garbage, as on a device: all-ones
  // bits (NaN in every float type), so that reading one before writing it
  // shows in the results.
  std::fill(regStore.begin(), regStore.end(), ~uint64_t(0));
  std::fill(localStore.begin(), localStore.end(), 0xff);
  const int32_t *sp = k->specials;
  uint32_t bx = shape->block[0], by = shape->block[1];
  for (Warp &w : warps) {
    w.exited = ~w.exists;
    w.atBarrier = w.waiting = w.parked = 0;
    w.atWarpgroup = false;
    w.gridWaited = false;
    for (int l = 0; l < 32; ++l) {
      w.pc[l] = 0;
      w.pending[l].clear();
      w.openGroup[l] = 0;
    }
    for (const auto &[s, v] : k->constants)
      for (int l = 0; l < 32; ++l)
        slot(w, s, l) = v;
    auto set = [&](int which, auto value) {
      if (sp[which] >= 0)
        for (int l = 0; l < 32; ++l)
          slot(w, sp[which], l) = static_cast<uint32_t>(value(l));
    };
    set(Kernel::TidX, [&](int l) { return uint32_t(w.id * 32 + l) % bx; });
    set(Kernel::TidY, [&](int l) { return (uint32_t(w.id * 32 + l) / bx) % by; });
    set(Kernel::TidZ, [&](int l) { return uint32_t(w.id * 32 + l) / (bx * by); });
    set(Kernel::NtidX, [&](int) { return bx; });
    set(Kernel::NtidY, [&](int) { return by; });
    set(Kernel::NtidZ, [&](int) { return shape->block[2]; });
    set(Kernel::CtaidX, [&](int) { return x; });
    set(Kernel::CtaidY, [&](int) { return y; });
    set(Kernel::CtaidZ, [&](int) { return z; });
    set(Kernel::NctaidX, [&](int) { return shape->grid[0]; });
    set(Kernel::NctaidY, [&](int) { return shape->grid[1]; });
    set(Kernel::NctaidZ, [&](int) { return shape->grid[2]; });
    set(Kernel::LaneId, [&](int l) { return uint32_t(l); });
    set(Kernel::WarpId, [&](int) { return uint32_t(w.id); });
    set(Kernel::NWarpId, [&](int) { return uint32_t(warps.size()); });
  }
  for (;;) {
    bool ran = false, polled = false;
    for (Warp &w : warps) {
      RunResult r = runWarp(w);
      ran |= r == RunResult::Ran;
      polled |= r == RunResult::Polled;
    }
    if (releaseWarpgroups())
      continue;
    int alive = 0;
    for (const Warp &w : warps)
      alive += __builtin_popcount(w.exists & ~w.exited);
    if (alive == 0) {
      for (const WarpgroupState &g : warpgroups)
        if (!g.mmas.empty()) {
          const Warp &w0 = warps[static_cast<size_t>(&g - warpgroups.data()) * 4];
          fault(w0, *g.mmas.front().in, 0, kErrLaunchFailed,
                "the warpgroup exited with a wgmma.mma_async that no "
                "wgmma.wait_group retired (its accumulators were never written)");
        }
      if (!bulks.empty()) {
        const PendingBulk &b = bulks.front();
        fault(warps[size_t(b.warp)], *b.in, b.lane, kErrLaunchFailed,
              "the CTA exited with a TMA load in flight: nothing waited on " +
                  describeMbarrier(b.mbar) + " for its bytes");
      }
      return;
    }
    if (ran)
      continue;
    if (landBulk())
      continue;
    if (polled) // threads poll with test_wait; the step limit ends an endless poll
      continue;
    deadlock();
  }
}

void Cta::arriveBarrier(Warp &w, const Instr &in, uint32_t m) {
  int lane = __builtin_ctz(m);
  uint32_t id = in.aux & 15;
  if (in.aux & kBarrierIdInRegister) {
    uint64_t v = slot(w, in.op[0].r[0], lane);
    for (uint32_t r = m; r; r &= r - 1)
      if (slot(w, in.op[0].r[0], __builtin_ctz(r)) != v)
        fault(w, in, __builtin_ctz(r), kErrIllegalInstruction,
              "the barrier id differs across the warp (" + std::to_string(v) +
                  " in lane " + std::to_string(lane) + ")");
    if (v > 15)
      fault(w, in, lane, kErrIllegalInstruction,
            "barrier number " + std::to_string(v) + " out of range (0..15)");
    id = uint32_t(v);
  }
  if (in.ctl == Ctl::Barrier)
    for (uint32_t r = m; r; r &= r - 1)
      w.barrierId[__builtin_ctz(r)] = uint8_t(id);
  NamedBarrier &b = barriers[id];
  uint32_t expected = in.aux2 ? in.aux2 : uint32_t(numThreads);
  if (in.aux2 && (in.aux2 % 32 || in.aux2 > uint32_t(numThreads)))
    fault(w, in, lane, kErrIllegalInstruction,
          "barrier thread count " + std::to_string(in.aux2) +
              " is not a multiple of 32 no larger than the CTA (" +
              std::to_string(numThreads) + " threads)");
  if (b.arrived == 0) {
    b.expected = expected;
    b.first = &in;
    b.firstWarp = w.id;
    b.firstLane = lane;
  } else if (b.expected != expected) {
    fault(w, in, lane, kErrIllegalInstruction,
          "barrier " + std::to_string(id) + " counts " + std::to_string(expected) +
              " threads here but " + std::to_string(b.expected) + " at PTX line " +
              std::to_string(b.first->line) + " (thread " +
              threadName(b.firstWarp, b.firstLane) + ") in the same round");
  } else if (!in.aux2 && (in.aux & kBarrierAligned) && in.ctl == Ctl::Barrier &&
             b.first->ctl == Ctl::Barrier && &in != b.first) {
    fault(w, in, lane, kErrLaunchFailed,
          "divergent barrier: thread " + threadName(w.id, lane) + " waits at barrier " +
              std::to_string(id) + " on PTX line " + std::to_string(in.line) +
              " while thread " + threadName(b.firstWarp, b.firstLane) +
              " waits at barrier " + std::to_string(id) + " on PTX line " +
              std::to_string(b.first->line));
  }
  b.arrived += uint32_t(__builtin_popcount(m));
  if (b.arrived > b.expected)
    fault(w, in, lane, kErrLaunchFailed,
          "barrier " + std::to_string(id) + ": " + std::to_string(b.arrived) +
              " threads arrive in one round where it counts " +
              std::to_string(b.expected) +
              " (a thread arrives twice before the barrier completes)");
  if (b.arrived == b.expected)
    releaseBarrier(id);
}

void Cta::releaseBarrier(uint32_t id) {
  for (Warp &w : warps) {
    for (uint32_t r = w.atBarrier; r; r &= r - 1) {
      int l = __builtin_ctz(r);
      if (w.barrierId[l] != id)
        continue;
      ++w.pc[l];
      w.atBarrier &= ~(1u << l);
    }
  }
  barriers[id] = NamedBarrier();
  ++epoch;
}

namespace {
/// "0-31, 40, 64-95" for a set of thread ids.
std::string ranges(const std::vector<int> &ids) {
  std::string s;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1)
      ++j;
    if (!s.empty())
      s += ", ";
    s += std::to_string(ids[i]);
    if (j > i)
      s += "-" + std::to_string(ids[j]);
    i = j + 1;
  }
  return s;
}
} // namespace

void Cta::deadlock() const {
  // Group the threads by what they wait on.
  std::map<std::string, std::vector<int>> groups;
  for (const Warp &w : warps)
    for (int l = 0; l < 32; ++l) {
      if (!((w.exists >> l) & 1))
        continue;
      int tid = w.id * 32 + l;
      std::string what;
      if ((w.exited >> l) & 1) {
        what = "exited";
      } else {
        const Instr &in = k->code[static_cast<size_t>(w.pc[l])];
        size_t pc = static_cast<size_t>(w.pc[l]);
        std::string text = pc < k->text.size() ? k->text[pc] : "";
        what = std::string((w.atBarrier >> l) & 1 ? "wait at the barrier on"
                           : (w.parked >> l) & 1  ? "wait at the mbarrier on"
                           : w.atWarpgroup        ? "wait for their warpgroup at"
                                                  : "wait for their warp at") +
               " PTX line " + std::to_string(in.line) + ": " + text;
        if ((w.atBarrier >> l) & 1) {
          const NamedBarrier &b = barriers[w.barrierId[l]];
          what += " (barrier " + std::to_string(w.barrierId[l]) + ": " +
                  std::to_string(b.arrived) + " of " + std::to_string(b.expected) +
                  " threads arrived)";
        } else if ((w.parked >> l) & 1) {
          what += " (" + describeMbarrier(uint32_t(address(w, in.op[1], l))) + ")";
        }
      }
      groups[what].push_back(tid);
    }
  std::string msg = "deadlock: no thread of the CTA can make progress (a "
                    "barrier or warp-collective that not every thread "
                    "reaches, or an mbarrier phase that cannot complete; no "
                    "TMA load is in flight)";
  for (const auto &[what, ids] : groups)
    msg += "\n    threads " + ranges(ids) + " " + what;
  msg += "\n    in kernel " + k->name + ", CTA (" + std::to_string(ctaid[0]) + ", " +
         std::to_string(ctaid[1]) + ", " + std::to_string(ctaid[2]) + ")";
  throw Fault{kErrLaunchTimeout, msg};
}

Cta::RunResult Cta::runWarp(Warp &w) {
  const Instr *code = k->code.data();
  bool any = false;
  for (;;) {
    uint32_t run = w.atWarpgroup ? 0
                                 : w.exists & ~w.exited & ~w.atBarrier & ~w.waiting &
                                       ~w.parked;
    if (!run)
      return any ? RunResult::Ran : RunResult::Idle;
    any = true;
    int pc = INT_MAX, nextOther = INT_MAX;
    for (uint32_t r = run; r; r &= r - 1)
      pc = std::min(pc, w.pc[__builtin_ctz(r)]);
    uint32_t g = 0;
    for (uint32_t r = run; r; r &= r - 1) {
      int l = __builtin_ctz(r);
      if (w.pc[l] == pc)
        g |= 1u << l;
      else
        nextOther = std::min(nextOther, w.pc[l]);
    }
    // Run group g from pc until it splits, stops, or meets other lanes.
    for (;;) {
      const Instr &in = code[pc];
      uint32_t m = g;
      if (in.guard >= 0) {
        m = 0;
        for (uint32_t r = g; r; r &= r - 1) {
          int l = __builtin_ctz(r);
          if ((slot(w, in.guard, l) != 0) != in.guardNeg)
            m |= 1u << l;
        }
      }
      if (++steps > maxSteps)
        fault(w, in, __builtin_ctz(g), kErrLaunchTimeout,
              "the CTA ran more than " + std::to_string(maxSteps) +
                  " warp instructions (an endless loop?); ATTNC_EMU_MAX_STEPS raises the limit");
      bool stop = false;
      switch (in.ctl) {
      case Ctl::Plain:
        if (m)
          in.fn(*this, w, in, m);
        ++pc;
        break;
      case Ctl::Branch:
        if (m == g) {
          pc = in.target;
        } else if (m == 0) {
          ++pc;
        } else {
          if (in.aux)
            fault(w, in, __builtin_ctz(m), kErrIllegalInstruction,
                  "bra.uni is not uniform: lanes " + std::to_string(m) +
                      " of " + std::to_string(g) + " take it");
          for (uint32_t r = g; r; r &= r - 1) {
            int l = __builtin_ctz(r);
            w.pc[l] = (m >> l) & 1 ? in.target : pc + 1;
          }
          g = 0;
          stop = true;
        }
        break;
      case Ctl::Exit:
        if (m) {
          w.exited |= m;
          for (uint32_t r = m; r; r &= r - 1)
            w.pending[__builtin_ctz(r)].clear();
          g &= ~m;
        }
        ++pc;
        stop = g == 0;
        break;
      case Ctl::Barrier:
        if (m) {
          w.atBarrier |= m;
          for (uint32_t r = m; r; r &= r - 1)
            w.pc[__builtin_ctz(r)] = pc;
          g &= ~m;
          arriveBarrier(w, in, m); // may release them (and others) at once
        }
        ++pc;
        stop = g == 0;
        break;
      case Ctl::BarArrive:
        if (m)
          arriveBarrier(w, in, m);
        ++pc;
        break;
      case Ctl::MbarWait: {
        if (!m) {
          ++pc;
          break;
        }
        uint32_t done = mbarrierWait(w, in, m);
        if (in.aux & 1) { // test_wait: a poll; a failed one yields the warp
          ++pc;
          if (done != m) {
            for (uint32_t r = g; r; r &= r - 1)
              w.pc[__builtin_ctz(r)] = pc;
            return RunResult::Polled;
          }
          break;
        }
        if (uint32_t wait = m & ~done) {
          w.parked |= wait;
          for (uint32_t r = wait; r; r &= r - 1)
            w.pc[__builtin_ctz(r)] = pc;
          g &= ~wait;
        }
        ++pc;
        stop = g == 0;
        break;
      }
      case Ctl::Warpgroup:
        // .sync.aligned over the warpgroup: the whole warp arrives
        // together, then waits for the other three (releaseWarpgroups).
        if (!m) {
          ++pc;
          break;
        }
        if (m != g || g != (w.exists & ~w.exited) || w.exists != 0xffffffffu)
          fault(w, in, __builtin_ctz(m), kErrIllegalInstruction,
                "this warpgroup instruction is .aligned: every lane of the "
                "warp must execute it together (lanes " + std::to_string(m) +
                    " of " + std::to_string(w.exists & ~w.exited) + " do)");
        w.atWarpgroup = true;
        for (uint32_t r = g; r; r &= r - 1)
          w.pc[__builtin_ctz(r)] = pc;
        g = 0;
        stop = true;
        break;
      case Ctl::Trap:
        if (m)
          fault(w, in, __builtin_ctz(m), kErrIllegalInstruction, "trap executed");
        ++pc;
        break;
      case Ctl::Collective: {
        if (!m) {
          ++pc;
          break;
        }
        int l0 = __builtin_ctz(m);
        uint32_t members = 0xffffffffu;
        if (in.membermask >= 0) {
          members = static_cast<uint32_t>(slot(w, in.membermask, l0));
          for (uint32_t r = m; r; r &= r - 1) {
            int l = __builtin_ctz(r);
            if (static_cast<uint32_t>(slot(w, in.membermask, l)) != members)
              fault(w, in, l, kErrIllegalInstruction,
                    "lanes of one warp execute this collective with different member masks");
          }
        }
        if (m & ~members)
          fault(w, in, __builtin_ctz(m & ~members), kErrIllegalInstruction,
                "a lane executes a collective whose member mask does not name it");
        if (members & ~w.exists)
          fault(w, in, l0, kErrIllegalInstruction,
                in.membermask >= 0
                    ? "the member mask names lanes that are not threads of the CTA"
                    : "this .aligned instruction needs all 32 lanes of the warp, "
                      "but the warp has fewer threads");
        if (in.membermask < 0 && (members & w.exited))
          deadlockAligned(w, in, members & w.exited);
        uint32_t needed = members & ~w.exited;
        uint32_t here = 0;
        for (uint32_t r = w.waiting; r; r &= r - 1) {
          int l = __builtin_ctz(r);
          if (w.pc[l] == pc)
            here |= 1u << l;
        }
        if (((m | here) & needed) == needed) {
          in.fn(*this, w, in, needed);
          w.waiting &= ~needed;
          g |= here;
        } else {
          w.waiting |= m;
          for (uint32_t r = m; r; r &= r - 1)
            w.pc[__builtin_ctz(r)] = pc;
          g &= ~m;
          stop = g == 0;
        }
        ++pc;
        break;
      }
      }
      if (stop)
        break;
      if (pc >= nextOther) {
        for (uint32_t r = g; r; r &= r - 1)
          w.pc[__builtin_ctz(r)] = pc;
        break;
      }
    }
  }
}

void Cta::deadlockAligned(const Warp &w, const Instr &in, uint32_t exited) const {
  fault(w, in, __builtin_ctz(~exited & w.exists ? ~exited & w.exists : 1u),
        kErrLaunchTimeout,
        "deadlock: this .aligned warp instruction needs every lane of the warp, "
        "but lanes " + std::to_string(exited) + " (mask) have exited");
}

} // namespace attnc::emu
