// Runtime tests that need no compiler: argument validation (one test per
// message), capture binding, the modifier-program interpreter, the fp64
// reference, .npy files and the KV cache.
#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Npy.h"
#include "PlainVariant.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <limits>

#include <unistd.h>

using namespace attnc::rt;

namespace {

const char *kVariant = R"(variant t
param bias tensor f32 H N
param doc tensor i32 B KV
param w scalar i32
param s scalar f32
mask-kind closed
mask-uses
score
  %0 = gather bias %h %kv
  %1 = scalar s
  %2 = arith.mulf %0 %1
  %3 = arith.addf %score %2
  yield %3
mask
  %0 = scalar w
  %1 = arith.subi %q %kv
  %2 = arith.cmpi slt %1 %0
  %3 = arith.cmpi sge %q %kv
  %4 = arith.andi %2 %3
  yield %4
end
)";

VariantInfo variant(const char *text = kVariant) {
  VariantInfo v;
  Status s = VariantInfo::parse(text, v);
  INFO(s.toString());
  REQUIRE(s.isOk());
  return v;
}

/// A small, valid problem for kVariant: B=2, Hq=4, Hkv=2, L=12, D=8.
struct Fixture {
  int64_t B = 2, H = 4, HK = 2, L = 12, D = 8;
  std::vector<float> q, k, v, o, lse, bias;
  std::vector<int32_t> doc;
  AttentionArgs a;
  Fixture() {
    q.resize(B * H * L * D);
    k.resize(B * HK * L * D);
    v.resize(B * HK * L * D);
    o.resize(B * H * L * D);
    lse.resize(B * H * L);
    bias.resize(H * 5);
    doc.resize(B * L);
    for (size_t i = 0; i < q.size(); ++i)
      q[i] = std::sin(0.37 * i);
    for (size_t i = 0; i < k.size(); ++i) {
      k[i] = std::cos(0.11 * i);
      v[i] = std::sin(0.05 * i + 1);
    }
    for (size_t i = 0; i < bias.size(); ++i)
      bias[i] = 0.1f * i;
    a.q = TensorView::contiguous(q.data(), DType::F32, {B, H, L, D});
    a.k = TensorView::contiguous(k.data(), DType::F32, {B, HK, L, D});
    a.v = TensorView::contiguous(v.data(), DType::F32, {B, HK, L, D});
    a.out = TensorView::contiguous(o.data(), DType::F32, {B, H, L, D});
    a.lse = TensorView::contiguous(lse.data(), DType::F32, {B, H, L});
    a.tensors = {{"bias", TensorView::contiguous(bias.data(), DType::F32, {H, 5})},
                 {"doc", TensorView::contiguous(doc.data(), DType::I32, {B, L})}};
    a.scalars = {{"w", 4}, {"s", 0.5}};
  }
  std::string error() {
    Problem p;
    Status s = resolveProblem(variant(), nullptr, a, p);
    return s.isOk() ? "" : s.message();
  }
};

} // namespace

TEST_CASE("a valid problem resolves with defaults", "[validate]") {
  Fixture f;
  Problem p;
  REQUIRE(resolveProblem(variant(), nullptr, f.a, p).isOk());
  CHECK(p.Hq == 4);
  CHECK(p.Hkv == 2);
  CHECK(p.kvLen == std::vector<int32_t>{12, 12});
  CHECK(p.qPos0 == std::vector<int32_t>{0, 0});
  CHECK(p.scale == Approx(1 / std::sqrt(8.0)));
  CHECK(p.params[0].shape == std::vector<int64_t>{4, 5}); // N bound to 5
}

TEST_CASE("validate: q must be 4-d", "[validate]") {
  Fixture f;
  f.a.q.shape = {2, 4, 12};
  f.a.q.strides = {1, 1, 1};
  CHECK(f.error() == "'q' must be a 4-d view [B, H, S, D], got shape [2, 4, 12]");
}

TEST_CASE("validate: k's shape must agree with q", "[validate]") {
  Fixture f;
  f.a.k.shape[3] = 16;
  CHECK(f.error() == "'k' has shape [2, 2, 12, 16], expected [2, 2, 12, 8]");
}

TEST_CASE("validate: out's shape", "[validate]") {
  Fixture f;
  f.a.out.shape[2] = 11;
  CHECK(f.error() == "'out' has shape [2, 4, 11, 8], expected [2, 4, 12, 8]");
}

TEST_CASE("validate: dtypes of q, k, v must agree", "[validate]") {
  Fixture f;
  f.a.v.dtype = DType::BF16;
  CHECK(f.error() == "'v' has dtype bf16, expected f32");
}

TEST_CASE("validate: lse must be f32 [B, H, Lq]", "[validate]") {
  Fixture f;
  f.a.lse.shape = {2, 4, 13};
  CHECK(f.error() == "'lse' has shape [2, 4, 13], expected [2, 4, 12]");
}

TEST_CASE("validate: the GQA ratio", "[validate]") {
  Fixture f;
  f.HK = 3;
  f.a.k.shape[1] = 3;
  f.a.v.shape[1] = 3;
  CHECK(f.error() == "the number of query heads (4) must be a multiple of "
                     "the number of KV heads (3)");
}

TEST_CASE("validate: head dims are multiples of 8 up to 256", "[validate]") {
  Fixture f;
  for (auto *t : {&f.a.q, &f.a.k})
    t->shape[3] = 12;
  CHECK(f.error() == "head dim (Dqk) must be a multiple of 8 in [8, 256], got 12");
}

TEST_CASE("validate: kvLens within the KV capacity", "[validate]") {
  Fixture f;
  f.a.kvLens = {12, 13};
  CHECK(f.error() == "'kvLens[1]' is 13, expected 0..12 (the KV capacity)");
  f.a.kvLens = {12};
  CHECK(f.error() == "'kvLens' has 1 entries, expected one per sequence (2)");
}

TEST_CASE("validate: more queries than keys needs explicit offsets",
          "[validate]") {
  Fixture f;
  f.a.kvLens = {12, 5};
  CHECK(f.error() == "sequence 1 has 5 keys but 12 queries; pass 'qOffsets' "
                     "to place the queries explicitly");
  f.a.qOffsets = {0, 0};
  CHECK(f.error().empty());
  f.a.qOffsets = {0, -1};
  CHECK(f.error() == "'qOffsets[1]' is -1, expected a non-negative position "
                     "(below 2^30 - 12)");
  f.a.qOffsets = {0, (1 << 30) - 12}; // the last query at 2^30 - 1
  CHECK(f.error().empty());
  f.a.qOffsets = {0, (1 << 30) - 11};
  CHECK(f.error() == "'qOffsets[1]' is 1073741813, expected a non-negative "
                     "position (below 2^30 - 12)");
}

TEST_CASE("validate: key offsets place the keys; KV spans their positions",
          "[validate]") {
  Fixture f;
  f.a.kvOffsets = {0, 4};
  // doc is i32[B, KV] and indexed by kv: it must reach position 4 + 11.
  CHECK(f.error() == "capture 'doc' spans 12 key positions (its KV axis), but "
                     "with 'kvOffsets' the keys reach position 15; a capture "
                     "indexed by kv must cover every key's absolute position");
  std::vector<int32_t> doc(2 * 16, 0);
  f.a.tensors[1].second = TensorView::contiguous(doc.data(), DType::I32, {2, 16});
  Problem p;
  REQUIRE(resolveProblem(variant(), nullptr, f.a, p).isOk());
  CHECK(p.kvPos0 == std::vector<int32_t>{0, 4});
  CHECK(p.qPos0 == std::vector<int32_t>{0, 4}); // the last Lq positions
  CHECK(p.params.back().scalar == 16);          // `size KV`
  f.a.kvOffsets = {0, -3};
  CHECK(f.error() == "'kvOffsets[1]' is -3, expected a non-negative position "
                     "(below 2^30 - 12)");
  f.a.kvOffsets = {4};
  CHECK(f.error() == "'kvOffsets' has 1 entries, expected one per sequence (2)");
  // Dropout's Philox blocks start at multiples of 4 positions.
  f.a.kvOffsets = {0, 2};
  f.a.dropout = {0.25, 7, 0};
  CHECK(f.error() == "'kvOffsets[1]' is 2; with dropout the first key's "
                     "position must be a multiple of 4");
  f.a.kvOffsets = {0, 4};
  CHECK(f.error().empty());
}

TEST_CASE("validate: a head offset places the query heads in the model's",
          "[validate]") {
  // bias is f32[H, N]: with heads 2..5 of 8, H is the model's 8.
  Fixture f;
  f.a.headOffset = 2;
  f.a.headCount = 8;
  CHECK(f.error() == "capture 'bias' has shape [4, 5], expected [8, 5] "
                     "(f32[H, N])");
  std::vector<float> bias(8 * 5, 0.f);
  f.a.tensors[0].second = TensorView::contiguous(bias.data(), DType::F32, {8, 5});
  Problem p;
  REQUIRE(resolveProblem(variant(), nullptr, f.a, p).isOk());
  CHECK(p.headPos0 == 2);
  size_t sizes = p.params.size() - 5; // B, H, HKV, Q, KV
  CHECK(p.params[sizes + 1].scalar == 8); // `size H`
  CHECK(p.params[sizes + 2].scalar == 4); // `size HKV`: GQA 2:1
  f.a.headCount = 5; // 2 + 4 heads do not fit in 5
  CHECK(f.error() == "'headOffset' 2 and 'headCount' 5 must place the 4 "
                     "query heads within the model's heads (0 <= headOffset, "
                     "headOffset + 4 <= headCount, both multiples of the GQA "
                     "group 2)");
  f.a.headCount = 7; // not a whole number of KV heads
  CHECK_FALSE(f.error().empty());
  f.a.headCount = 8;
  f.a.headOffset = 1; // not a whole group
  CHECK_FALSE(f.error().empty());
  f.a.headOffset = -1;
  f.a.headCount = 0;
  CHECK_FALSE(f.error().empty());
}

TEST_CASE("bind: a missing capture is named with its declaration", "[bind]") {
  Fixture f;
  f.a.tensors.pop_back();
  CHECK(f.error() == "missing capture 'doc' (i32[B, KV]) of variant 't'");
}

TEST_CASE("bind: an unknown capture is rejected", "[bind]") {
  Fixture f;
  f.a.tensors.push_back({"bais", f.a.tensors[0].second});
  CHECK(f.error() == "variant 't' has no tensor parameter 'bais'");
}

TEST_CASE("bind: a scalar passed as a tensor is rejected", "[bind]") {
  Fixture f;
  f.a.tensors.push_back({"w", f.a.tensors[0].second});
  CHECK(f.error() == "variant 't' has no tensor parameter 'w' (it is a scalar)");
}

TEST_CASE("bind: capture dtype must match the declaration", "[bind]") {
  Fixture f;
  // Its own i64 buffer: doc's i32 one read as i64 would span past it and,
  // where the heap put `out` next, overlap it (the overlap is checked first).
  std::vector<int64_t> doc64(2 * 12);
  f.a.tensors[1].second =
      TensorView::contiguous(doc64.data(), DType::I64, {2, 12});
  CHECK(f.error() == "capture 'doc' has dtype i64, expected i32");
}

TEST_CASE("bind: symbolic dims are checked", "[bind]") {
  Fixture f;
  f.a.tensors[1].second.shape = {2, 11};
  CHECK(f.error() == "capture 'doc' has shape [2, 11], expected [2, 12] "
                     "(i32[B, KV])");
}

TEST_CASE("bind: a capture's last stride is below 2^32 bytes", "[bind]") {
  // bias is f32[H, N] (4 x 5): its elements 2^30 - 1 floats apart along N
  // are 4 GiB - 4 bytes apart, the most the kernels' 32-bit byte stride
  // holds; the data is never read while binding.
  Fixture f;
  f.a.tensors[0].second.strides = {5, (int64_t(1) << 30) - 1};
  CHECK(f.error().empty());
  f.a.tensors[0].second.strides = {5, int64_t(1) << 30};
  CHECK(f.error() == "capture 'bias' has stride 1073741824 along its last "
                     "dimension (4294967296 bytes), expected below 2^32 bytes "
                     "(pass it with that dimension contiguous)");
  // A stride whose byte count passes 2^63 is refused, not wrapped.
  f.a.tensors[0].second.strides = {5, int64_t(1) << 62};
  CHECK(f.error() == "capture 'bias' has stride 4611686018427387904 along "
                     "its last dimension (18446744073709551616 bytes), "
                     "expected below 2^32 bytes (pass it with that "
                     "dimension contiguous)");
  // A last dimension of one element has no step to take: any stride.
  f.a.tensors[0].second.shape = {4, 1};
  f.a.tensors[0].second.strides = {1, int64_t(1) << 40};
  CHECK(f.error().empty());
}

TEST_CASE("bind: capture rank must match", "[bind]") {
  Fixture f;
  f.a.tensors[0].second.shape = {4};
  f.a.tensors[0].second.strides = {1};
  CHECK(f.error() == "capture 'bias' has shape [4], expected rank 2 (f32[H, N])");
}

TEST_CASE("bind: missing and mistyped scalars", "[bind]") {
  Fixture f;
  f.a.scalars = {{"s", 1.0}};
  CHECK(f.error() == "missing scalar 'w' (i32) of variant 't'");
  f.a.scalars = {{"s", 1.0}, {"w", 2.5}};
  CHECK(f.error() == "scalar 'w' is i32 but was given 2.5");
  f.a.scalars = {{"s", 1.0}, {"w", 2}, {"wdith", 3}};
  CHECK(f.error() == "variant 't' has no scalar parameter 'wdith'");
}

TEST_CASE("interpreter: integer division is total", "[interp]") {
  VariantInfo v = variant(R"(variant d
mask-kind data
mask-uses
score
  %0 = arith.divsi %q %kv
  %1 = arith.remsi %q %kv
  %2 = arith.sitofp %0
  %3 = arith.sitofp %1
  %4 = const.f32 1000
  %5 = arith.mulf %2 %4
  %6 = arith.addf %5 %3
  yield %6
mask
  %0 = const.i1 1
  yield %0
end
)");
  std::vector<BoundParam> none;
  CHECK(evalScoreMod(v, none, 0, 0, 0, 7, 2) == 3 * 1000 + 1);
  CHECK(evalScoreMod(v, none, 0, 0, 0, -7, 2) == -3 * 1000 - 1); // truncation
  CHECK(evalScoreMod(v, none, 0, 0, 0, 7, 0) == 0 * 1000 + 7);   // x/0, x%0
}

TEST_CASE("interpreter: gathers clamp and report the first violation",
          "[interp]") {
  VariantInfo v = variant();
  Fixture f;
  Problem p;
  REQUIRE(resolveProblem(v, nullptr, f.a, p).isOk());
  GatherViolation viol;
  // bias is [4, 5]; kv = 9 clamps to 4.
  double s = evalScoreMod(v, p.params, 1.0, 0, 2, 9, 9, &viol);
  CHECK(s == Approx(1.0 + 0.5 * f.bias[2 * 5 + 4]));
  CHECK(viol.capture == "bias");
  CHECK(viol.index == std::vector<int64_t>{2, 9});
  CHECK(viol.shape == std::vector<int64_t>{4, 5});
}

TEST_CASE("modifier program: malformed text is an error, not a crash",
          "[interp]") {
  VariantInfo v;
  CHECK_FALSE(VariantInfo::parse("variant x\nscore\n yield %0\nmask\n yield %b\nend\n", v).isOk());
  CHECK(VariantInfo::parse("variant x\nscore\n  %0 = math.frobnicate %score\n", v)
            .message() == "modifier program line 3: unsupported operation "
                          "'math.frobnicate'");
  CHECK_FALSE(VariantInfo::parse("variant x\nscore\n yield %score\n", v).isOk());
  CHECK_FALSE(VariantInfo::parse("variant x\nscore\n %0 = gather nope %b\n", v).isOk());
}

TEST_CASE("interpreter: sizes come from the bound problem, bools are i1",
          "[interp]") {
  // score = B*10000 + H*1000 + HKV*100 + Q*10 + N (bias's free dim, 5),
  // read through `size`; mask = the bool scalar `on`.
  VariantInfo v = variant(R"(variant sizes
param bias tensor f32 H N
param on scalar bool
score
  %0 = size B
  %1 = const.i32 10
  %2 = arith.muli %0 %1
  %3 = size H
  %4 = arith.addi %2 %3
  %5 = arith.muli %4 %1
  %6 = size HKV
  %7 = arith.addi %5 %6
  %8 = arith.muli %7 %1
  %9 = size Q
  %10 = arith.addi %8 %9
  %11 = arith.muli %10 %1
  %12 = size N
  %13 = arith.addi %11 %12
  %14 = arith.sitofp %13
  yield %14
mask
  %0 = scalar on
  yield %0
end
)");
  Fixture f; // B=2, Hq=4, Hkv=2, L=12
  f.a.scalars = {{"on", 1.0}};
  f.a.tensors = {{"bias", TensorView::contiguous(f.bias.data(), DType::F32,
                                                 {4, 5})}};
  Problem p;
  Status st = resolveProblem(v, nullptr, f.a, p);
  INFO(st.toString());
  REQUIRE(st.isOk());
  // Q is the call's query length (12), N the free dim bound by bias (5).
  CHECK(evalScoreMod(v, p.params, 0, 0, 0, 0, 0) ==
        ((2 * 10 + 4) * 10 + 2) * 100 + 12 * 10 + 5);
  CHECK(evalMaskMod(v, p.params, 0, 0, 0, 0));
  f.a.scalars = {{"on", 0.0}};
  REQUIRE(resolveProblem(v, nullptr, f.a, p).isOk());
  CHECK_FALSE(evalMaskMod(v, p.params, 0, 0, 0, 0));
  f.a.scalars = {{"on", 2.0}};
  CHECK(resolveProblem(v, nullptr, f.a, p).message() ==
        "scalar 'on' is bool but was given 2 (expected 0 or 1)");
  // A size that is neither fixed nor a free dimension is refused.
  VariantInfo bad;
  CHECK(VariantInfo::parse("variant x\nscore\n  %0 = size M\n", bad).message() ==
        "modifier program line 3: 'M' is neither a problem size nor a free "
        "dimension of a parameter");
}

TEST_CASE("interpreter: sums run their body per index, in order",
          "[interp]") {
  // score = sum(i < 4: 2^30) (wraps to 0) + sum(i < q: i) + sum(i < -3: 1).
  VariantInfo v = variant(R"(variant s
score
  %0 = const.i32 4
  %1 = sum %0 %2
  %3 = const.i32 1073741824
  endsum %3
  %4 = sum %q %5
  endsum %5
  %6 = const.i32 -3
  %7 = sum %6 %8
  %9 = const.i32 1
  endsum %9
  %10 = arith.addi %1 %4
  %11 = arith.addi %10 %7
  %12 = arith.sitofp %11
  yield %12
mask
  %0 = const.i1 1
  yield %0
end
)");
  std::vector<BoundParam> none;
  CHECK(evalScoreMod(v, none, 0, 0, 0, 10, 0) == 45.0);
  CHECK(evalScoreMod(v, none, 0, 0, 0, 0, 0) == 0.0);
  // An f32 sum rounds each addition to f32: 1 + 2^-24 + 2^-24 stays 1.
  VariantInfo f = variant(R"(variant f
score
  %0 = const.i32 3
  %1 = sum %0 %2
  %3 = const.i32 0
  %4 = arith.cmpi eq %2 %3
  %5 = const.f32 1
  %6 = const.f32 5.96046448e-08
  %7 = arith.select %4 %5 %6
  endsum %7
  yield %1
mask
  %0 = const.i1 1
  yield %0
end
)");
  CHECK(evalScoreMod(f, none, 0, 0, 0, 0, 0) == 1.0);
  // Malformed sums are refused with the line or op.
  VariantInfo bad;
  CHECK(VariantInfo::parse("variant x\nscore\n  endsum %score\n", bad)
            .message() == "modifier program line 3: 'endsum' without a sum");
  CHECK(VariantInfo::parse("variant x\nscore\n  %0 = sum %b %1\nmask\n", bad)
            .message() == "modifier program line 4: a sum is not closed with "
                           "'endsum'");
  CHECK(VariantInfo::parse("variant x\nscore\n  %0 = sum %b %1\n  %2 = "
                           "arith.cmpi eq %1 %1\n  endsum %2\n  %3 = "
                           "arith.sitofp %0\n  yield %3\nmask\n  %0 = "
                           "const.i1 1\n  yield %0\nend\n",
                           bad)
            .message() == "modifier program (score op 1): a sum's term must be "
                          "f32 or i32");
  CHECK(VariantInfo::parse("variant x\nscore\n  %0 = sum %b %1\n  endsum %1\n"
                           "  %2 = arith.addi %1 %0\n  %3 = arith.sitofp %2\n"
                           "  yield %3\nmask\n  %0 = const.i1 1\n  yield %0\n"
                           "end\n",
                           bad)
            .message() == "modifier program (score op 2): a value is used "
                          "before it is defined");
}

TEST_CASE("binding: a 0-d tensor stands for a one-element capture",
          "[bind]") {
  // `cap: f32[]` in the language: held as [1], bound from 0-d or [1].
  VariantInfo v = variant(R"(variant r0
param cap tensor f32 1
score
  %0 = const.i32 0
  %1 = gather cap %0
  %2 = arith.mulf %score %1
  yield %2
mask
  %0 = const.i1 1
  yield %0
end
)");
  Fixture f;
  float cap = 0.25f;
  f.a.tensors = {{"cap", TensorView::contiguous(&cap, DType::F32, {})}};
  f.a.scalars.clear();
  Problem p;
  Status st = resolveProblem(v, nullptr, f.a, p);
  INFO(st.toString());
  REQUIRE(st.isOk());
  CHECK(p.params[0].shape == std::vector<int64_t>{1});
  CHECK(evalScoreMod(v, p.params, 2.0, 0, 0, 0, 0) == 0.5);
  f.a.tensors = {{"cap", TensorView::contiguous(&cap, DType::F32, {1})}};
  REQUIRE(resolveProblem(v, nullptr, f.a, p).isOk());
  float two[2] = {1, 2};
  f.a.tensors = {{"cap", TensorView::contiguous(two, DType::F32, {2})}};
  CHECK(resolveProblem(v, nullptr, f.a, p).message() ==
        "capture 'cap' has shape [2], expected [1] (f32[1])");
}

TEST_CASE("reference: identical keys average the values", "[reference]") {
  Fixture f;
  std::fill(f.k.begin(), f.k.end(), 0.25f); // every score equal
  VariantInfo plain = variant(kPlainVariant);
  f.a.tensors.clear();
  f.a.scalars.clear();
  std::vector<double> out, lse;
  REQUIRE(referenceAttention(plain, f.a, out, lse).isOk());
  // Row (b=1, h=3, i=5) of a uniform softmax is the mean of V over keys.
  for (int d = 0; d < 8; ++d) {
    double mean = 0;
    for (int j = 0; j < 12; ++j)
      mean += f.v[((1 * 2 + 1) * 12 + j) * 8 + d] / 12.0;
    CHECK(out[((1 * 4 + 3) * 12 + 5) * 8 + d] == Approx(mean).epsilon(1e-12));
  }
}

TEST_CASE("reference: a fully masked row gives 0 and -inf", "[reference]") {
  Fixture f;
  f.a.scalars = {{"w", 0}, {"s", 0.5}}; // q - kv < 0 && q >= kv: never
  std::vector<double> out, lse;
  REQUIRE(referenceAttention(variant(), f.a, out, lse).isOk());
  for (double x : out)
    REQUIRE(x == 0.0);
  for (double l : lse)
    REQUIRE(l == -std::numeric_limits<double>::infinity());
}

TEST_CASE("reference: BSHD and BHSD views of the same data agree",
          "[reference]") {
  Fixture f;
  std::vector<double> ref, refLse;
  REQUIRE(referenceAttention(variant(), f.a, ref, refLse).isOk());
  // Re-lay q as BSHD and view it with permuted strides.
  std::vector<float> qb(f.q.size());
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t s = 0; s < 12; ++s)
        for (int64_t d = 0; d < 8; ++d)
          qb[((b * 12 + s) * 4 + h) * 8 + d] = f.q[((b * 4 + h) * 12 + s) * 8 + d];
  f.a.q.data = qb.data();
  f.a.q.strides = {12 * 4 * 8, 8, 4 * 8, 1};
  std::vector<double> out, lse;
  REQUIRE(referenceAttention(variant(), f.a, out, lse).isOk());
  CHECK(out == ref);
}

TEST_CASE("npy: write then read round-trips", "[npy]") {
  NpyArray a;
  a.dtype = DType::F32;
  a.shape = {2, 3};
  std::vector<float> x = {1, 2, 3, 4, 5, -6.5f};
  a.bytes.assign(reinterpret_cast<unsigned char *>(x.data()),
                 reinterpret_cast<unsigned char *>(x.data() + 6));
  char tmpl[] = "/tmp/attnc-npy-XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  close(fd);
  std::string path = tmpl;
  REQUIRE(writeNpy(path, a).isOk());
  NpyArray b;
  REQUIRE(readNpy(path, b).isOk());
  CHECK(b.shape == a.shape);
  CHECK(b.bytes == a.bytes);
  std::remove(path.c_str());
  CHECK(readNpy(path, b).code() == StatusCode::NotFound);
}

namespace {
/// A .npy file from a header dictionary and raw data bytes (format 1.0,
/// padded as NumPy pads).
std::string npyFile(const std::string &dict, size_t dataBytes, int major = 1) {
  std::string h = dict;
  size_t pre = major == 1 ? 10 : 12;
  h.append((64 - (pre + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string f = std::string("\x93NUMPY", 6) + char(major) + char(0);
  for (int i = 0; i < (major == 1 ? 2 : 4); ++i)
    f += char((h.size() >> (8 * i)) & 0xff);
  return f + h + std::string(dataBytes, '\0');
}

Status readNpyText(const std::string &bytes, NpyArray &out) {
  char tmpl[] = "/tmp/attnc-npy-XXXXXX";
  int fd = mkstemp(tmpl);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size()));
  close(fd);
  Status s = readNpy(tmpl, out);
  std::remove(tmpl);
  return s;
}
} // namespace

TEST_CASE("npy: headers are parsed strictly, data sizes must match", "[npy]") {
  NpyArray a;
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  REQUIRE(readNpyText(npyFile(ok, 24), a).isOk());
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  REQUIRE(readNpyText(npyFile("{'shape': (4,), 'fortran_order': False, 'descr': '<i4'}", 16, 2), a).isOk());
  CHECK(a.dtype == DType::I32);
  REQUIRE(readNpyText(npyFile("{'descr': '|b1', 'fortran_order': False, 'shape': ()}", 1), a).isOk());
  CHECK(a.shape.empty());
  auto why = [&](const std::string &file) {
    Status s = readNpyText(file, a);
    CHECK(!s.isOk());
    return s.message();
  };
  // A 'shape' inside another string is not the shape.
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'fortran_order': False, 'x': 'shape': (2,)}", 8)),
             Catch::Contains("unexpected or repeated key 'x'"));
  CHECK_THAT(why(npyFile("{'descr': \"'shape': (1,)\", 'fortran_order': False, 'shape': (2,)}", 8)),
             Catch::Contains("unsupported dtype"));
  // A non-numeric dimension.
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, x)}", 8)),
             Catch::Contains("'shape' must be a tuple of non-negative integers"));
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}", 8)),
             Catch::Contains("'shape' must be a tuple"));
  // Trailing bytes, missing bytes, and a shape claiming 2^40 elements.
  CHECK_THAT(why(npyFile(ok, 25)), Catch::Contains("needs 24 bytes of data, the file has 25"));
  CHECK_THAT(why(npyFile(ok, 23)), Catch::Contains("needs 24 bytes of data, the file has 23"));
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1048576, 1048576)}", 16)),
             Catch::Contains("needs 4398046511104 bytes of data, the file has 16"));
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}", 16)),
             Catch::Contains("overflows"));
  // Missing or repeated keys, other text, and other formats.
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'shape': (2,)}", 8)), Catch::Contains("needs 'descr'"));
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}", 8)),
             Catch::Contains("repeated key 'descr'"));
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", 8)),
             Catch::Contains("text after the dictionary"));
  CHECK_THAT(why(npyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2,)}", 8)),
             Catch::Contains("Fortran-ordered"));
  CHECK_THAT(why(std::string("\x93NUMPY\x09\x00xxxxxxxxxx", 18)),
             Catch::Contains("format version 9"));
  CHECK_THAT(why("not a npy file at all"), Catch::Contains("no \\x93NUMPY magic"));
  std::string cut = npyFile(ok, 24);
  cut[8] = char(0xff); // the header length runs past the end
  CHECK_THAT(why(cut), Catch::Contains("runs past the end"));
  CHECK_THAT(readNpy("/dev/zero", a).message(), Catch::Contains("not a regular file"));
}

TEST_CASE("KV cache: append fills lengths and checks capacity", "[kvcache]") {
  KVCache c;
  REQUIRE(KVCache::create(DType::F32, 2, 1, 4, 8, 8, c).isOk());
  std::vector<float> k(1 * 3 * 8, 1.f), v(1 * 3 * 8, 2.f);
  auto nk = TensorView::contiguous(k.data(), DType::F32, {1, 3, 8});
  auto nv = TensorView::contiguous(v.data(), DType::F32, {1, 3, 8});
  REQUIRE(c.append(1, nk, nv).isOk());
  CHECK(c.lengths() == std::vector<int32_t>{0, 3});
  CHECK(c.append(1, nk, nv).message() ==
        "appending 3 rows to sequence 1 (length 3) exceeds the cache capacity 4");
  CHECK(c.append(2, nk, nv).message() ==
        "sequence 2 is out of range for a cache of 2 sequences");
  TensorView keys = c.keys();
  CHECK(keys.shape == std::vector<int64_t>{2, 1, 4, 8});
  CHECK(static_cast<float *>(keys.data)[keys.offsetOf({1, 0, 2, 7})] == 1.f);
  CHECK(static_cast<float *>(keys.data)[keys.offsetOf({0, 0, 0, 0})] == 0.f);
  auto bad = TensorView::contiguous(k.data(), DType::BF16, {1, 3, 8});
  CHECK(c.append(0, bad, nv).message() == "'newK' has dtype bf16, expected f32");
}
