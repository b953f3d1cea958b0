//===- DeviceMemory.h - Device allocations: host memory with known bounds -===//
#ifndef ATTNC_EMU_DEVICEMEMORY_H
#define ATTNC_EMU_DEVICEMEMORY_H

#include "Machine.h"

#include <cstddef>
#include <mutex>
#include <vector>

namespace attnc::emu {

/// Every live allocation. Addresses are host addresses, 256-byte aligned
/// (as cuMemAlloc's are), each followed by an unallocated guard so that an
/// overrun never lands in a neighbour. Fresh memory holds 0xFF bytes (NaN
/// in every float type) as a device's holds garbage.
class DeviceMemory {
public:
  static DeviceMemory &get();
  /// Frees what is still allocated, as a context's destruction does.
  ~DeviceMemory();
  /// 0 when the host is out of memory.
  uint64_t allocate(size_t bytes);
  /// False for an address that is not the start of a live allocation.
  bool release(uint64_t base);
  /// The allocation holding [addr, addr + n), copied out (ok == false if none).
  bool find(uint64_t addr, uint64_t n, Allocation &out) const;
  MemoryMap snapshot() const;
  size_t live() const;
  size_t bytesInUse() const;

private:
  mutable std::mutex mu_;
  std::vector<Allocation> allocs_; // sorted by base
  uint64_t nextId_ = 1;
  size_t inUse_ = 0;
};

} // namespace attnc::emu

#endif
