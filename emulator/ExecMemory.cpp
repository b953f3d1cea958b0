//===- ExecMemory.cpp - ld, st, cp.async, atom/red, and memcheck ---------===//
//
// Every access is checked: global accesses against the allocation they
// fall in, shared against the CTA's shared size, local against the
// thread's frame, param against the parameter buffer; all for alignment.
// Shared memory reads must read written bytes (not poison, not the target
// of a cp.async in flight), and accesses of different warps to the same
// bytes between two barriers must not conflict (a write with any other
// access is a race).
//
//===----------------------------------------------------------------------===//
#include "Decode.h"
#include "MemoryAccess.h"
#include "Values.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace attnc::emu {

// ---- MemoryMap ----

const Allocation *MemoryMap::find(uint64_t addr, uint64_t n) const {
  auto it = std::upper_bound(allocs.begin(), allocs.end(), addr,
                             [](uint64_t a, const Allocation &x) { return a < x.base; });
  if (it == allocs.begin())
    return nullptr;
  --it;
  if (addr >= it->base && addr + n <= it->base + it->size && addr + n >= addr)
    return &*it;
  return nullptr;
}

static std::string hex(uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

std::string MemoryMap::describe(uint64_t addr, uint64_t n) const {
  auto it = std::upper_bound(allocs.begin(), allocs.end(), addr,
                             [](uint64_t a, const Allocation &x) { return a < x.base; });
  std::string s;
  if (it != allocs.begin()) {
    const Allocation &a = *std::prev(it);
    std::string alloc = "allocation #" + std::to_string(a.id) + " (" + hex(a.base) +
                        ", " + std::to_string(a.size) + " bytes)";
    if (addr < a.base + a.size)
      return "the access runs " + std::to_string(addr + n - (a.base + a.size)) +
             " bytes past the end of " + alloc;
    s = std::to_string(addr - (a.base + a.size)) + " bytes past the end of " + alloc;
  }
  if (it != allocs.end()) {
    std::string below = std::to_string(it->base - addr) + " bytes before allocation #" +
                        std::to_string(it->id) + " (" + hex(it->base) + ", " +
                        std::to_string(it->size) + " bytes)";
    s = s.empty() ? below : s + ", " + below;
  }
  return "the address is in no allocation" + (s.empty() ? std::string() : ": " + s);
}

// ---- Cta memory accesses ----

uint8_t *Cta::globalPtr(const Warp &w, const Instr &in, int lane, uint64_t addr,
                        uint32_t n, uint32_t align, bool write) {
  if (align > 1 && addr % align)
    fault(w, in, lane, kErrMisaligned,
          std::string("misaligned global ") + (write ? "write" : "read") + " of " +
              std::to_string(n) + " bytes at " + hex(addr) + " (needs " +
              std::to_string(align) + "-byte alignment)");
  const Allocation *a = lastAlloc;
  if (!a || addr < a->base || addr + n > a->base + a->size) {
    a = mem->find(addr, n);
    if (!a)
      fault(w, in, lane, kErrIllegalAddress,
            std::string("invalid global ") + (write ? "write" : "read") + " of " +
                std::to_string(n) + " bytes at " + hex(addr) + ": " +
                mem->describe(addr, n));
    // With a grid dependency to check, every access comes back here.
    if (!writeLog && !prerequisite)
      lastAlloc = a;
  }
  if (writeLog && write)
    GridWrites::note(*writeLog, addr, n);
  if (prerequisite && !w.gridWaited && prerequisite->overlaps(addr, n))
    fault(w, in, lane, kErrIllegalAddress,
          std::string("global ") + (write ? "write" : "read") + " of " +
              std::to_string(n) + " bytes at " + hex(addr) +
              " before griddepcontrol.wait: " + prerequisite->kernel +
              ", the kernel this launch depends on programmatically, writes "
              "those bytes and may still be running");
  return reinterpret_cast<uint8_t *>(addr);
}

void Cta::globalRead(const Warp &w, const Instr &in, int lane, uint64_t addr,
                     uint32_t n, void *dst, uint32_t align) {
  std::memcpy(dst, globalPtr(w, in, lane, addr, n, align, false), n);
}

void Cta::globalWrite(const Warp &w, const Instr &in, int lane, uint64_t addr,
                      uint32_t n, const void *src, uint32_t align) {
  std::memcpy(globalPtr(w, in, lane, addr, n, align, true), src, n);
}

void Cta::checkShared(const Warp &w, const Instr &in, int lane, uint64_t addr,
                      uint32_t n, uint32_t align, const char *what) const {
  if (align > 1 && addr % align)
    fault(w, in, lane, kErrMisaligned,
          std::string("misaligned shared ") + what + " of " + std::to_string(n) +
              " bytes at " + hex(addr) + " (needs " + std::to_string(align) +
              "-byte alignment)");
  if (addr + n > sharedBytes || addr + n < addr)
    fault(w, in, lane, kErrIllegalAddress,
          std::string("invalid shared ") + what + " of " + std::to_string(n) +
              " bytes at " + hex(addr) + ": the CTA has " +
              std::to_string(sharedBytes) + " bytes of shared memory (" +
              std::to_string(k->staticShared) + " static + " +
              std::to_string(shape->dynamicShared) + " dynamic)");
}

namespace {
std::string granuleRange(uint64_t addr, uint32_t n) {
  return hex(addr) + ".." + hex(addr + n - 1);
}
} // namespace

std::string Cta::unwrittenReason(uint64_t addr) const {
  switch (sharedInit[addr]) {
  case 2: return " is the target of a cp.async not yet retired by cp.async.wait_group";
  case 3:
    return " belongs to " + describeMbarrier(uint32_t(addr & ~uint64_t(7))) +
           ", which only mbarrier instructions may access";
  case 4:
    return " is the target of a TMA load in flight (wait on its mbarrier before "
           "reading it)";
  default: return " was never written";
  }
}

void Cta::sharedRead(const Warp &w, const Instr &in, int lane, uint64_t addr,
                     uint32_t n, void *dst, uint32_t align) {
  checkShared(w, in, lane, addr, n, align, "read");
  for (uint32_t i = 0; i < n; ++i)
    if (sharedInit[addr + i] != 1)
      fault(w, in, lane, kErrLaunchFailed,
            "uninitialized shared read of " + std::to_string(n) + " bytes at " +
                hex(addr) + ": byte " + hex(addr + i) + unwrittenReason(addr + i));
  if (racecheck) {
    uint32_t bit = 1u << w.id;
    for (uint64_t g = addr / 2; g <= (addr + n - 1) / 2; ++g) {
      uint32_t t = wtag[g];
      if ((t >> 6) == epoch && int(t & 63) != w.id)
        fault(w, in, lane, kErrLaunchFailed,
              "shared memory race: read of " + granuleRange(addr, n) +
                  " by warp " + std::to_string(w.id) + " after a write by warp " +
                  std::to_string(t & 63) + " with no barrier between them");
      if (repoch[g] != epoch) {
        repoch[g] = epoch;
        rmask[g] = 0;
      }
      rmask[g] |= bit;
    }
  }
  std::memcpy(dst, shared.data() + addr, n);
}

void Cta::sharedWrite(const Warp &w, const Instr &in, int lane, uint64_t addr,
                      uint32_t n, const void *src, uint32_t align) {
  checkShared(w, in, lane, addr, n, align, "write");
  if (mmasInFlight)
    checkInFlightReads(w, in, lane, addr, n, "write");
  for (uint32_t i = 0; i < n; ++i)
    if (sharedInit[addr + i] >= 3)
      fault(w, in, lane, kErrLaunchFailed,
            "shared write of " + std::to_string(n) + " bytes at " + hex(addr) +
                ": byte " + hex(addr + i) + unwrittenReason(addr + i));
  // A write of the bytes already there changes nothing: no hazard (as
  // compute-sanitizer's racecheck, which reports only writes that change
  // the data), and no new writer for the proxies.
  bool written = true;
  for (uint32_t i = 0; i < n && written; ++i)
    written = sharedInit[addr + i] == 1;
  if (written && std::memcmp(shared.data() + addr, src, n) == 0)
    return;
  uint32_t thread = uint32_t(w.id * 32 + lane);
  for (uint64_t g = addr / 2; g <= (addr + n - 1) / 2; ++g) {
    genericWriter[g] = thread + 1;
    genericFence[g] = proxyFences[thread];
  }
  if (racecheck) {
    uint32_t bit = 1u << w.id;
    for (uint64_t g = addr / 2; g <= (addr + n - 1) / 2; ++g) {
      if (repoch[g] == epoch && (rmask[g] & ~bit))
        fault(w, in, lane, kErrLaunchFailed,
              "shared memory race: write of " + granuleRange(addr, n) +
                  " by warp " + std::to_string(w.id) +
                  " after a read by warp " +
                  std::to_string(__builtin_ctz(rmask[g] & ~bit)) +
                  " with no barrier between them");
      uint32_t t = wtag[g];
      if ((t >> 6) == epoch && int(t & 63) != w.id)
        fault(w, in, lane, kErrLaunchFailed,
              "shared memory race: write of " + granuleRange(addr, n) +
                  " by warp " + std::to_string(w.id) + " after a write by warp " +
                  std::to_string(t & 63) + " with no barrier between them");
      wtag[g] = (epoch << 6) | uint32_t(w.id);
    }
  }
  std::memcpy(shared.data() + addr, src, n);
  std::memset(sharedInit.data() + addr, 1, n);
}

void Cta::sharedReserve(const Warp &w, const Instr &in, int lane, uint64_t addr,
                        uint32_t n, uint32_t align) {
  checkShared(w, in, lane, addr, n, align, "cp.async write");
  if (mmasInFlight)
    checkInFlightReads(w, in, lane, addr, n, "cp.async write");
  for (uint32_t i = 0; i < n; ++i)
    if (sharedInit[addr + i] >= 3)
      fault(w, in, lane, kErrLaunchFailed,
            "cp.async into " + std::to_string(n) + " bytes at " + hex(addr) +
                ": byte " + hex(addr + i) + unwrittenReason(addr + i));
  if (racecheck) {
    uint32_t bit = 1u << w.id;
    for (uint64_t g = addr / 2; g <= (addr + n - 1) / 2; ++g) {
      if (repoch[g] == epoch && (rmask[g] & ~bit))
        fault(w, in, lane, kErrLaunchFailed,
              "shared memory race: cp.async into " + granuleRange(addr, n) +
                  " by warp " + std::to_string(w.id) + " while warp " +
                  std::to_string(__builtin_ctz(rmask[g] & ~bit)) +
                  " reads it, with no barrier between them");
      uint32_t t = wtag[g];
      if ((t >> 6) == epoch && int(t & 63) != w.id)
        fault(w, in, lane, kErrLaunchFailed,
              "shared memory race: cp.async into " + granuleRange(addr, n) +
                  " by warp " + std::to_string(w.id) + " after a write by warp " +
                  std::to_string(t & 63) + " with no barrier between them");
      wtag[g] = (epoch << 6) | uint32_t(w.id);
    }
  }
  std::memset(sharedInit.data() + addr, 2, n);
}

void Cta::sharedLand(const Warp &w, const PendingCopy &c) {
  std::memcpy(shared.data() + c.dst, c.bytes, c.n);
  std::memset(sharedInit.data() + c.dst, 1, c.n);
  // cp.async writes through the generic proxy too.
  uint32_t thread = uint32_t(w.id * 32 + c.lane);
  for (uint64_t g = c.dst / 2; g <= (uint64_t(c.dst) + c.n - 1) / 2; ++g) {
    genericWriter[g] = thread + 1;
    genericFence[g] = proxyFences[thread];
  }
  if (racecheck)
    for (uint64_t g = c.dst / 2; g <= (uint64_t(c.dst) + c.n - 1) / 2; ++g)
      wtag[g] = (epoch << 6) | uint32_t(w.id);
}

uint8_t *Cta::localPtr(const Warp &w, const Instr &in, int lane, uint64_t addr,
                       uint32_t n, uint32_t align) {
  if (align > 1 && addr % align)
    fault(w, in, lane, kErrMisaligned,
          "misaligned local access of " + std::to_string(n) + " bytes at " + hex(addr));
  if (addr + n > k->localBytes || addr + n < addr)
    fault(w, in, lane, kErrIllegalAddress,
          "invalid local access of " + std::to_string(n) + " bytes at " + hex(addr) +
              ": the thread's frame has " + std::to_string(k->localBytes) + " bytes");
  return w.local + size_t(lane) * k->localBytes + addr;
}

namespace {

// ld/st: Size bytes per element, Vec elements; Sext: sign-extend loads.

template <Space S, unsigned N>
inline const uint8_t *loadPtr(Cta &c, Warp &w, const Instr &in, int l,
                              uint64_t addr, uint8_t *scratch) {
  if constexpr (S == Space::Global) {
    return globalAccess<N>(c, w, in, l, addr, false);
  } else if constexpr (S == Space::Shared) {
    return sharedLoad<N>(c, w, in, l, addr, scratch);
  } else if constexpr (S == Space::Local) {
    return localAccess<N>(c, w, in, l, addr);
  } else {
    if (addr % N || addr + N > c.k->paramBytes)
      c.fault(w, in, l, kErrIllegalAddress,
              "invalid param read of " + std::to_string(N) + " bytes at offset " +
                  std::to_string(addr) + " (the kernel has " +
                  std::to_string(c.k->paramBytes) + " bytes of parameters)");
    return c.params + addr;
  }
}

template <Space S, unsigned Size, unsigned Vec, bool Sext>
void ld(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  constexpr unsigned N = Size * Vec;
  const Operand &d = in.op[0], &a = in.op[1];
  uint8_t scratch[N];
  uint64_t lastAddr = ~uint64_t(0);
  const uint8_t *lastSrc = nullptr;
  forLanes(m, [&](int l) {
    uint64_t addr = address(w, a, l);
    const uint8_t *src;
    if constexpr (S == Space::Shared) {
      // Lanes reading what the previous lane read (a broadcast) need no
      // second check: same warp, same epoch, same bytes.
      src = addr == lastAddr ? lastSrc : loadPtr<S, N>(c, w, in, l, addr, scratch);
      lastAddr = addr;
      lastSrc = src;
    } else {
      src = loadPtr<S, N>(c, w, in, l, addr, scratch);
    }
    for (unsigned i = 0; i < Vec; ++i) {
      int32_t r = Vec > 1 ? d.r[i] : d.r[0];
      if (r < 0)
        continue;
      uint64_t v = 0;
      std::memcpy(&v, src + i * Size, Size);
      if constexpr (Sext && Size < 8)
        if ((v >> (8 * Size - 1)) & 1)
          v |= ~uint64_t(0) << (8 * Size);
      slot(w, r, l) = v;
    }
  });
}

template <Space S, unsigned Size, unsigned Vec>
void st(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  constexpr unsigned N = Size * Vec;
  const Operand &a = in.op[0], &v = in.op[1];
  forLanes(m, [&](int l) {
    uint64_t addr = address(w, a, l);
    uint8_t buf[N];
    for (unsigned i = 0; i < Vec; ++i) {
      uint64_t x = slot(w, Vec > 1 ? v.r[i] : v.r[0], l);
      std::memcpy(buf + i * Size, &x, Size);
    }
    if constexpr (S == Space::Global)
      std::memcpy(globalAccess<N>(c, w, in, l, addr, true), buf, N);
    else if constexpr (S == Space::Shared)
      sharedStore<N>(c, w, in, l, addr, buf);
    else
      std::memcpy(localAccess<N>(c, w, in, l, addr), buf, N);
  });
}

template <Space S, unsigned Size, unsigned Vec>
Handler ldFor(bool sext) {
  if constexpr (Size < 8)
    if (sext)
      return ld<S, Size, Vec, true>;
  return ld<S, Size, Vec, false>;
}

template <Space S, unsigned Size> Handler pickVec(bool load, unsigned vec, bool sext) {
  if (load)
    return vec == 1 ? ldFor<S, Size, 1>(sext) : vec == 2 ? ldFor<S, Size, 2>(sext)
                                                         : ldFor<S, Size, 4>(sext);
  if constexpr (S == Space::Param)
    return nullptr;
  else
    return vec == 1 ? st<S, Size, 1> : vec == 2 ? st<S, Size, 2> : st<S, Size, 4>;
}

template <Space S> Handler pickSize(bool load, unsigned size, unsigned vec, bool sext) {
  switch (size) {
  case 1: return pickVec<S, 1>(load, vec, sext);
  case 2: return pickVec<S, 2>(load, vec, sext);
  case 4: return pickVec<S, 4>(load, vec, sext);
  default: return pickVec<S, 8>(load, vec, sext);
  }
}

Handler pickLoadStore(Space sp, bool load, unsigned size, unsigned vec, bool sext) {
  switch (sp) {
  case Space::Global: return pickSize<Space::Global>(load, size, vec, sext);
  case Space::Shared: return pickSize<Space::Shared>(load, size, vec, sext);
  case Space::Local: return pickSize<Space::Local>(load, size, vec, sext);
  default: return pickSize<Space::Param>(load, size, vec, sext);
  }
}

/// cp.async [dst], [src], cp-size (aux), src-size (op[2] or none), or an
/// ignore-src predicate (aux2 == 1: op[2] is the predicate).
void cpAsync(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  uint32_t size = in.aux;
  forLanes(m, [&](int l) {
    uint64_t dst = address(w, in.op[0], l), src = address(w, in.op[1], l);
    uint32_t srcSize = size;
    if (in.op[2].kind == Operand::Reg) {
      uint64_t v = slot(w, in.op[2].r[0], l);
      srcSize = in.aux2 == 1 ? (v ? 0 : size) : static_cast<uint32_t>(v);
    }
    if (srcSize > size)
      c.fault(w, in, l, kErrIllegalInstruction,
              "cp.async src-size " + std::to_string(srcSize) + " exceeds cp-size " +
                  std::to_string(size));
    PendingCopy p;
    p.dst = static_cast<uint32_t>(dst);
    p.n = static_cast<uint8_t>(size);
    std::memset(p.bytes, 0, sizeof p.bytes);
    if (srcSize)
      c.globalRead(w, in, l, src, srcSize, p.bytes, size);
    else if (src % size)
      c.fault(w, in, l, kErrMisaligned,
              "misaligned cp.async source " + hex(src) + " (needs " +
                  std::to_string(size) + "-byte alignment)");
    c.sharedReserve(w, in, l, dst, size, size);
    p.group = w.openGroup[l];
    p.lane = static_cast<uint8_t>(l);
    w.pending[l].push_back(p);
  });
}

void cpCommit(Cta &, Warp &w, const Instr &, uint32_t m) {
  forLanes(m, [&](int l) { ++w.openGroup[l]; });
}

/// Retires every pending copy of a group older than the newest `aux`
/// committed groups (aux2 == 1: wait_all, which commits first).
void cpWait(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  forLanes(m, [&](int l) {
    if (in.aux2 == 1)
      ++w.openGroup[l];
    std::vector<PendingCopy> &q = w.pending[l];
    uint32_t limit = w.openGroup[l] >= in.aux ? w.openGroup[l] - in.aux : 0;
    size_t k = 0;
    while (k < q.size() && q[k].group < limit)
      c.sharedLand(w, q[k++]);
    q.erase(q.begin(), q.begin() + static_cast<long>(k));
  });
}

// ---- atomics ----
enum AtomOp : uint32_t { AAdd, AMin, AMax, AExch, ACas, AAnd, AOr, AXor };

template <class T> T atomApply(uint32_t op, T old, T b) {
  switch (op) {
  case AAdd:
    if constexpr (std::is_floating_point_v<T>)
      return old + b;
    else
      return T(Unsigned<T>(old) + Unsigned<T>(b));
  case AMin: return old < b ? old : b;
  case AMax: return old > b ? old : b;
  case AExch: return b;
  default: break;
  }
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
    case AAnd: return old & b;
    case AOr: return old | b;
    case AXor: return old ^ b;
    }
  }
  return b;
}

/// atom/red: op[0] d (Sink for red), op[1] address, op[2] b, op[3] c (cas).
template <class T, Space S> void atom(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  forLanes(m, [&](int l) {
    uint64_t addr = address(w, in.op[1], l);
    T b = get<T>(w, in.op[2].r[0], l);
    T old;
    if constexpr (S == Space::Global) {
      T *p = reinterpret_cast<T *>(c.globalPtr(w, in, l, addr, sizeof(T), sizeof(T), true));
      using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
      U *u = reinterpret_cast<U *>(p);
      U cur = __atomic_load_n(u, __ATOMIC_RELAXED);
      for (;;) {
        T o;
        std::memcpy(&o, &cur, sizeof(T));
        T nv;
        if (in.aux == ACas)
          nv = o == b ? get<T>(w, in.op[3].r[0], l) : o;
        else
          nv = atomApply<T>(in.aux, o, b);
        U nu;
        std::memcpy(&nu, &nv, sizeof(T));
        if (__atomic_compare_exchange_n(u, &cur, nu, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
          old = o;
          break;
        }
      }
    } else {
      c.sharedRead(w, in, l, addr, sizeof(T), &old, sizeof(T));
      T nv = in.aux == ACas ? (old == b ? get<T>(w, in.op[3].r[0], l) : old)
                            : atomApply<T>(in.aux, old, b);
      c.sharedWrite(w, in, l, addr, sizeof(T), &nv, sizeof(T));
    }
    if (in.op[0].kind == Operand::Reg)
      put<T>(w, in.op[0].r[0], l, old);
  });
}

template <Space S> Handler atomFor(Ty t) {
  switch (t) {
  case Ty::U32: case Ty::B32: return atom<uint32_t, S>;
  case Ty::S32: return atom<int32_t, S>;
  case Ty::U64: case Ty::B64: return atom<uint64_t, S>;
  case Ty::S64: return atom<int64_t, S>;
  case Ty::F32: return atom<float, S>;
  case Ty::F64: return atom<double, S>;
  default: return nullptr;
  }
}

Space spaceOf(const std::vector<std::string> &p) {
  for (size_t i = 1; i < p.size(); ++i) {
    if (p[i] == "global") return Space::Global;
    if (p[i] == "shared" || p[i] == "shared::cta") return Space::Shared;
    if (p[i] == "local") return Space::Local;
    if (p[i] == "param") return Space::Param;
    if (p[i] == "const") return Space::Const;
  }
  return Space::None;
}

} // namespace

bool bindMemory(Decoder &d, const SynInstr &s, Instr &in, std::string &err) {
  std::vector<std::string> p = splitOpcode(s.opcode);
  const std::string &op = p[0];
  if (op == "ld" || op == "st" || op == "ldu") {
    bool load = op != "st";
    Space sp = spaceOf(p);
    in.space = sp;
    Ty t = lastType(p);
    in.t = t;
    if (sp == Space::None || sp == Space::Const) {
      err = sp == Space::None
                ? "generic addressing ('" + s.opcode + "') is not supported by the emulator; use a state space"
                : "the .const space is not supported by the emulator";
      return true;
    }
    if (!load && sp == Space::Param) {
      err = "st.param is not supported in kernels";
      return true;
    }
    if (t == Ty::None || t == Ty::Pred || t == Ty::F16x2 || t == Ty::BF16x2) {
      if (t == Ty::F16x2 || t == Ty::BF16x2)
        t = Ty::B32;
      else {
        err = "'" + s.opcode + "' needs a type";
        return true;
      }
    }
    in.aux = static_cast<uint32_t>(tyBits(t) / 8);
    in.aux2 = tySigned(t);
    in.vec = hasPart(p, "v4") ? 4 : hasPart(p, "v2") ? 2 : hasPart(p, "v8") ? 8 : 1;
    if (in.vec > 4) {
      err = ".v8 is not supported by the emulator";
      return true;
    }
    if (s.ops.size() != 2) {
      err = "'" + op + "' takes 2 operands";
      return true;
    }
    const SynOperand &val = load ? s.ops[0] : s.ops[1];
    const SynOperand &adr = load ? s.ops[1] : s.ops[0];
    if ((in.vec > 1) != (val.kind == SynOperand::Vec) ||
        (in.vec > 1 && val.elems.size() != in.vec)) {
      err = "the value of '" + s.opcode + "' must be a vector of " + std::to_string(in.vec);
      return true;
    }
    Operand &vo = load ? in.op[0] : in.op[1];
    Operand &ao = load ? in.op[1] : in.op[0];
    if (!d.address(adr, sp, ao, err))
      return true;
    if (load ? !d.dest(val, vo, err, in.vec > 1) : !d.value(val, t, vo, err, in.vec > 1))
      return true;
    in.nops = 2;
    in.fn = pickLoadStore(sp, load, in.aux, in.vec, in.aux2);
    return true;
  }
  if (op == "cp" && p.size() > 1 && p[1] == "async") {
    if (p.size() >= 3 && p[2] == "commit_group") {
      in.fn = cpCommit;
      return true;
    }
    if (p.size() >= 3 && (p[2] == "wait_group" || p[2] == "wait_all")) {
      if (p[2] == "wait_all") {
        in.aux = 0;
        in.aux2 = 1;
      } else if (s.ops.size() != 1 || s.ops[0].kind != SynOperand::Int) {
        err = "cp.async.wait_group takes an immediate";
        return true;
      } else {
        in.aux = static_cast<uint32_t>(s.ops[0].ival);
      }
      in.fn = cpWait;
      return true;
    }
    if (p.size() < 5 || (p[2] != "ca" && p[2] != "cg") || spaceOf(p) != Space::Shared ||
        !hasPart(p, "global")) {
      err = "only cp.async.{ca,cg}.shared.global is supported by the emulator";
      return true;
    }
    for (const std::string &m : p)
      if (m.rfind("mbarrier", 0) == 0 || m == "bulk") {
        err = "'" + s.opcode + "' is not supported by the emulator";
        return true;
      }
    if (s.ops.size() < 3 || s.ops.size() > 4 || s.ops[2].kind != SynOperand::Int) {
      err = "cp.async takes [dst], [src], cp-size{, src-size | ignore-src}";
      return true;
    }
    int64_t size = s.ops[2].ival;
    if (size != 4 && size != 8 && size != 16) {
      err = "cp.async cp-size must be 4, 8 or 16";
      return true;
    }
    if (p[2] == "cg" && size != 16) {
      err = "cp.async.cg needs cp-size 16";
      return true;
    }
    in.aux = static_cast<uint32_t>(size);
    if (!d.address(s.ops[0], Space::Shared, in.op[0], err) ||
        !d.address(s.ops[1], Space::Global, in.op[1], err))
      return true;
    if (s.ops.size() == 4) {
      const SynOperand &x = s.ops[3];
      bool pred = x.kind == SynOperand::Reg && d.registerType(x.name) == Ty::Pred;
      in.aux2 = pred ? 1 : 0;
      if (!d.value(x, pred ? Ty::Pred : Ty::U32, in.op[2], err))
        return true;
    }
    in.fn = cpAsync;
    return true;
  }
  if (op == "atom" || op == "red") {
    Space sp = spaceOf(p);
    if (sp != Space::Global && sp != Space::Shared) {
      err = "'" + s.opcode + "' needs .global or .shared in the emulator";
      return true;
    }
    Ty t = lastType(p);
    static const char *ops[] = {"add", "min", "max", "exch", "cas", "and", "or", "xor"};
    in.aux = 99;
    for (uint32_t i = 0; i < 8; ++i)
      if (hasPart(p, ops[i]))
        in.aux = i;
    if (in.aux == 99 || (tyFloat(t) && in.aux != AAdd && in.aux != AExch) ||
        t == Ty::F16 || t == Ty::BF16 || t == Ty::F16x2 || t == Ty::BF16x2) {
      err = "'" + s.opcode + "' is not supported by the emulator";
      return true;
    }
    bool red = op == "red";
    size_t want = (red ? 2 : 3) + (in.aux == ACas);
    if (s.ops.size() != want) {
      err = "'" + s.opcode + "' takes " + std::to_string(want) + " operands";
      return true;
    }
    size_t i = 0;
    if (!red) {
      if (!d.dest(s.ops[i++], in.op[0], err))
        return true;
    } else {
      in.op[0].kind = Operand::Sink;
    }
    if (!d.address(s.ops[i++], sp, in.op[1], err) || !d.value(s.ops[i++], t, in.op[2], err))
      return true;
    if (in.aux == ACas && !d.value(s.ops[i++], t, in.op[3], err))
      return true;
    in.fn = sp == Space::Global ? atomFor<Space::Global>(t) : atomFor<Space::Shared>(t);
    if (!in.fn)
      err = "'" + s.opcode + "' is not supported by the emulator";
    return true;
  }
  if (op == "prefetch" || op == "prefetchu") {
    in.fn = [](Cta &, Warp &, const Instr &, uint32_t) {};
    return true;
  }
  return false;
}

} // namespace attnc::emu
