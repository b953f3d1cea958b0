//===- DeviceMemory.cpp - Device allocations: host memory with bounds -----===//
#include "DeviceMemory.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace attnc::emu {

namespace {
constexpr size_t kAlign = 256, kGuard = 256;
}

DeviceMemory &DeviceMemory::get() {
  static DeviceMemory m; // destroyed when the library is unloaded
  return m;
}

DeviceMemory::~DeviceMemory() {
  for (const Allocation &a : allocs_)
    std::free(reinterpret_cast<void *>(a.base));
}

uint64_t DeviceMemory::allocate(size_t bytes) {
  size_t total = (bytes + kGuard + kAlign - 1) / kAlign * kAlign;
  void *p = std::aligned_alloc(kAlign, total);
  if (!p)
    return 0;
  std::memset(p, 0xff, total);
  std::lock_guard<std::mutex> lock(mu_);
  Allocation a{reinterpret_cast<uint64_t>(p), bytes, nextId_++};
  allocs_.insert(std::upper_bound(allocs_.begin(), allocs_.end(), a.base,
                                  [](uint64_t b, const Allocation &x) { return b < x.base; }),
                 a);
  inUse_ += bytes;
  return a.base;
}

bool DeviceMemory::release(uint64_t base) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(allocs_.begin(), allocs_.end(),
                         [&](const Allocation &a) { return a.base == base; });
  if (it == allocs_.end())
    return false;
  inUse_ -= it->size;
  std::free(reinterpret_cast<void *>(base));
  allocs_.erase(it);
  return true;
}

bool DeviceMemory::find(uint64_t addr, uint64_t n, Allocation &out) const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryMap m;
  auto it = std::upper_bound(allocs_.begin(), allocs_.end(), addr,
                             [](uint64_t a, const Allocation &x) { return a < x.base; });
  if (it == allocs_.begin())
    return false;
  --it;
  if (addr + n > it->base + it->size || addr + n < addr)
    return false;
  out = *it;
  return true;
}

MemoryMap DeviceMemory::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  MemoryMap m;
  m.allocs = allocs_;
  return m;
}

size_t DeviceMemory::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return allocs_.size();
}

size_t DeviceMemory::bytesInUse() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inUse_;
}

} // namespace attnc::emu
