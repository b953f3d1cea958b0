//===- DevicePagedKVCache.h - A paged K/V cache in device memory -*- C++ -*-===//
//
// PagedKVCache's device twin: the K and V page pools in device memory, the
// same page allocator (on the host: which page a row goes to is decided
// there), and append on a stream: the new rows' destinations are uploaded
// and one small kernel per pool copies every row (a block per row, 4-byte
// words), with no loop over sequences on the host beyond computing the
// destinations. The pools' views go to AttentionArgs::k and ::v, the
// table() of a batch to AttentionArgs::pages (or a GpuPlan).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDA_DEVICEPAGEDKVCACHE_H
#define ATTNC_RUNTIME_CUDA_DEVICEPAGEDKVCACHE_H

#include "attnc/runtime/PagedKVCache.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <memory>

namespace attnc::rt::cuda {

class DevicePagedKVCache {
public:
  /// Allocates the pools (zeroed) and loads the row-copy kernel. Rows must
  /// be whole 4-byte words (head dims even for f16/bf16).
  static Status create(const Context &ctx, const PagedKVCacheSpec &spec,
                       DevicePagedKVCache &out);
  int32_t addSequence() { return pages_.addSequence(); }
  /// Appends newK [n, Hkv, T, Dqk] and newV [n, Hkv, T, Dv], device views
  /// with unit stride along D, to sequences seqs[0..n), on `stream`. The
  /// inputs must stay valid until the copy has run; appends share one
  /// destination buffer, so keep them in order on one stream.
  Status append(const std::vector<int32_t> &seqs, const TensorView &newK,
                const TensorView &newV, CUstream stream = nullptr);
  Status release(int32_t seq) { return pages_.release(seq); }
  Status table(const std::vector<int32_t> &seqs, PageTable &out) const {
    return pages_.table(seqs, out);
  }
  TensorView keys() const;
  TensorView values() const;
  const PageAllocator &pages() const { return pages_; }
  const PagedKVCacheSpec &spec() const { return spec_; }

private:
  struct Module;
  const Context *ctx_ = nullptr;
  PagedKVCacheSpec spec_;
  PageAllocator pages_;
  DeviceBuffer k_, v_, offsets_;
  std::shared_ptr<Module> module_;
};

} // namespace attnc::rt::cuda

#endif
