//===- KernelOperands.h - What every backend passes its kernels -*- C++ -*-===//
//
// Internal to the runtime: the integer/float parameter arrays of KernelABI.h,
// the head-packing policy and the block-mask geometry, shared by the CPU and
// CUDA launchers so that both run the same contract.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SRC_KERNELOPERANDS_H
#define ATTNC_RUNTIME_SRC_KERNELOPERANDS_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/KernelABI.h"
#include "attnc/runtime/SplitPlan.h"

#include <cstdint>
#include <vector>

namespace attnc::rt::detail {

/// Elements spanned by a strided view (the extent kernels may touch).
int64_t extent(const TensorView &t);

/// A 1-D memref operand as MLIR lowers it: five 8-byte words.
struct MemrefDesc {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t size;
  int64_t stride;
};

inline MemrefDesc memrefOf(void *p, int64_t n) { return {p, p, 0, n, 1}; }

/// The addresses of every word of `descs`, in order: the CPU kernels'
/// packed arguments and cuLaunchKernel's parameters alike (the caller
/// appends the trailing scalars).
std::vector<void *> memrefWords(std::vector<MemrefDesc> &descs);

/// Appends the captured tensors' operands, in parameter order.
void appendCaptures(const VariantInfo &v, const Problem &p,
                    std::vector<MemrefDesc> &descs);

struct Operands {
  std::vector<int64_t> ip;
  std::vector<float> fp;
};

/// Query heads per work item. For small query chunks (decode, chunked
/// decode) the G heads that share a KV head go in one tile, so K and V are
/// read once per group and the matrix products have G x Lq rows. Only when
/// tiles can be classified without knowing each row's head: no block mask,
/// and a mask that does not read h.
int64_t packedHeads(const VariantInfo &v, const KernelSpec &spec,
                    const Problem &p, const BlockMask *bm);

/// ip and fp for one call (KernelABI.h).
Operands buildOperands(const VariantInfo &v, const KernelSpec &spec,
                       const AttentionArgs &a, const Problem &p,
                       const BlockMask *bm, int64_t packHeads = 1);

/// Work items of a kernel launch: B * (Hq / pack) * numQTiles * splits.
inline int64_t numItems(const Problem &p, const Operands &o) {
  return p.B * (p.Hq / o.ip[abi::kPackHeads]) * o.ip[abi::kNumQTiles] *
         o.ip[abi::kNumSplits];
}

/// The split plan of a launch: `request` (AttentionArgs::numSplits) or the
/// planner's choice for `workers` cores or SMs.
Status planLaunchSplits(const Problem &p, const Operands &o, int64_t workers,
                        int64_t request, SplitPlan &out);

/// Makes `o` a split launch (plan.splits > 1): the kernel writes partial
/// rows through kOStride/kLseStride into buffers laid out as KernelABI.h
/// says, and the merge writes the caller's O and LSE through kOutStride,
/// kOutLseStride and kOutHasLse.
void applySplit(const Problem &p, const SplitPlan &plan, Operands &o);

/// Elements of a split launch's partial outputs and LSEs.
inline int64_t partialRows(const Problem &p, int64_t splits) {
  return splits * p.B * p.Hq * p.Lq;
}

/// For plan/run: checks that `now`'s views (q, k, v, out, lse and each
/// captured tensor, found by name) have the dtypes, shapes and strides of
/// the `planned` call's, and its scalars the same values, so that the
/// plan's parameters (and bounds) hold; the data pointers may differ.
/// Sets `captures` to the captured tensors' operands, in parameter order.
/// O(views + params): nothing per sequence.
Status matchPlannedViews(const VariantInfo &v, const AttentionArgs &planned,
                         const AttentionArgs &now,
                         std::vector<MemrefDesc> &captures);

/// Sizes `bm` for this problem (classes zeroed), as the builders fill it.
void initBlockMask(const VariantInfo &v, const KernelSpec &spec,
                   const Problem &p, BlockMask &bm);

/// Refuses a caller's block mask built for other lengths, offsets or tiles.
Status checkBlockMask(const KernelSpec &spec, const Problem &p,
                      const BlockMask &bm);

} // namespace attnc::rt::detail

#endif
