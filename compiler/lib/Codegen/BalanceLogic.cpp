//===- BalanceLogic.cpp - -attn-balance-logic: and/or chains as trees -----===//
//
// `a && b && c && ...` (or one `let` per term) parses into a left-deep
// chain: ((a && b) && c) && ... . LLVM's InstCombine asks, for each `and`
// of comparisons, whether one operand implies the other, walking down the
// chain: a chain of n terms costs it n^2, once per score element a thread
// evaluates (16 per tile in the tensor-core kernels): 200 terms took 12 s
// to reach PTX, 400 terms 40 s. The same terms as a balanced tree (depth
// log n) cost it n log n. `and`/`or` are associative and commutative on
// integers and the terms are pure, so the rebuilt tree computes the same
// value.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/BalanceLogic.h"
#include "attnc/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"

using namespace mlir;

namespace attnc {

#define GEN_PASS_DEF_ATTNBALANCELOGIC
#include "attnc/Passes.h.inc"

namespace {

bool sameKind(Operation *a, Operation *b) {
  return a && b && a->getName() == b->getName() &&
         a->getBlock() == b->getBlock();
}

/// Whether `op` is an inner node of a tree of its kind: its one use is an
/// op of the same kind in the same block.
bool isInner(Operation *op) {
  return op->hasOneUse() && sameKind(*op->user_begin(), op);
}

/// The leaves of the tree rooted at `root` (left to right), its inner ops
/// (`nodes`, the root first) and its depth. Iterative: a chain of one
/// `let` per term is as deep as it is long.
unsigned collect(Operation *root, SmallVectorImpl<Value> &leaves,
                 SmallVectorImpl<Operation *> &nodes) {
  SmallVector<std::pair<Value, unsigned>> stack; // (operand, its depth)
  nodes.push_back(root);
  stack.push_back({root->getOperand(1), 1});
  stack.push_back({root->getOperand(0), 1});
  unsigned depth = 1;
  while (!stack.empty()) {
    auto [v, d] = stack.pop_back_val();
    Operation *def = v.getDefiningOp();
    if (!(sameKind(def, root) && def->hasOneUse())) {
      leaves.push_back(v);
      continue;
    }
    nodes.push_back(def);
    depth = std::max(depth, d + 1);
    stack.push_back({def->getOperand(1), d + 1});
    stack.push_back({def->getOperand(0), d + 1});
  }
  return depth;
}

Value build(OpBuilder &b, Operation *like, ArrayRef<Value> leaves) {
  if (leaves.size() == 1)
    return leaves.front();
  size_t half = leaves.size() / 2;
  Value l = build(b, like, leaves.take_front(half));
  Value r = build(b, like, leaves.drop_front(half));
  OperationState st(like->getLoc(), like->getName());
  st.addOperands({l, r});
  st.addTypes(like->getResultTypes());
  st.addAttributes(like->getAttrs());
  return b.create(st)->getResult(0);
}

/// Rebuilds every unbalanced and/or tree under `root` as a balanced one.
void balance(Operation *root) {
  SmallVector<Operation *> roots;
  root->walk([&](Operation *op) {
    if (isa<arith::AndIOp, arith::OrIOp>(op) && !isInner(op))
      roots.push_back(op);
  });
  for (Operation *op : roots) {
    SmallVector<Value> leaves;
    SmallVector<Operation *> nodes;
    unsigned depth = collect(op, leaves, nodes);
    unsigned balanced = llvm::Log2_64_Ceil(leaves.size());
    if (depth <= balanced)
      continue;
    OpBuilder b(op);
    Value tree = build(b, op, leaves);
    op->getResult(0).replaceAllUsesWith(tree);
    for (Operation *n : nodes) // root first: each is unused when erased
      n->erase();
  }
}

struct BalanceLogicPass : impl::AttnBalanceLogicBase<BalanceLogicPass> {
  void runOnOperation() override { balance(getOperation()); }
};

} // namespace

void balanceLogic(Operation *root) { balance(root); }

} // namespace attnc
