//===- DifferentiatePass.cpp - -attn-differentiate -------------------------===//
//
// Builds each variant's score_grad region (ScoreModDerivative.cpp).
//
//===----------------------------------------------------------------------===//
#include "attnc/Autodiff/ScoreModDerivative.h"
#include "attnc/Passes.h"

using namespace mlir;

namespace attnc {

#define GEN_PASS_DEF_ATTNDIFFERENTIATE
#include "attnc/Passes.h.inc"

namespace {
struct DifferentiatePass : impl::AttnDifferentiateBase<DifferentiatePass> {
  void runOnOperation() override {
    for (auto v : getOperation().getOps<attn::VariantOp>())
      if (failed(buildScoreGrad(v)))
        return signalPassFailure();
  }
};
} // namespace

} // namespace attnc
