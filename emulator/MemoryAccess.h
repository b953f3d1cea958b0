//===- MemoryAccess.h - Checked accesses of fixed size, fast paths -------===//
//
// The hot path of every load and store: for an access of N bytes that is
// aligned, in bounds, initialized and race-free, these return the host
// pointer after updating the shadows; anything else goes to the Cta's
// general functions, which report the fault.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_MEMORYACCESS_H
#define ATTNC_EMU_MEMORYACCESS_H

#include "Machine.h"

#include <cstring>

namespace attnc::emu {

#define EMU_INLINE inline __attribute__((always_inline))

/// All N shadow bytes at p equal 1 (written).
template <unsigned N> EMU_INLINE bool allWritten(const uint8_t *p) {
  if constexpr (N == 1) {
    return *p == 1;
  } else if constexpr (N == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v == 0x0101u;
  } else if constexpr (N == 4) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v == 0x01010101u;
  } else {
    for (unsigned i = 0; i < N; i += 8) {
      uint64_t v;
      std::memcpy(&v, p + i, 8);
      if (v != 0x0101010101010101ull)
        return false;
    }
    return true;
  }
}

template <unsigned N> inline void markWritten(uint8_t *p) {
  std::memset(p, 1, N);
}

/// Race bookkeeping for a read of granules [g0, g1] by warp `id`; false on
/// a conflict (the caller then takes the reporting path).
EMU_INLINE bool raceRead(Cta &c, int id, uint64_t g0, uint64_t g1) {
  uint32_t bit = 1u << id;
  for (uint64_t g = g0; g <= g1; ++g) {
    uint32_t t = c.wtag[g];
    if ((t >> 6) == c.epoch && int(t & 63) != id)
      return false;
    if (c.repoch[g] != c.epoch) {
      c.repoch[g] = c.epoch;
      c.rmask[g] = bit;
    } else {
      c.rmask[g] |= bit;
    }
  }
  return true;
}

EMU_INLINE bool raceWrite(Cta &c, int id, uint64_t g0, uint64_t g1) {
  uint32_t bit = 1u << id, tag = (c.epoch << 6) | uint32_t(id);
  for (uint64_t g = g0; g <= g1; ++g) {
    if (c.repoch[g] == c.epoch && (c.rmask[g] & ~bit))
      return false;
    uint32_t t = c.wtag[g];
    if ((t >> 6) == c.epoch && int(t & 63) != id)
      return false;
    c.wtag[g] = tag;
  }
  return true;
}

template <unsigned N>
EMU_INLINE const uint8_t *sharedLoad(Cta &c, const Warp &w, const Instr &in, int l,
                                 uint64_t addr, void *scratch) {
  if (addr % N == 0 && addr + N <= c.sharedBytes && allWritten<N>(&c.sharedInit[addr]) &&
      (!c.racecheck || raceRead(c, w.id, addr / 2, (addr + N - 1) / 2)))
    return &c.shared[addr];
  c.sharedRead(w, in, l, addr, N, scratch, N); // reports the fault
  return static_cast<const uint8_t *>(scratch);
}

template <unsigned N>
EMU_INLINE void sharedStore(Cta &c, const Warp &w, const Instr &in, int l,
                        uint64_t addr, const void *src) {
  // With a wgmma in flight, the checked path (its operands must not change).
  // With mbarriers, too: their bytes and TMA targets in flight are guarded.
  if (addr % N == 0 && addr + N <= c.sharedBytes && !c.mmasInFlight &&
      c.mbarriers.empty() &&
      (!c.racecheck || raceWrite(c, w.id, addr / 2, (addr + N - 1) / 2))) {
    std::memcpy(&c.shared[addr], src, N);
    markWritten<N>(&c.sharedInit[addr]);
    // A generic-proxy write: the async proxy may read it only after this
    // thread's next fence.proxy.async.
    uint32_t thread = uint32_t(w.id * 32 + l);
    for (uint64_t g = addr / 2; g <= (addr + N - 1) / 2; ++g) {
      c.genericWriter[g] = thread + 1;
      c.genericFence[g] = c.proxyFences[thread];
    }
    return;
  }
  c.sharedWrite(w, in, l, addr, N, src, N);
}

template <unsigned N>
EMU_INLINE uint8_t *globalAccess(Cta &c, const Warp &w, const Instr &in, int l,
                             uint64_t addr, bool write) {
  const Allocation *a = c.lastAlloc;
  if (addr % N == 0 && a && addr >= a->base && addr + N <= a->base + a->size)
    return reinterpret_cast<uint8_t *>(addr);
  return c.globalPtr(w, in, l, addr, N, N, write);
}

template <unsigned N>
EMU_INLINE uint8_t *localAccess(Cta &c, Warp &w, const Instr &in, int l, uint64_t addr) {
  if (addr % N == 0 && addr + N <= c.k->localBytes)
    return w.local + size_t(l) * c.k->localBytes + addr;
  return c.localPtr(w, in, l, addr, N, N);
}

} // namespace attnc::emu

#endif
