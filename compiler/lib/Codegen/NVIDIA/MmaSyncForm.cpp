//===- MmaSyncForm.cpp - The forward form on mma.sync (sm_80+) -----------===//
//
// f16/bf16 with head dims multiples of 16 up to 256 on every GPU target:
// the tensor-core forward's builder (MmaSyncKernel.cpp) with mma.sync
// m16n8k16 products, ldmatrix operands and cp.async copies; its tile table
// and the tuner's candidates.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "TensorCoreForward.h"
#include "TensorCoreLayout.h"

#include <utility>
#include <vector>

using namespace mlir;

namespace attnc {

namespace {

/// The configuration table of the mma.sync form: block_m, block_n and warps
/// per head-dim class, the first row that matches. Up to D=128, 64-row
/// tiles of 4 warps, block_n 128 up to D=64 and 64 up to D=128: on an H100
/// (bf16, prefill 2k/8k and decode 8k; docs/performance.md, "Tile tuning")
/// they took 1.00-1.16x the best candidate's time but for document_mask's
/// 2k prefill at D=64 (1.44x), where the previous rows (128x64 with 8
/// warps up to D=64, 128x32 with 8 warps above) took up to 1.95x and 1.52x;
/// the static model counts 715 and 890 MMA-FLOP per instruction for full
/// (sm_89) against 662 and 771. ptxas keeps their tile loops spill-free
/// for every example; score_mods that read captured tensors (relative_bias,
/// synaptic) spill a few loop-invariant values once per work item
/// (docs/kernels.md). Above D=128, 128-row tiles of 8
/// warps x 16 rows: the largest that ptxas assembles with no spills for
/// every example (block_n 16 above D=192 before sm_90, where softcap and
/// synaptic spill at 32 at D=256, and above D=224 on sm_90, where
/// relative_bias spills at 32 at D=240).
struct TileChoice {
  int64_t maxDim, blockM, blockN, warps;
  bool sm90Only;
};
constexpr TileChoice kTable[] = {
    {64, 64, 128, 4, false},
    {128, 64, 64, 4, false},
    {192, 128, 32, 8, false},
    {224, 128, 32, 8, true},
    {256, 128, 16, 8, false},
};

/// The tuner's candidates besides the table's: (block_m, warps) x block_n.
constexpr std::pair<int64_t, int64_t> kCandidateRows[] = {{64, 4}, {128, 8}, {128, 4}};
constexpr int64_t kCandidateBlockN[] = {32, 64, 128};

/// Up to 256: the O accumulator is Dv / 2 registers per thread and m-tile
/// (128 at 256); above 128, Q is re-read from shared memory per KV tile.
constexpr int64_t kMaxDim = 256;

/// f16/bf16, head dims multiples of 16 up to 256, block_m = 16 x warps x
/// m-tiles per warp with 1 or 2 m-tiles, block_n a multiple of 16.
bool isMmaSyncShape(const rt::KernelSpec &s) {
  if ((s.dtype != rt::DType::F16 && s.dtype != rt::DType::BF16) ||
      s.headDim % 16 || s.vHeadDim % 16 || s.headDim > kMaxDim ||
      s.vHeadDim > kMaxDim || s.blockN % 16 || s.blockN < 16 ||
      s.blockM < 16 || s.warps < 0 || s.warps > 16)
    return false;
  TensorCoreLayout L = tensorCoreLayout(s);
  return (L.mTiles == 1 || L.mTiles == 2) && L.warps * 16 * L.mTiles == s.blockM;
}

/// The mma.sync form (tensor cores, sm_80+): f16/bf16 with mma.sync
/// m16n8k16, ldmatrix operands, Q, K and V through dynamic shared memory
/// with cp.async, two stages.
class MmaSyncForm final : public KernelForm {
public:
  StringRef name() const override { return "mma-sync"; }
  Direction direction() const override { return Direction::Forward; }
  bool runsOn(StringRef target) const override {
    return isGpuTarget(target.str());
  }
  std::optional<rt::KernelSpec> configure(const rt::KernelSpec &request,
                                          StringRef target) const override {
    rt::KernelSpec tc = request;
    if (requestsDefaultTiles(request)) {
      int64_t d = std::max(request.headDim, request.vHeadDim);
      for (const TileChoice &c : kTable)
        if (d <= c.maxDim && (!c.sm90Only || gpuArch(target.str()) == 90)) {
          tc.blockM = c.blockM;
          tc.blockN = c.blockN;
          tc.warps = c.warps;
          break;
        }
    }
    // The largest KV tile (a multiple of 16, at most the request) whose
    // stages fit the target's shared memory.
    tc.blockN = tc.blockN / 16 * 16;
    while (tc.blockN > 16 && tensorCoreLayout(tc).sharedBytes() >
                                 gpuSharedOptIn(target.str()))
      tc.blockN -= 16;
    if (accepts(tc, target))
      return tc;
    return std::nullopt;
  }
  bool accepts(const rt::KernelSpec &s, StringRef target) const override {
    return isMmaSyncShape(s) &&
           tensorCoreLayout(s).sharedBytes() <= gpuSharedOptIn(target.str());
  }
  rt::TileConfig tileConfig(const rt::KernelSpec &s) const override {
    TensorCoreLayout L = tensorCoreLayout(s);
    return rt::TileConfig{s.blockM, s.blockN, L.warps, L.stages};
  }
  std::vector<KernelEntry> entries(const rt::KernelSpec &s,
                                   attn::VariantOp) const override {
    TensorCoreLayout L = tensorCoreLayout(s);
    LaunchFacts l;
    l.threads = L.warps * 32;
    l.dynamicSharedBytes = L.sharedBytes();
    return {KernelEntry{"", l, tensorCoreTileWork(s)}};
  }
  /// Q held in registers takes its sign once per work item.
  bool takesScaleInExponent(const rt::KernelSpec &s) const override {
    return tensorCoreLayout(s).qInRegisters;
  }
  /// The sums as O's ones column (TensorCoreLayout::sumsInAccumulator).
  bool takesSumsInAccumulator(const rt::KernelSpec &s,
                              attn::VariantOp) const override {
    return tensorCoreLayout(s).sumsInAccumulator;
  }
  std::vector<rt::KernelSpec> tileCandidates(const rt::KernelSpec &request,
                                             StringRef target) const override {
    std::vector<rt::KernelSpec> out;
    auto add = [&](const rt::KernelSpec &r) {
      std::optional<rt::KernelSpec> s = configure(r, target);
      if (!s)
        return;
      s->warps = tensorCoreLayout(*s).warps;
      for (const rt::KernelSpec &o : out)
        if (o.blockM == s->blockM && o.blockN == s->blockN && o.warps == s->warps)
          return;
      out.push_back(*s);
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
        // Only configurations that fit whole (configure would shrink
        // block_n into another candidate).
        if (tensorCoreLayout(s).sharedBytes() <= gpuSharedOptIn(target.str()))
          add(s);
      }
    return out;
  }
  LogicalResult lower(flash::KernelOp kernel, const MaskAnalysis &mask,
                      Operation *container) const override {
    return lowerTensorCoreForward(kernel, mask, container, /*wgmma=*/false);
  }
};

} // namespace

const KernelForm &mmaSyncForm() {
  static const MmaSyncForm form;
  return form;
}

} // namespace attnc
