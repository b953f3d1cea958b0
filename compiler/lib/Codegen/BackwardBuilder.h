//===- BackwardBuilder.h - What the backward's kernel forms share ---------===//
//
// The builder of the backward kernels (CPU/CpuBackwardKernel.cpp, and the
// GPU forms in NVIDIA/): where each float parameter's gradient lives, and
// the per-(query, key) recomputation both forms run on their own tiles
// (ScoreGradEmission.cpp):
//
//   P  = exp(score_mod(scale s) - LSE)
//   dS = P (z dP - delta)    z: dropout's factor (1 without dropout); dV
//                            takes z P
//   dX = scale score_grad(scale s, dy = dS)   (accumulates: parameters)
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_BACKWARDBUILDER_H
#define ATTNC_CODEGEN_BACKWARDBUILDER_H

#include "ProgramBuilder.h"

#include "flash/FlashDialect.h"

namespace attnc::codegen {

/// A backward kernel's tile body as the tiled program writes it
/// (TiledProgram.cpp): the query-side loads, the two products, the pair
/// terms P, dS and dX, and what accumulates them. Each backward form runs
/// the pair terms at its own granularity (a tile, a 16-column chunk, a
/// pair) and its products its own way.
struct PairSection {
  mlir::flash::LoadKeyValueOp kv;          // bwd_q: in the body
  mlir::flash::LoadQueryOp q, dO;          // bwd_kv: in the body
  mlir::flash::LoadRowsOp lse, delta;      // bwd_kv: in the body
  mlir::flash::ProductOp s, dp;
  mlir::flash::ProbabilitiesOp p;
  mlir::flash::DropoutOp dropP, dropDp;    // with dropout: on P, on dP
  mlir::flash::ScoresMapOp ds;
  mlir::flash::ScoreGradOp dx;
  mlir::flash::AccumulateOp dq, dk, dv;    // those the kernel has
  mlir::flash::AddOwnedQueryGradOp ownedDq; // bwd_kv, may be null
};
/// The section of a loop body (flash.for_tiles of bwd_q, flash.for_query_
/// tiles of bwd_kv); an op it does not expect is an error.
mlir::FailureOr<PairSection> findPairSection(mlir::Block &body);

/// score_grad's accumulates by what their element reads (of score_grad's
/// arguments score, b, h, q, kv, dy): `item` neither q nor kv (b, h and
/// captures: alibi's slope[h], a scalar parameter), `rows` not kv (qamp[b,
/// h, q]), `cols` not q (key_factor[b, h, kv]); `pairs` the others (bias[h,
/// q - kv], and those inside a sum): an add per pair. A form sums the
/// first three where it holds their rows or keys, and adds the sums once.
struct AccumulateKinds {
  SmallVector<mlir::attn::AccumulateOp> item, rows, cols, pairs;
};
AccumulateKinds classifyAccumulates(mlir::attn::VariantOp v);

class BackwardBuilder : public ProgramBuilder {
public:
  using ProgramBuilder::ProgramBuilder;

protected:
  /// Binds the parameter-gradient buffer: each float parameter's gradient,
  /// dense over its shape, concatenated in declaration order (as
  /// rt::zeroParamGradients sizes them). With `atomic`, score_grad's
  /// accumulates are atomic adds (the GPU's many blocks share the buffer);
  /// else plain read-add-write (a CPU thread's own buffer).
  void bindGradients(Value grads, bool atomic);
  /// Whether score_grad adds into any parameter's gradient.
  bool accumulates();
  /// One kept (query, key) pair's P (times dropout's factor, as dV takes
  /// it) and dX from the section's ops: P =
  /// exp(score_mod(xs) - lse) (flash.probabilities), dS from its flash.scores_map body (its operands
  /// are P, dP and delta), dX = scale score_grad(xs, dS) with the
  /// section's accumulate flag (without `scale` where unscaledDx_); `s`
  /// is the unscaled score.
  std::pair<Value, Value> pairValues(PairSection sec, const Entry &e,
                                     Value s, Value dp, Value lse, Value delta,
                                     Value b, Value h, Value qpos, Value kv);
  /// P = e^(sm - lse) of a pair whose unscaled score is `s` and whose
  /// score_mod(scale s) is `sm`: 2^((sm - lse) log2 e) here (math.exp2);
  /// the GPU forms override it (GpuBackwardBuilder).
  virtual Value probability(const Entry &e, Value s, Value sm, Value lse);
  /// Whether pairValues leaves the factor `scale` out of dX: a form that
  /// sets it multiplies its dK and dQ sums by scale once, at their store.
  bool unscaledDx_ = false;
  /// score_grad's ops in order: accumulates (when `accumulate`) into the
  /// gradient buffer, the rest on demand; returns the yielded value.
  Value emitGrad(Block &block, IRMapping &map, bool accumulate);
  /// An accumulate of score_grad: into its slot when the form gave it one
  /// (accumulateSlots_), else into the gradient buffer (addToGradients);
  /// nothing for one the other kernel adds (elsewhere_).
  void emitAccumulate(attn::AccumulateOp a, IRMapping &map);
  /// The accumulates a kernel's flash.score_grad leaves to the other
  /// kernel: with "query", all but a query's (AccumulateKinds::rows); with
  /// "others", a query's. Set by pairValues from the section.
  llvm::DenseSet<Operation *> elsewhere_;
  Operation *elsewhereOf_ = nullptr; // the flash.score_grad it was made for
  void bindElsewhere(flash::ScoreGradOp dx);
  /// a's value (as `map` gives it) added to its element of the gradient
  /// buffer, the index clamped as the gather that read it.
  void addToGradients(attn::AccumulateOp a, IRMapping &map);
  /// Accumulates a form sums in slots of its own (the CPU's per-row and
  /// per-column sums, added to the buffer once per row or tile): the slot
  /// (a memref) and the element; their values are selected by
  /// accumulateKeep_ (0 for a pair that is masked or out of range).
  llvm::DenseMap<Operation *, std::pair<Value, Value>> accumulateSlots_;
  Value accumulateKeep_;
  /// The pair's diagonal values of score_mod and of score_grad, computed
  /// once per kv - q by a form that shares them (diagonalAt), or null.
  const IRMapping *pairScoreDiagonal_ = nullptr, *pairGradDiagonal_ = nullptr;

  Value grads_;
  bool atomicGrads_ = false;
  SmallVector<Value> gradBase_; // per parameter (null: no gradient)
};

} // namespace attnc::codegen

#endif
