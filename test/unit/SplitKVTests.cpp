// Split-KV on JIT-compiled CPU kernels: any number of splits gives one
// pass's output and LSE to rounding, splits that see no key (short
// sequences, windows, empty sequences) included, and the planner's choice
// too. (The emulated GPU's: test/Runtime/split-kv.test.)
#include "attnc/Driver/Session.h"
#include "attnc/runtime/SplitPlan.h"
#include "ReferenceCheck.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <random>

using namespace attnc;
using namespace attnc::rt;

namespace {

const char *kSplitSources = R"(
variant causal() { mask_mod(b, h, q, kv) = q >= kv }
variant window() {
  score_mod(s, b, h, q, kv) = s - 0.02 * abs(q - kv)
  mask_mod(b, h, q, kv) = q >= kv && q - kv < 50
}
)";

std::unique_ptr<CpuKernel> compileSplit(const std::string &variant) {
  KernelSpec spec;
  spec.blockN = 16; // many tiles for short sequences
  return test::compileCpuKernel(kSplitSources, variant, spec);
}

struct Batch {
  int64_t B, HQ, HK, LQ, LKV, D = 64;
  std::vector<float> q, k, v, out, lse;
  AttentionArgs args;
  Batch(int64_t b, int64_t hq, int64_t hk, int64_t lq, int64_t lkv,
        std::vector<int32_t> lens)
      : B(b), HQ(hq), HK(hk), LQ(lq), LKV(lkv) {
    std::mt19937_64 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    auto fill = [&](std::vector<float> &x, size_t n) {
      x.resize(n);
      for (float &e : x)
        e = u(rng);
    };
    fill(q, B * HQ * LQ * D);
    fill(k, B * HK * LKV * D);
    fill(v, B * HK * LKV * D);
    out.assign(B * HQ * LQ * D, 99.f);
    lse.assign(B * HQ * LQ, 99.f);
    args.q = TensorView::contiguous(q.data(), DType::F32, {B, HQ, LQ, D});
    args.k = TensorView::contiguous(k.data(), DType::F32, {B, HK, LKV, D});
    args.v = TensorView::contiguous(v.data(), DType::F32, {B, HK, LKV, D});
    args.out = TensorView::contiguous(out.data(), DType::F32, {B, HQ, LQ, D});
    args.lse = TensorView::contiguous(lse.data(), DType::F32, {B, HQ, LQ});
    args.kvLens = std::move(lens);
    args.qOffsets.clear();
    for (int32_t l : args.kvLens)
      args.qOffsets.push_back(std::max<int32_t>(l - int32_t(LQ), 0));
  }
};

/// |a - b| where both are finite, and whether they agree on which aren't.
double maxDiff(const std::vector<float> &a, const std::vector<float> &b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) || std::isinf(b[i])) {
      if (a[i] != b[i])
        return std::numeric_limits<double>::infinity();
      continue;
    }
    if (std::isnan(a[i]) || std::isnan(b[i]))
      return std::numeric_limits<double>::infinity();
    m = std::max(m, double(std::fabs(a[i] - b[i])));
  }
  return m;
}

/// Runs `b` unsplit, then with each split count, and compares.
void checkSplits(const CpuKernel &k, Batch &b) {
  b.args.numSplits = 1;
  REQUIRE(k.run(b.args).isOk());
  std::vector<float> out1 = b.out, lse1 = b.lse;
  for (int splits : {2, 3, 4, 7, 16, 33, 64}) {
    INFO("splits " << splits);
    std::fill(b.out.begin(), b.out.end(), 99.f);
    std::fill(b.lse.begin(), b.lse.end(), 99.f);
    b.args.numSplits = splits;
    REQUIRE(k.run(b.args).isOk());
    CHECK(maxDiff(b.out, out1) < 2e-6);
    CHECK(maxDiff(b.lse, lse1) < 2e-5);
  }
}

} // namespace

TEST_CASE("split-KV equals one pass to rounding, 1 to 64 splits",
          "[cpu][splits]") {
  for (const char *variant : {"causal", "window"}) {
    INFO(variant);
    auto k = compileSplit(variant);
    // Decode, GQA 8/2, sequences of 700, 1, 0 and 333 keys: most splits of
    // the short ones see no key; the window masks all but the last 50.
    Batch decode(4, 8, 2, 1, 700, {700, 1, 0, 333});
    checkSplits(*k, decode);
    // The empty sequence: output 0, LSE -inf, whatever the split.
    for (int64_t i = 2 * 8; i < 3 * 8; ++i) {
      CHECK(decode.lse[i] == -std::numeric_limits<float>::infinity());
      CHECK(decode.out[i * 64] == 0.f);
    }
    // Chunked decode: query rows with different visible ranges per split.
    Batch chunk(2, 4, 4, 9, 300, {300, 40});
    checkSplits(*k, chunk);
  }
}

TEST_CASE("the planner's split gives one pass's result to rounding",
          "[cpu][splits]") {
  auto k = compileSplit("causal");
  Batch b(1, 4, 1, 1, 4096, {4096}); // MQA: one work item, two threads
  b.args.numThreads = 2;
  b.args.numSplits = 1;
  REQUIRE(k->run(b.args).isOk());
  std::vector<float> out1 = b.out, lse1 = b.lse;
  b.args.numSplits = 0;
  REQUIRE(k->run(b.args).isOk());
  CHECK(maxDiff(b.out, out1) < 2e-6);
  CHECK(maxDiff(b.lse, lse1) < 2e-5);
  CHECK(b.out != out1); // it did split: the rounding differs somewhere
}

TEST_CASE("a bad split count is refused before anything is written",
          "[cpu][splits]") {
  auto k = compileSplit("causal");
  Batch b(1, 4, 1, 1, 100, {100});
  b.args.numSplits = 257;
  Status s = k->run(b.args);
  CHECK(s.message() ==
        "'numSplits' must be 0 (the planner's choice) or 1 to 256, got 257");
  b.args.numSplits = -1;
  CHECK(!k->run(b.args).isOk());
  CHECK(b.out == std::vector<float>(b.out.size(), 99.f));
}

TEST_CASE("the split planner fills the workers and keeps splits long",
          "[splits]") {
  SplitPlan p;
  // Enough items: no split.
  REQUIRE(planSplits(8, 512, 8, 0, p).isOk());
  CHECK(p.splits == 1);
  CHECK(p.tilesPerSplit == 512);
  // One item on two cores: one split per worker fills them (one wave).
  REQUIRE(planSplits(1, 512, 2, 0, p).isOk());
  CHECK(p.splits == 2);
  CHECK(p.tilesPerSplit == 256);
  // 8 items on 132 SMs, 64 tiles: at least kMinTilesPerSplit tiles each;
  // 13 to 15 splits would not shorten them below 13's 5 tiles.
  REQUIRE(planSplits(8, 64, 132, 0, p).isOk());
  CHECK(p.splits == 16);
  CHECK(p.tilesPerSplit == 4);
  // 64 items on 132 SMs (FlashAttention's case): 2 splits fill 97% of one
  // wave; the old rule's 5 made 2.4 waves.
  REQUIRE(planSplits(64, 512, 132, 0, p).isOk());
  CHECK(p.splits == 2);
  // 106 items fill 80% of 132 SMs: no split.
  REQUIRE(planSplits(106, 512, 132, 0, p).isOk());
  CHECK(p.splits == 1);
  REQUIRE(planSplits(105, 512, 132, 0, p).isOk());
  CHECK(p.splits == 5); // 525 blocks: 3.98 waves (99%)
  // Too short to split.
  REQUIRE(planSplits(1, 7, 16, 0, p).isOk());
  CHECK(p.splits == 1);
  // 102 tiles on 15 threads: 13 splits fill 87% of a wave (15 would fill
  // it, 12 only 80%); planned splits of 8 tiles, none empty.
  REQUIRE(planSplits(1, 102, 15, 0, p).isOk());
  CHECK(p.splits == 13);
  CHECK(p.tilesPerSplit == 8);
  // Forced: as many as asked, some empty when there are fewer tiles.
  REQUIRE(planSplits(100, 10, 2, 64, p).isOk());
  CHECK(p.splits == 64);
  CHECK(p.tilesPerSplit == 1);
  REQUIRE(planSplits(1, 0, 2, 3, p).isOk());
  CHECK(p.splits == 3);
  CHECK(!planSplits(1, 10, 2, 300, p).isOk());
}
