//===- PageTable.h - K and V in pages, addressed per sequence ---*- C++ -*-===//
//
// Serving engines keep K and V in a pool of fixed-size pages and give each
// sequence a list of pages. attnc takes FlashInfer's CSR form: sequence b
// owns pages indices[indptr[b]] .. indices[indptr[b+1] - 1], in order, each
// full except the last, which holds lastPageLen[b] rows; its length is
// (pages - 1) * pageSize + lastPageLen[b] (0 with no pages). A block table
// ([B, maxPages] plus lengths, vLLM's form) converts to it.
//
// With a page table, AttentionArgs::k and ::v are page pools, logical
// [numPages, Hkv, pageSize, D] with any strides: an NHD pool
// ([pages, pageSize, Hkv, D] in memory) and an HND pool ([pages, Hkv,
// pageSize, D]) are views of it. Mask and score_mod see the same absolute
// key positions as with a contiguous cache; a capture's KV dim is the
// longest sequence's length.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PAGETABLE_H
#define ATTNC_RUNTIME_PAGETABLE_H

#include "attnc/runtime/Status.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace attnc::rt {

struct PageTable {
  int64_t pageSize = 0;             // rows per page, >= 1
  std::vector<int32_t> indptr;      // [B + 1]: 0, then non-decreasing
  std::vector<int32_t> indices;     // [indptr[B]]: pages in [0, numPages)
  std::vector<int32_t> lastPageLen; // [B]: 1..pageSize, 0 for no pages

  int64_t batch() const { return static_cast<int64_t>(lastPageLen.size()); }
  /// Keys of sequence b (valid once check() passed).
  int32_t length(int64_t b) const;
  /// The pool row of key `row` of sequence b: (page, row within it).
  std::pair<int32_t, int32_t> locate(int64_t b, int64_t row) const {
    return {indices[static_cast<size_t>(indptr[b] + row / pageSize)],
            static_cast<int32_t>(row % pageSize)};
  }
  /// Checks the table against a batch of `batch` sequences and a pool of
  /// `numPages` pages: sizes, indptr, every index, every last-page length.
  /// Messages name the sequence and the page.
  Status check(int64_t batch, int64_t numPages) const;
  /// From a block table `table` [batch][maxPages] (row-major) and the
  /// sequences' lengths: sequence b uses its first ceil(len / pageSize)
  /// entries.
  static Status fromBlockTable(const std::vector<int32_t> &table,
                               int64_t maxPages,
                               const std::vector<int32_t> &lengths,
                               int64_t pageSize, PageTable &out);
};

} // namespace attnc::rt

#endif
