// The tuner's selection on recorded timings (what attnc-run --tune writes
// on a device): the geometric-mean rule, exclusions for failed checks and
// missing workloads, repeated records, ties, mixed GPUs; and the records'
// and the tuning file's formats.
#include "attnc/runtime/Tuning.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace attnc::rt;

namespace {
TuningRecord rec(const std::string &cfg, const std::string &workload, double ms,
                 int64_t d = 128, const std::string &gpu = "NVIDIA H100") {
  TuningRecord r;
  r.shape = {"sm_90", DType::BF16, d, d};
  int m = 0, n = 0, w = 0, s = 0;
  REQUIRE(std::sscanf(cfg.c_str(), "m%dn%dw%ds%d", &m, &n, &w, &s) == 4);
  r.config = {m, n, w, s};
  r.gpu = gpu;
  r.variant = "causal";
  r.workload = workload;
  r.passed = ms > 0;
  r.msMedian = ms > 0 ? ms : 0;
  r.error = ms > 0 ? "" : "max_abs 1 over tolerance 0.016";
  return r;
}
} // namespace

TEST_CASE("tuning: the lowest geometric mean of time / best wins",
          "[tuning]") {
  // m128n64 is fastest on the long workload, m128n32 on the two short ones:
  // geomeans 1.0/1.0/1.2 -> 1.063 for n32 and 1.0/1.1/1.0 ... per record.
  std::vector<TuningRecord> rs = {
      rec("m128n32w8s2", "prefill T4096", 2.0),
      rec("m128n64w8s2", "prefill T4096", 1.6),
      rec("m128n32w8s2", "prefill T512", 0.10),
      rec("m128n64w8s2", "prefill T512", 0.12),
      rec("m128n32w8s2", "decode T8192", 0.050),
      rec("m128n64w8s2", "decode T8192", 0.055),
      rec("m64n32w4s2", "prefill T4096", 2.4),
      rec("m64n32w4s2", "prefill T512", 0.09),
      rec("m64n32w4s2", "decode T8192", 0.060),
  };
  TuningTable t;
  REQUIRE(selectTileConfigs(rs, t).isOk());
  REQUIRE(t.choices.size() == 1);
  const TuningChoice &c = t.choices[0];
  // n32: (1.25 * 1.111 * 1)^(1/3) = 1.116; n64: (1 * 1.333 * 1.1)^(1/3) =
  // 1.136; m64: (1.5 * 1 * 1.2)^(1/3) = 1.216.
  CHECK(c.config.name() == "m128n32w8s2");
  CHECK(c.workloads == 3);
  REQUIRE(c.candidates.size() == 3);
  CHECK(c.candidates[0].score == Approx(std::cbrt(1.25 * (0.10 / 0.09) * 1.0)));
  CHECK(c.candidates[1].config.name() == "m128n64w8s2");
  CHECK(c.candidates[1].score == Approx(std::cbrt(1.0 * (0.12 / 0.09) * 1.1)));
  CHECK(c.candidates[2].config.name() == "m64n32w4s2");
  CHECK(t.find({"sm_90", DType::BF16, 128, 128}) == &c);
  CHECK(t.find({"sm_80", DType::BF16, 128, 128}) == nullptr);
}

TEST_CASE("tuning: a failed check or a missing workload excludes a candidate",
          "[tuning]") {
  std::vector<TuningRecord> rs = {
      rec("m128n32w8s2", "T4096", 2.0), rec("m128n32w8s2", "T512", 0.2),
      // Fastest on both, but wrong on one: never chosen.
      rec("m128n64w8s2", "T4096", 1.0), rec("m128n64w8s2", "T512", -1),
      // Fastest where it ran, but not timed on T512.
      rec("m64n32w4s2", "T4096", 0.5),
  };
  TuningTable t;
  REQUIRE(selectTileConfigs(rs, t).isOk());
  REQUIRE(t.choices.size() == 1);
  CHECK(t.choices[0].config.name() == "m128n32w8s2");
  CHECK(t.choices[0].candidates[0].score == Approx(1.0));
  REQUIRE(t.choices[0].candidates.size() == 3);
  // The excluded follow the chosen, in configuration order.
  CHECK(t.choices[0].candidates[1].config.name() == "m64n32w4s2");
  CHECK_THAT(t.choices[0].candidates[1].excluded,
             Catch::Contains("timed on 1 of the class's 2 workloads"));
  CHECK(t.choices[0].candidates[2].config.name() == "m128n64w8s2");
  CHECK_THAT(t.choices[0].candidates[2].excluded,
             Catch::Contains("failed the reference check on causal T512"));
  // Every candidate excluded: no choice, and the reason.
  TuningTable none;
  REQUIRE(selectTileConfigs({rec("m128n64w8s2", "T512", -1)}, none).isOk());
  CHECK(none.choices.empty());
  REQUIRE(none.unresolved.size() == 1);
  CHECK_THAT(none.unresolved[0].second, Catch::Contains("m128n64w8s2"));
}

TEST_CASE("tuning: repeated records keep the fastest; ties go to the smaller "
          "configuration; classes are separate",
          "[tuning]") {
  std::vector<TuningRecord> rs = {
      rec("m128n64w8s2", "T", 1.0), rec("m128n64w8s2", "T", 3.0),
      rec("m128n32w8s2", "T", 1.0),
      rec("m64n64w4s2", "T", 1.0, 64), rec("m128n64w8s2", "T", 2.0, 64),
  };
  TuningTable t;
  REQUIRE(selectTileConfigs(rs, t).isOk());
  REQUIRE(t.choices.size() == 2);
  // D=64 sorts first; the tie at D=128 goes to block_n 32.
  CHECK(t.choices[0].shape.headDim == 64);
  CHECK(t.choices[0].config.name() == "m64n64w4s2");
  CHECK(t.choices[1].config.name() == "m128n32w8s2");
  CHECK(t.choices[1].candidates[1].score == Approx(1.0));
}

TEST_CASE("tuning: records of one class from two GPUs are refused",
          "[tuning]") {
  TuningTable t;
  Status s = selectTileConfigs({rec("m128n64w8s2", "T", 1.0),
                                rec("m128n32w8s2", "T", 1.0, 128, "NVIDIA A100")},
                               t);
  REQUIRE_FALSE(s.isOk());
  CHECK_THAT(s.message(), Catch::Contains("two GPUs"));
}

TEST_CASE("tuning: records and tables round-trip; bad input names the line",
          "[tuning]") {
  std::string text = formatTuningRecord(rec("m128n64w8s2", "T 1", 1.5)) + "\n\n" +
                     formatTuningRecord(rec("m64n32w4s2", "T 1", -1)) + "\n";
  std::vector<TuningRecord> back;
  REQUIRE(parseTuningRecords(text, "r.jsonl", back).isOk());
  REQUIRE(back.size() == 2);
  CHECK(back[0].config.name() == "m128n64w8s2");
  CHECK(back[0].msMedian == 1.5);
  CHECK(back[0].workload == "T 1");
  CHECK_FALSE(back[1].passed);
  CHECK_THAT(back[1].error, Catch::Contains("tolerance"));

  Status bad = parseTuningRecords(text + "{\"target\": 3}\n", "r.jsonl", back);
  REQUIRE_FALSE(bad.isOk());
  CHECK_THAT(bad.message(), Catch::Contains("r.jsonl:4: 'target'"));
  CHECK_FALSE(parseTuningRecords("not json\n", "r", back).isOk());

  TuningTable t, t2;
  REQUIRE(selectTileConfigs(back, t).isOk());
  REQUIRE(TuningTable::parse(t.serialize(), "t.json", t2).isOk());
  REQUIRE(t2.choices.size() == 1);
  CHECK(t2.choices[0].config == t.choices[0].config);
  CHECK(t2.choices[0].shape == t.choices[0].shape);
  CHECK_FALSE(TuningTable::parse("{\"format\": \"attnc-package\"}", "p", t2).isOk());
  Status dup = TuningTable::parse(
      R"({"format": "attnc-tuning", "version": 1, "choices": [
          {"target": "sm_90", "dtype": "bf16", "head_dim": 64, "v_head_dim": 64,
           "block_m": 64, "block_n": 64, "warps": 4, "stages": 2},
          {"target": "sm_90", "dtype": "bf16", "head_dim": 64, "v_head_dim": 64,
           "block_m": 128, "block_n": 64, "warps": 8, "stages": 2}]})",
      "t.json", t2);
  REQUIRE_FALSE(dup.isOk());
  CHECK_THAT(dup.message(), Catch::Contains("choices[1]: a second choice"));
}
