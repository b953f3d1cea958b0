// End-to-end tests of JIT-compiled CPU kernels through the public API:
// Session (compiler) -> CpuKernel (runtime), checked against the fp64
// reference.
#include "attnc/Driver/Session.h"
#include "ReferenceCheck.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <array>
#include <random>

using namespace attnc;
using namespace attnc::rt;

namespace {

std::unique_ptr<CpuKernel> compile(const std::string &src,
                                   const std::string &variant,
                                   KernelSpec spec = {}) {
  return test::compileCpuKernel(src, variant, spec);
}

std::vector<float> randn(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> x(n);
  for (float &v : x)
    v = d(rng);
  return x;
}

/// max |kernel - reference| over out (rows only where defined).
double maxError(const CpuKernel &k, const AttentionArgs &a) {
  std::vector<double> ref, lse;
  Status s = referenceAttention(k.variant(), a, ref, lse);
  INFO(s.toString());
  REQUIRE(s.isOk());
  const TensorView &o = a.out;
  double m = 0;
  for (int64_t b = 0; b < o.shape[0]; ++b)
    for (int64_t h = 0; h < o.shape[1]; ++h)
      for (int64_t i = 0; i < o.shape[2]; ++i)
        for (int64_t d = 0; d < o.shape[3]; ++d) {
          double got = static_cast<float *>(o.data)[o.offsetOf({b, h, i, d})];
          double want = ref[((b * o.shape[1] + h) * o.shape[2] + i) * o.shape[3] + d];
          m = std::max(m, std::fabs(got - want));
        }
  return m;
}

const char *kSources = R"(
variant causal() { mask_mod(b, h, q, kv) = q >= kv }
variant doc(d: i32[B, KV]) {
  score_mod(s, b, h, q, kv) = s - 0.01 * abs(q - kv)
  mask_mod(b, h, q, kv) = d[b, q] == d[b, kv] && q >= kv
}
)";

} // namespace

TEST_CASE("decode over a growing KV cache matches the reference", "[cpu]") {
  auto k = compile(kSources, "causal");
  const int64_t B = 2, HQ = 6, HK = 2, D = 64, CAP = 96;
  KVCache cache;
  REQUIRE(KVCache::create(DType::F32, B, HK, CAP, D, D, cache).isOk());
  // Prefill 40 and 70 tokens, then decode 5 steps for both sequences.
  for (int64_t b = 0; b < B; ++b) {
    int64_t T = b == 0 ? 40 : 70;
    auto nk = randn(HK * T * D, 10 + b), nv = randn(HK * T * D, 20 + b);
    REQUIRE(cache.append(b, TensorView::contiguous(nk.data(), DType::F32, {HK, T, D}),
                         TensorView::contiguous(nv.data(), DType::F32, {HK, T, D}))
                .isOk());
  }
  for (int step = 0; step < 5; ++step) {
    for (int64_t b = 0; b < B; ++b) {
      auto nk = randn(HK * D, 100 + step * 2 + b), nv = randn(HK * D, 200 + step * 2 + b);
      REQUIRE(cache.append(b, TensorView::contiguous(nk.data(), DType::F32, {HK, 1, D}),
                           TensorView::contiguous(nv.data(), DType::F32, {HK, 1, D}))
                  .isOk());
    }
    auto q = randn(B * HQ * D, 300 + step);
    std::vector<float> out(B * HQ * D);
    AttentionArgs a;
    a.q = TensorView::contiguous(q.data(), DType::F32, {B, HQ, 1, D});
    a.k = cache.keys();
    a.v = cache.values();
    a.out = TensorView::contiguous(out.data(), DType::F32, {B, HQ, 1, D});
    a.kvLens = cache.lengths();
    REQUIRE(k->run(a).isOk());
    CHECK(maxError(*k, a) < 1e-5);
  }
  CHECK(cache.lengths() == std::vector<int32_t>{45, 75});
}

TEST_CASE("ragged batches with explicit query offsets", "[cpu]") {
  auto k = compile(kSources, "causal");
  const int64_t B = 3, H = 4, L = 50, Q = 7, D = 64;
  auto q = randn(B * H * Q * D, 1), kk = randn(B * H * L * D, 2),
       v = randn(B * H * L * D, 3);
  std::vector<float> out(B * H * Q * D, 99.f);
  AttentionArgs a;
  a.q = TensorView::contiguous(q.data(), DType::F32, {B, H, Q, D});
  a.k = TensorView::contiguous(kk.data(), DType::F32, {B, H, L, D});
  a.v = TensorView::contiguous(v.data(), DType::F32, {B, H, L, D});
  a.out = TensorView::contiguous(out.data(), DType::F32, {B, H, Q, D});
  a.kvLens = {50, 9, 0};      // the last sequence is empty
  a.qOffsets = {10, 2, 0};    // queries in the middle of the first sequence
  REQUIRE(k->run(a).isOk());
  CHECK(maxError(*k, a) < 1e-5);
  for (int64_t i = 2 * H * Q * D; i < B * H * Q * D; ++i)
    REQUIRE(out[i] == 0.f); // no keys: output 0, not NaN
}

TEST_CASE("a block mask is built once and reused while inputs hold",
          "[cpu][blockmask]") {
  auto k = compile(kSources, "doc");
  const int64_t B = 1, H = 2, L = 200, D = 64;
  auto q = randn(B * H * L * D, 4), kk = randn(B * H * L * D, 5),
       v = randn(B * H * L * D, 6);
  std::vector<int32_t> d(L);
  for (int64_t i = 0; i < L; ++i)
    d[i] = i < 64 ? 0 : i < 192 ? 1 : 2; // three documents
  std::vector<float> out(B * H * L * D);
  AttentionArgs a;
  a.q = TensorView::contiguous(q.data(), DType::F32, {B, H, L, D});
  a.k = TensorView::contiguous(kk.data(), DType::F32, {B, H, L, D});
  a.v = TensorView::contiguous(v.data(), DType::F32, {B, H, L, D});
  a.out = TensorView::contiguous(out.data(), DType::F32, {B, H, L, D});
  a.tensors = {{"d", TensorView::contiguous(d.data(), DType::I32, {B, L})}};
  BlockMask bm;
  REQUIRE(k->buildBlockMask(a, bm).isOk());
  CHECK(bm.heads == 1); // the mask ignores h: one mask for every head
  auto [empty, partial, full] = bm.histogram();
  CHECK(empty > 0);   // above the diagonal and across documents
  CHECK(full > 0);    // inside a document, below the diagonal
  CHECK(partial > 0);
  const KernelSpec &spec = k->spec();
  CHECK(bm.numQTiles == (L + spec.blockM - 1) / spec.blockM);
  CHECK(bm.numKTiles == (L + spec.blockN - 1) / spec.blockN);
  CHECK(empty + partial + full == bm.numQTiles * bm.numKTiles);
  a.blockMask = &bm;
  REQUIRE(k->run(a).isOk());
  CHECK(maxError(*k, a) < 1e-5);
  // New values, same mask inputs: the block mask still applies.
  auto v2 = randn(B * H * L * D, 7);
  std::copy(v2.begin(), v2.end(), v.begin()); // same buffer, new values
  REQUIRE(k->run(a).isOk());
  CHECK(maxError(*k, a) < 1e-5);
  // Different lengths: the stale block mask is refused, not misused.
  a.kvLens = {150};
  a.qOffsets = {0};
  Status s = k->run(a);
  CHECK(s.message() == "'blockMask' was built for different lengths, offsets "
                       "or tile sizes; rebuild it for these inputs");
}

TEST_CASE("results do not depend on the thread count", "[cpu]") {
  auto k = compile(kSources, "causal");
  const int64_t B = 2, H = 3, L = 77, D = 64;
  auto q = randn(B * H * L * D, 8), kk = randn(B * H * L * D, 9),
       v = randn(B * H * L * D, 10);
  std::vector<float> o1(B * H * L * D), o2(B * H * L * D);
  AttentionArgs a;
  a.q = TensorView::contiguous(q.data(), DType::F32, {B, H, L, D});
  a.k = TensorView::contiguous(kk.data(), DType::F32, {B, H, L, D});
  a.v = TensorView::contiguous(v.data(), DType::F32, {B, H, L, D});
  a.out = TensorView::contiguous(o1.data(), DType::F32, {B, H, L, D});
  a.numThreads = 1;
  REQUIRE(k->run(a).isOk());
  a.out.data = o2.data();
  a.numThreads = 2;
  REQUIRE(k->run(a).isOk());
  CHECK(o1 == o2);
}

TEST_CASE("invalid arguments are reported before anything is written",
          "[cpu]") {
  auto k = compile(kSources, "causal");
  const int64_t B = 1, H = 2, L = 20, D = 64;
  auto q = randn(B * H * L * D, 11);
  std::vector<float> out(B * H * L * D, 42.f);
  AttentionArgs a;
  a.q = TensorView::contiguous(q.data(), DType::F32, {B, H, L, D});
  a.k = TensorView::contiguous(q.data(), DType::F32, {B, H, L, D});
  a.v = TensorView::contiguous(q.data(), DType::F32, {B, H, L, 32});
  a.out = TensorView::contiguous(out.data(), DType::F32, {B, H, L, 32});
  Status s = k->run(a);
  CHECK(s.message() == "the kernel was compiled for Dqk=64 Dv=64, but the "
                       "inputs have Dqk=64 Dv=32");
  for (float x : out)
    REQUIRE(x == 42.f);
  a.v = TensorView::contiguous(q.data(), DType::BF16, {B, H, L, D});
  a.out = TensorView::contiguous(out.data(), DType::F32, {B, H, L, D});
  CHECK(k->run(a).message() == "'v' has dtype bf16, expected f32");
}

TEST_CASE("compiling rejects bad kernel configurations", "[cpu]") {
  std::string diags;
  std::unique_ptr<Session> s;
  REQUIRE(Session::loadSource("t.attn", kSources, diags, s).isOk());
  KernelSpec spec;
  spec.headDim = 100;
  std::unique_ptr<CpuKernel> k;
  CHECK(s->compileCpu("causal", spec, k).message() ==
        "head dim (Dqk) must be a multiple of 8 in [8, 256], got 100");
  CHECK(s->compileCpu("nope", KernelSpec{}, k).message() ==
        "no variant named 'nope'");
  std::unique_ptr<Session> bad;
  CHECK_FALSE(Session::loadSource("bad.attn", "variant v() { mask_mod(b,h,q,kv) = x }",
                                  diags, bad)
                  .isOk());
  CHECK(diags.find("bad.attn:1:36: error: unknown name 'x'") != std::string::npos);
}

TEST_CASE("non-unit strides along D take the element-wise path", "[cpu]") {
  // V (and K) stored as [B, H, D, S]: stride 1 along S, S along D.
  auto k = compile(kSources, "causal");
  const int64_t B = 1, H = 2, L = 70, D = 64;
  auto q = randn(B * H * L * D, 12), kk = randn(B * H * D * L, 13),
       v = randn(B * H * D * L, 14);
  std::vector<float> out(B * H * L * D);
  AttentionArgs a;
  a.q = TensorView::contiguous(q.data(), DType::F32, {B, H, L, D});
  a.k.data = kk.data();
  a.k.shape = {B, H, L, D};
  a.k.strides = {H * D * L, D * L, 1, L};
  a.v = a.k;
  a.v.data = v.data();
  a.out = TensorView::contiguous(out.data(), DType::F32, {B, H, L, D});
  REQUIRE(k->run(a).isOk());
  CHECK(maxError(*k, a) < 1e-5);
}

/// The test sources plus a causal window of run-time width `w`.
static std::unique_ptr<Session> sessionWithWindow() {
  std::string diags;
  std::unique_ptr<Session> s;
  REQUIRE(Session::loadSource("t.attn", std::string(kSources) +
                                            "variant window(w: i32) {\n"
                                            "  mask_mod(b, h, q, kv) = q >= kv && q - kv < w }",
                              diags, s)
              .isOk());
  return s;
}

TEST_CASE("tile counts of closed-form masks", "[cpu]") {
  std::unique_ptr<Session> s = sessionWithWindow();
  KernelSpec spec; // 64 x 64 tiles
  std::array<int64_t, 3> c{};
  // Causal, 256 x 256, one sequence, two heads: per head 4 x 4 tiles, the
  // diagonal partial, 6 below full, 6 above empty.
  REQUIRE(s->countTiles("causal", spec, 2, 256, {256}, {0}, {}, c).isOk());
  CHECK(c == std::array<int64_t, 3>{12, 8, 12});
  // A window of 64: only the diagonal and the tiles just below it.
  REQUIRE(s->countTiles("window", spec, 1, 256, {256}, {0}, {{"w", 64}}, c)
              .isOk());
  CHECK(c == std::array<int64_t, 3>{9, 7, 0});
  CHECK(s->countTiles("doc", spec, 1, 64, {64}, {0}, {}, c).message().find(
            "data-dependent") != std::string::npos);
}

TEST_CASE("a block of positions classified for every sequence and head "
          "(the ring's skip test)", "[cpu]") {
  std::unique_ptr<Session> s = sessionWithWindow();
  auto cls = [&](const char *v, std::map<std::string, int64_t> sizes,
                 int64_t qlo, int64_t qhi, int64_t klo, int64_t khi) {
    abi::TileClass c = abi::kPartial;
    Status st = s->classifyBlock(v, sizes, 2, 4, qlo, qhi, klo, khi, c);
    INFO(st.toString());
    REQUIRE(st.isOk());
    return c;
  };
  // Causal: keys after every query are empty, keys before every one full.
  CHECK(cls("causal", {}, 0, 7, 8, 15) == abi::kEmpty);
  CHECK(cls("causal", {}, 8, 15, 0, 7) == abi::kFull);
  CHECK(cls("causal", {}, 0, 15, 0, 15) == abi::kPartial);
  // The window reads w: far-behind keys are empty too.
  CHECK(cls("window", {{"w", 4}}, 100, 107, 0, 7) == abi::kEmpty);
  CHECK(cls("window", {{"w", 200}}, 100, 107, 0, 7) == abi::kFull);
  // Unbound w: undecided, never empty.
  CHECK(cls("window", {}, 100, 107, 0, 7) == abi::kPartial);
  // A data-dependent mask is never skipped.
  CHECK(cls("doc", {}, 0, 7, 8, 15) == abi::kPartial);
  abi::TileClass c;
  CHECK(s->classifyBlock("causal", {}, 1, 1, 5, 4, 0, 1, c).message().find(
            "non-empty") != std::string::npos);
  CHECK(s->classifyBlock("nope", {}, 1, 1, 0, 1, 0, 1, c).code() ==
        StatusCode::NotFound);
}
