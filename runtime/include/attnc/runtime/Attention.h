//===- Attention.h - Running a compiled variant -----------------*- C++ -*-===//
//
// Tensors are logical [B, H, S, D] views with arbitrary strides, so BHSD and
// BSHD memory are both accepted and never reinterpreted. Modes follow from
// the shapes: prefill (Lq == Lkv), decode (Lq == 1), chunked decode
// (Lkv > Lq > 1); per-sequence KV lengths make ragged batches, and query i
// of sequence b sits at absolute position qOffsets[b] + i (default
// kvOffsets[b] + kvLens[b] - Lq) and key j at kvOffsets[b] + j (default j):
// a key block that starts at position s of a longer sequence (a context-
// parallel shard, a cache whose prefix was evicted) is attended with the
// modifiers seeing its true positions. GQA: query head h reads KV head h / (Hq / Hkv).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_ATTENTION_H
#define ATTNC_RUNTIME_ATTENTION_H

#include "attnc/runtime/Dropout.h"
#include "attnc/runtime/PageTable.h"
#include "attnc/runtime/Status.h"
#include "attnc/runtime/TensorView.h"
#include "attnc/runtime/Variant.h"

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnc::rt {

/// What a compiled kernel was specialized for.
struct KernelSpec {
  DType dtype = DType::F32; // of Q, K, V and O
  int64_t headDim = 64;     // Dqk
  int64_t vHeadDim = 64;    // Dv
  int64_t blockM = 64;      // query rows per tile
  int64_t blockN = 64;      // keys per tile
  int64_t warps = 0;        // GPU tensor-core form: warps per block (0: the
                            // configuration table's choice for blockM)
  int64_t stages = 0;       // GPU tensor-core forms: K/V pipeline stages
                            // (0: the form's choice; a form that cannot
                            // have them is not chosen)
  std::string form;         // compiler: the kernel form asked for ("simt",
                            // "mma-sync"; empty: the registry's choice)
  bool dropout = false;     // applies dropout to P (Dropout.h); a kernel
                            // without it refuses dropout_p > 0
  bool keyOffsets = false;  // reads each sequence's first key position
                            // (AttentionArgs::kvOffsets); a kernel without
                            // it takes key 0 at position 0 and pays
                            // nothing, and refuses non-zero offsets
};

/// The part of a kernel's name its options give ("dropout_", "kvoff_", in
/// that order, or empty): the compiler names kernels with it and the
/// runtime checks packages' names against it. Inline: the package parser
/// (and its fuzzer) needs nothing else of this header's code.
inline std::string kernelOptionTags(const KernelSpec &spec) {
  return std::string(spec.dropout ? "dropout_" : "") +
         (spec.keyOffsets ? "kvoff_" : "");
}

/// What one iteration of a GPU kernel's tile loop issues on a full tile, as
/// the generator states it: mma.sync m16n8k16 instructions per warp, and
/// per thread (the thread with the most) 16-byte cp.async and atomic adds
/// (the backward's parameter gradients), and TMA loads (issued by one
/// thread for the CTA). Packages carry it so that the
/// static SASS model (bench/sassmodel) can check the loop it finds in the
/// machine code against it; mma 0: not stated (the SIMT form).
struct TileWork {
  int64_t mma = 0;
  int64_t asyncCopies = 0;
  int64_t atomics = 0;
  int64_t tmaLoads = 0; // issued by one thread of the CTA (UTMALDG)
  int64_t mbarrierWaits = 0; // per tile and warp (mbarrier.try_wait)
  /// Of `mma`, those that add the softmax's row sums (P [V | 1]'s ones
  /// column): issued, but not the attention's FLOP.
  int64_t sumMma = 0;
};

class BlockMask;

struct AttentionArgs {
  TensorView q;   // [B, Hq, Lq, Dqk]
  TensorView k;   // [B, Hkv, Lkv, Dqk]; with `pages`: [pages, Hkv, pageSize, Dqk]
  TensorView v;   // [B, Hkv, Lkv, Dv];  with `pages`: [pages, Hkv, pageSize, Dv]
  TensorView out; // [B, Hq, Lq, Dv], written
  TensorView lse; // optional [B, Hq, Lq] f32 (natural log); data == null: none
  std::vector<int32_t> kvLens;   // optional, per sequence (<= Lkv)
  std::vector<int32_t> qOffsets; // optional, per sequence
  /// Optional, per sequence: the position of key 0. With it, a capture's
  /// KV axis spans positions (it must reach the last key's), not Lkv.
  std::vector<int32_t> kvOffsets;
  /// The query heads are heads headOffset .. + Hq - 1 of a model with
  /// headCount query heads (0: headOffset + Hq), as the modifiers see them
  /// (h, `size H`, `size HKV`, captures over H and HKV): a head-parallel
  /// shard (Ulysses). K/V heads follow (GQA's group size is the same).
  int32_t headOffset = 0;
  int32_t headCount = 0;
  double scale = 0.0;            // 0: 1 / sqrt(Dqk)
  std::vector<std::pair<std::string, TensorView>> tensors; // captures
  std::vector<std::pair<std::string, double>> scalars;
  const BlockMask *blockMask = nullptr; // data-dependent masks (optional)
  int numThreads = 0;                   // 0: every core
  /// K and V in pages (PageTable.h): k and v are page pools, the lengths
  /// come from the table (kvLens, if given, must agree).
  const PageTable *pages = nullptr;
  /// Split-KV (SplitPlan.h): 0 lets the planner choose from the batch and
  /// the machine; 1 never splits; N > 1 forces N splits (at most 256).
  int numSplits = 0;
  /// Dropout on P (Dropout.h); p > 0 needs a kernel compiled with it.
  DropoutRequest dropout;
};

/// An attention problem after validation: sizes, lengths and bound params.
struct Problem {
  /// With a page table, Lkv (what a capture's KV dim means) is the longest
  /// sequence's length.
  int64_t B = 0, Hq = 0, Hkv = 0, Lq = 0, Lkv = 0, Dqk = 0, Dv = 0;
  const PageTable *pages = nullptr; // checked against the pools
  int64_t numPages = 0;
  std::vector<int32_t> kvLen, qPos0, kvPos0;
  int32_t headPos0 = 0; // the first query head's index (head offset)
  int64_t headCount = 0; // H as the modifiers see it (HKV: headCount / G)
  double scale = 1.0;
  std::vector<BoundParam> params; // in VariantInfo::params order
  bool hasLse = false;
  DropoutParams dropout;
};

/// Validates every argument against the variant (and the kernel's spec, if
/// given) and resolves defaults. Messages name the argument and the
/// expected versus actual shape, dtype or value.
Status resolveProblem(const VariantInfo &variant, const KernelSpec *spec,
                      const AttentionArgs &args, Problem &out);

/// Checks that every element of each i64 capture fits i32, as the kernels
/// read them as i32 (a wider id would silently wrap). Reads the captures'
/// memory, so the views must be host memory: CpuKernel::run,
/// buildBlockMask, referenceAttention and cuda::runFromHost call it;
/// GpuKernel::run does not read device memory on the host, so a caller
/// with device-resident i64 captures checks them where they are written.
/// O(elements of the i64 captures).
Status checkCaptureValues(const VariantInfo &variant, const Problem &p);

/// Per-(Q tile, KV tile) classes of a data-dependent mask, built once by
/// evaluating mask_mod per element and reusable while the mask's inputs
/// (captures, lengths, offsets) are unchanged. O(tiles) memory.
class BlockMask {
public:
  int64_t batch = 1, heads = 1, numQTiles = 0, numKTiles = 0;
  int64_t blockM = 0, blockN = 0, lq = 0;
  std::vector<int32_t> kvLen, qPos0, kvPos0; // what it was built for
  int32_t headPos0 = 0;
  std::vector<int8_t> classes;       // [batch][heads][numQTiles][numKTiles]
  int8_t at(int64_t b, int64_t h, int64_t qt, int64_t kt) const {
    return classes[((b * heads + h) * numQTiles + qt) * numKTiles + kt];
  }
  /// Counts of (empty, partial, full) tiles.
  std::array<int64_t, 3> histogram() const;
};

/// The fp64 oracle: naive attention with the modifiers evaluated by the
/// interpreter of the variant's program. `out` is [B, Hq, Lq, Dv] and `lse`
/// [B, Hq, Lq], both row-major. With `violation`, reports the first gather
/// outside its tensor (the checked mode). With `rowScale`, per row
/// (|max score| + the softmax-weighted mean |score|) times the largest |v|
/// element of the kept keys: about what rounding the scores to f32 moves
/// the row's output by, in units of f32's unit roundoff (attnc check's
/// tolerance grows with it). `rounding` says what is rounded to f32.
enum class ReferenceRounding {
  /// score_mod's inputs and arithmetic, as the kernels round them.
  Mods,
  /// Nothing: exact modifiers, for finite differences (Backward.h).
  None,
  /// The q.k dot products too, accumulated in f32: an f32 result, whose
  /// distance from the default shows how much a row's modifiers amplify
  /// the rounding every kernel's scores carry (attnc check's yardstick).
  DotsAndMods,
};
Status referenceAttention(const VariantInfo &variant, const AttentionArgs &args,
                          std::vector<double> &out, std::vector<double> &lse,
                          GatherViolation *violation = nullptr,
                          std::vector<double> *rowScale = nullptr,
                          ReferenceRounding rounding = ReferenceRounding::Mods);

/// A kernel compiled for the host CPU (see KernelABI.h for the calling
/// convention). `owner` keeps the code alive.
struct CpuEntryPoints {
  std::shared_ptr<void> owner;
  void (*kernel)(void **) = nullptr;
  void (*maskBuilder)(void **) = nullptr; // data-dependent masks only
  void (*merge)(void **) = nullptr;       // split-KV partials -> O, LSE
};

class CpuKernel;

/// One batch's call planned once (plan/run, as GpuPlan on the device):
/// validation of lengths and the page table, the parameters, the block
/// mask of a data-dependent mask, the split plan and its partial buffers.
/// Each layer then calls CpuKernel::run(plan, args) with its own q, k, v,
/// out, lse and captures, of the planned views' dtypes, shapes and strides.
/// A plan's runs share its partial buffers: one at a time.
class CpuPlan {
public:
  int64_t splits() const { return splits_; }

private:
  friend class CpuKernel;
  const CpuKernel *kernel_ = nullptr;
  AttentionArgs planned_;
  std::vector<int64_t> ip_;
  std::vector<float> fp_;
  BlockMask bm_;
  bool hasBlockMask_ = false;
  int64_t splits_ = 1, items_ = 0, rows_ = 0;
  mutable std::vector<unsigned char> opart_; // split partial rows
  mutable std::vector<float> lpart_;
};

class CpuKernel {
public:
  CpuKernel(VariantInfo variant, KernelSpec spec, CpuEntryPoints entry)
      : variant_(std::move(variant)), spec_(spec), entry_(std::move(entry)) {}

  const VariantInfo &variant() const { return variant_; }
  const KernelSpec &spec() const { return spec_; }

  /// Runs attention; validates everything first, touches nothing on error.
  /// A data-dependent mask without args.blockMask builds one for this call.
  Status run(const AttentionArgs &args) const;
  /// Plan/run (CpuPlan): plan once per batch, run per layer. run(args) is
  /// plan(args) then run(plan, args).
  Status plan(const AttentionArgs &args, CpuPlan &out) const;
  Status run(const CpuPlan &plan, const AttentionArgs &args) const;

  /// Builds the block mask of a data-dependent variant for these inputs.
  Status buildBlockMask(const AttentionArgs &args, BlockMask &out) const;

private:
  void fillBlockMask(const AttentionArgs &args, const Problem &p,
                     BlockMask &out) const;
  VariantInfo variant_;
  KernelSpec spec_;
  CpuEntryPoints entry_;
};

/// A contiguous KV cache: K [B, Hkv, capacity, Dqk] and V [B, Hkv, capacity,
/// Dv] owned here, with a current length per sequence.
class KVCache {
public:
  static Status create(DType dtype, int64_t batch, int64_t kvHeads,
                       int64_t capacity, int64_t headDim, int64_t vHeadDim,
                       KVCache &out);
  /// Appends `newK` [Hkv, T, Dqk] and `newV` [Hkv, T, Dv] (any strides, same
  /// dtype as the cache) to sequence `seq`.
  Status append(int64_t seq, const TensorView &newK, const TensorView &newV);
  TensorView keys() const;
  TensorView values() const;
  const std::vector<int32_t> &lengths() const { return lengths_; }
  int64_t capacity() const { return capacity_; }

private:
  DType dtype_ = DType::F32;
  int64_t batch_ = 0, heads_ = 0, capacity_ = 0, dqk_ = 0, dv_ = 0;
  std::vector<unsigned char> k_, v_;
  std::vector<int32_t> lengths_;
};

} // namespace attnc::rt

#endif
