//===- WgmmaForm.cpp - The sm_90a forward form: wgmma ---------------------===//
//
// f16/bf16 on sm_90a (Hopper's architecture-specific target) with head dims
// that are multiples of 64 up to 256: the tensor-core forward's loop
// (MmaSyncKernel.cpp) with both products on wgmma (Wgmma.h), warp-
// specialized. A CTA is block_m / 64 consumer warpgroups and one producer
// warpgroup: each consumer warpgroup issues S = Q K^T for its 64 rows as
// one m64n{block_n}k16 per 16 of Dqk from shared-memory descriptors (Q
// stays in shared memory), and O += P V with P from registers; the
// producer fills three stages of K and V (two where Dqk + Dv > 256) in
// 128-byte swizzled atoms by TMA (Tma.h), or by cp.async where the call's
// tensor maps cannot serve, behind a `full` and an `empty` mbarrier per
// stage, and gives the consumers its registers (setmaxnreg); the two
// consumer warpgroups take turns issuing their products (ping-pong), and a
// consumer warpgroup computes a tile's softmax while the previous tile's
// P V runs (WgmmaTileLoop.cpp) where three stages fit. Issue #30's steps
// (a) and (b). Other shapes take the mma.sync form on sm_90a.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "ProgramBuilder.h"
#include "TensorCoreForward.h"
#include "TensorCoreLayout.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"

using namespace mlir;

namespace attnc {
namespace {

/// block_m and block_n per head-dim class (max(Dqk, Dv) up to): 2
/// warpgroups of 64 rows; the KV tile as wide as the registers allow (S is
/// block_n / 2 and O Dv / 2 f32 per thread), FlashAttention-3's shapes for
/// D 64 and 128.
struct WgmmaTile {
  int64_t maxDim, blockM, blockN;
};
constexpr WgmmaTile kTable[] = {{64, 128, 128}, {128, 128, 128}, {256, 128, 64}};

/// A warp per 16 query rows (two consumer warpgroups at block_m 128) and
/// the producer warpgroup: the warps its configuration name states.
int64_t launchWarps(const rt::KernelSpec &s) {
  return tensorCoreWarps(s, /*wgmma=*/true);
}

/// Whether the forward of `v` (null: any) keeps the softmax's sums in O's
/// accumulator (TensorCoreLayout::sumsInAccumulator): not with dropout,
/// and not at Dv > 64 where a modifier gathers at an index of the key. The
/// column's 4 registers per thread beside such gathers' made ptxas
/// serialize the wgmma pipeline (synaptic, relative_bias at D=128: the
/// static model's gate) or spill in the tile loop (document_mask).
bool sumsFit(const rt::KernelSpec &s, attn::VariantOp v) {
  if (!tensorCoreLayout(s, /*wgmma=*/true).sumsInAccumulator)
    return false;
  if (!v || s.vHeadDim <= 64)
    return true;
  // (score_mod's arguments: score, b, h, q, kv; mask_mod's: b, h, q, kv)
  using codegen::ProgramBuilder;
  return !ProgramBuilder::gathersVarying(v.getScoreBlock(), {4}) &&
         !ProgramBuilder::gathersVarying(v.getMaskBlock(), {3});
}

bool isWgmmaShape(const rt::KernelSpec &s) {
  return (s.dtype == rt::DType::F16 || s.dtype == rt::DType::BF16) &&
         s.headDim % 64 == 0 && s.vHeadDim % 64 == 0 && s.headDim > 0 &&
         s.vHeadDim > 0 && s.headDim <= 256 && s.vHeadDim <= 256;
}

class WgmmaForm final : public KernelForm {
public:
  /// `persistent`: the form `wgmma-persistent`, asked for by name only
  /// (attnc compile --form): the same kernel with each block taking work
  /// items a grid apart, the producer filling stages with the next item's
  /// tiles while the consumers finish this one's (forEachItem in
  /// MmaSyncKernel.cpp); the runtime launches one block per SM.
  explicit WgmmaForm(bool persistent) : persistent_(persistent) {}
  StringRef name() const override {
    return persistent_ ? "wgmma-persistent" : "wgmma";
  }
  Direction direction() const override { return Direction::Forward; }
  bool runsOn(StringRef target) const override { return target == "sm_90a"; }
  std::optional<rt::KernelSpec> configure(const rt::KernelSpec &request,
                                          StringRef target) const override {
    if (!isWgmmaShape(request))
      return std::nullopt;
    rt::KernelSpec s = request;
    if (requestsDefaultTiles(request)) {
      int64_t d = std::max(request.headDim, request.vHeadDim);
      for (const WgmmaTile &t : kTable)
        if (d <= t.maxDim) {
          s.blockM = t.blockM;
          s.blockN = t.blockN;
          break;
        }
      s.warps = launchWarps(s);
    }
    while (s.blockN > 16 &&
           tensorCoreSharedBytes(s, true) > gpuSharedOptIn(target.str()))
      s.blockN -= 16;
    if (accepts(s, target))
      return s;
    return std::nullopt;
  }
  bool accepts(const rt::KernelSpec &s, StringRef target) const override {
    return isWgmmaShape(s) && s.blockM % 64 == 0 && s.blockM >= 64 &&
           s.blockM <= 256 && s.warps == launchWarps(s) && s.blockN % 16 == 0 &&
           s.blockN >= 16 && s.blockN <= 256 &&
           tensorCoreSharedBytes(s, true) <= gpuSharedOptIn(target.str());
  }
  /// The table's tiles with each pipeline depth that fits: three stages
  /// (the softmax overlapping the previous tile's P V) against two (the
  /// products in turn) and four; the table's choice first.
  std::vector<rt::KernelSpec> tileCandidates(const rt::KernelSpec &request,
                                             StringRef target) const override {
    std::vector<rt::KernelSpec> out;
    for (int64_t stages : {int64_t(0), int64_t(2), int64_t(3), int64_t(4)}) {
      rt::KernelSpec r = request;
      r.blockM = rt::KernelSpec().blockM;
      r.blockN = rt::KernelSpec().blockN;
      r.warps = rt::KernelSpec().warps;
      r.stages = stages;
      std::optional<rt::KernelSpec> s = configure(r, target);
      if (!s || (stages && tileConfig(*s).stages != stages))
        continue;
      s->stages = tileConfig(*s).stages;
      bool seen = false;
      for (const rt::KernelSpec &o : out)
        seen |= tileConfig(o).name() == tileConfig(*s).name();
      if (!seen)
        out.push_back(*s);
    }
    return out;
  }
  rt::TileConfig tileConfig(const rt::KernelSpec &s) const override {
    return rt::TileConfig{s.blockM, s.blockN, launchWarps(s),
                          tensorCoreLayout(s, true).stages};
  }
  std::vector<KernelEntry> entries(const rt::KernelSpec &s,
                                   attn::VariantOp v) const override {
    LaunchFacts l;
    l.threads = tensorCoreWarps(s, true) * 32;
    l.dynamicSharedBytes = tensorCoreSharedBytes(s, true);
    l.persistent = persistent_ && tensorCoreLayout(s, true).producerWarps > 0;
    rt::TileWork w = tensorCoreWork(s, true);
    if (!sumsFit(s, v)) {
      w.mma -= w.sumMma;
      w.sumMma = 0;
    }
    return {KernelEntry{"", l, w}};
  }
  /// The scale goes into the exponents where the score_mod is the
  /// identity: Q, in shared memory, takes a negative scale's sign once per
  /// work item.
  bool takesScaleInExponent(const rt::KernelSpec &) const override {
    return true;
  }
  /// The sums as O's ones column where they fit (sumsFit).
  bool takesSumsInAccumulator(const rt::KernelSpec &s,
                              attn::VariantOp v) const override {
    return sumsFit(s, v);
  }
  LogicalResult lower(flash::KernelOp kernel, const MaskAnalysis &mask,
                      Operation *container) const override {
    return lowerTensorCoreForward(kernel, mask, container, /*wgmma=*/true,
                                  persistent_);
  }

private:
  bool persistent_;
};

} // namespace

const KernelForm &wgmmaForm() {
  static const WgmmaForm form(/*persistent=*/false);
  return form;
}

const KernelForm &wgmmaPersistentForm() {
  static const WgmmaForm form(/*persistent=*/true);
  return form;
}

} // namespace attnc
