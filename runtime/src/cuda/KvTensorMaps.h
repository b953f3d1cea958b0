//===- KvTensorMaps.h - K and V as TMA tensor maps --------------*- C++ -*-===//
//
// Internal to the CUDA launcher: the trailing parameters of a kernel that
// reads K and V through the Tensor Memory Accelerator (the sm_90a wgmma
// form; KernelABI.h): two CUtensorMaps passed by value and a flag saying
// whether they are usable for this call. The kernel copies K and V itself
// when they are not (paged K/V, rows that are not 16-byte aligned, a head
// whose row would wrap in the 2-D view, a driver without the call).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SRC_CUDA_KVTENSORMAPS_H
#define ATTNC_RUNTIME_SRC_CUDA_KVTENSORMAPS_H

#include "../KernelOperands.h"
#include "attnc/runtime/cuda/CudaDriver.h"

#include <array>
#include <mutex>
#include <string>
#include <vector>

namespace attnc::rt::cuda {

/// The three parameters, laid out as cuLaunchKernel reads them.
struct KvTensorMaps {
  alignas(64) unsigned char k[128] = {};
  alignas(64) unsigned char v[128] = {};
  int64_t usable = 0;
  /// Why not usable (for tests and logs); empty when usable.
  std::string why;
  /// Not usable because the driver refused (not the call's geometry): a
  /// cache tries again next time.
  bool driverRefused = false;
};

/// True when an entry's parameter sizes end with the two 128-byte maps and
/// the flag (after the first item).
bool takesKvTensorMaps(const std::vector<int> &sizes);

/// The maps of one call: K and V (element type `dtype`) as 3-D views
/// [P / 64 chunks][rows][64 elements] (P = the sequence stride, ip
/// kKStride + 2 and kVStride + 2: a row's 64-element chunks are the outer
/// dimension), boxes of D / 64 chunks x `boxRows` rows x 64, 128-byte
/// swizzle: a tile's K (or V) in one load, as the wgmma form's atom
/// columns. Each (batch, KV head)'s first row is row kBase / P, chunk
/// (kBase % P) / 64. Paged K/V (ip kPageSize > 0) where the page size is a
/// multiple of `boxRows` and the page stride of P: page p's rows of KV head
/// h start at row p s0 / P + (h s1) / P, chunk ((h s1) % P) / 64, and a
/// tile is one box within a page. Never an error: a call the maps cannot
/// serve gets usable = 0.
/// `ip`: the call's integer parameters (KernelABI.h; the fixed words are
/// all they read).
KvTensorMaps kvTensorMaps(const DriverApi &api, const TensorView &k,
                          const TensorView &v, const int64_t *ip, DType dtype,
                          int64_t headDim, int64_t vHeadDim, int64_t boxRows);

/// The last call's maps, made again only when K, V or their geometry
/// change (a decode loop calls with the same cache every step: two driver
/// calls fewer per launch). Thread-safe.
class KvTensorMapCache {
public:
  KvTensorMaps get(const DriverApi &api, const TensorView &k, const TensorView &v,
                   const int64_t *ip, DType dtype, int64_t headDim,
                   int64_t vHeadDim, int64_t boxRows);

private:
  /// What the maps are made from besides the kernel's own dtype, head dims
  /// and box: the pointers, extents, page size, B, Hkv and both strides.
  using Key = std::array<int64_t, 15>;
  std::mutex mu_;
  Key key_{};
  bool valid_ = false;
  KvTensorMaps maps_;
};

} // namespace attnc::rt::cuda

#endif
