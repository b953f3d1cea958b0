//===- AttnPipeline.cpp - The attn module the later stages start from -----===//
#include "attnc/Codegen/AttnPipeline.h"
#include "attnc/Autodiff/ScoreModDerivative.h"
#include "attnc/Codegen/Canonicalize.h"

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
  // forward and simplified in turn.
  for (auto v : module.getOps<attn::VariantOp>())
    if (failed(buildScoreGrad(v))) {
      error = "score_mod of '" + v.getSymName().str() +
              "' could not be differentiated";
      return failure();
    }
  if (simplify && failed(pm.run(module))) {
    error = "canonicalization failed";
    return failure();
  }
  return success();
}

} // namespace attnc
