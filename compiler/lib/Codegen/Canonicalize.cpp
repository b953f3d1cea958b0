//===- Canonicalize.cpp - Canonicalization with bounded locations --------===//
#include "attnc/Codegen/Canonicalize.h"

#include "mlir/IR/Location.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

namespace attnc {

namespace {

/// Trims the fused location of every op a rewrite creates or changes.
class LocationCap : public RewriterBase::Listener {
public:
  void notifyOperationInserted(Operation *op, OpBuilder::InsertPoint) override {
    trim(op);
  }
  void notifyOperationModified(Operation *op) override { trim(op); }

private:
  static void trim(Operation *op) {
    auto fused = dyn_cast<FusedLoc>(op->getLoc());
    if (!fused || fused.getLocations().size() <= kMaxFusedLocations)
      return;
    ArrayRef<Location> all = fused.getLocations();
    unsigned head = kMaxFusedLocations / 2, tail = kMaxFusedLocations - head;
    SmallVector<Location> kept(all.begin(), all.begin() + head);
    kept.append(all.end() - tail, all.end());
    op->setLoc(FusedLoc::get(op->getContext(), kept, fused.getMetadata()));
  }
};

} // namespace

std::unique_ptr<Pass> createCanonicalizer() {
  static LocationCap cap; // stateless: shared by every pass instance
  GreedyRewriteConfig config;
  config.setListener(&cap);
  return createCanonicalizerPass(config);
}

} // namespace attnc
