//===- PagedKVCache.cpp - The page allocator and the host paged cache ----===//
#include "attnc/runtime/PagedKVCache.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

namespace attnc::rt {

// ---- PageAllocator -------------------------------------------------------

PageAllocator::PageAllocator(int64_t pageSize, int64_t numPages)
    : pageSize_(pageSize), numPages_(numPages) {
  for (int64_t p = numPages - 1; p >= 0; --p)
    free_.push_back(static_cast<int32_t>(p));
}

int32_t PageAllocator::addSequence() {
  int32_t id = nextId_++;
  seqs_[id] = Sequence();
  return id;
}

int64_t PageAllocator::length(int32_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? -1 : it->second.length;
}

Status PageAllocator::reserve(const std::vector<int32_t> &seqs, int64_t rows,
                              std::vector<int64_t> &slots) {
  if (rows < 0)
    return Status::invalidArgument(
        fmt::format("cannot append {} rows to a sequence", rows));
  int64_t need = 0;
  std::set<int32_t> seen;
  for (int32_t s : seqs) {
    auto it = seqs_.find(s);
    if (it == seqs_.end())
      return Status::invalidArgument(fmt::format(
          "sequence {} is not in the cache (added, and not released)", s));
    if (!seen.insert(s).second)
      return Status::invalidArgument(
          fmt::format("sequence {} appears twice in one append", s));
    int64_t have = static_cast<int64_t>(it->second.pages.size());
    int64_t want = (it->second.length + rows + pageSize_ - 1) / pageSize_;
    need += std::max<int64_t>(want - have, 0);
  }
  if (need > freePages())
    return Status::invalidArgument(fmt::format(
        "the cache has {} free pages of {} rows, the append needs {}",
        freePages(), pageSize_, need));
  for (int32_t s : seqs) {
    Sequence &q = seqs_[s];
    for (int64_t r = 0; r < rows; ++r, ++q.length) {
      if (q.length % pageSize_ == 0) {
        q.pages.push_back(free_.back());
        free_.pop_back();
      }
      slots.push_back(q.pages.back() * pageSize_ + q.length % pageSize_);
    }
  }
  return Status::ok();
}

Status PageAllocator::release(int32_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end())
    return Status::invalidArgument(
        fmt::format("sequence {} is not in the cache", seq));
  for (auto p = it->second.pages.rbegin(); p != it->second.pages.rend(); ++p)
    free_.push_back(*p);
  seqs_.erase(it);
  return Status::ok();
}

Status PageAllocator::table(const std::vector<int32_t> &seqs,
                            PageTable &out) const {
  PageTable t;
  t.pageSize = pageSize_;
  t.indptr = {0};
  for (int32_t s : seqs) {
    auto it = seqs_.find(s);
    if (it == seqs_.end())
      return Status::invalidArgument(
          fmt::format("sequence {} is not in the cache", s));
    const Sequence &q = it->second;
    t.indices.insert(t.indices.end(), q.pages.begin(), q.pages.end());
    t.indptr.push_back(static_cast<int32_t>(t.indices.size()));
    t.lastPageLen.push_back(
        q.length ? static_cast<int32_t>((q.length - 1) % pageSize_ + 1) : 0);
  }
  out = std::move(t);
  return Status::ok();
}

// ---- Pool layout -----------------------------------------------------------

Status PagedKVCacheSpec::check() const {
  if (kvHeads <= 0 || headDim <= 0 || vHeadDim <= 0 || pageSize <= 0 ||
      numPages <= 0)
    return Status::invalidArgument(fmt::format(
        "paged cache sizes must be positive, got kv_heads={} head_dim={} "
        "v_head_dim={} page_size={} pages={}",
        kvHeads, headDim, vHeadDim, pageSize, numPages));
  if (numPages > std::numeric_limits<int32_t>::max() ||
      numPages * pageSize * kvHeads * std::max(headDim, vHeadDim) >
          (int64_t(1) << 40))
    return Status::invalidArgument(fmt::format(
        "a paged cache of {} pages of {} rows is too large", numPages,
        pageSize));
  return Status::ok();
}

int64_t PagedKVCacheSpec::rowOffset(int64_t row, int64_t h, int64_t d) const {
  int64_t page = row / pageSize, r = row % pageSize;
  return nhd ? ((page * pageSize + r) * kvHeads + h) * d
             : ((page * kvHeads + h) * pageSize + r) * d;
}

TensorView PagedKVCacheSpec::poolView(void *data, int64_t d) const {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.shape = {numPages, kvHeads, pageSize, d};
  t.strides = nhd ? std::vector<int64_t>{pageSize * kvHeads * d, d,
                                         kvHeads * d, 1}
                  : TensorView::rowMajorStrides(t.shape);
  return t;
}

namespace {
/// Checks an append's source: [n, Hkv, T, d], unit stride along D.
Status checkAppendSource(const PagedKVCacheSpec &spec, const TensorView &src,
                         const char *name, int64_t n, int64_t d) {
  if (src.shape.size() != 4)
    return Status::invalidArgument(fmt::format(
        "'{}' must be [sequences, Hkv, T, D], got shape {}", name,
        TensorView::formatDims(src.shape)));
  if (Status s = checkTensor(src, name, spec.dtype,
                             {n, spec.kvHeads, src.shape[2], d});
      !s)
    return s;
  if (d > 1 && src.strides[3] != 1)
    return Status::invalidArgument(fmt::format(
        "'{}' must have unit stride along D to be appended, got strides {}",
        name, TensorView::formatDims(src.strides)));
  return Status::ok();
}
} // namespace

Status planAppend(const PagedKVCacheSpec &spec, PageAllocator &pages,
                  const std::vector<int32_t> &seqs, const TensorView &newK,
                  const TensorView &newV, AppendRows &out) {
  int64_t n = static_cast<int64_t>(seqs.size());
  if (Status s = checkAppendSource(spec, newK, "newK", n, spec.headDim); !s)
    return s;
  if (Status s = checkAppendSource(spec, newV, "newV", n, spec.vHeadDim); !s)
    return s;
  int64_t T = newK.shape[2];
  if (newV.shape[2] != T)
    return Status::invalidArgument(fmt::format(
        "'newK' has {} new rows per sequence, 'newV' {}", T, newV.shape[2]));
  std::vector<int64_t> slots;
  if (Status s = pages.reserve(seqs, T, slots); !s)
    return s;
  out = AppendRows();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t h = 0; h < spec.kvHeads; ++h)
      for (int64_t t = 0; t < T; ++t) {
        int64_t row = slots[i * T + t];
        out.kFrom.push_back(i * newK.strides[0] + h * newK.strides[1] +
                            t * newK.strides[2]);
        out.vFrom.push_back(i * newV.strides[0] + h * newV.strides[1] +
                            t * newV.strides[2]);
        out.kTo.push_back(spec.rowOffset(row, h, spec.headDim));
        out.vTo.push_back(spec.rowOffset(row, h, spec.vHeadDim));
      }
  return Status::ok();
}

// ---- PagedKVCache ----------------------------------------------------------

Status PagedKVCache::create(const PagedKVCacheSpec &spec, PagedKVCache &out) {
  if (Status s = spec.check(); !s)
    return s;
  out = PagedKVCache();
  out.spec_ = spec;
  out.pages_ = PageAllocator(spec.pageSize, spec.numPages);
  size_t rows = static_cast<size_t>(spec.numPages * spec.pageSize * spec.kvHeads);
  size_t es = dtypeSize(spec.dtype);
  out.k_.assign(rows * spec.headDim * es, 0);
  out.v_.assign(rows * spec.vHeadDim * es, 0);
  return Status::ok();
}

Status PagedKVCache::append(const std::vector<int32_t> &seqs,
                            const TensorView &newK, const TensorView &newV) {
  AppendRows rows;
  if (Status s = planAppend(spec_, pages_, seqs, newK, newV, rows); !s)
    return s;
  size_t es = dtypeSize(spec_.dtype);
  auto copy = [&](std::vector<unsigned char> &pool, const TensorView &src,
                  const std::vector<int64_t> &from,
                  const std::vector<int64_t> &to, int64_t d) {
    auto base = static_cast<const unsigned char *>(src.data);
    for (size_t i = 0; i < from.size(); ++i)
      std::memcpy(&pool[static_cast<size_t>(to[i]) * es],
                  base + static_cast<size_t>(from[i]) * es,
                  static_cast<size_t>(d) * es);
  };
  copy(k_, newK, rows.kFrom, rows.kTo, spec_.headDim);
  copy(v_, newV, rows.vFrom, rows.vTo, spec_.vHeadDim);
  return Status::ok();
}

TensorView PagedKVCache::keys() const {
  return spec_.poolView(const_cast<unsigned char *>(k_.data()), spec_.headDim);
}
TensorView PagedKVCache::values() const {
  return spec_.poolView(const_cast<unsigned char *>(v_.data()), spec_.vHeadDim);
}

} // namespace attnc::rt
