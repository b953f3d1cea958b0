//===- Tune.cpp - `attnc tune`: tile configurations from timed records ---===//
//
// Reads the records `attnc-run CANDIDATES --tune` wrote on a device, picks
// one tile configuration per shape class (rt::selectTileConfigs), prints
// how every candidate fared and writes the tuning file that
// `attnc compile --emit=package --tuning FILE` builds with. It runs no
// kernel: timing happens on the device, never while compiling.
//
//===----------------------------------------------------------------------===//
#include "Check.h"

#include "attnc/runtime/FileIO.h"
#include "attnc/runtime/Tuning.h"

#include <fmt/format.h>

#include <iostream>

namespace attnc::tools {

namespace {
const char *kTuneUsage = R"(usage: attnc tune RECORDS.jsonl... [-o FILE]

Chooses a tile configuration per shape class (target, dtype, Dqk, Dv) from
the JSON-line records of attnc-run CANDIDATES --tune: the candidate with
the lowest geometric mean of (its median time / the best candidate's) over
the class's workloads. Candidates that failed the reference check or were
not timed on every workload are excluded. Prints the comparison to
standard error and the tuning file to FILE (default: standard output),
for attnc compile --emit=package --tuning FILE.
)";
} // namespace

int runTune(const std::vector<std::string> &args) {
  std::vector<std::string> inputs;
  std::string output;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &a = args[i];
    if (a == "--help" || a == "-h") {
      std::cout << kTuneUsage;
      return 0;
    }
    if (a == "-o" && i + 1 < args.size())
      output = args[++i];
    else if (a.rfind("-o=", 0) == 0)
      output = a.substr(3);
    else if (!a.empty() && a[0] == '-')
      return (std::cerr << "attnc: error: unknown option '" << a
                        << "' for 'tune'\nrun 'attnc tune --help' for usage\n",
              2);
    else
      inputs.push_back(a);
  }
  if (inputs.empty())
    return (std::cerr << "attnc: error: 'tune' needs at least one records "
                         "file (attnc-run CANDIDATES --tune)\n",
            2);
  std::vector<rt::TuningRecord> records;
  for (const std::string &path : inputs) {
    std::string text;
    rt::Status s = rt::readFileLimited(path, 256 << 20, text);
    if (s)
      s = rt::parseTuningRecords(text, path, records);
    if (!s) {
      std::cerr << "attnc: error: " << s.message() << "\n";
      return 1;
    }
  }
  rt::TuningTable table;
  if (rt::Status s = rt::selectTileConfigs(records, table); !s) {
    std::cerr << "attnc: error: " << s.message() << "\n";
    return 1;
  }
  for (const rt::TuningChoice &c : table.choices) {
    std::cerr << fmt::format("{} on {}: {} ({} workloads)\n",
                             c.shape.describe(), c.gpu, c.config.name(),
                             c.workloads);
    for (const auto &cand : c.candidates)
      std::cerr << (cand.excluded.empty()
                        ? fmt::format("  {:<14} {:.3f}x the best\n",
                                      cand.config.name(), cand.score)
                        : fmt::format("  {:<14} excluded: {}\n",
                                      cand.config.name(), cand.excluded));
  }
  for (const auto &[shape, why] : table.unresolved)
    std::cerr << fmt::format("{}: no choice: {}\n", shape.describe(), why);
  std::string json = table.serialize();
  if (output.empty() || output == "-")
    std::cout << json;
  else if (rt::Status s = rt::writeFileAtomic(output, json); !s) {
    std::cerr << "attnc: error: " << s.message() << "\n";
    return 1;
  }
  return table.unresolved.empty() ? 0 : 1;
}

} // namespace attnc::tools
