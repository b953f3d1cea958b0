//===- BackwardBuilder.h - What the backward's kernel forms share ---------===//
//
// The builder of the backward kernels (CPU/CpuBackwardKernel.cpp, and the
// GPU forms in NVIDIA/): where each float parameter's gradient lives, and
// the per-(query, key) recomputation both forms run on their own tiles
// (ScoreGradEmission.cpp):
//
//   P  = exp(score_mod(scale s) - LSE)
//   dS = P (dP - delta)
//   dX = scale score_grad(scale s, dy = dS)   (accumulates: parameters)
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_BACKWARDBUILDER_H
#define ATTNC_CODEGEN_BACKWARDBUILDER_H

#include "ProgramBuilder.h"

namespace attnc::codegen {

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
  /// One kept (query, key) pair: P and dX (see above) from the scaled score
  /// `xs`, dP = dO . v, the row's LSE and delta, at (b, h, qpos, kv) (i32).
  /// With `accumulate`, score_grad's accumulates are emitted too.
  std::pair<Value, Value> keyGradient(const Entry &e, Value xs, Value b,
                                      Value h, Value qpos, Value kv, Value dp,
                                      Value lse, Value delta, bool accumulate);
  /// score_grad's ops in order: accumulates (when `accumulate`) into the
  /// gradient buffer, the rest on demand; returns the yielded value.
  Value emitGrad(Block &block, IRMapping &map, bool accumulate);
  void emitAccumulate(attn::AccumulateOp a, IRMapping &map);

  Value grads_;
  bool atomicGrads_ = false;
  SmallVector<Value> gradBase_; // per parameter (null: no gradient)
};

} // namespace attnc::codegen

#endif
