//===- AttnPipeline.cpp - The attn module the later stages start from -----===//
#include "attnc/Codegen/AttnPipeline.h"
#include "attnc/Autodiff/ScoreModDerivative.h"
#include "attnc/Codegen/Canonicalize.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace attnc {

LogicalResult runAttnPipeline(ModuleOp module, bool simplify,
                              std::string &error) {
  PassManager pm(module.getContext());
  pm.addPass(createCanonicalizer());
  pm.addPass(createCSEPass());
  if (simplify && failed(pm.run(module))) {
    error = "canonicalization failed";
    return failure();
  }
  // score_mod's derivative (the backward pass), built from the simplified
  // forward and simplified in turn. A score_mod with an op that has no
  // derivative rule keeps an empty score_grad: its forward still compiles,
  // and the backward refuses it (the variant has no `grad` section).
  for (auto v : module.getOps<attn::VariantOp>()) {
    ScopedDiagnosticHandler quiet(module.getContext(),
                                  [](Diagnostic &) { return success(); });
    if (failed(buildScoreGrad(v))) {
      v.getScoreGrad().dropAllReferences();
      v.getScoreGrad().getBlocks().clear();
    }
  }
  if (simplify && failed(pm.run(module))) {
    error = "canonicalization failed";
    return failure();
  }
  return success();
}

} // namespace attnc
