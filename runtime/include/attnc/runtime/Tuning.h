//===- Tuning.h - Timed tile configurations and the winners -----*- C++ -*-===//
//
// Tuning never runs on a user's critical path. On a machine with the GPU,
// `attnc-run CANDIDATES --tune` (runtime only) checks each candidate tile
// configuration of a package against the fp64 reference and times it over
// a set of workloads, writing one TuningRecord per (kernel, workload) as a
// JSON line. `attnc tune RECORDS...` picks one configuration per shape
// class (target, dtype, Dqk, Dv) from those records and writes a
// TuningTable, which `attnc compile --emit=package --tuning FILE` builds
// with; without one, the compiler's configuration table decides.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TUNING_H
#define ATTNC_RUNTIME_TUNING_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Status.h"

#include <string>
#include <vector>

namespace attnc::rt {

/// The tile configuration of a tensor-core kernel.
struct TileConfig {
  int64_t blockM = 0, blockN = 0, warps = 0, stages = 0;
  /// "m128n64w8s2", as in kernel names.
  std::string name() const;
  bool operator<(const TileConfig &o) const;
  bool operator==(const TileConfig &o) const;
};

/// The class of problems one configuration is chosen for.
struct ShapeClass {
  std::string target; // "sm_90"
  DType dtype = DType::BF16;
  int64_t headDim = 0, vHeadDim = 0;
  std::string describe() const; // "sm_90 bf16 D=128/128"
  bool operator<(const ShapeClass &o) const;
  bool operator==(const ShapeClass &o) const;
};

/// One candidate kernel timed on one workload.
struct TuningRecord {
  ShapeClass shape;
  TileConfig config;
  std::string gpu;      // the device's name
  std::string variant;  // the workload: variant and problem
  std::string workload; // "prefill B1 H16/16 Lq4096 Lkv4096"
  bool passed = false;  // the candidate agreed with the fp64 reference
  double msMedian = 0;  // when passed
  std::string error;    // when not
};

std::string formatTuningRecord(const TuningRecord &r); // one JSON line
/// JSON lines (blank lines skipped); errors name `origin` and the line.
Status parseTuningRecords(const std::string &text, const std::string &origin,
                          std::vector<TuningRecord> &out);

/// The configuration chosen for a shape class and how the others fared.
struct TuningChoice {
  ShapeClass shape;
  TileConfig config;
  std::string gpu;
  int64_t workloads = 0;
  struct Candidate {
    TileConfig config;
    double score = 0;     // geometric mean of time / best time (1 = best
                          // on every workload); 0 when excluded
    std::string excluded; // why it could not be chosen
  };
  std::vector<Candidate> candidates; // best first, then the excluded
};

struct TuningTable {
  static constexpr int kVersion = 1;
  std::vector<TuningChoice> choices;
  /// Shape classes whose every candidate was excluded, with the reason.
  std::vector<std::pair<ShapeClass, std::string>> unresolved;

  const TuningChoice *find(const ShapeClass &shape) const;
  std::string serialize() const;
  static Status parse(const std::string &text, const std::string &origin,
                      TuningTable &out);
  static Status read(const std::string &path, TuningTable &out);
};

/// Chooses per shape class the candidate with the lowest geometric mean,
/// over the class's workloads, of its median time divided by the best
/// candidate's. A candidate that failed the reference check on any
/// workload, or was not timed on every workload of its class, is
/// excluded; repeated records of one (candidate, workload) keep the
/// fastest. Ties go to the smaller configuration (block_m, block_n, warps,
/// stages). Records of one class from different GPUs are an error.
Status selectTileConfigs(const std::vector<TuningRecord> &records,
                         TuningTable &out);

} // namespace attnc::rt

#endif
