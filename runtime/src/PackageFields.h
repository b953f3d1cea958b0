//===- PackageFields.h - Reading a package's JSON fields safely -*- C++ -*-===//
//
// Package.cpp (forward kernels) and PackageBackward.cpp (backward kernels)
// read the same kinds of fields: every access checks its type and bounds
// first (a package is input, and nothing in it may throw, overflow or be
// truncated), and each image's PTX must be for its target and declare its
// entries with the parameter sizes of the manifest.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PACKAGEFIELDS_H
#define ATTNC_RUNTIME_PACKAGEFIELDS_H

#include "attnc/runtime/Package.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <climits>
#include <string>
#include <utility>
#include <vector>

namespace attnc::rt {

using nlohmann::json;

// Limits on what a package may hold: generous for what the compiler emits,
// and far below what could overflow the launcher's arithmetic.
inline constexpr size_t kMaxPtxBytes = 64 << 20;
inline constexpr size_t kMaxParams = 4096;
inline constexpr int64_t kMaxSharedBytes = 232448; // the largest opt-in (sm_90)

/// A string field of `j` (required) with at most `max` bytes.
inline bool stringField(const json &j, const char *key, std::string &out,
                 std::string &why, size_t max = 4096) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) {
    why = fmt::format("\"{}\" must be a string", key);
    return false;
  }
  out = it->get<std::string>();
  if (out.size() > max) {
    why = fmt::format("\"{}\" is longer than {} bytes", key, max);
    return false;
  }
  return true;
}

/// An optional boolean field (absent: false).
inline bool optionalBoolField(const json &j, const char *key, bool &out,
                              std::string &why) {
  auto it = j.find(key);
  out = false;
  if (it == j.end())
    return true;
  if (!it->is_boolean()) {
    why = fmt::format("\"{}\" must be a boolean, found {}", key, it->dump());
    return false;
  }
  out = it->get<bool>();
  return true;
}

/// An integer field in [lo, hi] (never truncated).
inline bool intField(const json &j, const char *key, int64_t lo, int64_t hi,
              int64_t &out, std::string &why) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer() ||
      (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX)) ||
      it->get<int64_t>() < lo || it->get<int64_t>() > hi) {
    why = fmt::format("\"{}\" must be an integer in [{}, {}]{}", key, lo, hi,
                      it == j.end() ? "" : ", found " + it->dump());
    return false;
  }
  out = it->get<int64_t>();
  return true;
}

inline bool paramSizes(const json &j, const char *key, std::vector<int> &out,
                std::string &why) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array() || it->size() > kMaxParams) {
    why = fmt::format("\"{}\" must be an array of at most {} sizes", key,
                      kMaxParams);
    return false;
  }
  out.clear();
  for (const json &x : *it) {
    if (!x.is_number_integer() ||
        (x.get<int64_t>() != 4 && x.get<int64_t>() != 8 && x.get<int64_t>() != 128)) {
      why = fmt::format("\"{}\" holds {}, not a parameter size (4, 8, or 128: a tensor map)", key,
                        x.dump());
      return false;
    }
    out.push_back(static_cast<int>(x.get<int64_t>()));
  }
  return true;
}

/// An optional tile-work object {"mma": N, "async_copies": M, "atomics":
/// A, "tma_loads": T, "mbarrier_waits": W, "sum_mma": S} (the last four
/// optional; S <= N); absent, `out` stays unstated (zero).
inline bool tileWorkField(const json &j, const char *key, TileWork &out,
                          std::string &why) {
  auto it = j.find(key);
  if (it == j.end())
    return true;
  if (!it->is_object()) {
    why = fmt::format("\"{}\" must be an object", key);
    return false;
  }
  constexpr int64_t kMax = 1 << 20;
  if (!intField(*it, "mma", 0, kMax, out.mma, why) ||
      !intField(*it, "async_copies", 0, kMax, out.asyncCopies, why) ||
      (it->contains("atomics") &&
       !intField(*it, "atomics", 0, kMax, out.atomics, why)) ||
      (it->contains("tma_loads") &&
       !intField(*it, "tma_loads", 0, kMax, out.tmaLoads, why)) ||
      (it->contains("mbarrier_waits") &&
       !intField(*it, "mbarrier_waits", 0, kMax, out.mbarrierWaits, why)) ||
      (it->contains("sum_mma") &&
       !intField(*it, "sum_mma", 0, out.mma, out.sumMma, why))) {
    why = fmt::format("\"{}\": {}", key, why);
    return false;
  }
  return true;
}

inline json tileWorkToJson(const TileWork &w) {
  json j{{"mma", w.mma}, {"async_copies", w.asyncCopies}};
  if (w.atomics)
    j["atomics"] = w.atomics;
  if (w.tmaLoads)
    j["tma_loads"] = w.tmaLoads;
  if (w.mbarrierWaits)
    j["mbarrier_waits"] = w.mbarrierWaits;
  if (w.sumMma)
    j["sum_mma"] = w.sumMma;
  return j;
}

/// The PTX is for `target` and declares each named entry (an empty name is
/// skipped) with exactly the given parameter sizes.
inline bool checkPtx(
    const std::string &ptx, const std::string &target,
    std::initializer_list<std::pair<const std::string *, const std::vector<int> *>>
        entries,
    std::string &why) {
  if (ptx.find_first_not_of(" \t\r\n") == std::string::npos) {
    why = fmt::format("the PTX of '{}' is empty", *entries.begin()->first);
    return false;
  }
  std::string targetLine = "\n.target " + target;
  size_t at = ptx.find(targetLine);
  if (at == std::string::npos ||
      (at + targetLine.size() < ptx.size() &&
       std::isalnum(static_cast<unsigned char>(ptx[at + targetLine.size()])))) {
    why = fmt::format("the PTX of '{}' is not for its target {}",
                      *entries.begin()->first, target);
    return false;
  }
  for (auto [entry, sizes] : entries) {
    if (entry->empty())
      continue;
    std::vector<int> actual;
    if (Status st = ptxEntryParams(ptx, *entry, actual); !st) {
      why = st.message();
      return false;
    }
    if (actual.size() != sizes->size()) {
      why = fmt::format("the manifest gives '{}' {} parameters, its PTX "
                        "declares {}", *entry, sizes->size(), actual.size());
      return false;
    }
    for (size_t i = 0; i < actual.size(); ++i)
      if (actual[i] != (*sizes)[i]) {
        why = fmt::format("the manifest gives parameter {} of '{}' {} bytes, "
                          "its PTX declares {}",
                          i, *entry, (*sizes)[i], actual[i]);
        return false;
      }
  }
  return true;
}

/// The block size the manifest launches `entry` with agrees with the one
/// its PTX declares (.maxntid/.reqntid), where it declares one: a kernel
/// written for 256 threads and launched with 128 races in shared memory.
inline bool entryThreadsMatch(const std::string &ptx, const std::string &entry,
                              int64_t threads, std::string &why) {
  int64_t declared = ptxEntryMaxThreads(ptx, entry);
  if (declared < 0) {
    why = fmt::format("cannot read the block size (.maxntid) of '{}'", entry);
    return false;
  }
  if (declared && declared != threads) {
    why = fmt::format("the manifest launches '{}' with {} threads, its PTX "
                      "declares {} (.maxntid)",
                      entry, threads, declared);
    return false;
  }
  return true;
}

/// An image's optional "mask_builder" entry and its "mask_builder_params":
/// present exactly when the variant's mask is data-dependent, and named
/// `stem` + "_block_mask". `what` names the image in errors.
inline bool maskBuilderFields(const json &j, const VariantInfo &info,
                              const std::string &what, const std::string &stem,
                              std::string &name, std::vector<int> &params,
                              std::string &why) {
  if (j.contains("mask_builder")) {
    if (!stringField(j, "mask_builder", name, why, 256) ||
        !paramSizes(j, "mask_builder_params", params, why))
      return false;
    if (name != stem + "_block_mask") {
      why = fmt::format("{} names the block-mask builder '{}'", what, name);
      return false;
    }
  }
  if ((info.maskKind == MaskKind::Data) == name.empty()) {
    why = what + " of variant '" + info.name + "' " +
          (name.empty()
               ? "lacks the block-mask builder its data-dependent mask needs"
               : "has a block-mask builder but no data-dependent mask");
    return false;
  }
  return true;
}

/// What a kernel's options add to its description ("", " key offsets",
/// " dropout, key offsets").
inline std::string describeOptions(const KernelSpec &s) {
  if (!s.dropout && !s.keyOffsets)
    return "";
  return std::string(" ") + (s.dropout ? "dropout" : "") +
         (s.dropout && s.keyOffsets ? ", " : "") +
         (s.keyOffsets ? "key offsets" : "");
}

/// Of `images` (forward or backward), the one for a device of compute
/// capability `cc` and these inputs: the highest target not above `cc`
/// (PTX is JIT-compiled forward); of those with the options `needs` asks
/// for, the one with the fewest others; of several such the first; null
/// if none. `have` lists what there is.
template <typename Image>
const Image *selectImage(const std::vector<Image> &images, int cc, DType dtype,
                         int64_t headDim, int64_t vHeadDim, KernelNeeds needs,
                         std::string &have) {
  const Image *out = nullptr;
  int best = -1;
  for (const Image &k : images) {
    have += fmt::format("{}{} {} D={}/{}{}", have.empty() ? "" : ", ",
                        k.target, dtypeName(k.spec.dtype), k.spec.headDim,
                        k.spec.vHeadDim, describeOptions(k.spec));
    bool arch = false;
    int t = targetNumber(k.target, &arch);
    // An architecture-specific kernel (sm_90a) runs on its own compute
    // capability only, and is preferred there to the generic one; then
    // a kernel without options the call does not need (each costs).
    int unneeded = (k.spec.keyOffsets && !needs.keyOffsets ? 1 : 0) +
                   (k.spec.dropout && !needs.dropout ? 1 : 0);
    int rank = 4 * (2 * t + (arch ? 1 : 0)) + (2 - unneeded);
    if (k.spec.dtype != dtype || k.spec.headDim != headDim ||
        k.spec.vHeadDim != vHeadDim || t > cc || (arch && t != cc) ||
        (needs.keyOffsets && !k.spec.keyOffsets) ||
        (needs.dropout && !k.spec.dropout) || rank <= best)
      continue;
    best = rank;
    out = &k;
  }
  return out;
}

/// A backward image as the package's JSON, and back (PackageBackward.cpp):
/// the parse checks every field, the entry names against the variant and
/// the manifest, and the PTX.
json backwardToJson(const GpuBackwardImage &k);
bool parseBackward(const json &j, const VariantInfo &info, GpuBackwardImage &k,
                   std::string &why);

} // namespace attnc::rt

#endif
