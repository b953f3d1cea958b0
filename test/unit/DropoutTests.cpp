// Attention dropout (runtime/include/attnc/runtime/Dropout.h): the Philox
// generator against Random123's known answers, the keep rate, argument
// errors, and the forward kernels' keep masks. With V the identity (one
// key per output column) O[q, kv] is P z, so the mask each kernel drew is
// read off its output: it must equal the fp64 reference's bit for bit on
// the CPU at several tile shapes, thread counts and KV splits, and on the
// emulated GPU in the SIMT and tensor-core forms. The backward with
// dropout is checked in BackwardTests.cpp.
#include "attnc/Driver/Session.h"
#include "attnc/runtime/Dropout.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <random>

using namespace attnc;
using namespace attnc::rt;

TEST_CASE("Philox 4x32-10 gives Random123's known answers", "[dropout]") {
  using W = std::array<uint32_t, 4>;
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        W{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}) ==
        W{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                      {0xa4093822u, 0x299f31d0u}) ==
        W{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("dropout keeps 1 - p of the pairs, and streams differ by seed and "
          "offset",
          "[dropout]") {
  for (double p : {0.1, 0.5, 0.9}) {
    DropoutParams d;
    REQUIRE(resolveDropout({p, 1234, 0}, d).isOk());
    CHECK(d.scale == float(1.0 / (1.0 - p)));
    int64_t kept = 0, n = 0;
    for (int32_t b = 0; b < 2; ++b)
      for (int32_t h = 0; h < 4; ++h)
        for (int32_t q = 0; q < 128; ++q)
          for (int32_t kv = 0; kv < 256; ++kv, ++n)
            kept += dropoutKeeps(d, b, h, q, kv);
    // Binomial: within 5 standard deviations.
    double sd = std::sqrt(n * p * (1 - p));
    INFO("p " << p << ": kept " << kept << " of " << n);
    CHECK(std::fabs(kept - n * (1 - p)) < 5 * sd);
  }
  DropoutParams a, b, c;
  REQUIRE(resolveDropout({0.5, 1, 0}, a).isOk());
  REQUIRE(resolveDropout({0.5, 2, 0}, b).isOk());
  REQUIRE(resolveDropout({0.5, 1, 1}, c).isOk());
  int same_ab = 0, same_ac = 0;
  for (int32_t kv = 0; kv < 4096; ++kv) {
    bool x = dropoutKeeps(a, 0, 0, 0, kv);
    same_ab += x == dropoutKeeps(b, 0, 0, 0, kv);
    same_ac += x == dropoutKeeps(c, 0, 0, 0, kv);
  }
  // Independent streams agree on about half the pairs.
  CHECK(std::abs(same_ab - 2048) < 5 * 32);
  CHECK(std::abs(same_ac - 2048) < 5 * 32);
  // p = 0 keeps everything at factor 1.
  DropoutParams none;
  REQUIRE(resolveDropout({0.0, 7, 3}, none).isOk());
  CHECK_FALSE(none.active());
  CHECK(none.scale == 1.0f);
  CHECK(dropoutKeeps(none, 1, 2, 3, 4));
}

TEST_CASE("dropout_p outside [0, 1) is refused by name", "[dropout]") {
  DropoutParams d;
  for (double p : {-0.1, 1.0, 1.5, double(NAN), double(INFINITY)}) {
    Status s = resolveDropout({p, 0, 0}, d);
    INFO(p);
    CHECK_FALSE(s.isOk());
    CHECK_THAT(s.message(), Catch::Contains("'dropout_p' must be in [0, 1)"));
  }
}

namespace {

const char *kSources = R"(
variant causal() { mask_mod(b, h, q, kv) = q >= kv }
variant biased(s: f32[B, H, Q, KV]) {
  score_mod(x, b, h, q, kv) = x + s[b, h, q, kv]
}
)";

std::unique_ptr<Session> session() {
  std::string diags;
  std::unique_ptr<Session> s;
  REQUIRE(Session::loadSource("t.attn", kSources, diags, s).isOk());
  return s;
}

/// Sequences of 48 and 37 keys, 48 queries from position 0, GQA 2:1,
/// Dqk 16, Dv 48 = the key capacity, V[b, hk, j, d] = (d == j): O[.., q, j]
/// is the pair's P z. The score bias (for `biased`) is seeded.
struct IdentityProblem {
  static constexpr int64_t B = 2, H = 4, HK = 2, L = 48, D = 16;
  DType dt;
  std::vector<uint8_t> q, k, v, out;
  std::vector<float> lse, bias;
  AttentionArgs a;
  explicit IdentityProblem(DType dtype, const std::string &variant)
      : dt(dtype) {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<double> u(-1, 1);
    auto fill = [&](std::vector<uint8_t> &buf, int64_t n) {
      buf.resize(n * dtypeSize(dt));
      for (int64_t i = 0; i < n; ++i)
        storeFromDouble(buf.data(), dt, i, u(rng));
    };
    fill(q, B * H * L * D);
    fill(k, B * HK * L * D);
    v.assign(B * HK * L * L * dtypeSize(dt), 0);
    for (int64_t bh = 0; bh < B * HK; ++bh)
      for (int64_t j = 0; j < L; ++j)
        storeFromDouble(v.data(), dt, (bh * L + j) * L + j, 1.0);
    out.assign(B * H * L * L * dtypeSize(dt), 0xff);
    lse.assign(B * H * L, NAN);
    a.q = TensorView::contiguous(q.data(), dt, {B, H, L, D});
    a.k = TensorView::contiguous(k.data(), dt, {B, HK, L, D});
    a.v = TensorView::contiguous(v.data(), dt, {B, HK, L, L});
    a.out = TensorView::contiguous(out.data(), dt, {B, H, L, L});
    a.lse = TensorView::contiguous(lse.data(), DType::F32, {B, H, L});
    a.kvLens = {48, 37};
    a.qOffsets = {0, 0};
    if (variant == "biased") {
      bias.resize(B * H * L * L);
      for (float &x : bias)
        x = float(2 * u(rng));
      a.tensors.push_back(
          {"s", TensorView::contiguous(bias.data(), DType::F32, {B, H, L, L})});
    }
    a.dropout = {0.3, 0x0123456789abcdefull, 5};
  }
  /// Every pair's mask and value against the reference: a pair the
  /// reference weighs (P > 0) is nonzero in O exactly where dropoutKeeps
  /// says; values within `tol`. Returns the number of pairs compared.
  int64_t check(const VariantInfo &info, double tol) const {
    std::vector<double> ref, refLse;
    REQUIRE(referenceAttention(info, a, ref, refLse).isOk());
    DropoutParams d;
    REQUIRE(resolveDropout(a.dropout, d).isOk());
    int64_t pairs = 0, dropped = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < a.kvLens[b]; ++j) {
            if (j > i && !a.tensors.size())
              continue; // causal: masked
            size_t at = static_cast<size_t>(((b * H + h) * L + i) * L + j);
            double got = loadAsDouble(out.data(), dt, static_cast<int64_t>(at));
            bool keep = dropoutKeeps(d, int32_t(b), int32_t(h), int32_t(i),
                                     int32_t(j));
            INFO("b " << b << " h " << h << " q " << i << " kv " << j
                      << ": got " << got << ", reference " << ref[at]);
            REQUIRE((ref[at] != 0) == keep);
            REQUIRE((got != 0) == keep);
            REQUIRE(std::fabs(got - ref[at]) <= tol * (1 + std::fabs(ref[at])));
            ++pairs;
            dropped += !keep;
          }
    // The mask drops about 30% of the pairs.
    CHECK(dropped > pairs / 5);
    CHECK(dropped < pairs * 2 / 5);
    return pairs;
  }
};

} // namespace

TEST_CASE("the CPU forward draws the reference's keep mask at every tile "
          "shape, thread count and KV split",
          "[dropout][kernel]") {
  auto s = session();
  for (const char *variant : {"causal", "biased"}) {
    VariantInfo info;
    REQUIRE(s->info(variant, info).isOk());
    for (int64_t tile : {16, 32, 64}) {
      KernelSpec spec;
      spec.headDim = IdentityProblem::D;
      spec.vHeadDim = IdentityProblem::L;
      spec.blockM = spec.blockN = tile;
      spec.dropout = true;
      std::unique_ptr<CpuKernel> k;
      Status st = s->compileCpu(variant, spec, k);
      INFO(st.toString());
      REQUIRE(st.isOk());
      for (int threads : {1, 3})
        for (int splits : {1, 3}) {
          INFO(variant << " tile " << tile << ", " << threads << " threads, "
                       << splits << " splits");
          IdentityProblem p(DType::F32, variant);
          p.a.numThreads = threads;
          p.a.numSplits = splits;
          REQUIRE(k->run(p.a).isOk());
          CHECK(p.check(info, 1e-5) > 1000);
        }
    }
  }
}

TEST_CASE("dropout needs a kernel compiled with it; at p = 0 it changes "
          "nothing",
          "[dropout][kernel]") {
  auto s = session();
  VariantInfo info;
  REQUIRE(s->info("causal", info).isOk());
  KernelSpec spec;
  spec.headDim = IdentityProblem::D;
  spec.vHeadDim = IdentityProblem::L;
  std::unique_ptr<CpuKernel> plain, drop;
  REQUIRE(s->compileCpu("causal", spec, plain).isOk());
  IdentityProblem p(DType::F32, "causal");
  Status st = plain->run(p.a);
  CHECK_THAT(st.message(),
             Catch::Contains("'dropout_p' is 0.3, but the kernel was compiled "
                             "without dropout"));
  spec.dropout = true;
  REQUIRE(s->compileCpu("causal", spec, drop).isOk());
  IdentityProblem x(DType::F32, "causal"), y(DType::F32, "causal");
  x.a.dropout.p = y.a.dropout.p = 0.0;
  REQUIRE(plain->run(x.a).isOk());
  REQUIRE(drop->run(y.a).isOk());
  CHECK(x.out == y.out); // x 1.0 is exact: bit for bit
  IdentityProblem bad(DType::F32, "causal");
  bad.a.dropout.p = 1.0;
  CHECK_THAT(drop->run(bad.a).message(),
             Catch::Contains("'dropout_p' must be in [0, 1), got 1"));
}

TEST_CASE("the emulated GPU forward draws the same keep mask: SIMT and "
          "tensor cores, with and without KV splits",
          "[dropout][kernel][gpu-emulated]") {
  auto s = session();
  std::unique_ptr<cuda::Context> ctx;
  REQUIRE(cuda::Context::open(ctx, 0, ATTNC_EMUCUDA_PATH).isOk());
  struct Case {
    DType dt;
    const char *form;
    double tol;
  };
  for (const char *variant : {"causal", "biased"})
    for (Case c : {Case{DType::F32, "simt", 1e-5},
                   Case{DType::BF16, "mma-sync", 1.6e-2},
                   Case{DType::F16, "mma-sync", 2e-3}}) {
      KernelSpec spec;
      spec.dtype = c.dt;
      spec.headDim = IdentityProblem::D;
      spec.vHeadDim = IdentityProblem::L;
      spec.blockM = 32;
      spec.blockN = 16;
      spec.form = c.form;
      spec.dropout = true;
      GpuKernelImage image;
      Status st = s->compileGpu(variant, spec, "sm_80", image);
      INFO(variant << " " << c.form << " " << dtypeName(c.dt) << ": "
                   << st.toString());
      REQUIRE(st.isOk());
      CHECK_THAT(image.kernel, Catch::Contains("_dropout_"));
      VariantInfo info;
      REQUIRE(s->info(variant, info).isOk());
      std::unique_ptr<cuda::GpuKernel> k;
      REQUIRE(cuda::GpuKernel::load(*ctx, info, image, k).isOk());
      for (int splits : {1, 3}) {
        INFO(splits << " splits");
        IdentityProblem p(c.dt, variant);
        p.a.numSplits = splits;
        st = cuda::runFromHost(*ctx, *k, p.a);
        INFO(st.toString());
        REQUIRE(st.isOk());
        CHECK(p.check(info, c.tol) > 1000);
      }
    }
}
