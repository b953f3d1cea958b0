//===- Backward.h - Gradients of an attention call --------------*- C++ -*-===//
//
// The backward pass: given dO (the gradient of the loss with respect to the
// output), the gradients of Q, K, V and of every float parameter score_mod
// reads. As FlashAttention-2's backward, per kept (query, key) pair:
//
//   P = exp(score_mod(s) - LSE), s = scale * q.k
//   dV += P dO,  dP = dO . v,  D = rowsum(dO * O) = sum_j P_j dP_j
//   dS = P (dP - D)              (the gradient into score_mod's result)
//   ds = score_grad(s, dy = dS)  (into score; parameters accumulate)
//   dQ += scale ds k,  dK += scale ds q
//
// The mask has no gradient; a row with no kept key has zero gradients.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_BACKWARD_H
#define ATTNC_RUNTIME_BACKWARD_H

#include "attnc/runtime/Attention.h"

namespace attnc::rt {

/// The gradients of one call (the fp64 reference's form), row-major: dq [B, Hq, Lq, Dqk], dk [B, Hkv,
/// Lkv, Dqk], dv [B, Hkv, Lkv, Dv] (a key past its sequence's length gets
/// 0; with GQA, a KV head's gradient sums its query heads'), and the float
/// parameters' (ParamGradients: dense over each parameter's bound shape).
struct AttentionGrads {
  std::vector<double> dq, dk, dv;
  ParamGradients params;
};

/// The fp64 oracle of the backward pass: the forward recomputed naively in
/// double, score_mod's derivative evaluated by the interpreter of the
/// variant's `grad` section. `args` as for referenceAttention (out and lse
/// are not read); `dOut` is [B, Hq, Lq, Dv] of any float dtype and strides.
/// Paged K/V is refused (training passes contiguous K and V). With `exact`,
/// the modifiers are evaluated without rounding to f32 (for finite
/// differences). With `forwardOut` ([B, Hq, Lq, Dv]: the O a kernel
/// computed), D = rowsum(dO * O) is formed from it, as the kernels do,
/// instead of from the reference's own O: a check of a backward kernel then
/// measures the backward's error alone, not the forward's O rounded to a
/// 16-bit dtype (which moves D, and so every dS, by that rounding).
Status referenceAttentionBackward(const VariantInfo &variant,
                                  const AttentionArgs &args,
                                  const TensorView &dOut, AttentionGrads &out,
                                  bool exact = false,
                                  const TensorView *forwardOut = nullptr);

/// One backward call.
struct BackwardArgs {
  /// The forward call as it ran: q, k, v, captures, scalars, lengths,
  /// offsets and scale; `out` is the forward's O and `lse` its LSE (both
  /// required). Paged K/V and caller block masks are not taken.
  AttentionArgs forward;
  TensorView dOut;       // [B, Hq, Lq, Dv], the kernel's dtype, any strides
  /// Optional [B, Hq, Lq] f32: the gradient of the loss with respect to the
  /// LSE output (d LSE / d s_j = P_j, so it enters as delta - dLse).
  TensorView dLse;
  TensorView dq, dk, dv; // written: q's, k's and v's shapes; f32, f16 or
                         // bf16, any strides (keys past a sequence's
                         // length get 0)
};

/// The CPU backward kernels of a variant (CpuBackwardKernel.cpp): dK/dV
/// per KV tile, dQ per Q tile, and the block-mask builder of a
/// data-dependent mask.
struct CpuBackwardEntryPoints {
  std::shared_ptr<void> owner;
  void (*keyValue)(void **) = nullptr;
  void (*query)(void **) = nullptr;
  void (*maskBuilder)(void **) = nullptr;
};

class CpuBackwardKernel {
public:
  CpuBackwardKernel(VariantInfo variant, KernelSpec spec,
                    CpuBackwardEntryPoints entry)
      : variant_(std::move(variant)), spec_(spec), entry_(std::move(entry)) {}

  const VariantInfo &variant() const { return variant_; }
  const KernelSpec &spec() const { return spec_; }

  /// Writes dq, dk, dv and, with `paramGrads`, every float parameter's
  /// gradient (dense, ParamGradients). Validates everything first and
  /// touches nothing on error. dq, dk and dv are deterministic for given
  /// inputs; the parameters' gradients are summed per thread, so their last
  /// bits may depend on how work items fell to threads.
  Status run(const BackwardArgs &args, ParamGradients *paramGrads = nullptr) const;

private:
  VariantInfo variant_;
  KernelSpec spec_;
  CpuBackwardEntryPoints entry_;
};

/// The GPU backward of a variant for one target (PTX and launch facts):
/// attnc::compileBackwardForGpu makes it, cuda::GpuBackwardKernel runs it.
struct GpuBackwardImage {
  std::string target;  // "sm_80" ... "sm_90"
  KernelSpec spec;     // the backward's tiles (blockM = blockN)
  std::string query, keyValue, maskBuilder; // entries; maskBuilder may be empty
  int64_t queryThreads = 0, keyValueThreads = 0; // per block
  int64_t querySharedBytes = 0, keyValueSharedBytes = 0; // static, per block
  /// Dynamic shared memory per block, opted into at load (the tensor-core
  /// form's tiles; 0: none).
  int64_t queryDynamicSharedBytes = 0, keyValueDynamicSharedBytes = 0;
  std::vector<int> queryParams, keyValueParams, maskBuilderParams; // bytes
  /// Per visited KV tile of _bwd_q and per visited Q tile of _bwd_kv
  /// (optional in a package).
  TileWork queryTileWork, keyValueTileWork;
  std::string ptx;
};

} // namespace attnc::rt

#endif
