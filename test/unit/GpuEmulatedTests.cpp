// Compiled GPU kernels run end to end on the GPU emulator (emulator/),
// through the public API: Session::compileGpu (compiler) -> GpuKernel
// (runtime) -> runFromHost, checked against the fp64 reference. Cases the
// parity matrix does not reach: empty sequences, explicit query offsets, a
// growing KV cache, the device block-mask builder reused.
#include "attnc/Driver/Session.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include "Representative.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <functional>
#include <random>

using namespace attnc;
using namespace attnc::rt;
using namespace attnc::rt::cuda;

namespace {

const char *kSources = R"(
variant causal() { mask_mod(b, h, q, kv) = q >= kv }
variant full() {}
variant heads(slope: f32[H]) {
  score_mod(s, b, h, q, kv) = s + slope[h] * (kv - q) + 0.5 * h / H
  mask_mod(b, h, q, kv) = q >= kv || h % 2 == 1
}
variant doc(d: i32[B, KV]) {
  score_mod(s, b, h, q, kv) = s - 0.01 * abs(q - kv)
  mask_mod(b, h, q, kv) = d[b, q] == d[b, kv] && q >= kv
}
variant fn_exp(x: f32[Q]) { score_mod(s, b, h, q, kv) = exp(x[q]) }
variant fn_log(x: f32[Q]) { score_mod(s, b, h, q, kv) = log(x[q]) }
variant fn_tanh(x: f32[Q]) { score_mod(s, b, h, q, kv) = tanh(x[q]) }
variant fn_capped(x: f32[Q], cap: f32) {
  score_mod(s, b, h, q, kv) = cap * tanh(x[q] / cap)
}
variant by_distance(c: f32) { score_mod(s, b, h, q, kv) = s + c * (kv - q) }
variant by_abs_distance(c: f32) {
  score_mod(s, b, h, q, kv) = s - c * abs(q - kv)
}
variant by_offset() { score_mod(s, b, h, q, kv) = s + (q - kv) }
variant by_bucket(t: f32[256]) {
  score_mod(s, b, h, q, kv) = s + t[min(abs(kv - q), 255)]
}
variant strided(t: f32[H, 64], w: f16[B, KV], m: i64[KV], keep: bool[KV]) {
  score_mod(s, b, h, q, kv) = s + t[h, min(abs(q - kv), 63)] + w[b, kv] * (m[kv] % 3)
  mask_mod(b, h, q, kv) = keep[kv] || q == kv
}
variant buckets_causal(t: f32[H, 8]) {
  score_mod(s, b, h, q, kv) = s + t[h, min(q - kv, 7)]
  mask_mod(b, h, q, kv) = q >= kv
}
variant buckets_two_sided(t: f32[H, 16]) {
  score_mod(s, b, h, q, kv) = s + t[h, min(abs(q - kv), 15)]
}
variant buckets_coarse(t: f32[H, 8]) {
  score_mod(s, b, h, q, kv) = s + 0.5 * t[h, max(min((kv - q) / 32, 3), -4) + 4]
}
variant log_product(x: f32[Q], y: f32[KV]) {
  score_mod(s, b, h, q, kv) = s + log(x[q] * y[kv])
  mask_mod(b, h, q, kv) = q >= kv
}
variant log_quotient(x: f32[H, Q], y: f32[H, KV]) {
  score_mod(s, b, h, q, kv) = s - 0.5 * log(y[h, kv] / x[h, q])
}
variant divided(m: f32, d: f32) { score_mod(s, b, h, q, kv) = (s * m) / d }
variant capped(cap: f32) {
  score_mod(s, b, h, q, kv) = cap * tanh(s / cap)
  mask_mod(b, h, q, kv) = q >= kv
}
)";

struct Gpu {
  std::unique_ptr<cuda::Context> ctx;
  std::unique_ptr<Session> session;
  Gpu() {
    REQUIRE(cuda::Context::open(ctx, 0, ATTNC_EMUCUDA_PATH).isOk());
    std::string diags;
    REQUIRE(Session::loadSource("t.attn", kSources, diags, session).isOk());
  }
  std::unique_ptr<cuda::GpuKernel> kernel(const std::string &variant, DType dt,
                                          int64_t d = 64,
                                          const std::string &target = "sm_80",
                                          bool keyOffsets = false) {
    KernelSpec spec;
    spec.dtype = dt;
    spec.keyOffsets = keyOffsets;
    spec.headDim = spec.vHeadDim = d;
    GpuKernelImage image;
    Status s = session->compileGpu(variant, spec, target, image);
    INFO(s.toString());
    REQUIRE(s.isOk());
    VariantInfo info;
    REQUIRE(session->info(variant, info).isOk());
    std::unique_ptr<cuda::GpuKernel> k;
    s = cuda::GpuKernel::load(*ctx, info, image, k);
    INFO(s.toString());
    REQUIRE(s.isOk());
    return k;
  }
};

/// Host tensors of dtype `dt` (values in [-1, 1]) and their views.
struct HostProblem {
  DType dt;
  std::vector<uint8_t> q, k, v, out;
  std::vector<float> lse;
  AttentionArgs a;
  HostProblem(DType dtype, int64_t B, int64_t H, int64_t HK, int64_t Lq, int64_t Lk,
          int64_t D, uint64_t seed)
      : dt(dtype) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<double> u(-1, 1);
    auto fill = [&](std::vector<uint8_t> &buf, int64_t n) {
      buf.resize(n * dtypeSize(dt));
      for (int64_t i = 0; i < n; ++i)
        storeFromDouble(buf.data(), dt, i, u(rng));
    };
    fill(q, B * H * Lq * D);
    fill(k, B * HK * Lk * D);
    fill(v, B * HK * Lk * D);
    out.assign(B * H * Lq * D * dtypeSize(dt), 0xff);
    lse.assign(B * H * Lq, NAN);
    a.q = TensorView::contiguous(q.data(), dt, {B, H, Lq, D});
    a.k = TensorView::contiguous(k.data(), dt, {B, HK, Lk, D});
    a.v = TensorView::contiguous(v.data(), dt, {B, HK, Lk, D});
    a.out = TensorView::contiguous(out.data(), dt, {B, H, Lq, D});
    a.lse = TensorView::contiguous(lse.data(), DType::F32, {B, H, Lq});
  }
  /// max |out - reference|; LSE must match too (and be -inf for rows with
  /// no key).
  double maxError(const VariantInfo &info) const {
    std::vector<double> ref, refLse;
    REQUIRE(referenceAttention(info, a, ref, refLse).isOk());
    double m = 0;
    const TensorView &o = a.out;
    for (int64_t b = 0; b < o.shape[0]; ++b)
      for (int64_t h = 0; h < o.shape[1]; ++h)
        for (int64_t i = 0; i < o.shape[2]; ++i) {
          int64_t row = (b * o.shape[1] + h) * o.shape[2] + i;
          if (std::isinf(refLse[row]))
            CHECK(lse[row] == refLse[row]);
          else
            CHECK(std::fabs(lse[row] - refLse[row]) < 2e-3);
          for (int64_t d = 0; d < o.shape[3]; ++d) {
            double got = loadAsDouble(o.data, o.dtype, o.offsetOf({b, h, i, d}));
            m = std::max(m, std::fabs(got - ref[row * o.shape[3] + d]));
            if (std::isnan(got))
              return INFINITY;
          }
        }
    return m;
  }
};

/// A kernel form a case runs, and its output's tolerance.
struct EmulatedForm {
  const char *target;
  DType dt;
  int64_t d;
  double tol;
};

} // namespace

TEST_CASE("emulated GPU: empty sequences and explicit query offsets",
          "[gpu-emulated]") {
  Gpu g;
  for (DType dt : {DType::F32, DType::F16}) {
    auto k = g.kernel("causal", dt);
    HostProblem p(dt, 3, 4, 2, 7, 50, 64, 1);
    p.a.kvLens = {50, 9, 0};   // the last sequence is empty
    p.a.qOffsets = {10, 2, 0}; // queries in the middle of the first
    REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
    CHECK(p.maxError(k->variant()) < (dt == DType::F32 ? 1e-5 : 2e-3));
    // No keys: output 0 and LSE -inf, never NaN.
    for (int64_t i = 2 * 4 * 7 * 64; i < 3 * 4 * 7 * 64; ++i)
      REQUIRE(loadAsDouble(p.out.data(), dt, i) == 0.0);
    for (int64_t r = 2 * 4 * 7; r < 3 * 4 * 7; ++r)
      REQUIRE(p.lse[r] == -INFINITY);
  }
}

TEST_CASE("emulated GPU: probabilities by one FMA where the row maxima are "
          "small, by the exact difference where they are not",
          "[gpu-emulated]") {
  // The tensor-core forms take exp2(s c - m c) when every row of the warp
  // has |m c| < 2^10, else exp2((s - m) c): c is scale log2 e with no
  // score_mod (m a maximum of products), log2 e after one (m of modified
  // scores; capped's cap of 2000 leaves them near s scale). A scale of 200
  // puts head 0's rows with a maximum above 3.55 past it (those warps take
  // the exact form); head 1's Q, scaled down 20 times, keeps its warps on
  // the FMA. Both must match the reference.
  Gpu g;
  for (const char *variant : {"causal", "capped"})
    for (const char *target : {"sm_80", "sm_90a"})
      for (DType dt : {DType::F16, DType::BF16}) {
        INFO(variant << " " << target << " " << dtypeName(dt));
        auto k = g.kernel(variant, dt, 64, target);
        HostProblem p(dt, 1, 2, 2, 100, 100, 64, 11);
        for (int64_t i = 100 * 64; i < 2 * 100 * 64; ++i)
          storeFromDouble(p.q.data(), dt, i,
                          loadAsDouble(p.q.data(), dt, i) / 20.0);
        p.a.scale = 200.0;
        if (std::string(variant) == "capped")
          p.a.scalars.emplace_back("cap", 2000.0);
        REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
        std::vector<double> ref, refLse;
        REQUIRE(referenceAttention(k->variant(), p.a, ref, refLse).isOk());
        double err = 0, lseErr = 0, bigRows = 0;
        for (int64_t row = 0; row < 2 * 100; ++row) {
          // LSE <= m + ln 100: above 3.55 * 200 + 4.7, m log2 e > 2^10.
          bigRows += row < 100 && refLse[row] > 3.55 * 200 + 4.7;
          // capped's tanh is the tensor-core kernels' absolute-accuracy
          // form: its score is within ~3e-7 cap (~2e-4 here, a relative
          // 2e-4 in P: under f16's rounding of it).
          lseErr = std::max(
              lseErr, (std::fabs(p.lse[row] - refLse[row]) -
                       (std::string(variant) == "capped" ? 3e-7 * 2000 : 0)) /
                          std::max(1.0, std::fabs(refLse[row])));
          for (int64_t d = 0; d < 64; ++d)
            err = std::max(err, std::fabs(loadAsDouble(p.out.data(), dt, row * 64 + d) -
                                          ref[row * 64 + d]));
        }
        CHECK(bigRows > 10); // the exact form is taken
        CHECK(err < (dt == DType::F16 ? 2e-3 : 1.6e-2));
        CHECK(lseErr < 1e-5);
      }
}

TEST_CASE("emulated GPU: the running maximum moves only by more than 2^8, "
          "and the accumulator is rescaled wherever a row of the warp moved it",
          "[gpu-emulated]") {
  // Scores that rise along the keys: key j's elements are a_j / D with
  // a_j growing by `step` per 64 keys plus noise, Q's +8 in even rows and
  // -8 in odd ones, the scale 1 / 8, so row i's score at key j is a_j or
  // -a_j (plus Q's noise for rows past 32). A step of 3 (4.3 in exponent
  // units) keeps an even row's reference for a tile and moves it at the
  // next; a step of 12 moves it at every tile; odd rows (falling scores)
  // never move theirs after the first tile, so every warp has rows that
  // moved beside rows that did not. The output leans on each row's largest
  // scores: an accumulator left unscaled where its row's maximum moved (by
  // 2^8 or more) is far off the fp64 reference. sm_80: mma.sync; sm_90a:
  // wgmma; f32: the SIMT form, whose factor of 1 multiplies.
  Gpu g;
  const int64_t D = 64, Lq = 64, Lk = 700;
  for (double step : {3.0, 12.0, -2.0})
    for (auto [target, dt] :
         {std::pair{"sm_80", DType::BF16}, std::pair{"sm_90a", DType::F16},
          std::pair{"sm_90a", DType::BF16}, std::pair{"sm_80", DType::F32}}) {
      INFO("step " << step << " " << target << " " << dtypeName(dt));
      auto k = g.kernel("full", dt, D, target);
      HostProblem p(dt, 1, 2, 2, Lq, Lk, D, 17);
      std::mt19937_64 rng(3);
      std::uniform_real_distribution<double> noise(-1, 1);
      for (int64_t h = 0; h < 2; ++h) {
        for (int64_t j = 0; j < Lk; ++j) {
          double a = step * double(j / 64) + noise(rng);
          for (int64_t d = 0; d < D; ++d)
            storeFromDouble(p.k.data(), dt, (h * Lk + j) * D + d,
                            a / double(D));
        }
        for (int64_t i = 0; i < Lq; ++i)
          for (int64_t d = 0; d < D; ++d)
            storeFromDouble(p.q.data(), dt, (h * Lq + i) * D + d,
                            (i % 2 ? -8.0 : 8.0) +
                                (i >= 32 ? 0.5 * noise(rng) : 0.0));
      }
      p.a.scale = 1.0 / 8.0;
      REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
      // (an output's ulp: bf16 2^-8, f16 2^-11 near 1; measured 1e-3, 1e-4
      // and 1e-6, and 2e-2 to 0.5 with either mutation of the skip)
      CHECK(p.maxError(k->variant()) < (dt == DType::F32   ? 2e-5
                                        : dt == DType::F16 ? 5e-4
                                                           : 4e-3));
    }
}

TEST_CASE("emulated GPU: the tensor-core forward divides O by its ones "
          "column's sums, with or without the LSE, whose sums stay f32's",
          "[gpu-emulated]") {
  // O's sums are P [V | 1]'s extra column (the rounded P that weights O);
  // the LSE's are f32 adds of the unrounded P, taken only where the call
  // writes an LSE. A call without it must write the same O, bit for bit,
  // and that O must match the fp64 reference; with it, the LSE stays
  // within f32's error even where one probability dominates its row (a
  // scale of 2.5; from the column's sums it was 2.3e-3 off, bf16's 2^-9).
  // Keys rise by 12 per 64 (FlashAttention's rescale at every tile: the
  // column is rescaled with O) in half the heads.
  Gpu g;
  const int64_t Lq = 150, Lk = 300;
  std::vector<float> slope = {0.5f, -0.25f, 0.125f, 1.0f};
  test::MatrixSample sample(3);
  for (const char *variant : {"causal", "heads", "capped"})
    for (const char *target : {"sm_80", "sm_90a"})
      for (DType dt : {DType::F16, DType::BF16})
        for (int64_t D : {64, 128}) {
          if (!sample.keep())
            continue;
          INFO(variant << " " << target << " " << dtypeName(dt) << " D=" << D);
          auto k = g.kernel(variant, dt, D, target);
          HostProblem p(dt, 1, 4, 2, Lq, Lk, D, 23);
          for (int64_t j = 0; j < Lk; ++j)
            for (int64_t d = 0; d < D; ++d) {
              int64_t at = j * D + d; // KV head 0
              storeFromDouble(p.k.data(), dt, at,
                              loadAsDouble(p.k.data(), dt, at) * 0.25 +
                                  12.0 * double(j / 64) / double(D));
            }
          p.a.scale = 2.5;
          if (std::string(variant) == "heads")
            p.a.tensors = {{"slope", TensorView::contiguous(slope.data(),
                                                            DType::F32, {4})}};
          if (std::string(variant) == "capped")
            p.a.scalars = {{"cap", 30.0}};
          REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
          std::vector<double> ref, refLse;
          REQUIRE(referenceAttention(k->variant(), p.a, ref, refLse).isOk());
          double lseErr = 0;
          for (size_t r = 0; r < refLse.size(); ++r)
            lseErr = std::max(lseErr, std::fabs(p.lse[r] - refLse[r]) /
                                          std::max(1.0, std::fabs(refLse[r])));
          // (capped: its tanh's absolute error, ~3e-7 cap)
          CHECK(lseErr < (std::string(variant) == "capped" ? 2e-5 : 2e-6));
          std::vector<uint8_t> withLse = p.out;
          p.out.assign(p.out.size(), 0xff);
          p.a.lse = {};
          REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
          CHECK(p.out == withLse);
          double err = 0;
          for (size_t i = 0; i < ref.size(); ++i)
            err = std::max(
                err,
                std::fabs(loadAsDouble(p.out.data(), dt, int64_t(i)) - ref[i]));
          CHECK(err < (dt == DType::F16 ? 2e-3 : 1.6e-2));
        }
}

TEST_CASE("emulated GPU: softcap's one exponent factor, clamped where "
          "the cap is too small for it, keeps zero scores finite",
          "[gpu-emulated]") {
  // The tensor-core kernels take tanh(score / cap)'s exponent as S F, F =
  // scale s k 2 log2 e once (SpecialFunctions.cpp, combinedFactor). With
  // cap 1e-40 (a subnormal) F overflows f32: it is clamped to the largest
  // float, so that a zero score (Q's zero rows) stays 0, not 0 x inf =
  // NaN; every score is then within |cap| of the reference's. A cap of
  // -7 checks the sign. A cap of 3e38 is past what the absolute-accuracy
  // tanh resolves (its score is within ~3e-7 cap: here every score
  // rounds to 0), but it must stay finite: c - 2c r overflowed -2c, every
  // score -inf and the LSE infinite, before c + c (-2 r).
  Gpu g;
  for (double cap : {1e-40, -7.0, 3e38})
    for (const char *target : {"sm_80", "sm_90a"}) {
      INFO(target << " cap " << cap);
      auto k = g.kernel("capped", DType::BF16, 64, target);
      HostProblem p(DType::BF16, 1, 2, 2, 70, 70, 64, 31);
      for (int64_t i = 0; i < 64 * 10; ++i) // rows 0..9 of head 0: zero
        storeFromDouble(p.q.data(), DType::BF16, i, 0.0);
      p.a.scalars = {{"cap", cap}};
      REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
      if (cap < 1e30) {
        CHECK(p.maxError(k->variant()) < 1.6e-2);
        continue;
      }
      bool finite = true;
      for (float l : p.lse)
        finite &= std::isfinite(l);
      for (int64_t i = 0; i < 2 * 70 * 64; ++i)
        finite &= std::isfinite(loadAsDouble(p.out.data(), DType::BF16, i));
      CHECK(finite);
    }
}

TEST_CASE("emulated GPU: division by a divisor fixed for the loop, at the "
          "ends of the float range",
          "[gpu-emulated]") {
  // d is the same for every score: its scale and reciprocal are computed
  // once (1/4 above 2^126, 2^24 below 2^-126), each division is (x s) k.
  // m / d = 1/2 in each case, so the scores are s / 2 whatever the scale.
  Gpu g;
  for (auto [m, d] : {std::pair{1.0, 2.0}, std::pair{1e38, 2e38},
                      std::pair{1e-39, 2e-39}, std::pair{-3e-39, -6e-39}})
    for (DType dt : {DType::F32, DType::BF16}) {
      INFO("m " << m << " d " << d << " " << dtypeName(dt));
      auto k = g.kernel("divided", dt, 64);
      HostProblem p(dt, 1, 2, 2, 70, 90, 64, 5);
      p.a.scalars = {{"m", m}, {"d", d}};
      REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
      // Denormal m and d: s m keeps ~20 bits, a relative 1e-6 in a score.
      CHECK(p.maxError(k->variant()) < (dt == DType::F32 ? 2e-5 : 1.6e-2));
    }
}

TEST_CASE("emulated GPU: the device block mask, built and reused",
          "[gpu-emulated]") {
  Gpu g;
  auto k = g.kernel("doc", DType::BF16, 128);
  HostProblem p(DType::BF16, 2, 4, 4, 100, 100, 128, 2);
  std::vector<int32_t> doc(2 * 100);
  for (int i = 0; i < 200; ++i)
    doc[i] = (i % 100) / 30; // 4 documents per sequence
  p.a.tensors = {{"d", TensorView::contiguous(doc.data(), DType::I32, {2, 100})}};
  REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
  CHECK(p.maxError(k->variant()) < 1.6e-2);
  // The block mask built once (on the device, from device copies of the
  // inputs: buildBlockMask takes device views) and passed in gives the
  // same result.
  cuda::DeviceMirror mirror;
  REQUIRE(cuda::DeviceMirror::create(*g.ctx, p.a, mirror).isOk());
  BlockMask bm;
  REQUIRE(k->buildBlockMask(mirror.args(), bm).isOk());
  CHECK(bm.numQTiles == 2); // block_m 64 (the configuration table's)
  std::vector<uint8_t> first = p.out;
  p.a.blockMask = &bm;
  std::fill(p.out.begin(), p.out.end(), 0xff);
  REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
  CHECK(p.out == first);
}

TEST_CASE("emulated GPU: a data mask's long runs of empty tiles are searched "
          "32 tiles at a time",
          "[gpu-emulated]") {
  // The last 20 queries of 4500 keys, in a document that starts at key
  // 4400: every tile before it is empty (34 at the 128-key tiles of both
  // forms: the next tile alone, then two rounds of the warp's search), the
  // search after the last visited tile finds none; in sequence 1 the
  // queries' documents start at keys 4380 and 4490 (a run that ends inside
  // a round of 32).
  Gpu g;
  for (const char *target : {"sm_80", "sm_90a"})
    for (DType dt : {DType::F16, DType::BF16}) {
      INFO(target << " " << dtypeName(dt));
      auto k = g.kernel("doc", dt, 64, target);
      HostProblem p(dt, 2, 2, 2, 20, 4500, 64, 5);
      std::vector<int32_t> doc(2 * 4500);
      for (int i = 0; i < 4500; ++i) {
        doc[i] = i < 4400 ? 0 : 1;
        doc[4500 + i] = i < 1000 ? 0 : i < 4380 ? 2 : i < 4490 ? 1 : 3;
      }
      p.a.tensors = {{"d", TensorView::contiguous(doc.data(), DType::I32,
                                                  {2, 4500})}};
      REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
      CHECK(p.maxError(k->variant()) < 1.6e-2);
    }
}

TEST_CASE("emulated GPU: decode over a growing KV cache", "[gpu-emulated]") {
  Gpu g;
  auto k = g.kernel("causal", DType::F16);
  const int64_t B = 2, HQ = 6, HK = 2, D = 64, CAP = 96;
  KVCache cache;
  REQUIRE(KVCache::create(DType::F16, B, HK, CAP, D, D, cache).isOk());
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-1, 1);
  auto tokens = [&](int64_t T) {
    std::vector<uint8_t> buf(HK * T * D * 2);
    for (int64_t i = 0; i < HK * T * D; ++i)
      storeFromDouble(buf.data(), DType::F16, i, u(rng));
    return buf;
  };
  for (int64_t b = 0; b < B; ++b) {
    int64_t T = b == 0 ? 40 : 70;
    auto nk = tokens(T), nv = tokens(T);
    REQUIRE(cache.append(b, TensorView::contiguous(nk.data(), DType::F16, {HK, T, D}),
                         TensorView::contiguous(nv.data(), DType::F16, {HK, T, D}))
                .isOk());
  }
  for (int step = 0; step < 3; ++step) {
    for (int64_t b = 0; b < B; ++b) {
      auto nk = tokens(1), nv = tokens(1);
      REQUIRE(cache.append(b, TensorView::contiguous(nk.data(), DType::F16, {HK, 1, D}),
                           TensorView::contiguous(nv.data(), DType::F16, {HK, 1, D}))
                  .isOk());
    }
    HostProblem p(DType::F16, B, HQ, HK, 1, CAP, D, 100 + step);
    p.a.k = cache.keys();
    p.a.v = cache.values();
    p.a.kvLens = cache.lengths();
    REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
    CHECK(p.maxError(k->variant()) < 2e-3);
  }
}

TEST_CASE("emulated GPU: back-to-back launches of different shapes on a "
          "non-blocking stream", "[gpu-emulated]") {
  Gpu g;
  auto k = g.kernel("causal", DType::F16);
  const DriverApi &api = g.ctx->driver().api();
  CUstream stream = nullptr;
  REQUIRE(api.cuStreamCreate(&stream, 1 /* CU_STREAM_NON_BLOCKING */) == 0);
  HostProblem a(DType::F16, 2, 4, 2, 70, 70, 64, 11), b(DType::F16, 1, 8, 8, 1, 200, 64, 12);
  cuda::DeviceMirror da, db;
  REQUIRE(cuda::DeviceMirror::create(*g.ctx, a.a, da).isOk());
  REQUIRE(cuda::DeviceMirror::create(*g.ctx, b.a, db).isOk());
  // Nothing waits between the two: each launch must keep its own
  // parameters however long it stays queued.
  REQUIRE(k->run(da.args(), stream).isOk());
  REQUIRE(k->run(db.args(), stream).isOk());
  REQUIRE(api.cuStreamSynchronize(stream) == 0);
  REQUIRE(da.downloadOutputs(a.a).isOk());
  REQUIRE(db.downloadOutputs(b.a).isOk());
  CHECK(a.maxError(k->variant()) < 2e-3);
  CHECK(b.maxError(k->variant()) < 2e-3);
  REQUIRE(api.cuStreamDestroy(stream) == 0);
}

TEST_CASE("emulated GPU: exp, log and tanh through ex2, lg2 and rcp stay "
          "within a few ulp of libm", "[gpu-emulated]") {
  // One key per row, so each row's LSE is its score: f(x[q]). The emulator
  // executes ex2/lg2/rcp.approx correctly rounded, so this measures the
  // lowering's own error (SpecialFunctions.cpp; the hardware adds ~2 ulp).
  Gpu g;
  auto ulps = [](double got, double want) {
    return std::fabs(got - want) /
           std::ldexp(1.0, std::ilogb(std::max(std::fabs(want), 1e-38)) - 23);
  };
  struct Case {
    const char *variant;
    double (*f)(double);
    std::vector<float> xs;
    double maxUlp; // relative, in ulp of the result
    double maxAbs; // or absolute (log near 1)
  };
  std::vector<Case> cases = {
      {"fn_exp", [](double x) { return std::exp(x); }, {}, 4, 0},
      {"fn_log", [](double x) { return std::log(x); }, {}, 4, 2.5e-7},
      {"fn_tanh", [](double x) { return std::tanh(x); }, {}, 4, 0}};
  for (int i = 0; i < 2000; ++i) {
    double t = i / 1999.0;
    cases[0].xs.push_back(float(-87 + 175 * t));       // exp: [-87, 88]
    cases[1].xs.push_back(float(std::exp(-60 + 120 * t))); // log: e^-60..e^60
    cases[1].xs.push_back(float(0.9 + 0.2 * t));       // and near 1
    cases[2].xs.push_back(float(-6 + 12 * t));          // tanh: both branches
    cases[2].xs.push_back(float(0.5 + 0.1 * t));        // around the switch
    cases[2].xs.push_back(float(1e-6 + 0.01 * t));      // small arguments
  }
  for (const Case &c : cases) {
    INFO(c.variant);
    auto k = g.kernel(c.variant, DType::F32, 64);
    std::vector<float> xs = c.xs;
    const int64_t n = int64_t(xs.size());
    HostProblem p(DType::F32, 1, 1, 1, n, 1, 64, 3);
    p.a.tensors = {{"x", TensorView::contiguous(xs.data(), DType::F32, {n})}};
    p.a.qOffsets = {0};
    Status run = cuda::runFromHost(*g.ctx, *k, p.a);
    INFO(run.toString());
    REQUIRE(run.isOk());
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      double want = c.f(double(xs[i]));
      double err = ulps(p.lse[i], want);
      if (c.maxAbs > 0 && std::fabs(p.lse[i] - want) <= c.maxAbs)
        err = 0;
      INFO("x = " << xs[i] << " got " << p.lse[i] << " want " << want);
      CHECK(err <= c.maxUlp);
      worst = std::max(worst, err);
    }
    UNSCOPED_INFO(c.variant << ": worst " << worst << " ulp over " << n
                            << " arguments");
  }
  // Where the results are inf, 0 or NaN.
  auto k = g.kernel("fn_exp", DType::F32, 64);
  std::vector<float> xs = {200.f, -200.f, INFINITY, NAN, 88.f, -103.f};
  HostProblem p(DType::F32, 1, 1, 1, int64_t(xs.size()), 1, 64, 3);
  p.a.tensors = {{"x", TensorView::contiguous(xs.data(), DType::F32,
                                              {int64_t(xs.size())})}};
  p.a.qOffsets = {0};
  REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
  // e^200 and e^inf are +inf, a score that makes its row NaN (as the
  // reference's softmax does); e^-200 is 0; e^NaN is NaN.
  CHECK(std::isnan(p.lse[0]));
  CHECK(p.lse[1] == 0.0f);
  CHECK(std::isnan(p.lse[2]));
  CHECK(std::isnan(p.lse[3]));
  CHECK(p.lse[4] == Approx(std::exp(88.0)).epsilon(1e-6));
  CHECK(p.lse[5] == Approx(std::exp(-103.0)).margin(1e-45));
}

TEST_CASE("emulated GPU: the tensor-core kernels' tanh, exp and division by "
          "a loop-invariant divisor are within ~3e-7 absolute",
          "[gpu-emulated]") {
  // The tensor-core kernels round P to 16 bits, so score_mod's tanh, exp
  // and x / cap take the shorter absolute-accuracy forms (fastmath afn,
  // SpecialFunctions.cpp): tanh = 1 - 2 / (2^(2x log2 e) + 1) (with softcap's
  // cap in its last FMA), exp = 2^(x log2 e), x / cap = x (1/cap). One key
  // per row, so each row's LSE is its score; the emulator's ex2 and rcp are
  // correctly rounded (the hardware adds ~2 ulp: ~2.4e-7 at 1). The error
  // bounds are the forms' own: a sign or scale lost, a polynomial term
  // dropped or the wrong log2 e would each miss them by orders.
  Gpu g;
  std::vector<float> xs;
  for (int i = 0; i < 3000; ++i) {
    double t = i / 2999.0;
    xs.push_back(float(-9 + 18 * t)); // tanh saturates to +-1 past ~9
    xs.push_back(float(-1e-3 + 2e-3 * t));
  }
  xs.insert(xs.end(), {0.0f, -0.0f, 40.0f, -40.0f, 1e30f, -1e30f});
  struct Case {
    const char *variant;
    double cap; // fn_capped's; 0: the variant has none
    double (*f)(double x, double cap);
    double maxAbs; // per unit of max(1, |cap|)
  };
  const Case cases[] = {
      {"fn_tanh", 0, [](double x, double) { return std::tanh(x); }, 3e-7},
      {"fn_capped", 30, [](double x, double c) { return c * std::tanh(x / c); },
       3e-7},
      {"fn_capped", -5, [](double x, double c) { return c * std::tanh(x / c); },
       3e-7}};
  for (const char *target : {"sm_80", "sm_90a"})
    for (const Case &c : cases) {
      INFO(target << " " << c.variant << " cap " << c.cap);
      auto k = g.kernel(c.variant, DType::BF16, 64, target);
      const int64_t n = int64_t(xs.size());
      HostProblem p(DType::BF16, 1, 1, 1, n, 1, 64, 3);
      p.a.tensors = {{"x", TensorView::contiguous(xs.data(), DType::F32, {n})}};
      if (c.cap != 0)
        p.a.scalars = {{"cap", c.cap}};
      p.a.qOffsets = {0};
      REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
      double worst = 0;
      for (int64_t i = 0; i < n; ++i) {
        double want = c.f(double(xs[i]), c.cap);
        double err =
            std::fabs(p.lse[i] - want) / std::max(1.0, std::fabs(c.cap));
        INFO("x = " << xs[i] << " got " << p.lse[i] << " want " << want);
        CHECK(err <= c.maxAbs);
        worst = std::max(worst, err);
      }
      UNSCOPED_INFO(target << " " << c.variant << ": worst " << worst);
    }
  // exp: relative, within the product's rounding (|x| log2 e 2^-24 ln 2)
  // and ex2's: 40 ulp at x = 80 where the f32 kernels' form keeps 4.
  auto k = g.kernel("fn_exp", DType::F16, 64, "sm_80");
  std::vector<float> es;
  for (int i = 0; i < 2000; ++i)
    es.push_back(float(-87 + 175 * (i / 1999.0)));
  const int64_t n = int64_t(es.size());
  HostProblem p(DType::F16, 1, 1, 1, n, 1, 64, 3);
  p.a.tensors = {{"x", TensorView::contiguous(es.data(), DType::F32, {n})}};
  p.a.qOffsets = {0};
  REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
  for (int64_t i = 0; i < n; ++i) {
    double want = std::exp(double(es[i]));
    INFO("x = " << es[i] << " got " << p.lse[i] << " want " << want);
    CHECK(std::fabs(p.lse[i] - want) / want <=
          std::ldexp(1.0, -23) * (1 + std::fabs(es[i]) * 1.4427 * 0.6932));
  }
}

TEST_CASE("emulated GPU: the tensor-core kernels' f32(kv - q) per diagonal "
          "is exact below 2^24 and within an ulp past it",
          "[gpu-emulated]") {
  // The f16/bf16 kernels form a diagonal's f32(kv - q) as f32(base) + at
  // (base: the thread's first element's kv - q in the tile), abs of it as
  // |f32(base) + at| and c f32(kv - q) as fma(c, at, c f32(base))
  // (ProgramBuilder::diagonalAt): exact conversions while |kv - q| < 2^24,
  // then within an ulp of f32's own rounding. Q is zero, so each row's LSE
  // is the logsumexp of its keys' biases alone; query and key offsets put
  // the differences near 0, around 2^24 and past 2^29, both signs. The f32
  // kernels keep one conversion per diagonal (half an ulp). A lost `at`,
  // sign or abs would miss the bound by the tile's extent. by_bucket
  // gathers by min(abs(kv - q), 255), its abs the diagonal's non-negative
  // one (llvm.abs, INT32_MIN poison: no difference of positions is).
  Gpu g;
  const int64_t B = 5, Lq = 130, Lk = 20;
  const int32_t qOff[B] = {0, (1 << 24) - 70, (1 << 25) + 3, (1 << 29) + 11, 0};
  const int32_t kvOff[B] = {0, 0, 0, 0, (1 << 26) + 5};
  struct Case {
    const char *variant;
    double c;                           // the scalar; 0: none
    double (*bias)(double c, double v); // of v = kv - q
  };
  const Case cases[] = {
      {"by_distance", 0.75, [](double c, double v) { return c * v; }},
      {"by_abs_distance", 0.375,
       [](double c, double v) { return -c * std::fabs(v); }},
      {"by_offset", 0, [](double, double v) { return -v; }},
      // A table by |kv - q| (relative_bias's buckets; the diagonal's abs
      // is known non-negative, so the gather clamps at 255 only).
      {"by_bucket", 0, [](double, double v) {
         return 0.01 * std::min(std::fabs(v), 255.0) - 1;
       }}};
  std::vector<float> table(256);
  for (int i = 0; i < 256; ++i)
    table[i] = float(0.01 * i - 1);
  struct Form {
    const char *target;
    DType dt;
    double ulps;
  };
  test::MatrixSample sample(3);
  for (Form f : {Form{"sm_80", DType::BF16, 2}, Form{"sm_90a", DType::BF16, 2},
                 Form{"sm_80", DType::F32, 0.5}})
    for (const Case &c : cases) {
      if (!sample.keep())
        continue;
      INFO(f.target << " " << dtypeName(f.dt) << " " << c.variant);
      auto k = g.kernel(c.variant, f.dt, 64, f.target, /*keyOffsets=*/true);
      HostProblem p(f.dt, B, 1, 1, Lq, Lk, 64, 9);
      for (size_t i = 0; i < p.q.size() / dtypeSize(f.dt); ++i)
        storeFromDouble(p.q.data(), f.dt, int64_t(i), 0.0);
      p.a.qOffsets.assign(qOff, qOff + B);
      p.a.kvOffsets.assign(kvOff, kvOff + B);
      if (c.c != 0)
        p.a.scalars = {{"c", c.c}};
      if (std::string(c.variant) == "by_bucket")
        p.a.tensors = {
            {"t", TensorView::contiguous(table.data(), DType::F32, {256})}};
      Status st = cuda::runFromHost(*g.ctx, *k, p.a);
      INFO(st.toString());
      REQUIRE(st.isOk());
      double worst = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < Lq; ++i) {
          double m = -INFINITY, sum = 0, bound = 0;
          std::vector<double> x(Lk);
          for (int64_t j = 0; j < Lk; ++j) {
            double v = double(kvOff[b] + j) - double(qOff[b] + i);
            x[j] = c.bias(c.c == 0 ? 1 : c.c, v);
            m = std::max(m, x[j]);
            // f32's ulp at |v|, the bias's products' and the LSE's own
            // roundings (relative), the sum's (absolute).
            int e;
            std::frexp(std::fabs(v), &e);
            double ulp = std::fabs(v) < 1 ? 0 : std::ldexp(1.0, e - 24);
            double cc = c.c == 0 ? 1 : c.c;
            bound =
                std::max(bound, f.ulps * cc * ulp + std::fabs(x[j]) * 0x1p-23);
          }
          for (double xj : x)
            sum += std::exp(xj - m);
          double want = m + std::log(sum), got = p.lse[b * Lq + i];
          INFO("sequence " << b << " row " << i << " got " << got << " want "
                           << want);
          CHECK(std::fabs(got - want) <= bound + 4e-6);
          worst = std::max(worst, std::fabs(got - want) / (bound + 4e-6));
        }
      UNSCOPED_INFO(f.target << " " << c.variant << ": worst / bound "
                             << worst);
    }
}

TEST_CASE("emulated GPU: a bucketed modifier's diagonal values, once per "
          "tile where its bucket is constant",
          "[gpu-emulated]") {
  // Where score_mod's diagonal values depend on kv - q through one
  // saturating monotone i32 value (the bucket: a clamp, a division), a
  // tile whose warp sees one bucket on all its diagonals computes them
  // once (ProgramBuilder::bucketConstant). 300 tokens and buckets of a few
  // diagonals: most tiles are past the last bucket (or before the first),
  // the diagonal's straddle it, and a two-sided abs's tiles across kv = q
  // have the same bucket at both ends but not between (its sign check).
  // Large table values, so that a wrong bucket moves P by far more than
  // the tolerance.
  Gpu g;
  const int64_t H = 2, L = 300;
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-3, 3);
  std::vector<float> t(H * 16);
  for (float &x : t)
    x = float(u(rng));
  test::MatrixSample sample(2);
  for (EmulatedForm f : {EmulatedForm{"sm_80", DType::BF16, 64, 1.6e-2},
                         EmulatedForm{"sm_80", DType::F16, 128, 2e-3},
                         EmulatedForm{"sm_90a", DType::BF16, 64, 1.6e-2}})
    for (auto [variant, n] :
         {std::pair{"buckets_causal", 8}, std::pair{"buckets_two_sided", 16},
          std::pair{"buckets_coarse", 8}}) {
      if (!sample.keep())
        continue;
      INFO(f.target << " " << dtypeName(f.dt) << " D=" << f.d << " "
                    << variant);
      auto k = g.kernel(variant, f.dt, f.d, f.target);
      // Each is s + g: with a positive scale a bucket's tile keeps S and
      // its scores are scale S + g per row (AffineScores); a negative one
      // takes the per-diagonal values.
      for (double scale : {0.0 /* 1 / sqrt(D) */, -0.6}) {
        INFO("scale " << scale);
        HostProblem p(f.dt, 1, H, H, L, L, f.d, 7);
        p.a.scale = scale;
        p.a.tensors = {{"t", TensorView::contiguous(t.data(), DType::F32,
                                                    {H, int64_t(n)})}};
        Status st = cuda::runFromHost(*g.ctx, *k, p.a);
        INFO(st.toString());
        REQUIRE(st.isOk());
        CHECK(p.maxError(k->variant()) < f.tol);
      }
    }
}

TEST_CASE("emulated GPU: a log of a row value times or over a column value "
          "as ln x per row plus lg2 y per column",
          "[gpu-emulated]") {
  // log(x[q] * y[kv]) and log(y / x) where every x of the warp's rows and
  // y of its key columns is in [2^-62, 2^62]: ln x + ln y, a lg2 per row
  // and per key column (TensorCoreKernel::separableLogs; the mma.sync form
  // at block_n 64 and the wgmma form); elsewhere per score with f32's
  // product, as the language has it. Three kinds of data:
  // - factors in range, and two zeros of y in the last key tile
  //   (infinities for the quotient): -inf scores, masked keys, in the
  //   per-score version of that tile;
  // - negative x and y, their products positive: per score (the separated
  //   version would give NaN);
  // - factors out of range: x 2^-80 on even rows and y 2^-80 on every
  //   third key, whose f32 product is 0 (a -inf score: row 0 has no other
  //   key), where ln x + ln y is finite.
  Gpu g;
  const int64_t H = 2, L = 200;
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  test::MatrixSample sample(2);
  for (EmulatedForm f : {EmulatedForm{"sm_80", DType::BF16, 128, 1.6e-2},
                         EmulatedForm{"sm_80", DType::F16, 64, 2e-3},
                         EmulatedForm{"sm_90a", DType::BF16, 64, 1.6e-2},
                         EmulatedForm{"sm_90a", DType::F16, 128, 2e-3}})
    for (const char *variant : {"log_product", "log_quotient"}) {
      if (!sample.keep())
        continue;
      auto k = g.kernel(variant, f.dt, f.d, f.target);
      const bool quotient = std::string(variant) == "log_quotient";
      const int64_t rows = quotient ? H * L : L;
      for (int data = 0; data < 3; ++data) {
        INFO(f.target << " " << dtypeName(f.dt) << " D=" << f.d << " "
                      << variant << " data " << data);
        std::vector<float> x(rows), y(rows);
        for (int64_t i = 0; i < rows; ++i) {
          x[i] = float(u(rng));
          y[i] = float(u(rng));
          if (data == 0 && (i % L == 190 || i % L == 195))
            y[i] = quotient ? INFINITY : 0.0f;
          if (data == 1) {
            x[i] = -x[i];
            y[i] = -y[i];
          }
          if (data == 2) {
            x[i] *= i % 2 ? 1.0f : 0x1p-80f;
            y[i] *= i % 3 ? 1.0f : 0x1p-80f;
          }
        }
        HostProblem p(f.dt, 1, H, H, L, L, f.d, 3);
        std::vector<int64_t> shape =
            quotient ? std::vector<int64_t>{H, L} : std::vector<int64_t>{L};
        p.a.tensors = {
            {"x", TensorView::contiguous(x.data(), DType::F32, shape)},
            {"y", TensorView::contiguous(y.data(), DType::F32, shape)}};
        Status st = cuda::runFromHost(*g.ctx, *k, p.a);
        INFO(st.toString());
        REQUIRE(st.isOk());
        CHECK(p.maxError(k->variant()) < f.tol);
      }
    }
}

TEST_CASE("emulated GPU: gathers step by each capture's own strides, of "
          "every element size",
          "[gpu-emulated]") {
  // The GPU kernels form a gather's address in bytes, its last dimension
  // by a 32-bit byte stride (ProgramBuilder::gather). Every capture here is
  // a view that is not contiguous: t transposed (its last stride H floats),
  // w transposed (f16, B halves), m every other i64, keep every third
  // bool. Taking an element stride for a byte one, or a contiguous layout,
  // reads other elements (and misses the fp64 reference, which reads the
  // same views).
  Gpu g;
  const int64_t B = 2, H = 4, L = 150;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<float> t(64 * H);
  for (float &x : t)
    x = float(u(rng));
  std::vector<uint8_t> w(L * B * 2);
  for (int64_t i = 0; i < L * B; ++i)
    storeFromDouble(w.data(), DType::F16, i, u(rng));
  std::vector<int64_t> m(2 * L);
  for (int64_t i = 0; i < 2 * L; ++i)
    m[i] = i % 2 == 0 ? int64_t(rng() % 1000) : -7;
  std::vector<uint8_t> keep(3 * L);
  for (int64_t i = 0; i < 3 * L; ++i)
    keep[i] = i % 3 == 0 ? uint8_t(rng() % 4 != 0) : 0x5a;
  auto views = [&] {
    TensorView tv = TensorView::contiguous(t.data(), DType::F32, {H, 64});
    tv.strides = {1, H};
    TensorView wv = TensorView::contiguous(w.data(), DType::F16, {B, L});
    wv.strides = {1, B};
    TensorView mv = TensorView::contiguous(m.data(), DType::I64, {L});
    mv.strides = {2};
    TensorView kv = TensorView::contiguous(keep.data(), DType::Bool, {L});
    kv.strides = {3};
    return std::vector<std::pair<std::string, TensorView>>{
        {"t", tv}, {"w", wv}, {"m", mv}, {"keep", kv}};
  };
  struct Form {
    const char *target;
    DType dt;
    double tol;
  };
  for (Form f :
       {Form{"sm_80", DType::F16, 4e-3}, Form{"sm_90a", DType::BF16, 3e-2},
        Form{"sm_80", DType::F32, 1e-5}}) {
    INFO(f.target << " " << dtypeName(f.dt));
    auto k = g.kernel("strided", f.dt, 64, f.target);
    HostProblem p(f.dt, B, H, H, L, L, 64, 5);
    p.a.tensors = views();
    Status st = cuda::runFromHost(*g.ctx, *k, p.a);
    INFO(st.toString());
    REQUIRE(st.isOk());
    CHECK(p.maxError(k->variant()) < f.tol);
  }
}

TEST_CASE("emulated GPU: the tensor-core forward takes the scale in its "
          "exponents, negative scales included",
          "[gpu-emulated]") {
  // causal's score_mod is the identity: the tensor-core forms leave QK^T
  // unscaled, take |scale| in each exponent's multiply and negate Q for a
  // negative scale (flash.score_scale): mma.sync in its registers (sm_80),
  // wgmma in shared memory (sm_90a); 1e-300 is 0 in the kernel's f32,
  // where masked scores must stay -inf (not NaN). doc's is not: it scales
  // first.
  Gpu g;
  test::MatrixSample sample(3);
  for (const char *target : {"sm_80", "sm_90a"})
  for (DType dt : {DType::F16, DType::BF16})
    for (int64_t d : {64, 128})
      for (const char *variant : {"causal", "doc"}) {
        if (!sample.keep())
          continue;
        auto k = g.kernel(variant, dt, d, target);
        for (double scale : {0.125, -0.3, 2.5, -1e-3, 1e-300}) {
          INFO(target << " " << variant << " D=" << d << " scale " << scale);
          HostProblem p(dt, 2, 2, 2, 70, 70, d, 7);
          std::vector<int32_t> docs(2 * 70);
          for (int64_t i = 0; i < 2 * 70; ++i)
            docs[i] = int32_t(i % 70 / 30);
          if (std::string(variant) == "doc")
            p.a.tensors = {{"d", TensorView::contiguous(docs.data(), DType::I32, {2, 70})}};
          p.a.scale = scale;
          REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
          CHECK(p.maxError(k->variant()) < (dt == DType::BF16 ? 2e-2 : 2e-3));
        }
      }
}

TEST_CASE("emulated GPU: a key block that starts at a position of a longer "
          "sequence, every form, with the device block mask",
          "[gpu-emulated]") {
  // kvOffsets place key 0 of each sequence at position 30 and 5 (a
  // context-parallel shard): the modifiers, the tile classification and
  // the block-mask builder see positions, K and V are read by row. doc's
  // ids span the positions (KV binds to its 100).
  Gpu g;
  struct Form { const char *target; DType dt; int64_t d; };
  for (Form f : {Form{"sm_80", DType::F32, 64}, Form{"sm_80", DType::F16, 64},
                 Form{"sm_90a", DType::BF16, 64}})
    for (const char *variant : {"causal", "doc"}) {
      INFO(f.target << " " << dtypeName(f.dt) << " " << variant);
      auto k = g.kernel(variant, f.dt, f.d, f.target, /*keyOffsets=*/true);
      HostProblem p(f.dt, 2, 2, 1, 40, 70, f.d, 5);
      p.a.kvOffsets = {30, 5};
      p.a.qOffsets = {60, 50};
      std::vector<int32_t> docs(2 * 100);
      for (int64_t i = 0; i < 2 * 100; ++i)
        docs[i] = int32_t(i % 100 / 25);
      if (std::string(variant) == "doc")
        p.a.tensors = {{"d", TensorView::contiguous(docs.data(), DType::I32, {2, 100})}};
      REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
      double tol = f.dt == DType::F32 ? 1e-5 : f.dt == DType::BF16 ? 2e-2 : 2e-3;
      CHECK(p.maxError(k->variant()) < tol);
      if (std::string(variant) != "doc")
        continue;
      cuda::DeviceMirror mirror;
      REQUIRE(cuda::DeviceMirror::create(*g.ctx, p.a, mirror).isOk());
      BlockMask bm;
      REQUIRE(k->buildBlockMask(mirror.args(), bm).isOk());
      CHECK(bm.kvPos0 == std::vector<int32_t>{30, 5});
      std::vector<uint8_t> first = p.out;
      p.a.blockMask = &bm;
      std::fill(p.out.begin(), p.out.end(), 0xff);
      REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
      CHECK(p.out == first);
      // A mask built for other key positions is refused, not misread.
      p.a.kvOffsets = {30, 6};
      Status s = cuda::runFromHost(*g.ctx, *k, p.a);
      CHECK_FALSE(s.isOk());
      CHECK(s.message().find("rebuild it") != std::string::npos);
    }
  // A kernel compiled without key offsets refuses them, by name.
  auto plain = g.kernel("causal", DType::F16);
  HostProblem p(DType::F16, 1, 2, 2, 8, 16, 64, 3);
  p.a.kvOffsets = {4};
  Status s = cuda::runFromHost(*g.ctx, *plain, p.a);
  CHECK(s.message() == "'kvOffsets[0]' is 4, but the kernel was compiled "
                       "without key offsets (compile it with key offsets "
                       "enabled)");
  p.a.kvOffsets = {0}; // position 0 is every kernel's
  CHECK(cuda::runFromHost(*g.ctx, *plain, p.a).isOk());
}

TEST_CASE("emulated GPU: a head-parallel shard sees its heads' model indices, "
          "every form",
          "[gpu-emulated]") {
  // Query heads 3..6 of a model with 12: the modifiers read slope[h],
  // h / H and the mask h % 2 with the model's h and H (an odd offset: the
  // heads' parities flip), for the score, the mask, the tile
  // classification and the row hoisting.
  Gpu g;
  struct Form { const char *target; DType dt; };
  for (Form f : {Form{"sm_80", DType::F32}, Form{"sm_80", DType::F16},
                 Form{"sm_90a", DType::BF16}}) {
    INFO(f.target << " " << dtypeName(f.dt));
    auto k = g.kernel("heads", f.dt, 64, f.target);
    HostProblem p(f.dt, 2, 4, 4, 70, 70, 64, 9);
    p.a.headOffset = 3;
    p.a.headCount = 12;
    std::vector<float> slope(12);
    for (int i = 0; i < 12; ++i)
      slope[i] = 0.05f * float(i + 1);
    p.a.tensors = {{"slope", TensorView::contiguous(slope.data(), DType::F32, {12})}};
    REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
    CHECK(p.maxError(k->variant()) <
          (f.dt == DType::F32 ? 1e-5 : f.dt == DType::BF16 ? 2e-2 : 2e-3));
  }
}

namespace {
/// TMA loads the emulator executed since the last call (dlsym on the
/// library the context loaded: the same handle).
uint64_t tmaLoadsSince() {
  void *h = dlopen(ATTNC_EMUCUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h);
  auto count = reinterpret_cast<unsigned long long (*)(int)>(
      dlsym(h, "attnc_emu_tma_loads"));
  REQUIRE(count);
  uint64_t n = count(1);
  dlclose(h);
  return n;
}
} // namespace

TEST_CASE("emulated GPU: the wgmma form reads contiguous and paged K and V "
          "by TMA, zeroes rows past a sequence, and copies what its maps "
          "cannot serve",
          "[gpu-emulated]") {
  Gpu g;
  auto k = g.kernel("causal", DType::BF16, 64, "sm_90a");
  const int64_t B = 2, H = 4, HK = 2, Lq = 40, Lk = 200, D = 64;
  tmaLoadsSince();
  SECTION("[B, H, L, D], tails with NaN rows past each sequence") {
    HostProblem p(DType::BF16, B, H, HK, Lq, Lk, D, 21);
    p.a.kvLens = {200, 137}; // 137: a tile of 128 and a tail of 9 rows
    p.a.qOffsets = {160, 97}; // the last queries: they see the tail
    // Rows past the second sequence hold NaN: a TMA box reads them (they
    // are inside the view), and the kernel must zero them as cp.async's
    // zero-fill leaves them, or P V turns them into NaN outputs.
    for (int64_t h = 0; h < HK; ++h)
      for (int64_t t = 137; t < Lk; ++t)
        for (int64_t d = 0; d < D; ++d)
          storeFromDouble(p.v.data(), DType::BF16, ((1 * HK + h) * Lk + t) * D + d, NAN);
    REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
    CHECK(p.maxError(k->variant()) < 2e-2);
    CHECK(tmaLoadsSince() > 0);
  }
  SECTION("[B, L, H, D]: a head's rows start mid-row of the 2-D view") {
    HostProblem p(DType::BF16, B, H, HK, Lq, Lk, D, 22);
    // The same buffers, strided as [B, L, H, D] (the values differ; the
    // reference reads the same views).
    p.a.k = TensorView{p.k.data(), DType::BF16, {B, HK, Lk, D},
                       {Lk * HK * D, D, HK * D, 1}};
    p.a.v = TensorView{p.v.data(), DType::BF16, {B, HK, Lk, D},
                       {Lk * HK * D, D, HK * D, 1}};
    REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
    CHECK(p.maxError(k->variant()) < 2e-2);
    CHECK(tmaLoadsSince() > 0);
  }
  SECTION("rows that are not 16-byte aligned: no maps, the kernel copies") {
    // A row stride of D + 4 elements (136 bytes): neither TMA nor 16-byte
    // cp.async can take it; the element loop does.
    std::vector<uint8_t> kb((B * HK * Lk * (D + 4) + 8) * 2), vb(kb.size());
    HostProblem p(DType::BF16, B, H, HK, Lq, Lk, D, 23);
    for (auto [dst, src] : {std::pair{&kb, &p.k}, std::pair{&vb, &p.v}})
      for (int64_t r = 0; r < B * HK * Lk; ++r)
        std::memcpy(dst->data() + r * (D + 4) * 2, src->data() + r * D * 2, D * 2);
    std::vector<int64_t> st = {HK * Lk * (D + 4), Lk * (D + 4), D + 4, 1};
    p.a.k = TensorView{kb.data(), DType::BF16, {B, HK, Lk, D}, st};
    p.a.v = TensorView{vb.data(), DType::BF16, {B, HK, Lk, D}, st};
    REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
    CHECK(p.maxError(k->variant()) < 2e-2);
    CHECK(tmaLoadsSince() == 0);
  }
  SECTION("maps are made once per K and V; a driver that refuses them "
          "leaves the kernel its own copies") {
    void *h = dlopen(ATTNC_EMUCUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
    REQUIRE(h);
    auto calls = reinterpret_cast<long (*)(const char *)>(dlsym(h, "attnc_emu_call_count"));
    auto reset = reinterpret_cast<void (*)()>(dlsym(h, "attnc_emu_reset_calls"));
    auto fail = reinterpret_cast<void (*)(const char *, long, int)>(
        dlsym(h, "attnc_emu_fail_call"));
    REQUIRE((calls && reset && fail));
    HostProblem p(DType::BF16, B, H, HK, Lq, Lk, D, 26);
    cuda::DeviceMirror m;
    REQUIRE(cuda::DeviceMirror::create(*g.ctx, p.a, m).isOk());
    reset();
    REQUIRE(k->run(m.args()).isOk());
    REQUIRE(k->run(m.args()).isOk());
    CHECK(calls("cuTensorMapEncodeTiled") == 2); // K's and V's, once
    REQUIRE(m.downloadOutputs(p.a).isOk()); // (queued launches run here)
    CHECK(tmaLoadsSince() > 0);
    CHECK(p.maxError(k->variant()) < 2e-2);
    // Another K and V: made again; the driver refuses the first (an
    // injected CUDA_ERROR_INVALID_VALUE): the kernel copies, still right.
    HostProblem p2(DType::BF16, B, H, HK, Lq, Lk, D, 27);
    cuda::DeviceMirror m2;
    REQUIRE(cuda::DeviceMirror::create(*g.ctx, p2.a, m2).isOk());
    reset();
    fail("cuTensorMapEncodeTiled", 1, 1);
    REQUIRE(k->run(m2.args()).isOk());
    fail("", 0, 0);
    REQUIRE(m2.downloadOutputs(p2.a).isOk());
    CHECK(tmaLoadsSince() == 0);
    CHECK(p2.maxError(k->variant()) < 2e-2);
    // A refusal is not kept: the next run asks the driver again.
    REQUIRE(k->run(m2.args()).isOk());
    REQUIRE(m2.downloadOutputs(p2.a).isOk());
    CHECK(tmaLoadsSince() > 0);
    dlclose(h);
  }
  SECTION("paged K and V: pages of a multiple of the 128-key tile by TMA "
          "(a box per tile, within its page), smaller pages by copies") {
    for (int64_t P : {128, 256, 64}) {
      INFO("page size " << P);
      HostProblem p(DType::BF16, B, H, HK, Lq, Lk, D, 28);
      p.a.kvLens = {200, 137};
      p.a.qOffsets = {160, 97};
      // The sequences' pages in reverse order after a spare page; spare
      // pages and rows past a sequence are NaN (the kernel zeroes a TMA
      // tile's rows past the sequence, as in the contiguous case).
      const int64_t per = (Lk + P - 1) / P, pool = B * per + 1;
      std::vector<int32_t> table(static_cast<size_t>(B * per));
      for (int64_t i = 0; i < B * per; ++i)
        table[size_t(i)] = int32_t(B * per - i);
      auto pt = std::make_shared<PageTable>();
      REQUIRE(PageTable::fromBlockTable(table, per, {200, 137}, P, *pt).isOk());
      std::vector<uint8_t> kp(size_t(pool * HK * P * D * 2), 0xff), vp(kp.size(), 0xff);
      for (auto [dst, src] : {std::pair{&kp, &p.k}, std::pair{&vp, &p.v}})
        for (int64_t b = 0; b < B; ++b)
          for (int64_t h = 0; h < HK; ++h)
            for (int64_t t = 0; t < p.a.kvLens[size_t(b)]; ++t) {
              auto [page, row] = pt->locate(b, t);
              std::memcpy(dst->data() + ((page * HK + h) * P + row) * D * 2,
                          src->data() + ((b * HK + h) * Lk + t) * D * 2, D * 2);
            }
      p.a.k = TensorView::contiguous(kp.data(), DType::BF16, {pool, HK, P, D});
      p.a.v = TensorView::contiguous(vp.data(), DType::BF16, {pool, HK, P, D});
      p.a.pages = pt.get();
      REQUIRE(cuda::runFromHost(*g.ctx, *k, p.a).isOk());
      CHECK(p.maxError(k->variant()) < 2e-2);
      if (P % 128 == 0)
        CHECK(tmaLoadsSince() > 0);
      else
        CHECK(tmaLoadsSince() == 0);
    }
  }
  SECTION("a plan run with other K and V makes maps of its own") {
    HostProblem p1(DType::BF16, B, H, HK, Lq, Lk, D, 24), p2(DType::BF16, B, H, HK, Lq, Lk, D, 25);
    cuda::DeviceMirror m1, m2;
    REQUIRE(cuda::DeviceMirror::create(*g.ctx, p1.a, m1).isOk());
    REQUIRE(cuda::DeviceMirror::create(*g.ctx, p2.a, m2).isOk());
    cuda::GpuPlan plan;
    REQUIRE(k->plan(m1.args(), plan).isOk());
    REQUIRE(k->run(plan, m2.args()).isOk());
    REQUIRE(m2.downloadOutputs(p2.a).isOk());
    CHECK(p2.maxError(k->variant()) < 2e-2);
    CHECK(tmaLoadsSince() > 0);
  }
}

TEST_CASE("emulated GPU: the split-KV merge is its kernel's programmatic "
          "dependent on sm_90 and later, and waits for it",
          "[gpu-emulated]") {
  Gpu g;
  void *h = dlopen(ATTNC_EMUCUDA_PATH, RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(h);
  auto calls = reinterpret_cast<long (*)(const char *)>(
      dlsym(h, "attnc_emu_call_count"));
  auto reset = reinterpret_cast<void (*)()>(dlsym(h, "attnc_emu_reset_calls"));
  auto report =
      reinterpret_cast<const char *(*)()>(dlsym(h, "attnc_emu_last_report"));
  REQUIRE((calls && reset && report));
  // Decode over 300 keys in 4 splits: the kernel writes partial rows, the
  // merge reads them.
  auto decode = [&](cuda::GpuKernel &k, uint64_t seed,
                    const std::function<void()> &injected = {}) {
    HostProblem p(DType::BF16, 2, 4, 2, 1, 300, 64, seed);
    p.a.numSplits = 4;
    reset();
    if (injected)
      injected();
    Status s = cuda::runFromHost(*g.ctx, k, p.a);
    if (s.isOk())
      CHECK(p.maxError(k.variant()) < 2e-2);
    return s;
  };
  for (const char *target : {"sm_80", "sm_90", "sm_90a"}) {
    INFO(target);
    bool sm90 = std::string(target) != "sm_80";
    auto k = g.kernel("causal", DType::BF16, 64, target);
    CHECK(k->image().mergeGridDependency == sm90);
    REQUIRE(decode(*k, 40).isOk());
    CHECK(calls("cuLaunchKernelEx") == (sm90 ? 1 : 0));
  }
  SECTION("ATTNC_PDL=0 launches it after the kernel by stream order") {
    setenv("ATTNC_PDL", "0", 1);
    auto k = g.kernel("causal", DType::BF16, 64, "sm_90");
    unsetenv("ATTNC_PDL");
    REQUIRE(decode(*k, 41).isOk());
    CHECK(calls("cuLaunchKernelEx") == 0);
  }
  SECTION("a failing cuLaunchKernelEx is an error naming it; the next call "
          "works") {
    auto fail = reinterpret_cast<void (*)(const char *, long, int)>(
        dlsym(h, "attnc_emu_fail_call"));
    REQUIRE(fail);
    auto k = g.kernel("causal", DType::BF16, 64, "sm_90");
    Status s = decode(*k, 43, [&] {
      fail("cuLaunchKernelEx", 1, 999 /* CUDA_ERROR_UNKNOWN */);
    });
    fail("", 0, 0);
    CHECK_FALSE(s.isOk());
    CHECK_THAT(s.message(), Catch::Contains("cuLaunchKernelEx failed"));
    REQUIRE(decode(*k, 44).isOk());
  }
  SECTION("a merge that reads the partials without waiting is reported") {
    KernelSpec spec;
    spec.dtype = DType::BF16;
    spec.headDim = spec.vHeadDim = 64;
    GpuKernelImage image;
    REQUIRE(g.session->compileGpu("causal", spec, "sm_90", image).isOk());
    std::string wait = "griddepcontrol.wait;";
    size_t at = image.ptx.find(wait);
    REQUIRE(at != std::string::npos);
    image.ptx.erase(at, wait.size());
    VariantInfo info;
    REQUIRE(g.session->info("causal", info).isOk());
    std::unique_ptr<cuda::GpuKernel> k;
    REQUIRE(cuda::GpuKernel::load(*g.ctx, info, image, k).isOk());
    setenv("ATTNC_EMU_QUIET", "1", 1);
    Status s = decode(*k, 42);
    unsetenv("ATTNC_EMU_QUIET");
    CHECK_FALSE(s.isOk());
    CHECK_THAT(
        std::string(report()),
        Catch::Contains("before griddepcontrol.wait: attnc_causal_bf16"));
  }
}
