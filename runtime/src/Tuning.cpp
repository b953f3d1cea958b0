//===- Tuning.cpp - Tuning records, the selection and the table (JSON) ---===//
#include "attnc/runtime/Tuning.h"
#include "attnc/runtime/FileIO.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

namespace attnc::rt {

using nlohmann::json;

std::string TileConfig::name() const {
  return fmt::format("m{}n{}w{}s{}", blockM, blockN, warps, stages);
}
bool TileConfig::operator<(const TileConfig &o) const {
  return std::tie(blockM, blockN, warps, stages) <
         std::tie(o.blockM, o.blockN, o.warps, o.stages);
}
bool TileConfig::operator==(const TileConfig &o) const {
  return !(*this < o) && !(o < *this);
}

std::string ShapeClass::describe() const {
  return fmt::format("{} {} D={}/{}", target, dtypeName(dtype), headDim,
                     vHeadDim);
}
bool ShapeClass::operator<(const ShapeClass &o) const {
  return std::tie(target, dtype, headDim, vHeadDim) <
         std::tie(o.target, o.dtype, o.headDim, o.vHeadDim);
}
bool ShapeClass::operator==(const ShapeClass &o) const {
  return !(*this < o) && !(o < *this);
}

namespace {

void putShape(json &j, const ShapeClass &s) {
  j["target"] = s.target;
  j["dtype"] = std::string(dtypeName(s.dtype));
  j["head_dim"] = s.headDim;
  j["v_head_dim"] = s.vHeadDim;
}
void putConfig(json &j, const TileConfig &c) {
  j["block_m"] = c.blockM;
  j["block_n"] = c.blockN;
  j["warps"] = c.warps;
  j["stages"] = c.stages;
}

/// Field readers: a missing or mistyped field is an error naming it.
struct Reader {
  const json &j;
  std::string where;
  Status st;
  std::string str(const char *k) {
    if (st && (!j.contains(k) || !j[k].is_string()))
      st = Status::invalidArgument(fmt::format("{}: '{}' must be a string",
                                               where, k));
    return st ? j[k].get<std::string>() : "";
  }
  int64_t num(const char *k, int64_t lo, int64_t hi) {
    if (st && (!j.contains(k) || !j[k].is_number_integer() ||
               j[k].get<int64_t>() < lo || j[k].get<int64_t>() > hi))
      st = Status::invalidArgument(fmt::format(
          "{}: '{}' must be an integer in [{}, {}]", where, k, lo, hi));
    return st ? j[k].get<int64_t>() : 0;
  }
  double real(const char *k) {
    if (st && (!j.contains(k) || !j[k].is_number() ||
               !std::isfinite(j[k].get<double>()) || j[k].get<double>() < 0))
      st = Status::invalidArgument(fmt::format(
          "{}: '{}' must be a finite non-negative number", where, k));
    return st ? j[k].get<double>() : 0;
  }
  ShapeClass shape() {
    ShapeClass s;
    s.target = str("target");
    std::string dt = str("dtype");
    if (st) {
      auto t = parseDType(dt);
      if (!t || (*t != DType::F16 && *t != DType::BF16 && *t != DType::F32))
        st = Status::invalidArgument(fmt::format(
            "{}: 'dtype' must be f32, f16 or bf16, not '{}'", where, dt));
      else
        s.dtype = *t;
    }
    s.headDim = num("head_dim", 1, 1024);
    s.vHeadDim = num("v_head_dim", 1, 1024);
    return s;
  }
  TileConfig config() {
    TileConfig c;
    c.blockM = num("block_m", 1, 1024);
    c.blockN = num("block_n", 1, 1024);
    c.warps = num("warps", 0, 32);
    c.stages = num("stages", 1, 8);
    return c;
  }
};

} // namespace

std::string formatTuningRecord(const TuningRecord &r) {
  json j;
  putShape(j, r.shape);
  putConfig(j, r.config);
  j["gpu"] = r.gpu;
  j["variant"] = r.variant;
  j["workload"] = r.workload;
  j["check"] = r.passed ? "pass" : "fail";
  if (r.passed)
    j["ms_median"] = r.msMedian;
  else
    j["error"] = r.error;
  return j.dump();
}

Status parseTuningRecords(const std::string &text, const std::string &origin,
                          std::vector<TuningRecord> &out) {
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos)
      continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::string where = fmt::format("{}:{}", origin, n);
    if (!j.is_object())
      return Status::invalidArgument(where +
                                     ": not a JSON object (a tuning record)");
    Reader rd{j, where, Status::ok()};
    TuningRecord r;
    r.shape = rd.shape();
    r.config = rd.config();
    r.gpu = rd.str("gpu");
    r.variant = rd.str("variant");
    r.workload = rd.str("workload");
    std::string check = rd.str("check");
    if (rd.st && check != "pass" && check != "fail")
      rd.st = Status::invalidArgument(where + ": 'check' must be pass or fail");
    r.passed = check == "pass";
    if (r.passed)
      r.msMedian = rd.real("ms_median");
    else if (rd.st && j.contains("error") && j["error"].is_string())
      r.error = j["error"].get<std::string>();
    if (!rd.st)
      return rd.st;
    if (r.passed && r.msMedian <= 0)
      return Status::invalidArgument(where + ": 'ms_median' must be positive");
    out.push_back(std::move(r));
  }
  return Status::ok();
}

Status selectTileConfigs(const std::vector<TuningRecord> &records,
                         TuningTable &out) {
  out = TuningTable();
  struct ClassData {
    std::string gpu;
    std::set<std::pair<std::string, std::string>> workloads;
    // candidate -> workload -> fastest median (absent: not timed)
    std::map<TileConfig, std::map<std::pair<std::string, std::string>, double>> times;
    std::map<TileConfig, std::string> failed;
  };
  std::map<ShapeClass, ClassData> classes;
  for (const TuningRecord &r : records) {
    ClassData &c = classes[r.shape];
    if (c.gpu.empty())
      c.gpu = r.gpu;
    else if (c.gpu != r.gpu)
      return Status::invalidArgument(fmt::format(
          "records of {} come from two GPUs ('{}' and '{}'): tune one device "
          "at a time",
          r.shape.describe(), c.gpu, r.gpu));
    auto w = std::make_pair(r.variant, r.workload);
    c.workloads.insert(w);
    auto &t = c.times[r.config];
    if (!r.passed) {
      c.failed.emplace(r.config, fmt::format("failed the reference check on "
                                             "{} {}: {}",
                                             r.variant, r.workload, r.error));
      continue;
    }
    auto it = t.find(w);
    if (it == t.end() || r.msMedian < it->second)
      t[w] = r.msMedian;
  }
  for (auto &[shape, c] : classes) {
    TuningChoice choice;
    choice.shape = shape;
    choice.gpu = c.gpu;
    choice.workloads = static_cast<int64_t>(c.workloads.size());
    std::vector<TuningChoice::Candidate> eligible, excluded;
    for (auto &[cfg, times] : c.times) {
      TuningChoice::Candidate cand;
      cand.config = cfg;
      if (auto f = c.failed.find(cfg); f != c.failed.end())
        cand.excluded = f->second;
      else if (times.size() != c.workloads.size())
        cand.excluded = fmt::format("timed on {} of the class's {} workloads",
                                    times.size(), c.workloads.size());
      (cand.excluded.empty() ? eligible : excluded).push_back(cand);
    }
    // Each workload's best time among the eligible candidates.
    std::map<std::pair<std::string, std::string>, double> best;
    for (const auto &cand : eligible)
      for (auto &[w, ms] : c.times[cand.config]) {
        auto it = best.find(w);
        if (it == best.end() || ms < it->second)
          best[w] = ms;
      }
    for (auto &cand : eligible) {
      double logSum = 0;
      for (auto &[w, ms] : c.times[cand.config])
        logSum += std::log(ms / best[w]);
      cand.score = std::exp(logSum / double(c.workloads.size()));
    }
    // Stable: equal scores keep the configurations' order (smaller first).
    std::stable_sort(eligible.begin(), eligible.end(),
                     [](const auto &a, const auto &b) { return a.score < b.score; });
    if (eligible.empty()) {
      out.unresolved.push_back(
          {shape, excluded.empty() ? "no candidate was timed"
                                   : "every candidate was excluded (" +
                                         excluded.front().config.name() +
                                         ": " + excluded.front().excluded + ")"});
      continue;
    }
    choice.config = eligible.front().config;
    choice.candidates = eligible;
    choice.candidates.insert(choice.candidates.end(), excluded.begin(),
                             excluded.end());
    out.choices.push_back(std::move(choice));
  }
  return Status::ok();
}

const TuningChoice *TuningTable::find(const ShapeClass &shape) const {
  for (const TuningChoice &c : choices)
    if (c.shape == shape)
      return &c;
  return nullptr;
}

std::string TuningTable::serialize() const {
  json j;
  j["format"] = "attnc-tuning";
  j["version"] = kVersion;
  j["choices"] = json::array();
  for (const TuningChoice &c : choices) {
    json e;
    putShape(e, c.shape);
    putConfig(e, c.config);
    e["gpu"] = c.gpu;
    e["workloads"] = c.workloads;
    e["candidates"] = json::array();
    for (const auto &cand : c.candidates) {
      json k;
      k["config"] = cand.config.name();
      if (cand.excluded.empty())
        k["score"] = cand.score;
      else
        k["excluded"] = cand.excluded;
      e["candidates"].push_back(k);
    }
    j["choices"].push_back(e);
  }
  return j.dump(1) + "\n";
}

Status TuningTable::parse(const std::string &text, const std::string &origin,
                          TuningTable &out) {
  out = TuningTable();
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("format") ||
      j["format"] != "attnc-tuning")
    return Status::invalidArgument(origin +
                                   ": not an attnc tuning file (attnc tune)");
  if (!j.contains("version") || j["version"] != kVersion)
    return Status::invalidArgument(fmt::format(
        "{}: tuning file version {} (this attnc reads version {})", origin,
        j.contains("version") ? j["version"].dump() : "none", kVersion));
  if (!j.contains("choices") || !j["choices"].is_array())
    return Status::invalidArgument(origin + ": 'choices' must be an array");
  for (size_t i = 0; i < j["choices"].size(); ++i) {
    const json &e = j["choices"][i];
    std::string where = fmt::format("{}: choices[{}]", origin, i);
    if (!e.is_object())
      return Status::invalidArgument(where + ": not an object");
    Reader rd{e, where, Status::ok()};
    TuningChoice c;
    c.shape = rd.shape();
    c.config = rd.config();
    if (!rd.st)
      return rd.st;
    if (e.contains("gpu") && e["gpu"].is_string())
      c.gpu = e["gpu"].get<std::string>();
    if (out.find(c.shape))
      return Status::invalidArgument(where + ": a second choice for " +
                                     c.shape.describe());
    out.choices.push_back(std::move(c));
  }
  return Status::ok();
}

Status TuningTable::read(const std::string &path, TuningTable &out) {
  std::string text;
  if (Status s = readFileLimited(path, 64 << 20, text); !s)
    return s;
  return parse(text, path, out);
}

} // namespace attnc::rt
