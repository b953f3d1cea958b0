// Which strided views share memory (runtime/src/Overlap.cpp), and calls
// refusing an output that overlaps an input, another output or itself.
#include "attnc/runtime/Attention.h"
#include "attnc/runtime/TensorView.h"

#include <catch2/catch.hpp>

#include <vector>

using namespace attnc::rt;

namespace {

TensorView view(void *base, int64_t offsetElems, DType dt,
                std::vector<int64_t> shape, std::vector<int64_t> strides) {
  TensorView t;
  t.data = static_cast<char *>(base) + offsetElems * int64_t(dtypeSize(dt));
  t.dtype = dt;
  t.shape = std::move(shape);
  t.strides = std::move(strides);
  return t;
}

/// Brute force: every byte each view covers.
bool sharesByBytes(const TensorView &a, const TensorView &b) {
  auto bytes = [](const TensorView &t) {
    std::vector<intptr_t> out;
    int64_t n = t.numel();
    for (int64_t flat = 0; flat < n; ++flat) {
      int64_t rem = flat, off = 0;
      for (size_t d = t.shape.size(); d-- > 0;) {
        off += (rem % t.shape[d]) * t.strides[d];
        rem /= t.shape[d];
      }
      for (size_t x = 0; x < dtypeSize(t.dtype); ++x)
        out.push_back(reinterpret_cast<intptr_t>(t.data) +
                      off * int64_t(dtypeSize(t.dtype)) + int64_t(x));
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  auto x = bytes(a), y = bytes(b);
  std::vector<intptr_t> both;
  std::set_intersection(x.begin(), x.end(), y.begin(), y.end(),
                        std::back_inserter(both));
  return !both.empty();
}

} // namespace

TEST_CASE("views of one buffer share memory exactly when bytes coincide",
          "[overlap]") {
  std::vector<float> buf(4096);
  void *p = buf.data();
  // A packed [S, 3, D] q/k/v buffer: the three slices are disjoint.
  TensorView q = view(p, 0, DType::F32, {16, 32}, {96, 1});
  TensorView k = view(p, 32, DType::F32, {16, 32}, {96, 1});
  CHECK_FALSE(sharesMemory(q, k));
  CHECK(sharesMemory(q, q));
  // One row down: a partial overlap.
  CHECK(sharesMemory(q, view(p, 96, DType::F32, {16, 32}, {96, 1})));
  // Interleaved even and odd elements.
  CHECK_FALSE(sharesMemory(view(p, 0, DType::F32, {64}, {2}),
                           view(p, 1, DType::F32, {64}, {2})));
  // A bf16 view half a float in: its elements land inside q's floats.
  TensorView half = view(p, 1, DType::BF16, {16, 32}, {192, 1});
  CHECK(sharesMemory(q, half));
  CHECK(sharesMemory(half, q));
  // Distinct buffers.
  std::vector<float> other(512);
  CHECK_FALSE(sharesMemory(q, view(other.data(), 0, DType::F32, {16, 32},
                                   {32, 1})));

  // The exact answer agrees with the bytes, over shifted and strided views.
  for (int64_t off = 0; off < 40; ++off)
    for (auto [s0, s1] : {std::pair<int64_t, int64_t>{7, 1}, {3, 9},
                          {10, 2}, {0, 3}, {5, 5}}) {
      TensorView a = view(p, 0, DType::F32, {4, 3}, {s0, s1});
      TensorView b = view(p, off, DType::F16, {3, 5}, {s1 * 2 + 1, 2});
      INFO("offset " << off << " strides " << s0 << ", " << s1);
      CHECK(sharesMemory(a, b) == sharesByBytes(a, b));
    }
}

TEST_CASE("a broadcast or self-overlapping view cannot be written",
          "[overlap]") {
  std::vector<float> buf(256);
  CHECK_FALSE(hasInternalOverlap(
      view(buf.data(), 0, DType::F32, {2, 4, 8}, {32, 8, 1})));
  CHECK_FALSE(hasInternalOverlap(
      view(buf.data(), 0, DType::F32, {4, 8}, {1, 4}))); // transposed
  CHECK(hasInternalOverlap(view(buf.data(), 0, DType::F32, {4, 8}, {0, 1})));
  CHECK(hasInternalOverlap(view(buf.data(), 0, DType::F32, {4, 8}, {4, 1})));
  CHECK_FALSE(hasInternalOverlap(
      view(buf.data(), 0, DType::F32, {1, 8}, {0, 1}))); // size-1 axis
}

TEST_CASE("an output overlapping an input is refused by name", "[overlap]") {
  std::vector<float> buf(1 << 14);
  float *p = buf.data();
  TensorView q = TensorView::contiguous(p, DType::F32, {1, 2, 16, 32});
  TensorView k = TensorView::contiguous(p + 1024, DType::F32, {1, 2, 16, 32});
  TensorView v = TensorView::contiguous(p + 2048, DType::F32, {1, 2, 16, 32});
  TensorView out = TensorView::contiguous(p + 3072, DType::F32, {1, 2, 16, 32});
  TensorView lse = TensorView::contiguous(p + 4096, DType::F32, {1, 2, 16});
  CHECK(checkWritesDisjoint({{&out, "out"}, {&lse, "lse"}},
                            {{&q, "q"}, {&k, "k"}, {&v, "v"}})
            .isOk());
  Status s = checkWritesDisjoint({{&out, "out"}}, {{&q, "q"}, {&k, "k"}});
  CHECK(s.isOk());
  TensorView outOnK = k;
  s = checkWritesDisjoint({{&outOnK, "out"}}, {{&q, "q"}, {&k, "k"}});
  CHECK(s.message() == "'out' shares memory with the input 'k': an output "
                       "must not overlap any input (the kernel reads its "
                       "inputs while it writes)");
  TensorView lseInOut = TensorView::contiguous(p + 3080, DType::F32, {1, 2, 16});
  s = checkWritesDisjoint({{&out, "out"}, {&lseInOut, "lse"}}, {});
  CHECK(s.message() == "'lse' shares memory with 'out': outputs must not overlap");
  TensorView broadcast = out;
  broadcast.strides = {0, 0, 32, 1};
  broadcast.shape = {1, 2, 16, 32};
  s = checkWritesDisjoint({{&broadcast, "out"}}, {});
  CHECK(s.message().find("'out' has elements that share memory") == 0);
}
