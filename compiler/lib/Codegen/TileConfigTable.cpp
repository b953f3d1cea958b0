//===- TileConfigTable.cpp - GPU kernel configurations per shape ---------===//
//
// The configuration table, tuning files' choices, the tuner's candidates
// and each configuration's threads, shared memory and name.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/TileConfigTable.h"
#include "attnc/Codegen/FlashProgram.h"

#include <fmt/format.h>

#include <algorithm>

namespace attnc {

bool isGpuTarget(const std::string &t) {
  return t == "sm_80" || t == "sm_86" || t == "sm_89" || t == "sm_90";
}

namespace {
constexpr int64_t kStaticShared = 48 * 1024;

/// The configuration table of the tensor-core form: block_m, block_n and
/// warps per head-dim class, the first row that matches. Off sm_90, 128-row
/// tiles of 8 warps x 16 rows: the largest that ptxas assembles with no
/// spills for every example (block_n 32 above D=64, where synaptic spills at
/// 64; block_n 16 above D=192 before sm_90, where softcap and synaptic spill
/// at 32 at D=256, and above D=224 on sm_90, where relative_bias spills at
/// 32 at D=240; 2 m-tiles per warp, which halve the shared-memory reads per
/// row, spill at block_n 64). On sm_90 up to D=64, 64-row tiles of 4 warps:
/// timed on an H100 (bf16, causal and document mask, prefill 2k/8k and
/// decode 8k; docs/performance.md) they took 1.16x the best candidate's
/// time against 1.41x for 128x64 with 8 warps; the fastest there (64x128,
/// 128x64 with 4 warps) spill for synaptic. Other rows: ptxas's figures,
/// not yet timed on a device (docs/kernels.md).
struct TileChoice {
  int64_t maxDim, blockM, blockN, warps;
  bool sm90Only;
};
constexpr TileChoice kTensorCoreTable[] = {
    {64, 64, 64, 4, true},
    {64, 128, 64, 8, false},
    {192, 128, 32, 8, false},
    {224, 128, 32, 8, true},
    {256, 128, 16, 8, false},
};

/// The tuner's candidates besides the table's: (block_m, warps) x block_n.
constexpr std::pair<int64_t, int64_t> kCandidateRows[] = {{64, 4}, {128, 8}, {128, 4}};
constexpr int64_t kCandidateBlockN[] = {32, 64, 128};
} // namespace

int64_t gpuSharedOptIn(const std::string &target) {
  // cudaDevAttrMaxSharedMemoryPerBlockOptin: 163 KB on sm_80, 99 KB on
  // sm_86/sm_89, 227 KB on sm_90.
  if (target == "sm_80")
    return 166912;
  if (target == "sm_90")
    return 232448;
  return 101376;
}

bool requestsDefaultTiles(const rt::KernelSpec &s) {
  rt::KernelSpec d;
  return s.blockM == d.blockM && s.blockN == d.blockN && s.warps == d.warps;
}

rt::KernelSpec gpuSpec(const rt::KernelSpec &requested,
                       const std::string &target) {
  rt::KernelSpec tc = requested;
  if (requestsDefaultTiles(requested)) {
    int64_t d = std::max(requested.headDim, requested.vHeadDim);
    for (const TileChoice &c : kTensorCoreTable)
      if (d <= c.maxDim && (!c.sm90Only || target == "sm_90")) {
        tc.blockM = c.blockM;
        tc.blockN = c.blockN;
        tc.warps = c.warps;
        break;
      }
  }
  // Tensor cores: the largest KV tile (a multiple of 16, at most the
  // request) whose stages fit the target's shared memory.
  tc.blockN = tc.blockN / 16 * 16;
  while (tc.blockN > 16 &&
         tensorCoreLayout(tc).sharedBytes() > gpuSharedOptIn(target))
    tc.blockN -= 16;
  if (useTensorCores(tc) &&
      tensorCoreLayout(tc).sharedBytes() <= gpuSharedOptIn(target))
    return tc;
  // SIMT: K^T and V tiles in f32, static shared memory.
  rt::KernelSpec s = requested;
  s.warps = 0;
  int64_t perKey = (s.headDim + s.vHeadDim) * 4;
  s.blockN = std::max<int64_t>(
      8, std::min<int64_t>(s.blockN, (kStaticShared / perKey) / 8 * 8));
  return s;
}

rt::Status applyTuning(const rt::KernelSpec &requested,
                       const std::string &target,
                       const rt::TuningTable &tuning, rt::KernelSpec &out) {
  out = requested;
  if (!requestsDefaultTiles(requested))
    return rt::Status::ok();
  rt::ShapeClass shape{target, requested.dtype, requested.headDim,
                       requested.vHeadDim};
  const rt::TuningChoice *c = tuning.find(shape);
  if (!c)
    return rt::Status::ok();
  rt::KernelSpec tuned = requested;
  tuned.blockM = c->config.blockM;
  tuned.blockN = c->config.blockN;
  tuned.warps = c->config.warps;
  rt::KernelSpec built = gpuSpec(tuned, target);
  if (!useTensorCores(tuned) || built.blockN != tuned.blockN ||
      tensorCoreLayout(tuned).stages != c->config.stages)
    return rt::Status::invalidArgument(fmt::format(
        "the tuning file's choice for {} ({}) is not a tensor-core "
        "configuration that fits {}",
        shape.describe(), c->config.name(), target));
  out = tuned;
  return rt::Status::ok();
}

std::vector<rt::KernelSpec> gpuTileCandidates(const rt::KernelSpec &request,
                                              const std::string &target) {
  std::vector<rt::KernelSpec> out;
  auto add = [&](rt::KernelSpec s) {
    s = gpuSpec(s, target);
    if (!useTensorCores(s))
      return;
    s.warps = tensorCoreLayout(s).warps;
    for (const rt::KernelSpec &o : out)
      if (o.blockM == s.blockM && o.blockN == s.blockN && o.warps == s.warps)
        return;
    out.push_back(s);
  };
  rt::KernelSpec defaults = request;
  defaults.blockM = rt::KernelSpec().blockM;
  defaults.blockN = rt::KernelSpec().blockN;
  defaults.warps = rt::KernelSpec().warps;
  add(defaults);
  if (out.empty())
    return out; // not a tensor-core shape
  for (auto [blockM, warps] : kCandidateRows)
    for (int64_t blockN : kCandidateBlockN) {
      rt::KernelSpec s = request;
      s.blockM = blockM;
      s.blockN = blockN;
      s.warps = warps;
      // Only configurations that fit whole (gpuSpec would shrink block_n
      // into another candidate).
      if (tensorCoreLayout(s).sharedBytes() <= gpuSharedOptIn(target))
        add(s);
    }
  return out;
}

int64_t gpuThreads(const rt::KernelSpec &spec) {
  return useTensorCores(spec) ? tensorCoreLayout(spec).warps * 32
                              : spec.blockM;
}

int64_t gpuSharedBytes(const rt::KernelSpec &spec) {
  if (useTensorCores(spec))
    return 0;
  return (spec.headDim + spec.vHeadDim) * spec.blockN * 4;
}

int64_t gpuDynamicSharedBytes(const rt::KernelSpec &spec) {
  return useTensorCores(spec) ? tensorCoreLayout(spec).sharedBytes() : 0;
}

rt::TileConfig gpuTileConfig(const rt::KernelSpec &spec) {
  rt::TileConfig c;
  c.blockM = spec.blockM;
  c.blockN = spec.blockN;
  c.warps = (gpuThreads(spec) + 31) / 32;
  c.stages = useTensorCores(spec) ? tensorCoreLayout(spec).stages : 1;
  return c;
}

std::string gpuKernelName(llvm::StringRef variant, const rt::KernelSpec &spec) {
  return fmt::format("attnc_{}_{}_d{}v{}_{}", variant.str(),
                     rt::dtypeName(spec.dtype), spec.headDim, spec.vHeadDim,
                     gpuTileConfig(spec).name());
}

} // namespace attnc
