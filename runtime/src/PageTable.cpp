//===- PageTable.cpp - Checking and building page tables ------------------===//
#include "attnc/runtime/PageTable.h"

#include <fmt/format.h>

#include <limits>

namespace attnc::rt {

int32_t PageTable::length(int64_t b) const {
  int64_t pages = indptr[b + 1] - indptr[b];
  return pages == 0 ? 0
                    : static_cast<int32_t>((pages - 1) * pageSize +
                                           lastPageLen[b]);
}

Status PageTable::check(int64_t batch, int64_t numPages) const {
  if (pageSize < 1 || pageSize > std::numeric_limits<int32_t>::max() / 2)
    return Status::invalidArgument(fmt::format(
        "the page size is {}, expected at least 1", pageSize));
  if (static_cast<int64_t>(indptr.size()) != batch + 1)
    return Status::invalidArgument(fmt::format(
        "the page table's 'indptr' has {} entries, expected {} (batch + 1)",
        indptr.size(), batch + 1));
  if (static_cast<int64_t>(lastPageLen.size()) != batch)
    return Status::invalidArgument(fmt::format(
        "the page table's 'last_page_len' has {} entries, expected {} (one "
        "per sequence)",
        lastPageLen.size(), batch));
  if (indptr[0] != 0)
    return Status::invalidArgument(fmt::format(
        "the page table's 'indptr[0]' is {}, expected 0", indptr[0]));
  for (int64_t b = 0; b < batch; ++b)
    if (indptr[b + 1] < indptr[b])
      return Status::invalidArgument(fmt::format(
          "the page table's 'indptr' decreases at sequence {} ({} then {})",
          b, indptr[b], indptr[b + 1]));
  if (static_cast<int64_t>(indices.size()) != indptr[batch])
    return Status::invalidArgument(fmt::format(
        "the page table's 'indices' has {} entries, but indptr[{}] is {}",
        indices.size(), batch, indptr[batch]));
  for (int64_t b = 0; b < batch; ++b) {
    int64_t pages = indptr[b + 1] - indptr[b];
    int32_t last = lastPageLen[b];
    if (pages == 0 ? last != 0 : (last < 1 || last > pageSize))
      return Status::invalidArgument(fmt::format(
          "sequence {}: 'last_page_len' is {}, expected {} ({} page(s) of {} "
          "rows)",
          b, last, pages == 0 ? "0" : fmt::format("1..{}", pageSize), pages,
          pageSize));
    if ((pages - 1) * pageSize + last > std::numeric_limits<int32_t>::max() / 2)
      return Status::invalidArgument(fmt::format(
          "sequence {}: {} pages of {} rows: the length must fit in i32", b,
          pages, pageSize));
    for (int64_t i = indptr[b]; i < indptr[b + 1]; ++i)
      if (indices[i] < 0 || indices[i] >= numPages)
        return Status::invalidArgument(fmt::format(
            "sequence {}, page {}: index {} is outside the pool of {} pages",
            b, i - indptr[b], indices[i], numPages));
  }
  return Status::ok();
}

Status PageTable::fromBlockTable(const std::vector<int32_t> &table,
                                 int64_t maxPages,
                                 const std::vector<int32_t> &lengths,
                                 int64_t pageSize, PageTable &out) {
  if (pageSize < 1)
    return Status::invalidArgument(fmt::format(
        "the page size is {}, expected at least 1", pageSize));
  int64_t batch = static_cast<int64_t>(lengths.size());
  if (maxPages < 0 || static_cast<int64_t>(table.size()) != batch * maxPages)
    return Status::invalidArgument(fmt::format(
        "the block table has {} entries, expected {} x {} (sequences x "
        "pages)",
        table.size(), batch, maxPages));
  PageTable t;
  t.pageSize = pageSize;
  t.indptr.push_back(0);
  for (int64_t b = 0; b < batch; ++b) {
    if (lengths[b] < 0)
      return Status::invalidArgument(fmt::format(
          "sequence {}: the length is {}, expected >= 0", b, lengths[b]));
    int64_t pages = (lengths[b] + pageSize - 1) / pageSize;
    if (pages > maxPages)
      return Status::invalidArgument(fmt::format(
          "sequence {}: {} keys need {} pages of {}, but the block table has "
          "{} per sequence",
          b, lengths[b], pages, pageSize, maxPages));
    for (int64_t i = 0; i < pages; ++i)
      t.indices.push_back(table[b * maxPages + i]);
    t.indptr.push_back(static_cast<int32_t>(t.indices.size()));
    t.lastPageLen.push_back(
        pages == 0 ? 0 : static_cast<int32_t>(lengths[b] - (pages - 1) * pageSize));
  }
  out = std::move(t);
  return Status::ok();
}

} // namespace attnc::rt
