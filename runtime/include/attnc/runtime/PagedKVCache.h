//===- PagedKVCache.h - Page pools that sequences grow into ----*- C++ -*-===//
//
// A serving engine's K/V cache: one pool of fixed-size pages per K and V,
// a page allocator handing pages to sequences as they grow and taking them
// back when they finish, and the page table (PageTable.h) of any batch of
// live sequences, for AttentionArgs::pages. PagedKVCache keeps its pools in
// host memory; cuda::DevicePagedKVCache (cuda/DevicePagedKVCache.h) on the
// device, with the same allocator and append on a stream.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PAGEDKVCACHE_H
#define ATTNC_RUNTIME_PAGEDKVCACHE_H

#include "attnc/runtime/PageTable.h"
#include "attnc/runtime/Status.h"
#include "attnc/runtime/TensorView.h"

#include <cstdint>
#include <map>
#include <vector>

namespace attnc::rt {

/// Pages of a pool handed to sequences: each sequence owns a list of pages,
/// full but the last; released pages return to a free list.
class PageAllocator {
public:
  PageAllocator() = default;
  PageAllocator(int64_t pageSize, int64_t numPages);

  /// A new sequence with no keys; returns its id (never reused).
  int32_t addSequence();
  /// Makes room for `rows` more keys of each of `seqs` (distinct ids) and
  /// appends each new row's pool row (page * pageSize + row in the page) to
  /// `slots`, sequence by sequence. All or nothing: an unknown or repeated
  /// id, or too few free pages, is an error and changes nothing.
  Status reserve(const std::vector<int32_t> &seqs, int64_t rows,
                 std::vector<int64_t> &slots);
  /// Returns the sequence's pages to the free list.
  Status release(int32_t seq);
  /// The page table of `seqs`, in that order.
  Status table(const std::vector<int32_t> &seqs, PageTable &out) const;

  int64_t pageSize() const { return pageSize_; }
  int64_t numPages() const { return numPages_; }
  int64_t freePages() const { return static_cast<int64_t>(free_.size()); }
  /// The sequence's length, or -1 for an unknown id.
  int64_t length(int32_t seq) const;

private:
  struct Sequence {
    std::vector<int32_t> pages;
    int64_t length = 0;
  };
  int64_t pageSize_ = 0, numPages_ = 0;
  int32_t nextId_ = 0;
  std::vector<int32_t> free_; // popped from the back
  std::map<int32_t, Sequence> seqs_;
};

/// What a paged cache holds.
struct PagedKVCacheSpec {
  DType dtype = DType::F32;
  int64_t kvHeads = 1, headDim = 64, vHeadDim = 64;
  int64_t pageSize = 16, numPages = 0;
  /// Pool memory [pages, pageSize, Hkv, D] (NHD, token-major) instead of
  /// [pages, Hkv, pageSize, D] (HND); the views are logical HND either way.
  bool nhd = false;

  Status check() const;
  /// Element offset of row `row` (page * pageSize + row in page) of head h
  /// in a pool of head dim `d`.
  int64_t rowOffset(int64_t row, int64_t h, int64_t d) const;
  /// The logical [pages, Hkv, pageSize, d] view of a pool at `data`.
  TensorView poolView(void *data, int64_t d) const;
};

/// Where an append's rows go, for K and V: each row's element offset in
/// newK or newV and in its pool, for (sequence i, head h, new row t),
/// i-major.
struct AppendRows {
  std::vector<int64_t> kFrom, kTo, vFrom, vTo;
};

/// What both caches' append does first: checks newK [n, Hkv, T, Dqk] and
/// newV [n, Hkv, T, Dv] (n = seqs.size(), the spec's dtype, unit stride
/// along D), reserves T rows for each of `seqs` in `pages` (all or
/// nothing) and says where every row goes.
Status planAppend(const PagedKVCacheSpec &spec, PageAllocator &pages,
                  const std::vector<int32_t> &seqs, const TensorView &newK,
                  const TensorView &newV, AppendRows &out);

/// A paged K/V cache in host memory (CPU kernels).
class PagedKVCache {
public:
  static Status create(const PagedKVCacheSpec &spec, PagedKVCache &out);
  int32_t addSequence() { return pages_.addSequence(); }
  /// Appends newK [n, Hkv, T, Dqk] and newV [n, Hkv, T, Dv] (any strides
  /// with unit stride along D; the cache's dtype) to sequences seqs[0..n).
  Status append(const std::vector<int32_t> &seqs, const TensorView &newK,
                const TensorView &newV);
  Status release(int32_t seq) { return pages_.release(seq); }
  Status table(const std::vector<int32_t> &seqs, PageTable &out) const {
    return pages_.table(seqs, out);
  }
  TensorView keys() const;   // for AttentionArgs::k
  TensorView values() const; // for AttentionArgs::v
  const PageAllocator &pages() const { return pages_; }
  const PagedKVCacheSpec &spec() const { return spec_; }

private:
  PagedKVCacheSpec spec_;
  PageAllocator pages_;
  std::vector<unsigned char> k_, v_;
};

} // namespace attnc::rt

#endif
