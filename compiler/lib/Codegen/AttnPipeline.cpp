//===- AttnPipeline.cpp - The attn module the later stages start from -----===//
#include "attnc/Codegen/AttnPipeline.h"
#include "attnc/Autodiff/ScoreModDerivative.h"
#include "attnc/Codegen/BalanceLogic.h"
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
  // Long `&&`/`||` chains as balanced trees: LLVM's cost on a chain grows
  // with the square of its length (BalanceLogic.cpp).
  balanceLogic(module);
  // score_mod's derivative (the backward pass), built from the simplified
  // forward and simplified in turn. A score_mod with an op that has no
  // derivative rule keeps an empty score_grad: its forward still compiles,
  // and the backward refuses it (the variant has no `grad` section).
  for (auto v : module.getOps<attn::VariantOp>()) {
    ScopedDiagnosticHandler quiet(module.getContext(),
                                  [](mlir::Diagnostic &) { return success(); });
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

bool checkModifierSizes(ModuleOp module, const Module &ast,
                        DiagnosticEngine &diag) {
  bool ok = true;
  for (auto v : module.getOps<attn::VariantOp>()) {
    const Variant *src = ast.findVariant(v.getSymName().str());
    if (!src)
      continue;
    for (auto [region, mod, what] :
         {std::tuple{&v.getScoreMod(), &src->scoreMod, "score_mod"},
          std::tuple{&v.getMaskMod(), &src->maskMod, "mask_mod"}}) {
      int64_t ops = 0;
      region->walk([&](Operation *) { ++ops; });
      if (ops <= kMaxModifierOps)
        continue;
      ok = false;
      diag.error(mod->loc,
                 std::string(what) + " of variant '" + src->name + "' has " +
                     std::to_string(ops) +
                     " operations after simplification; the limit is " +
                     std::to_string(kMaxModifierOps) +
                     " (the kernels evaluate it per score element, and "
                     "compile time grows with it)");
    }
  }
  return ok;
}

} // namespace attnc
