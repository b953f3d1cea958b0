//===- ExecAsync.cpp - mbarriers, TMA loads, elect, setmaxnreg (sm_90) ----===//
//
// The asynchronous machinery producer/consumer kernels are made of:
//  - mbarrier objects in shared memory: init/inval, arrive (with a count,
//    with expect_tx, arrive_drop), expect_tx/complete_tx, and the waits
//    (try_wait parks the thread until a phase completes; test_wait polls),
//    by phase parity or by the state token an arrive returned;
//  - cp.async.bulk.tensor loads (1-5-D tiles through a tensor map that
//    cuTensorMapEncodeTiled wrote; TensorMap.h): the box is read from
//    global memory at issue (out-of-bounds elements zero, or NaN where the
//    map asks), placed at swizzled shared addresses, and lands later,
//    completing its bytes on the mbarrier (Cta.cpp decides when);
//  - elect.sync, and setmaxnreg (a warpgroup's register budget).
//
// What a device would not report and the emulator does: any operation on
// an mbarrier that was never initialized (or was invalidated), init of a
// live one, more arrivals than a phase expects, a transaction count out of
// range or completed past what was expected, a state token of another
// mbarrier or two phases old, an ordinary load or store of an mbarrier's
// bytes, a TMA load into bytes that another is still filling or that a
// wgmma in flight reads, a read of bytes a TMA load has not delivered, a
// tensor-map operand that holds no tensor map, a CTA that exits with a TMA
// load in flight, and setmaxnreg outside 24..256, in the wrong direction
// or in a kernel without .maxnreg (its launch count, where every
// warpgroup starts; a block that needs more than the 64K-register file
// does not launch). setmaxnreg.inc waits (as on a device) until the
// warpgroups' counts fit the CTA's pool, the launch's count for each of
// its warps; if they never do, that is a deadlock.
//
//===----------------------------------------------------------------------===//
#include "Decode.h"
#include "MemoryAccess.h"
#include "TensorMap.h"
#include "Values.h"

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>

namespace attnc::emu {

namespace {
std::atomic<uint64_t> tmaLoadCount{0};
} // namespace

uint64_t tmaLoadsIssued(bool clear) {
  return clear ? tmaLoadCount.exchange(0) : tmaLoadCount.load();
}

namespace {

constexpr int64_t kTxLimit = (int64_t(1) << 20) - 1;
constexpr uint32_t kCountLimit = (1u << 20) - 1;
constexpr uint8_t kMbarrierByte = 3, kBulkInFlight = 4;

std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

/// A state token: the mbarrier's address and the phase it was taken in.
uint64_t token(const MBarrier &b) { return (uint64_t(b.addr) << 32) | b.phase; }

} // namespace

MBarrier *Cta::mbarrierAt(uint32_t addr) {
  for (MBarrier &b : mbarriers)
    if (b.addr == addr)
      return &b;
  return nullptr;
}

std::string Cta::describeMbarrier(uint32_t addr) const {
  for (const MBarrier &b : mbarriers)
    if (b.addr == addr) {
      std::string s = "the mbarrier at shared " + hex(addr) + " (phase " +
                      std::to_string(b.phase) + ": " + std::to_string(b.pending) +
                      " of " + std::to_string(b.count) + " arrivals missing";
      if (b.tx > 0)
        s += ", " + std::to_string(b.tx) + " transaction bytes outstanding";
      else if (b.tx < 0)
        s += ", " + std::to_string(-b.tx) + " transaction bytes completed ahead";
      return s + ")";
    }
  return "shared " + hex(addr) + " (no mbarrier is initialized there)";
}

MBarrier &Cta::mbarrier(const Warp &w, const Instr &in, int lane, uint64_t addr) {
  if (MBarrier *b = addr < sharedBytes ? mbarrierAt(uint32_t(addr)) : nullptr)
    return *b;
  checkShared(w, in, lane, addr, 8, 8, "mbarrier access");
  fault(w, in, lane, kErrLaunchFailed,
        "mbarrier operation on shared " + hex(addr) +
            ", where no mbarrier is initialized (mbarrier.init first; an "
            "invalidated one must be initialized again)");
}

void Cta::mbarrierUpdate(const Warp &w, const Instr &in, int lane, MBarrier &b,
                         int64_t tx, uint32_t arrivals) {
  b.tx -= tx;
  if (b.tx > kTxLimit || b.tx < -kTxLimit)
    fault(w, in, lane, kErrLaunchFailed,
          "transaction count of " + describeMbarrier(b.addr) +
              " out of range (at most 2^20-1 bytes outstanding)");
  if (arrivals > b.pending)
    fault(w, in, lane, kErrLaunchFailed,
          std::to_string(arrivals) + " arrival(s) at " + describeMbarrier(b.addr) +
              ": more than its phase expects (mbarrier.init counted " +
              std::to_string(b.count) + ")");
  b.pending -= arrivals;
  if (b.pending == 0 && b.tx < 0)
    fault(w, in, lane, kErrLaunchFailed,
          "more transaction bytes completed on " + describeMbarrier(b.addr) +
              " than its phase expected (expect_tx short of the bytes the copies "
              "deliver)");
  if (b.pending != 0 || b.tx != 0)
    return;
  // The phase completes: the waiting threads retry, and what happened
  // before it is ordered before what follows the waits.
  ++b.phase;
  b.count -= b.drops;
  b.drops = 0;
  b.pending = b.count;
  for (Warp &x : warps)
    x.parked = 0;
  ++epoch;
}

uint32_t Cta::mbarrierWait(Warp &w, const Instr &in, uint32_t m) {
  const bool poll = in.aux & 1, parity = in.aux & 2;
  uint32_t done = 0;
  forLanes(m, [&](int l) {
    MBarrier &b = mbarrier(w, in, l, address(w, in.op[1], l));
    uint64_t v = slot(w, in.op[2].r[0], l);
    bool ready;
    if (parity) {
      ready = (b.phase & 1) != (v & 1);
    } else {
      uint32_t addr = uint32_t(v >> 32), phase = uint32_t(v);
      if (addr != b.addr)
        fault(w, in, l, kErrLaunchFailed,
              "the state operand is a token of the mbarrier at shared " + hex(addr) +
                  ", not of " + describeMbarrier(b.addr));
      if (phase > b.phase || b.phase - phase > 1)
        fault(w, in, l, kErrLaunchFailed,
              "the state operand was taken in phase " + std::to_string(phase) + " of " +
                  describeMbarrier(b.addr) +
                  ": a wait needs a token of the current or the previous phase");
      ready = phase < b.phase;
    }
    if (ready || poll)
      slot(w, in.op[0].r[0], l) = ready ? 1 : 0;
    if (ready)
      done |= 1u << l;
  });
  return done;
}

bool Cta::landBulk() {
  if (bulks.empty())
    return false;
  PendingBulk p = std::move(bulks.front());
  bulks.erase(bulks.begin());
  const Warp &w = warps[size_t(p.warp)];
  for (size_t i = 0; i < p.chunks.size(); ++i) {
    uint32_t a = p.chunks[i];
    std::memcpy(shared.data() + a, p.data.data() + 16 * i, 16);
    std::memset(sharedInit.data() + a, 1, 16);
    for (uint32_t g = a / 2; g < (a + 16) / 2; ++g) {
      genericWriter[g] = 0; // written by the async proxy: no fence needed
      wtag[g] = (epoch << 6) | uint32_t(p.warp);
    }
  }
  MBarrier *b = mbarrierAt(p.mbar);
  if (!b)
    fault(w, *p.in, p.lane, kErrLaunchFailed,
          "a TMA load landed on shared " + hex(p.mbar) +
              ", where its mbarrier was invalidated while the load was in flight");
  mbarrierUpdate(w, *p.in, p.lane, *b, int64_t(p.bytes), 0);
  return true;
}

namespace {

// ---- mbarrier ----

/// mbarrier.init [addr], count: op[0] address, op[1] count.
void mbarInit(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  forLanes(m, [&](int l) {
    uint64_t addr = address(w, in.op[0], l);
    c.checkShared(w, in, l, addr, 8, 8, "mbarrier.init");
    uint32_t count = uint32_t(slot(w, in.op[1].r[0], l));
    if (c.mbarrierAt(uint32_t(addr)))
      c.fault(w, in, l, kErrLaunchFailed,
              "mbarrier.init of " + c.describeMbarrier(uint32_t(addr)) +
                  ", which is live (mbarrier.inval it first)");
    if (count == 0 || count > kCountLimit)
      c.fault(w, in, l, kErrLaunchFailed,
              "mbarrier.init count " + std::to_string(count) + " is not in 1..2^20-1");
    for (uint32_t i = 0; i < 8; ++i) {
      uint8_t s = c.sharedInit[addr + i];
      if (s == 2 || s == kBulkInFlight)
        c.fault(w, in, l, kErrLaunchFailed,
                "mbarrier.init at shared " + hex(addr) +
                    " over bytes an asynchronous copy in flight writes");
    }
    if (c.mmasInFlight)
      c.checkInFlightReads(w, in, l, addr, 8, "mbarrier.init");
    MBarrier b;
    b.addr = uint32_t(addr);
    b.count = b.pending = count;
    b.initLine = in.line;
    c.mbarriers.push_back(b);
    std::memset(c.sharedInit.data() + addr, kMbarrierByte, 8);
  });
}

void mbarInval(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  forLanes(m, [&](int l) {
    uint64_t addr = address(w, in.op[0], l);
    MBarrier &b = c.mbarrier(w, in, l, addr);
    for (const PendingBulk &p : c.bulks)
      if (p.mbar == b.addr)
        c.fault(w, in, l, kErrLaunchFailed,
                "mbarrier.inval of " + c.describeMbarrier(b.addr) +
                    " while a TMA load (PTX line " + std::to_string(p.in->line) +
                    ") will complete on it");
    c.mbarriers.erase(c.mbarriers.begin() + (&b - c.mbarriers.data()));
    std::memset(c.sharedInit.data() + addr, 0, 8); // the bytes hold nothing now
  });
}

/// mbarrier.arrive / arrive.expect_tx / arrive_drop / expect_tx /
/// complete_tx: op[0] state (Sink or none), op[1] address, op[2] the count
/// or transaction bytes (or none). aux bit 0: arrives; bit 1: op[2] is
/// transaction bytes expected; bit 2: completed (complete_tx); bit 3: drop.
void mbarArrive(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  const bool arrives = in.aux & 1, expects = in.aux & 2, completes = in.aux & 4,
             drop = in.aux & 8;
  forLanes(m, [&](int l) {
    MBarrier &b = c.mbarrier(w, in, l, address(w, in.op[1], l));
    uint32_t v = in.op[2].kind == Operand::Reg ? uint32_t(slot(w, in.op[2].r[0], l)) : 1;
    if (in.op[0].kind == Operand::Reg)
      slot(w, in.op[0].r[0], l) = token(b);
    int64_t tx = 0;
    uint32_t arrivals = arrives ? 1 : 0;
    if (expects)
      tx = -int64_t(v);
    else if (completes)
      tx = int64_t(v);
    else if (arrives)
      arrivals = v;
    if (arrives && arrivals == 0)
      c.fault(w, in, l, kErrLaunchFailed, "mbarrier.arrive with a count of 0");
    if (drop) {
      if (b.count - b.drops <= arrivals)
        c.fault(w, in, l, kErrLaunchFailed,
                "mbarrier.arrive_drop would leave " + c.describeMbarrier(b.addr) +
                    " expecting no arrivals");
      b.drops += arrivals;
    }
    c.mbarrierUpdate(w, in, l, b, tx, arrivals);
  });
}

// ---- TMA ----

/// cp.async.bulk.tensor.<aux>d...: op[0] the shared destination, op[1] the
/// tensor map's generic address (coordinates: aux slots in `wide` from
/// op[1].r[0]), op[2] the mbarrier.
void tmaLoad(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  const uint32_t rank = in.aux;
  forLanes(m, [&](int l) {
    // The tensor map: a parameter (param window) or global memory.
    uint64_t mapAddr = address(w, in.op[1], l);
    const uint8_t *raw;
    if (mapAddr >= kParamWindow && mapAddr - kParamWindow < c.k->paramBytes) {
      uint64_t off = mapAddr - kParamWindow;
      if (off % 64 || off + kTensorMapBytes > c.k->paramBytes)
        c.fault(w, in, l, kErrMisaligned,
                "the tensor map at parameter offset " + std::to_string(off) +
                    " is not a 64-byte aligned 128-byte parameter");
      raw = c.params + off;
    } else {
      raw = c.globalPtr(w, in, l, mapAddr, kTensorMapBytes, 64, false);
    }
    TensorMapDesc d;
    if (!decodeTensorMap(raw, d))
      c.fault(w, in, l, kErrIllegalInstruction,
              "the tensor-map operand (" + hex(mapAddr) +
                  ") holds no tensor map made by cuTensorMapEncodeTiled");
    if (d.rank != rank)
      c.fault(w, in, l, kErrIllegalInstruction,
              "a " + std::to_string(rank) + "-d TMA load through a tensor map of rank " +
                  std::to_string(d.rank));
    int64_t coord[kTensorMapMaxRank] = {};
    for (uint32_t i = 0; i < rank; ++i)
      coord[i] = int32_t(slot(w, in.wide[size_t(in.op[1].r[0]) + i], l));
    const uint32_t eb = uint32_t(tensorMapElementBytes(d.dtype));
    const uint32_t rowBytes = d.box[0] * eb, span = swizzleSpan(d.swizzle);
    uint64_t rows = 1;
    for (uint32_t i = 1; i < rank; ++i)
      rows *= d.box[i];
    const uint32_t bytes = uint32_t(rows * rowBytes);
    uint64_t dst = address(w, in.op[0], l);
    if (dst % 128)
      c.fault(w, in, l, kErrMisaligned,
              "TMA destination shared " + hex(dst) + " is not 128-byte aligned");
    c.checkShared(w, in, l, dst, bytes, 16, "TMA write");
    uint32_t mbar = uint32_t(address(w, in.op[2], l));
    c.mbarrier(w, in, l, mbar);

    PendingBulk p;
    p.in = &in;
    p.warp = w.id;
    p.lane = l;
    p.mbar = mbar;
    p.bytes = bytes;
    p.chunks.reserve(bytes / 16);
    p.data.assign(bytes, 0);
    std::vector<uint8_t> row(rowBytes);
    uint8_t fill[8] = {};
    if (d.oobFill == 1) {
      // A NaN, in the device's pattern: 0x7ff7 in every 2 bytes, for f32
      // (0x7ff77ff7) as for 16-bit types (tma_probe.py on an H200, driver
      // 580.159.04, 2026-11-27; 8-byte elements were not probed).
      for (int i = 0; i < 8; i += 2)
        fill[i] = 0xf7, fill[i + 1] = 0x7f;
    }
    for (uint64_t r = 0; r < rows; ++r) {
      // The row's outer coordinates; out of range: the whole row is fill.
      bool inside = true;
      uint64_t base = d.global, rem = r;
      for (uint32_t i = 1; i < rank; ++i) {
        int64_t x = coord[i] + int64_t(rem % d.box[i]);
        rem /= d.box[i];
        if (x < 0 || uint64_t(x) >= d.dims[i])
          inside = false;
        else
          base += uint64_t(x) * d.strides[i - 1];
      }
      int64_t x0 = coord[0];
      bool whole = inside && x0 >= 0 && uint64_t(x0) + d.box[0] <= d.dims[0];
      if (whole) {
        c.globalRead(w, in, l, base + uint64_t(x0) * eb, rowBytes, row.data(), eb);
      } else {
        for (uint32_t e = 0; e < d.box[0]; ++e) {
          int64_t x = x0 + e;
          if (inside && x >= 0 && uint64_t(x) < d.dims[0])
            c.globalRead(w, in, l, base + uint64_t(x) * eb, eb, row.data() + e * eb, eb);
          else
            std::memcpy(row.data() + e * eb, fill, eb);
        }
      }
      for (uint32_t k = 0; k < rowBytes; k += 16) {
        uint32_t a = swizzleAddress(uint32_t(dst + r * rowBytes + k), span);
        std::memcpy(p.data.data() + 16 * p.chunks.size(), row.data() + k, 16);
        p.chunks.push_back(a);
      }
    }
    // Reserve the destination: nothing else may write it or read it while
    // the load is in flight.
    for (uint32_t a : p.chunks) {
      for (uint32_t i = 0; i < 16; ++i) {
        uint8_t s = c.sharedInit[a + i];
        if (s == kMbarrierByte)
          c.fault(w, in, l, kErrLaunchFailed,
                  "a TMA load into shared " + hex(a + i) + ", which holds " +
                      c.describeMbarrier((a + i) & ~7u));
        if (s == kBulkInFlight || s == 2)
          c.fault(w, in, l, kErrLaunchFailed,
                  "a TMA load into shared " + hex(a + i) +
                      ", which an asynchronous copy in flight already writes");
      }
      if (c.mmasInFlight)
        c.checkInFlightReads(w, in, l, a, 16, "TMA write");
      if (c.racecheck)
        for (uint32_t g = a / 2; g < (a + 16) / 2; ++g)
          if (c.repoch[g] == c.epoch && (c.rmask[g] & ~(1u << w.id)))
            c.fault(w, in, l, kErrLaunchFailed,
                    "shared memory race: a TMA load into " + hex(a) + " by warp " +
                        std::to_string(w.id) + " while warp " +
                        std::to_string(__builtin_ctz(c.rmask[g] & ~(1u << w.id))) +
                        " reads it, with no barrier between them");
      std::memset(c.sharedInit.data() + a, kBulkInFlight, 16);
    }
    c.bulks.push_back(std::move(p));
    tmaLoadCount.fetch_add(1, std::memory_order_relaxed);
  });
}

// ---- elect, setmaxnreg ----

/// elect.sync d|p, membermask (a collective over `m`): the lowest lane
/// leads.
void elect(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int leader = __builtin_ctz(m);
  forLanes(m, [&](int l) {
    if (in.op[0].kind == Operand::Reg)
      slot(w, in.op[0].r[0], l) = uint32_t(leader);
    if (in.op[1].kind == Operand::Reg)
      slot(w, in.op[1].r[0], l) = l == leader ? 1 : 0;
  });
}

/// setmaxnreg.{inc,dec}: aux the count, aux2 1 for inc (a warpgroup
/// instruction: run once for the 4 warps, once warpgroupReady).
void setMaxNReg(Cta &c, Warp &w0, const Instr &in, uint32_t) {
  uint32_t &cur = c.maxnreg[size_t(w0.id / 4)];
  if (cur && (in.aux2 ? in.aux < cur : in.aux > cur))
    c.fault(w0, in, 0, kErrIllegalInstruction,
            std::string("setmaxnreg.") + (in.aux2 ? "inc" : "dec") + " to " +
                std::to_string(in.aux) + " registers from " + std::to_string(cur) +
                (in.aux2 ? ": .inc may not lower the count" : ": .dec may not raise it"));
  cur = in.aux;
}

} // namespace

bool warpgroupReady(const Cta &c, const Instr &in, size_t group) {
  if (in.fn != setMaxNReg || !in.aux2)
    return true;
  // setmaxnreg.inc waits until the CTA's pool has room (PTX ISA: "a pool
  // of available registers is maintained per-CTA"). The pool is what the
  // block was launched with, the launch's count (.maxnreg, which a kernel
  // with setmaxnreg must state) for each of its warps, not the SM's 64K
  // file: an H200 hung on 48 x 128 + 232 x 256 = 65536 > 168 x 384. Every
  // warpgroup counts the registers it set, or the launch's until it sets
  // some; one whose warps exited keeps its count (on the device the pool
  // did not get them back).
  const uint64_t pool = uint64_t(c.warps.size()) * 32 * uint64_t(c.k->launchRegisters());
  uint64_t total = 0;
  for (size_t g = 0; g < c.maxnreg.size(); ++g)
    total += uint64_t(g == group ? in.aux : c.maxnreg[g]) * 128;
  return total <= pool;
}

namespace {

bool sharedAddress(Decoder &d, const SynOperand &s, Operand &out, std::string &err) {
  return d.address(s, Space::Shared, out, err);
}

} // namespace

bool bindAsync(Decoder &d, const SynInstr &s, Instr &in, std::string &err) {
  std::vector<std::string> p = splitOpcode(s.opcode);
  const std::string &op = p[0];
  auto needs90 = [&](const char *what) {
    if (d.target() < 90)
      err = std::string(what) + " needs .target sm_90 or later";
    return d.target() >= 90;
  };
  if (op == "mbarrier") {
    if (p.size() < 2) {
      err = "mbarrier needs an operation";
      return true;
    }
    const std::string &kind = p[1];
    if (!hasPart(p, "shared") && !hasPart(p, "shared::cta")) {
      err = "the emulator supports mbarrier operations on .shared::cta addresses only";
      return true;
    }
    if (lastType(p) != Ty::B64) {
      err = "mbarrier operations take .b64 objects";
      return true;
    }
    if (kind == "init") {
      if (s.ops.size() != 2 || !sharedAddress(d, s.ops[0], in.op[0], err) ||
          !d.value(s.ops[1], Ty::U32, in.op[1], err)) {
        if (err.empty())
          err = "mbarrier.init takes [addr], count";
        return true;
      }
      in.fn = mbarInit;
      return true;
    }
    if (kind == "inval") {
      if (s.ops.size() != 1 || !sharedAddress(d, s.ops[0], in.op[0], err)) {
        if (err.empty())
          err = "mbarrier.inval takes [addr]";
        return true;
      }
      in.fn = mbarInval;
      return true;
    }
    if (kind == "arrive" || kind == "arrive_drop") {
      if (!needs90("mbarrier.arrive") && hasPart(p, "expect_tx"))
        return true;
      if (hasPart(p, "noComplete")) {
        err = "mbarrier.arrive.noComplete is not supported by the emulator";
        return true;
      }
      in.aux = 1 | (hasPart(p, "expect_tx") ? 2 : 0) | (kind == "arrive_drop" ? 8 : 0);
      if (s.ops.size() < 2 || s.ops.size() > 3 ||
          !d.dest(s.ops[0], in.op[0], err) ||
          !sharedAddress(d, s.ops[1], in.op[1], err) ||
          (s.ops.size() == 3 && !d.value(s.ops[2], Ty::U32, in.op[2], err))) {
        if (err.empty())
          err = "mbarrier.arrive takes state, [addr]{, count}";
        return true;
      }
      if ((in.aux & 2) && s.ops.size() != 3) {
        err = "mbarrier.arrive.expect_tx takes state, [addr], txCount";
        return true;
      }
      in.fn = mbarArrive;
      return true;
    }
    if (kind == "expect_tx" || kind == "complete_tx") {
      if (!needs90(kind == "expect_tx" ? "mbarrier.expect_tx" : "mbarrier.complete_tx"))
        return true;
      in.aux = kind == "expect_tx" ? 2 : 4;
      in.op[0].kind = Operand::Sink;
      if (s.ops.size() != 2 || !sharedAddress(d, s.ops[0], in.op[1], err) ||
          !d.value(s.ops[1], Ty::U32, in.op[2], err)) {
        if (err.empty())
          err = "mbarrier." + kind + " takes [addr], txCount";
        return true;
      }
      in.fn = mbarArrive;
      return true;
    }
    if (kind == "try_wait" || kind == "test_wait") {
      bool parity = hasPart(p, "parity");
      in.ctl = Ctl::MbarWait;
      in.aux = (kind == "test_wait" ? 1 : 0) | (parity ? 2 : 0);
      if (s.ops.size() < 3 || s.ops.size() > 4 || !d.dest(s.ops[0], in.op[0], err) ||
          in.op[0].kind != Operand::Reg || !sharedAddress(d, s.ops[1], in.op[1], err) ||
          !d.value(s.ops[2], parity ? Ty::U32 : Ty::B64, in.op[2], err) ||
          (s.ops.size() == 4 && !d.value(s.ops[3], Ty::U32, in.op[3], err))) {
        if (err.empty())
          err = "mbarrier." + kind + " takes p, [addr], " +
                (parity ? "phaseParity" : "state") + "{, suspendTimeHint}";
        return true;
      }
      return true;
    }
    err = "'" + s.opcode + "' is not supported by the emulator";
    return true;
  }
  if (op == "cp" && p.size() > 2 && p[1] == "async" && p[2] == "bulk") {
    if (!needs90("cp.async.bulk"))
      return true;
    bool tensor = p.size() > 3 && p[3] == "tensor";
    uint32_t rank = 0;
    if (tensor && p.size() > 4 && p[4].size() == 2 && p[4][1] == 'd')
      rank = uint32_t(p[4][0] - '0');
    bool toShared = p.size() > 5 && (p[5] == "shared::cluster" || p[5] == "shared::cta");
    if (!tensor || rank < 1 || rank > 5 || !toShared || !hasPart(p, "global") ||
        !hasPart(p, "mbarrier::complete_tx::bytes") || hasPart(p, "multicast::cluster") ||
        hasPart(p, "im2col")) {
      err = "the emulator supports cp.async.bulk.tensor.Nd.shared::{cta,cluster}.global"
            "{.tile}.mbarrier::complete_tx::bytes{.L2::cache_hint} (tiled TMA loads "
            "into this CTA); not '" + s.opcode + "'";
      return true;
    }
    size_t nops = hasPart(p, "L2::cache_hint") ? 4 : 3;
    if (s.ops.size() != nops || s.ops[1].kind != SynOperand::Addr ||
        s.ops[1].elems.size() != rank) {
      err = "cp.async.bulk.tensor." + std::to_string(rank) +
            "d takes [dstMem], [tensorMap, {" + std::to_string(rank) +
            " coordinates}], [mbar]" + (nops == 4 ? ", cache-policy" : "");
      return true;
    }
    in.aux = rank;
    if (!sharedAddress(d, s.ops[0], in.op[0], err) ||
        !sharedAddress(d, s.ops[2], in.op[2], err))
      return true;
    // The map: a register holding a generic address, or a parameter's name.
    SynOperand map = s.ops[1];
    map.elems.clear();
    uint64_t paramOff = 0;
    if (map.kind == SynOperand::Addr && d.registerSlot(map.name) < 0 &&
        d.paramSymbol(map.name, paramOff)) {
      in.op[1] = Operand();
      in.op[1].kind = Operand::Addr;
      in.op[1].off = int64_t(kParamWindow + paramOff) + map.offset;
    } else if (!d.address(map, Space::Global, in.op[1], err)) {
      return true;
    }
    in.op[1].r[0] = int32_t(in.wide.size());
    for (const SynOperand &c : s.ops[1].elems) {
      Operand e;
      if (!d.value(c, Ty::S32, e, err))
        return true;
      in.wide.push_back(e.r[0]);
    }
    in.fn = tmaLoad;
    return true;
  }
  if (op == "elect") {
    if (!needs90("elect.sync"))
      return true;
    if (!hasPart(p, "sync") || s.ops.size() != 2 || s.ops[0].kind != SynOperand::Pair) {
      err = "expected elect.sync d|p, membermask";
      return true;
    }
    Operand mm;
    if (!d.dest(s.ops[0].elems[0], in.op[0], err) ||
        !d.dest(s.ops[0].elems[1], in.op[1], err) ||
        !d.value(s.ops[1], Ty::B32, mm, err))
      return true;
    in.ctl = Ctl::Collective;
    in.membermask = mm.r[0];
    in.fn = elect;
    return true;
  }
  if (op == "setmaxnreg") {
    if (!d.archSpecific() || d.target() != 90) {
      err = "setmaxnreg needs .target sm_90a";
      return true;
    }
    bool inc = hasPart(p, "inc");
    if ((!inc && !hasPart(p, "dec")) || !hasPart(p, "sync") || !hasPart(p, "aligned") ||
        s.ops.size() != 1 || s.ops[0].kind != SynOperand::Int) {
      err = "expected setmaxnreg.{inc,dec}.sync.aligned.u32 imm";
      return true;
    }
    int64_t n = s.ops[0].ival;
    if (n < 24 || n > 256 || n % 8) {
      err = "setmaxnreg count " + std::to_string(n) + " is not a multiple of 8 in 24..256";
      return true;
    }
    in.ctl = Ctl::Warpgroup;
    in.aux = uint32_t(n);
    in.aux2 = inc ? 1 : 0;
    in.fn = setMaxNReg;
    d.noteSetMaxNReg();
    return true;
  }
  return false;
}

} // namespace attnc::emu
