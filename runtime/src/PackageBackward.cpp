//===- PackageBackward.cpp - The backward's kernels in a package ----------===//
//
// A package variant's "backward" array: one GpuBackwardImage per (target,
// dtype, head dims), written by `attnc compile --emit=package --backward`
// and read, with every field checked, by the runtime (attnc-run
// --backward, the Python package). Launch facts are those
// cuda::GpuBackwardKernel::load checks again.
//
//===----------------------------------------------------------------------===//
#include "PackageFields.h"

#include "attnc/runtime/Parse.h"

namespace attnc::rt {

json backwardToJson(const GpuBackwardImage &k) {
  json j;
  j["target"] = k.target;
  j["dtype"] = std::string(dtypeName(k.spec.dtype));
  j["head_dim"] = k.spec.headDim;
  j["v_head_dim"] = k.spec.vHeadDim;
  j["block_m"] = k.spec.blockM;
  j["block_n"] = k.spec.blockN;
  if (k.spec.dropout)
    j["dropout"] = true;
  if (k.spec.keyOffsets)
    j["key_offsets"] = true;
  j["warps"] = k.spec.warps; // > 0: tensor cores, a warp per 16 rows
  j["query"] = k.query;
  j["query_threads"] = k.queryThreads;
  j["query_shared_bytes"] = k.querySharedBytes;
  j["query_dynamic_shared_bytes"] = k.queryDynamicSharedBytes;
  j["query_params"] = k.queryParams;
  j["key_value"] = k.keyValue;
  j["key_value_threads"] = k.keyValueThreads;
  j["key_value_shared_bytes"] = k.keyValueSharedBytes;
  j["key_value_dynamic_shared_bytes"] = k.keyValueDynamicSharedBytes;
  j["key_value_params"] = k.keyValueParams;
  if (!k.maskBuilder.empty()) {
    j["mask_builder"] = k.maskBuilder;
    j["mask_builder_params"] = k.maskBuilderParams;
  }
  if (k.queryTileWork.mma)
    j["query_tile_work"] = tileWorkToJson(k.queryTileWork);
  if (k.keyValueTileWork.mma)
    j["key_value_tile_work"] = tileWorkToJson(k.keyValueTileWork);
  j["ptx"] = k.ptx;
  return j;
}

namespace {

/// The tiles the entry names encode (m<M>n<N>w<W>s<S>) against the
/// manifest's block_m, block_n, warps and thread counts: a relabelled
/// manifest would launch the kernel over the wrong grid or block.
/// Tensor-core kernels (warps > 0) run warps x 32 threads in both entries,
/// a warp per 16 query rows, _bwd_q's K and V in one or two stages; SIMT
/// kernels a thread per query row (_bwd_q) and per key row (_bwd_kv), one
/// stage.
bool checkBackwardTiles(const GpuBackwardImage &k, const std::string &tiles,
                        std::string &why) {
  int64_t m = k.spec.blockM, n = k.spec.blockN, w = k.spec.warps;
  bool mma = w > 0;
  std::string want = fmt::format("m{}n{}w{}s{}", m, n,
                                 mma ? w : (k.queryThreads + 31) / 32,
                                 mma ? 2 : 1);
  if (mma && tiles == fmt::format("m{}n{}w{}s1", m, n, w))
    want = tiles;
  if (tiles != want) {
    why = fmt::format("backward kernel '{}' names tiles '{}', its manifest "
                      "gives '{}' (block_m, block_n, warps, threads)",
                      k.query, tiles, want);
    return false;
  }
  int64_t qThreads = mma ? w * 32 : m, kvThreads = mma ? w * 32 : n;
  if ((mma && m != w * 16) || k.queryThreads != qThreads ||
      k.keyValueThreads != kvThreads) {
    why = fmt::format("backward kernel '{}' launches {} and {} threads with "
                      "block_m {} and warps {}; its tiles take {} and {}",
                      k.query, k.queryThreads, k.keyValueThreads, m, w,
                      qThreads, kvThreads);
    return false;
  }
  return true;
}

} // namespace

bool parseBackward(const json &j, const VariantInfo &info, GpuBackwardImage &k,
                   std::string &why) {
  if (!j.is_object()) {
    why = "a backward kernel must be an object";
    return false;
  }
  std::string dtype;
  int64_t warps = 0;
  constexpr int64_t kStatic = 48 * 1024;
  if (!stringField(j, "target", k.target, why) ||
      !stringField(j, "dtype", dtype, why) ||
      !intField(j, "head_dim", 8, 256, k.spec.headDim, why) ||
      !intField(j, "v_head_dim", 8, 256, k.spec.vHeadDim, why) ||
      !intField(j, "block_m", 16, 1024, k.spec.blockM, why) ||
      !intField(j, "block_n", 16, 1024, k.spec.blockN, why) ||
      !optionalBoolField(j, "dropout", k.spec.dropout, why) ||
      !optionalBoolField(j, "key_offsets", k.spec.keyOffsets, why) ||
      !intField(j, "warps", -1, 32, warps, why) ||
      !stringField(j, "query", k.query, why, 256) ||
      !intField(j, "query_threads", 16, 1024, k.queryThreads, why) ||
      !intField(j, "query_shared_bytes", 0, kStatic, k.querySharedBytes, why) ||
      !intField(j, "query_dynamic_shared_bytes", 0, kMaxSharedBytes,
                k.queryDynamicSharedBytes, why) ||
      !paramSizes(j, "query_params", k.queryParams, why) ||
      !stringField(j, "key_value", k.keyValue, why, 256) ||
      !intField(j, "key_value_threads", 16, 1024, k.keyValueThreads, why) ||
      !intField(j, "key_value_shared_bytes", 0, kStatic, k.keyValueSharedBytes,
                why) ||
      !intField(j, "key_value_dynamic_shared_bytes", 0, kMaxSharedBytes,
                k.keyValueDynamicSharedBytes, why) ||
      !paramSizes(j, "key_value_params", k.keyValueParams, why) ||
      !tileWorkField(j, "query_tile_work", k.queryTileWork, why) ||
      !tileWorkField(j, "key_value_tile_work", k.keyValueTileWork, why) ||
      !stringField(j, "ptx", k.ptx, why, kMaxPtxBytes))
    return false;
  k.spec.warps = warps;
  auto dt = parseDType(dtype);
  if (!dt || (*dt != DType::F32 && *dt != DType::F16 && *dt != DType::BF16)) {
    why = fmt::format("backward kernel '{}' has dtype '{}' (expected f32, f16 "
                      "or bf16)", k.query, dtype);
    return false;
  }
  k.spec.dtype = *dt;
  if (!targetNumber(k.target)) {
    why = fmt::format("backward kernel '{}' has target '{}' (expected sm_NN)",
                      k.query, k.target);
    return false;
  }
  // Entries: attnc_<variant>_<dtype>_d<D>v<Dv>_<options><tiles>_bwd_q
  // (options: kernelOptionTags), the same with _bwd_kv, and _block_mask
  // exactly for data-dependent masks.
  std::string prefix = fmt::format("attnc_{}_{}_d{}v{}_{}", info.name, dtype,
                                   k.spec.headDim, k.spec.vHeadDim,
                                   kernelOptionTags(k.spec));
  const std::string q = "_bwd_q";
  if (k.query.rfind(prefix, 0) != 0 || k.query.size() <= prefix.size() + q.size() ||
      k.query.compare(k.query.size() - q.size(), q.size(), q) != 0) {
    why = fmt::format("backward kernel '{}' does not match its manifest "
                      "(expected '{}<tiles>_bwd_q')", k.query, prefix);
    return false;
  }
  std::string stem = k.query.substr(0, k.query.size() - q.size());
  if (k.keyValue != stem + "_bwd_kv") {
    why = fmt::format("backward kernel '{}' names its second entry '{}'",
                      k.query, k.keyValue);
    return false;
  }
  if (!checkBackwardTiles(k, stem.substr(prefix.size()), why))
    return false;
  if (!maskBuilderFields(j, info, "backward kernel '" + k.query + "'", stem,
                         k.maskBuilder, k.maskBuilderParams, why))
    return false;
  return checkPtx(k.ptx, k.target,
                  {{&k.query, &k.queryParams},
                   {&k.keyValue, &k.keyValueParams},
                   {&k.maskBuilder, &k.maskBuilderParams}},
                  why) &&
         entryThreadsMatch(k.ptx, k.query, k.queryThreads, why) &&
         entryThreadsMatch(k.ptx, k.keyValue, k.keyValueThreads, why);
}

Status selectBackward(const PackageVariant &v, int cc, DType dtype,
                      int64_t headDim, int64_t vHeadDim,
                      const GpuBackwardImage *&out, KernelNeeds needs) {
  std::string have;
  out = selectImage(v.backward, cc, dtype, headDim, vHeadDim, needs, have);
  if (out)
    return Status::ok();
  KernelSpec asked;
  asked.dropout = needs.dropout;
  asked.keyOffsets = needs.keyOffsets;
  return Status::notFound(fmt::format(
      "the package has no backward kernel of variant '{}' for sm_{} {} Dqk={} "
      "Dv={}{} (it has: {}; attnc compile --emit=package --backward adds "
      "them)",
      v.info.name, cc, dtypeName(dtype), headDim, vHeadDim,
      describeOptions(asked), have.empty() ? "none" : have));
}

} // namespace attnc::rt
