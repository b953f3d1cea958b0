//===- Representative.h - the sanitizer build's subset of heavy matrices -===//
//
// scripts/check-sanitizers.sh runs every Catch2 suite again under ASan and
// UBSan, where the emulator and the compiler run several times slower.
// There (ATTNC_TEST_REPRESENTATIVE=1) the heaviest matrices run a
// representative subset: the examples chosen for their own compiler paths
// (tour's helpers, `let` blocks and both capture shapes; a data-dependent
// mask; a special function; a gather by a bucket) and, of a nested loop
// over forms, dtypes and head dims, a rotation that still reaches every
// value of every axis. The main build runs every case.
//
//===----------------------------------------------------------------------===//
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

namespace attnc::test {

/// True in the sanitizer build's run (ATTNC_TEST_REPRESENTATIVE set and
/// not "0").
inline bool representativeRun() {
  const char *v = std::getenv("ATTNC_TEST_REPRESENTATIVE");
  return v && *v && std::string(v) != "0";
}

/// Whether a matrix over every example runs `file` (an examples/*.attn
/// path): every one, but in a representative run only those whose
/// variants reach a compiler path the others do not.
inline bool runsExample(const std::string &file) {
  if (!representativeRun())
    return true;
  std::string stem = std::filesystem::path(file).stem().string();
  return stem == "tour" || stem == "document_mask" || stem == "softcap" ||
         stem == "relative_bias";
}

/// One combination in `every` of a nested loop's, in the loop's order, in
/// a representative run; every combination otherwise. Each use picks
/// `every` so that each value of each axis is still reached, checked by
/// hand for its loop (e.g. 3 over axes of 2, or an outer axis of 3; 2 over
/// an innermost axis of 3, which 3 would pin to its first value).
class MatrixSample {
public:
  explicit MatrixSample(int every) : every_(representativeRun() ? every : 1) {}
  bool keep() { return next_++ % every_ == 0; }

private:
  int every_;
  int next_ = 0;
};

} // namespace attnc::test
