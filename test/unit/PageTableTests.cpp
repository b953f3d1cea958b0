// Page tables (PageTable.h): every malformed table is refused with a
// message naming the sequence and the page, block tables convert, and the
// fp64 reference reads paged K/V exactly as the same values contiguous.
#include "attnc/runtime/Attention.h"
#include "PlainVariant.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attnc::rt;

namespace {

PageTable table(int64_t pageSize, std::vector<int32_t> indptr,
                std::vector<int32_t> indices, std::vector<int32_t> last) {
  PageTable t;
  t.pageSize = pageSize;
  t.indptr = std::move(indptr);
  t.indices = std::move(indices);
  t.lastPageLen = std::move(last);
  return t;
}

std::string error(const PageTable &t, int64_t batch, int64_t pages) {
  Status s = t.check(batch, pages);
  return s.isOk() ? "" : s.message();
}

} // namespace

TEST_CASE("page tables: a valid table and its lengths", "[pages]") {
  PageTable t = table(4, {0, 2, 2, 3}, {5, 0, 3}, {3, 0, 4});
  REQUIRE(error(t, 3, 6).empty());
  CHECK(t.length(0) == 7);
  CHECK(t.length(1) == 0);
  CHECK(t.length(2) == 4);
  CHECK(t.locate(0, 5) == std::pair<int32_t, int32_t>{0, 1});
  CHECK(t.locate(2, 3) == std::pair<int32_t, int32_t>{3, 3});
}

TEST_CASE("page tables: malformed tables are refused", "[pages]") {
  CHECK(error(table(4, {0, 2, 3}, {5, 6, 1}, {3, 4}), 2, 6) ==
        "sequence 0, page 1: index 6 is outside the pool of 6 pages");
  CHECK(error(table(4, {0, 2, 3}, {5, -1, 1}, {3, 4}), 2, 6) ==
        "sequence 0, page 1: index -1 is outside the pool of 6 pages");
  CHECK(error(table(4, {0, 2, 1}, {5, 0}, {3, 4}), 2, 6) ==
        "the page table's 'indptr' decreases at sequence 1 (2 then 1)");
  CHECK(error(table(4, {1, 2, 3}, {5, 0, 1}, {3, 4}), 2, 6) ==
        "the page table's 'indptr[0]' is 1, expected 0");
  CHECK(error(table(4, {0, 2, 3}, {5, 0, 1}, {0, 4}), 2, 6) ==
        "sequence 0: 'last_page_len' is 0, expected 1..4 (2 page(s) of 4 rows)");
  CHECK(error(table(4, {0, 2, 3}, {5, 0, 1}, {3, 5}), 2, 6) ==
        "sequence 1: 'last_page_len' is 5, expected 1..4 (1 page(s) of 4 rows)");
  CHECK(error(table(4, {0, 0, 1}, {1}, {2, 4}), 2, 6) ==
        "sequence 0: 'last_page_len' is 2, expected 0 (0 page(s) of 4 rows)");
  CHECK(error(table(4, {0, 2, 3}, {5, 0}, {3, 4}), 2, 6) ==
        "the page table's 'indices' has 2 entries, but indptr[2] is 3");
  CHECK(error(table(4, {0, 2}, {5, 0}, {3}), 2, 6) ==
        "the page table's 'indptr' has 2 entries, expected 3 (batch + 1)");
  CHECK(error(table(0, {0, 1}, {0}, {1}), 1, 6) ==
        "the page size is 0, expected at least 1");
}

TEST_CASE("page tables: from a block table", "[pages]") {
  PageTable t;
  // Lengths 5, 0 and 8 in pages of 4: 2, 0 and 2 pages.
  REQUIRE(PageTable::fromBlockTable({7, 2, 9, 9, 9, 9, 4, 1, 9}, 3, {5, 0, 8},
                                    4, t)
              .isOk());
  CHECK(t.indptr == std::vector<int32_t>{0, 2, 2, 4});
  CHECK(t.indices == std::vector<int32_t>{7, 2, 4, 1});
  CHECK(t.lastPageLen == std::vector<int32_t>{1, 0, 4});
  Status s = PageTable::fromBlockTable({0, 1}, 1, {5, 1}, 4, t);
  CHECK(s.message() == "sequence 0: 5 keys need 2 pages of 4, but the block "
                       "table has 1 per sequence");
}

TEST_CASE("page tables: the reference reads pages as contiguous K/V", "[pages]") {
  VariantInfo v;
  REQUIRE(VariantInfo::parse(kPlainVariant, v).isOk());
  // B=2, H=2, Hkv=1, Lq=3, D=8; sequence lengths 5 and 3, pages of 2.
  const int64_t B = 2, H = 2, L = 3, D = 8, P = 2, Lkv = 5;
  std::vector<float> q(B * H * L * D), k(B * Lkv * D), v_(B * Lkv * D),
      o(B * H * L * D), lse(B * H * L);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = std::sin(0.3 * i);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = std::cos(0.7 * i);
    v_[i] = std::sin(0.2 * i + 1);
  }
  AttentionArgs flat;
  flat.q = TensorView::contiguous(q.data(), DType::F32, {B, H, L, D});
  flat.k = TensorView::contiguous(k.data(), DType::F32, {B, 1, Lkv, D});
  flat.v = TensorView::contiguous(v_.data(), DType::F32, {B, 1, Lkv, D});
  flat.out = TensorView::contiguous(o.data(), DType::F32, {B, H, L, D});
  flat.kvLens = {5, 3};
  std::vector<double> want, wantLse;
  REQUIRE(referenceAttention(v, flat, want, wantLse).isOk());

  // Pool of 6 pages [6, 1, 2, D]: sequence 0 on pages 4, 0, 5; sequence 1
  // on pages 2, 1; page 3 unused (NaN).
  PageTable t = table(P, {0, 3, 5}, {4, 0, 5, 2, 1}, {1, 1});
  std::vector<float> kp(6 * P * D, NAN), vp(6 * P * D, NAN);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t j = 0; j < flat.kvLens[b]; ++j) {
      auto [page, row] = t.locate(b, j);
      for (int64_t d = 0; d < D; ++d) {
        kp[(page * P + row) * D + d] = k[(b * Lkv + j) * D + d];
        vp[(page * P + row) * D + d] = v_[(b * Lkv + j) * D + d];
      }
    }
  AttentionArgs paged = flat;
  paged.k = TensorView::contiguous(kp.data(), DType::F32, {6, 1, P, D});
  paged.v = TensorView::contiguous(vp.data(), DType::F32, {6, 1, P, D});
  paged.kvLens.clear();
  paged.pages = &t;
  std::vector<double> got, gotLse;
  REQUIRE(referenceAttention(v, paged, got, gotLse).isOk());
  CHECK(got == want);
  CHECK(gotLse == wantLse);

  // Lengths that disagree with the table, and a pool of another page size.
  paged.kvLens = {5, 4};
  CHECK(referenceAttention(v, paged, got, gotLse).message() ==
        "'kvLens[1]' is 4, but the page table gives sequence 1 3 keys");
  paged.kvLens.clear();
  paged.k = TensorView::contiguous(kp.data(), DType::F32, {3, 1, 4, D});
  CHECK(referenceAttention(v, paged, got, gotLse).message() ==
        "'k' is a page pool of 4 rows per page (shape [3, 1, 4, 8]), but the "
        "page table's page size is 2");
}
