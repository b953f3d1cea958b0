//===- ExecWarpgroup.cpp - wgmma and the async proxy (sm_90a) ------------===//
//
// The warpgroup-level matrix instructions of sm_90a: wgmma.fence,
// wgmma.mma_async (A from a shared-memory descriptor or from registers, B
// from a descriptor; f16/bf16 inputs, f32 accumulators), commit_group and
// wait_group; and fence.proxy.async. Each wgmma.* runs once all 128 threads
// of its warpgroup (4 consecutive warps, Ctl::Warpgroup) have arrived.
//
// What a device would not report and the emulator does:
//  - mma_async reads its shared operands at issue and its result lands at
//    the wait_group that retires its group: until then the accumulator
//    registers hold poison (all-ones, NaN), and a write to the shared bytes
//    it read is an error;
//  - an mma_async needs a wgmma.fence since the warpgroup's last
//    wait_group (or the kernel's start), unless every accumulator it reads
//    is one an mma_async in flight writes (the implicit ordering of
//    accumulators of one shape);
//  - shared bytes written through the generic proxy (st.shared, cp.async)
//    and read by an mma_async need a fence.proxy.async by the writing
//    thread between the two;
//  - a warpgroup that exits with an mma_async not retired.
//
// Operand layouts are the canonical ones of the PTX ISA's "matrix
// descriptor" section: 16-byte core-matrix rows, K-major or MN-major
// (transposed), with no swizzle or a 32/64/128-byte swizzle applied to the
// shared address (bits [4, 4 + b) xor bits [7, 7 + b)).
//
//===----------------------------------------------------------------------===//
#include "Decode.h"
#include "MemoryAccess.h"
#include "Values.h"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace attnc::emu {

namespace {
std::atomic<uint32_t> layoutsSeen{0};
} // namespace

uint32_t wgmmaLayoutsSeen(bool clear) {
  return clear ? layoutsSeen.exchange(0) : layoutsSeen.load();
}

void Cta::checkInFlightReads(const Warp &w, const Instr &in, int lane,
                             uint64_t addr, uint32_t n, const char *what) const {
  for (const WarpgroupState &g : warpgroups)
    for (const PendingMma &p : g.mmas)
      for (auto [b, e] : p.reads)
        if (addr < e && addr + n > b)
          fault(w, in, lane, kErrLaunchFailed,
                std::string("shared ") + what + " of " + std::to_string(n) +
                    " bytes at " + std::to_string(addr) +
                    " while a wgmma.mma_async (PTX line " +
                    std::to_string(p.in->line) +
                    ") reads it: its group is not retired by wgmma.wait_group");
}

namespace {

constexpr int kWarpgroupThreads = 128;

/// The decoded fields of a shared-memory matrix descriptor.
struct Descriptor {
  uint32_t start = 0, lbo = 0, sbo = 0; // bytes
  uint32_t baseOffset = 0;
  uint32_t swizzleUnits = 0; // 16-byte units in a swizzled row: 0 (none), 2, 4, 8
};

Descriptor decodeDescriptor(uint64_t d) {
  Descriptor out;
  out.start = uint32_t(d & 0x3fff) << 4;
  out.lbo = uint32_t((d >> 16) & 0x3fff) << 4;
  out.sbo = uint32_t((d >> 32) & 0x3fff) << 4;
  out.baseOffset = uint32_t((d >> 49) & 7);
  switch (uint32_t(d >> 62)) {
  case 1: out.swizzleUnits = 8; break; // 128B
  case 2: out.swizzleUnits = 4; break; // 64B
  case 3: out.swizzleUnits = 2; break; // 32B
  default: out.swizzleUnits = 0; break;
  }
  return out;
}

/// The shared address of element (r, k) of a 16-bit operand: r along M or
/// N, k along K (0..15); `kMajor`: K contiguous within a 16-byte unit.
uint32_t elementAddress(const Descriptor &d, bool kMajor, uint32_t r, uint32_t k) {
  const uint32_t eb = 2, T = 16 / eb; // elements per 16-byte unit
  const uint32_t W = d.swizzleUnits;
  uint32_t off;
  if (kMajor) {
    uint32_t unit = k / T, within = (k % T) * eb;
    off = W == 0 ? (r % 8) * 16 + (r / 8) * d.sbo + unit * d.lbo + within
                 : (r % 8) * (W * 16) + (r / 8) * d.sbo + unit * 16 + within;
  } else {
    off = W == 0 ? (r % T) * eb + (r / T) * d.sbo + (k % 8) * 16 + (k / 8) * d.lbo
                 : (r % T) * eb + ((r / T) % W) * 16 + (r / (T * W)) * d.lbo +
                       (k % 8) * (W * 16) + (k / 8) * d.sbo;
  }
  uint32_t a = d.start + off;
  if (W) {
    uint32_t bits = W - 1; // 1, 3 or 7: the chunk's low bits
    a ^= ((a >> 7) & bits) << 4;
  }
  return a;
}

/// wgmma.mma_async: aux = N, aux2 bit 0: bf16 inputs; bit 1: A from
/// registers; bit 2: trans-a; bit 3: trans-b; bit 4: negate A; bit 5:
/// negate B. op[0]: the accumulators (n = N / 2 slots in `wide` from r[0]);
/// op[1]: A's descriptor (Reg) or its 4 registers (Vec); op[2]: B's
/// descriptor; op[3]: scale-d (a predicate or a constant).
void mmaAsync(Cta &c, Warp &w0, const Instr &in, uint32_t) {
  const int N = int(in.aux);
  const bool bf = in.aux2 & 1, aRegs = in.aux2 & 2, transA = in.aux2 & 4,
             transB = in.aux2 & 8;
  const double sa = (in.aux2 & 16) ? -1.0 : 1.0, sb = (in.aux2 & 32) ? -1.0 : 1.0;
  const size_t g = static_cast<size_t>(w0.id / 4);
  WarpgroupState &wg = c.warpgroups[g];
  Warp *warps[4];
  for (int i = 0; i < 4; ++i)
    warps[i] = &c.warps[g * 4 + static_cast<size_t>(i)];
  const int nD = N / 2;
  const int32_t *dest = in.wide.data() + in.op[0].r[0];

  // The accumulators: the newest in-flight result for each slot, else the
  // register (every accumulator in flight: ordered without a fence).
  std::vector<const PendingMma *> chained(static_cast<size_t>(nD), nullptr);
  bool allChained = true;
  for (int j = 0; j < nD; ++j) {
    for (const PendingMma &p : wg.mmas)
      for (size_t q = 0; q < p.dest.size(); ++q)
        if (p.dest[q] == dest[j])
          chained[size_t(j)] = &p;
    allChained &= chained[size_t(j)] != nullptr;
  }
  if (!wg.fenced && !allChained)
    c.fault(w0, in, 0, kErrLaunchFailed,
            "wgmma.mma_async without a wgmma.fence since the warpgroup's last "
            "wgmma.wait_group (or its start): its accumulator or A registers "
            "may not be ordered with the warpgroup's own accesses");
  bool scaleD = true;
  if (in.op[3].kind == Operand::Reg) {
    uint64_t p0 = slot(w0, in.op[3].r[0], 0);
    for (int i = 0; i < 4; ++i)
      for (int l = 0; l < 32; ++l)
        if ((slot(*warps[i], in.op[3].r[0], l) != 0) != (p0 != 0))
          c.fault(*warps[i], in, l, kErrIllegalInstruction,
                  "wgmma.mma_async's scale-d differs between threads of the warpgroup");
    scaleD = p0 != 0;
  } else {
    scaleD = in.op[3].off != 0;
  }

  auto half = [&](uint16_t h) {
    return bf ? double(bf16ToFloat(h)) : double(f16ToFloat(h));
  };
  PendingMma pm;
  pm.in = &in;
  std::vector<double> A, B; // A[m][k] (64 x 16), B[n][k] (N x 16)
  // Shared operands: read now, with the checks of a read by the async proxy.
  auto readOperand = [&](uint64_t descBits, int rows, bool kMajor,
                         std::vector<double> &out) {
    Descriptor d = decodeDescriptor(descBits);
    uint32_t swizzle = d.swizzleUnits == 8 ? 3 : d.swizzleUnits == 4 ? 2
                       : d.swizzleUnits == 2 ? 1 : 0;
    layoutsSeen |= 1u << ((&out == &B ? 8 : 0) + (kMajor ? 0 : 4) + swizzle);
    if (d.baseOffset)
      c.fault(w0, in, 0, kErrIllegalInstruction,
              "wgmma matrix descriptor with a base offset (bits 49-51) is not "
              "supported by the emulator");
    out.assign(size_t(rows) * 16, 0.0);
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < 16; ++k) {
        uint32_t a = elementAddress(d, kMajor, uint32_t(r), uint32_t(k));
        c.checkAsyncRead(w0, in, a, 2);
        uint16_t h;
        std::memcpy(&h, c.shared.data() + a, 2);
        out[size_t(r) * 16 + size_t(k)] = half(h);
        pm.reads.push_back({a, a + 2});
      }
  };
  if (aRegs)
    layoutsSeen |= 1u << 16;
  if (aRegs) {
    A.assign(64 * 16, 0.0);
    for (int i = 0; i < 4; ++i)
      for (int l = 0; l < 32; ++l) {
        int gr = l >> 2, t = l & 3;
        for (int reg = 0; reg < 4; ++reg) {
          uint32_t v = static_cast<uint32_t>(slot(*warps[i], in.op[1].r[reg], l));
          int row = 16 * i + gr + 8 * (reg & 1), col = 2 * t + 8 * (reg >> 1);
          A[size_t(row) * 16 + size_t(col)] = half(uint16_t(v));
          A[size_t(row) * 16 + size_t(col) + 1] = half(uint16_t(v >> 16));
        }
      }
  } else {
    readOperand(slot(w0, in.op[1].r[0], 0), 64, !transA, A);
  }
  readOperand(slot(w0, in.op[2].r[0], 0), N, !transB, B);
  // Merge the byte ranges (one per element) into runs.
  std::sort(pm.reads.begin(), pm.reads.end());
  std::vector<std::pair<uint32_t, uint32_t>> runs;
  for (auto rg : pm.reads)
    if (!runs.empty() && rg.first <= runs.back().second)
      runs.back().second = std::max(runs.back().second, rg.second);
    else
      runs.push_back(rg);
  pm.reads = std::move(runs);

  pm.dest.assign(dest, dest + nD);
  pm.value.assign(size_t(4) * 32 * size_t(nD), 0);
  for (int i = 0; i < 4; ++i)
    for (int l = 0; l < 32; ++l) {
      int gr = l >> 2, t = l & 3;
      for (int j = 0; j < nD; ++j) {
        // d[4 q + e]: row gr (+8 for e >= 2), column 8 q + 2 t + (e & 1).
        int q = j / 4, e = j % 4;
        int row = 16 * i + gr + 8 * (e >> 1), col = 8 * q + 2 * t + (e & 1);
        size_t at = (size_t(i) * 32 + size_t(l)) * size_t(nD) + size_t(j);
        double acc = 0;
        if (scaleD) {
          const PendingMma *p = chained[size_t(j)];
          uint32_t bits;
          if (p) {
            size_t q2 = 0;
            while (p->dest[q2] != dest[j])
              ++q2;
            bits = p->value[(size_t(i) * 32 + size_t(l)) * p->dest.size() + q2];
          } else {
            bits = static_cast<uint32_t>(slot(*warps[i], dest[j], l));
          }
          acc = double(bitsFloat(bits));
        }
        double s = 0;
        for (int k = 0; k < 16; ++k)
          s += A[size_t(row) * 16 + size_t(k)] * B[size_t(col) * 16 + size_t(k)];
        pm.value[at] = floatBits(canon(static_cast<float>(acc + sa * sb * s)));
      }
    }
  // Poison the accumulators until the result lands.
  for (int i = 0; i < 4; ++i)
    for (int l = 0; l < 32; ++l)
      for (int j = 0; j < nD; ++j)
        slot(*warps[i], dest[j], l) = ~uint64_t(0);
  wg.mmas.push_back(std::move(pm));
  ++c.mmasInFlight;
}

void fenceOp(Cta &c, Warp &w0, const Instr &, uint32_t) {
  c.warpgroups[static_cast<size_t>(w0.id / 4)].fenced = true;
}

void commitGroup(Cta &c, Warp &w0, const Instr &, uint32_t) {
  WarpgroupState &wg = c.warpgroups[static_cast<size_t>(w0.id / 4)];
  bool any = false;
  for (PendingMma &p : wg.mmas)
    if (p.group == 0) {
      p.group = wg.groups + 1;
      any = true;
    }
  if (any)
    ++wg.groups;
}

/// wgmma.wait_group N (aux): retires every committed group but the newest N.
void waitGroup(Cta &c, Warp &w0, const Instr &in, uint32_t) {
  const size_t g = static_cast<size_t>(w0.id / 4);
  WarpgroupState &wg = c.warpgroups[g];
  uint32_t limit = wg.groups >= in.aux ? wg.groups - in.aux : 0;
  std::vector<PendingMma> keep;
  for (PendingMma &p : wg.mmas) {
    if (p.group == 0 || p.group > limit) {
      keep.push_back(std::move(p));
      continue;
    }
    size_t nD = p.dest.size();
    for (int i = 0; i < 4; ++i) {
      Warp &w = c.warps[g * 4 + size_t(i)];
      for (int l = 0; l < 32; ++l)
        for (size_t j = 0; j < nD; ++j)
          slot(w, p.dest[j], l) = p.value[(size_t(i) * 32 + size_t(l)) * nD + j];
    }
    --c.mmasInFlight;
  }
  wg.mmas = std::move(keep);
  wg.fenced = false;
}

/// fence.proxy.async: this thread's generic-proxy writes become visible to
/// the async proxy.
void proxyFence(Cta &c, Warp &w, const Instr &, uint32_t m) {
  forLanes(m, [&](int l) { ++c.proxyFences[size_t(w.id) * 32 + size_t(l)]; });
}

} // namespace

void Cta::checkAsyncRead(const Warp &w, const Instr &in, uint32_t addr, uint32_t n) {
  checkShared(w, in, 0, addr, n, 1, "read by wgmma");
  for (uint32_t i = 0; i < n; ++i)
    if (sharedInit[addr + i] != 1)
      fault(w, in, 0, kErrLaunchFailed,
            "wgmma.mma_async reads shared byte " + std::to_string(addr + i) +
                ", which" + unwrittenReason(addr + i));
  int group = w.id / 4;
  for (uint32_t g = addr / 2; g <= (addr + n - 1) / 2; ++g) {
    uint32_t t = genericWriter[g];
    if (t && proxyFences[t - 1] == genericFence[g])
      fault(w, in, 0, kErrLaunchFailed,
            "wgmma.mma_async (the async proxy) reads shared byte " +
                std::to_string(2 * g) + ", written through the generic proxy by thread " +
                threadName(int(t - 1) / 32, int(t - 1) % 32) +
                " with no fence.proxy.async by that thread since");
    if (racecheck) {
      uint32_t tag = wtag[g];
      int writer = int(tag & 63);
      if ((tag >> 6) == epoch && writer / 4 != group)
        fault(w, in, 0, kErrLaunchFailed,
              "shared memory race: wgmma.mma_async of warps " +
                  std::to_string(4 * group) + "-" + std::to_string(4 * group + 3) +
                  " reads bytes written by warp " + std::to_string(writer) +
                  " with no barrier between them");
    }
  }
}

bool Cta::releaseWarpgroups() {
  bool any = false;
  for (size_t g = 0; g < warpgroups.size(); ++g) {
    size_t first = g * 4;
    Warp &w0 = warps[first];
    if (!w0.atWarpgroup && !(first + 1 < warps.size() && warps[first + 1].atWarpgroup) &&
        !(first + 2 < warps.size() && warps[first + 2].atWarpgroup) &&
        !(first + 3 < warps.size() && warps[first + 3].atWarpgroup))
      continue;
    // Every warp of the group must be here, at the same instruction.
    const Warp *waiting = nullptr;
    for (size_t i = first; i < first + 4; ++i)
      if (i < warps.size() && warps[i].atWarpgroup)
        waiting = &warps[i];
    const Instr &in = k->code[static_cast<size_t>(waiting->pc[0])];
    if (first + 4 > warps.size() || numThreads < int(first + 4) * 32)
      fault(*waiting, in, 0, kErrIllegalInstruction,
            "a warpgroup instruction needs the 4 warps of its warpgroup (128 "
            "threads from a multiple of 128), but the CTA has " +
                std::to_string(numThreads) + " threads");
    bool ready = true;
    for (size_t i = first; i < first + 4; ++i) {
      const Warp &w = warps[i];
      if (w.exited == w.exists)
        fault(*waiting, in, 0, kErrLaunchTimeout,
              "deadlock: warp " + std::to_string(i) + " of this warpgroup has exited");
      if (!w.atWarpgroup) {
        ready = false;
        continue;
      }
      if (w.pc[0] != waiting->pc[0]) {
        const Instr &other = k->code[static_cast<size_t>(w.pc[0])];
        fault(w, other, 0, kErrIllegalInstruction,
              "warps of one warpgroup wait at different warpgroup instructions "
              "(PTX lines " + std::to_string(other.line) + " and " +
                  std::to_string(in.line) + ")");
      }
    }
    if (!ready || !warpgroupReady(*this, in, g))
      continue;
    in.fn(*this, w0, in, 0xffffffffu);
    for (size_t i = first; i < first + 4; ++i) {
      Warp &w = warps[i];
      for (int l = 0; l < 32; ++l)
        ++w.pc[l];
      w.atWarpgroup = false;
    }
    any = true;
  }
  return any;
}

bool bindWarpgroup(Decoder &d, const SynInstr &s, Instr &in, std::string &err) {
  std::vector<std::string> p = splitOpcode(s.opcode);
  const std::string &op = p[0];
  if (op == "fence" && p.size() >= 2 && p[1] == "proxy") {
    if (!hasPart(p, "async")) {
      err = "'" + s.opcode + "' is not supported by the emulator";
      return true;
    }
    in.fn = proxyFence;
    return true;
  }
  if (op != "wgmma")
    return false;
  if (!d.archSpecific() || d.target() != 90) {
    err = "wgmma needs .target sm_90a";
    return true;
  }
  if (!hasPart(p, "sync") || !hasPart(p, "aligned")) {
    err = "wgmma instructions are .sync.aligned";
    return true;
  }
  in.ctl = Ctl::Warpgroup;
  if (p.size() > 1 && p[1] == "fence") {
    in.fn = fenceOp;
    return true;
  }
  if (p.size() > 1 && p[1] == "commit_group") {
    in.fn = commitGroup;
    return true;
  }
  if (p.size() > 1 && p[1] == "wait_group") {
    if (s.ops.size() != 1 || s.ops[0].kind != SynOperand::Int) {
      err = "wgmma.wait_group takes an immediate";
      return true;
    }
    in.aux = static_cast<uint32_t>(s.ops[0].ival);
    in.fn = waitGroup;
    return true;
  }
  if (p.size() < 2 || p[1] != "mma_async") {
    err = "'" + s.opcode + "' is not supported by the emulator";
    return true;
  }
  // wgmma.mma_async.sync.aligned.m64nNk16.f32.{bf16,f16}.{bf16,f16}
  int N = 0;
  for (const std::string &part : p)
    if (part.size() > 4 && part[0] == 'm' && part.rfind("m64n", 0) == 0) {
      size_t kpos = part.find('k');
      N = std::atoi(part.substr(4, kpos - 4).c_str());
      if (part.substr(kpos) != "k16") {
        err = "the emulator's wgmma takes 16-bit inputs (k16), not '" + part + "'";
        return true;
      }
    }
  if (N < 8 || N > 256 || N % 8) {
    err = "wgmma.mma_async needs a shape m64nNk16 with N a multiple of 8 up to 256";
    return true;
  }
  std::vector<std::string> types;
  for (size_t i = 2; i < p.size(); ++i)
    if (p[i] == "f32" || p[i] == "f16" || p[i] == "bf16" || p[i] == "tf32" ||
        p[i] == "e4m3" || p[i] == "e5m2" || p[i] == "s8" || p[i] == "u8")
      types.push_back(p[i]);
  if (types.size() != 3 || types[0] != "f32" || types[1] != types[2] ||
      (types[1] != "bf16" && types[1] != "f16")) {
    err = "the emulator's wgmma.mma_async takes f32 accumulators and f16 or bf16 "
          "inputs ('" + s.opcode + "')";
    return true;
  }
  in.aux = static_cast<uint32_t>(N);
  in.aux2 = types[1] == "bf16" ? 1 : 0;
  if (s.ops.size() < 6 || s.ops[0].kind != SynOperand::Vec ||
      s.ops[0].elems.size() != static_cast<size_t>(N / 2)) {
    err = "wgmma.mma_async m64n" + std::to_string(N) + " takes {" +
          std::to_string(N / 2) + " f32 accumulators}, a-desc or {4 a registers}, "
          "b-desc, scale-d, imm-scale-a, imm-scale-b[, imm-trans-a], imm-trans-b";
    return true;
  }
  in.op[0].kind = Operand::Vec;
  in.op[0].r[0] = static_cast<int32_t>(in.wide.size());
  in.op[0].n = 0;
  for (const SynOperand &e : s.ops[0].elems) {
    int32_t slotId = e.kind == SynOperand::Reg ? d.registerSlot(e.name) : -1;
    if (slotId < 0) {
      err = "wgmma.mma_async accumulators must be registers";
      return true;
    }
    in.wide.push_back(slotId);
  }
  const bool aRegs = s.ops[1].kind == SynOperand::Vec;
  size_t immediates = aRegs ? 3 : 4; // scale-a, scale-b, [trans-a,] trans-b
  if (s.ops.size() != 4 + immediates) {
    err = std::string("wgmma.mma_async with A from ") +
          (aRegs ? "registers" : "a descriptor") + " takes " +
          std::to_string(4 + immediates) + " operands";
    return true;
  }
  if (aRegs) {
    if (s.ops[1].elems.size() != 4) {
      err = "wgmma.mma_async's A registers must be a vector of 4";
      return true;
    }
    if (!d.value(s.ops[1], Ty::B32, in.op[1], err, true))
      return true;
    in.aux2 |= 2;
  } else if (!d.value(s.ops[1], Ty::B64, in.op[1], err)) {
    return true;
  }
  if (!d.value(s.ops[2], Ty::B64, in.op[2], err))
    return true;
  if (s.ops[3].kind == SynOperand::Int) {
    in.op[3].kind = Operand::None;
    in.op[3].off = s.ops[3].ival;
  } else if (!d.value(s.ops[3], Ty::Pred, in.op[3], err)) {
    return true;
  }
  auto imm = [&](size_t i, int64_t &v) {
    if (s.ops[i].kind != SynOperand::Int) {
      err = "wgmma.mma_async's scale and transpose operands are immediates";
      return false;
    }
    v = s.ops[i].ival;
    return true;
  };
  int64_t scaleA = 1, scaleB = 1, transA = 0, transB = 0;
  if (!imm(4, scaleA) || !imm(5, scaleB) ||
      (!aRegs && !imm(6, transA)) || !imm(aRegs ? 6 : 7, transB))
    return true;
  if ((scaleA != 1 && scaleA != -1) || (scaleB != 1 && scaleB != -1) ||
      (transA != 0 && transA != 1) || (transB != 0 && transB != 1)) {
    err = "wgmma.mma_async: imm-scale-a/b are 1 or -1, imm-trans-a/b 0 or 1";
    return true;
  }
  in.aux2 |= (transA ? 4u : 0u) | (transB ? 8u : 0u) | (scaleA < 0 ? 16u : 0u) |
             (scaleB < 0 ? 32u : 0u);
  in.fn = mmaAsync;
  return true;
}

} // namespace attnc::emu
