//===- MaskAnalysisPass.cpp - -attn-mask-analysis --------------------------===//
//
// Records each variant's mask analysis on it (attn.mask_kind, attn.mask).
//
//===----------------------------------------------------------------------===//
#include "attnc/Analysis/MaskAnalysis.h"
#include "attnc/Passes.h"

using namespace mlir;

namespace attnc {

#define GEN_PASS_DEF_ATTNMASKANALYSIS
#include "attnc/Passes.h.inc"

namespace {
struct MaskAnalysisPass : impl::AttnMaskAnalysisBase<MaskAnalysisPass> {
  void runOnOperation() override {
    Builder b(&getContext());
    for (auto v : getOperation().getOps<attn::VariantOp>()) {
      MaskAnalysis m = analyzeMask(v);
      const char *kind = m.kind == rt::MaskKind::None     ? "none"
                         : m.kind == rt::MaskKind::Closed ? "closed"
                                                          : "data";
      v->setAttr("attn.mask_kind", b.getStringAttr(kind));
      v->setAttr("attn.mask", b.getStringAttr(m.describe()));
    }
  }
};
} // namespace

} // namespace attnc
