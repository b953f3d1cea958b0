//===- KernelOperands.cpp - Kernel parameters shared by every backend ----===//
#include "KernelOperands.h"
#include "attnc/runtime/KernelABI.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <tuple>

namespace attnc::rt::detail {

int64_t extent(const TensorView &t) {
  int64_t e = 1;
  for (size_t i = 0; i < t.shape.size(); ++i)
    if (t.shape[i] > 0)
      e += (t.shape[i] - 1) * t.strides[i];
  return e;
}

int64_t packedHeads(const VariantInfo &v, const KernelSpec &spec,
                    const Problem &p, const BlockMask *bm) {
  int64_t g = p.Hq / p.Hkv;
  if (g == 1 || bm || v.maskKind == MaskKind::Data || v.maskUsesHead ||
      p.Lq >= spec.blockM)
    return 1;
  return g;
}

Operands buildOperands(const VariantInfo &v, const KernelSpec &spec,
                       const AttentionArgs &a, const Problem &p,
                       const BlockMask *bm, int64_t packHeads) {
  abi::Layout L = abi::computeLayout(v);
  Operands o;
  int64_t pageEntries = p.pages ? static_cast<int64_t>(p.pages->indices.size()) : 0;
  // A paged batch with no page at all still marks itself paged.
  o.ip.assign(L.size(p.B, p.pages ? std::max<int64_t>(pageEntries, 1) : 0), 0);
  o.fp.assign(1 + v.params.size(), 0.f);
  auto &ip = o.ip;
  ip[abi::kB] = p.B;
  ip[abi::kHq] = p.Hq;
  ip[abi::kHkv] = p.Hkv;
  ip[abi::kLq] = p.Lq;
  ip[abi::kLkv] = p.Lkv;
  ip[abi::kNumQTiles] = (packHeads * p.Lq + spec.blockM - 1) / spec.blockM;
  ip[abi::kPackHeads] = packHeads;
  ip[abi::kNumKTiles] = (p.Lkv + spec.blockN - 1) / spec.blockN;
  for (int d = 0; d < 4; ++d) {
    ip[abi::kQStride + d] = a.q.strides[d];
    ip[abi::kKStride + d] = a.k.strides[d];
    ip[abi::kVStride + d] = a.v.strides[d];
    ip[abi::kOStride + d] = a.out.strides[d];
  }
  if (p.hasLse)
    for (int d = 0; d < 3; ++d)
      ip[abi::kLseStride + d] = a.lse.strides[d];
  ip[abi::kHasLse] = p.hasLse;
  if (bm) {
    ip[abi::kHasBlockMask] = 1;
    ip[abi::kBMStrideB] = bm->heads * bm->numQTiles * bm->numKTiles;
    ip[abi::kBMStrideH] = bm->heads > 1 ? bm->numQTiles * bm->numKTiles : 0;
  }
  for (size_t i = 0; i < v.params.size(); ++i) {
    const ParamSpec &ps = v.params[i];
    const BoundParam &bp = p.params[i];
    if (!ps.isTensor) {
      if (ps.dtype == DType::I32 || ps.dtype == DType::Bool)
        ip[L.paramBase + i] = static_cast<int64_t>(bp.scalar);
      else
        o.fp[1 + i] = static_cast<float>(bp.scalar);
      continue;
    }
    int64_t base = L.captureBase[i], r = static_cast<int64_t>(bp.shape.size());
    for (int64_t d = 0; d < r; ++d) {
      ip[base + d] = bp.shape[d];
      ip[base + r + d] = bp.strides[d];
    }
  }
  for (int64_t b = 0; b < p.B; ++b) {
    ip[L.seqBase + b] = p.kvLen[b];
    ip[L.seqBase + p.B + b] = p.qPos0[b];
    ip[L.seqBase + 2 * p.B + b] = p.kvPos0[b];
  }
  if (p.pages) {
    ip[abi::kPageSize] = p.pages->pageSize;
    int64_t base = L.pageBase(p.B);
    for (int64_t b = 0; b < p.B; ++b)
      ip[base + b] = p.pages->indptr[b];
    for (int64_t i = 0; i < pageEntries; ++i)
      ip[base + p.B + i] = p.pages->indices[i];
  }
  o.fp[0] = static_cast<float>(p.scale);
  // Unsplit: one split of every tile; the merge's slots mirror O and LSE.
  ip[abi::kNumSplits] = 1;
  ip[abi::kSplitTiles] = std::max<int64_t>(ip[abi::kNumKTiles], 1);
  for (int d = 0; d < 4; ++d)
    ip[abi::kOutStride + d] = ip[abi::kOStride + d];
  for (int d = 0; d < 3; ++d)
    ip[abi::kOutLseStride + d] = ip[abi::kLseStride + d];
  ip[abi::kOutHasLse] = ip[abi::kHasLse];
  uint32_t scaleBits;
  std::memcpy(&scaleBits, &p.dropout.scale, sizeof scaleBits);
  ip[abi::kDropThreshold] = p.dropout.threshold;
  ip[abi::kDropScaleBits] = scaleBits;
  ip[abi::kDropKey0] = p.dropout.key0;
  ip[abi::kDropKey1] = p.dropout.key1;
  // The problem sizes follow the declared parameters, in
  // kProblemSizeNames' order (B, H, HKV, Q, KV).
  const BoundParam *sizes = &p.params[v.params.size()];
  ip[abi::kHSize] = static_cast<int64_t>(sizes[1].scalar);
  ip[abi::kHkvSize] = static_cast<int64_t>(sizes[2].scalar);
  ip[abi::kKvSize] = static_cast<int64_t>(sizes[4].scalar);
  ip[abi::kHeadPos0] = p.headPos0;
  return o;
}

Status planLaunchSplits(const Problem &p, const Operands &o, int64_t workers,
                        int64_t request, SplitPlan &out) {
  return planSplits(numItems(p, o), o.ip[abi::kNumKTiles], workers, request,
                    out);
}

void applySplit(const Problem &p, const SplitPlan &plan, Operands &o) {
  auto &ip = o.ip;
  ip[abi::kNumSplits] = plan.splits;
  ip[abi::kSplitTiles] = plan.tilesPerSplit;
  if (plan.splits <= 1)
    return;
  // Partial rows: [S][B][Hq][Lq][Dv] and [S][B][Hq][Lq], contiguous.
  int64_t oStrides[4] = {p.Hq * p.Lq * p.Dv, p.Lq * p.Dv, p.Dv, 1};
  int64_t lStrides[3] = {p.Hq * p.Lq, p.Lq, 1};
  for (int d = 0; d < 4; ++d)
    ip[abi::kOStride + d] = oStrides[d];
  for (int d = 0; d < 3; ++d)
    ip[abi::kLseStride + d] = lStrides[d];
  ip[abi::kHasLse] = 1;
}

std::vector<void *> memrefWords(std::vector<MemrefDesc> &descs) {
  std::vector<void *> words;
  for (MemrefDesc &d : descs)
    for (void *w : {static_cast<void *>(&d.allocated),
                    static_cast<void *>(&d.aligned),
                    static_cast<void *>(&d.offset),
                    static_cast<void *>(&d.size),
                    static_cast<void *>(&d.stride)})
      words.push_back(w);
  return words;
}

void appendCaptures(const VariantInfo &v, const Problem &p,
                    std::vector<MemrefDesc> &descs) {
  for (size_t i = 0; i < v.params.size(); ++i) {
    if (!v.params[i].isTensor)
      continue;
    const BoundParam &bp = p.params[i];
    TensorView t;
    t.shape = bp.shape;
    t.strides = bp.strides;
    descs.push_back(memrefOf(const_cast<void *>(bp.data), extent(t)));
  }
}

namespace {
Status sameView(const char *name, const TensorView &planned,
                const TensorView &now) {
  if (now.dtype == planned.dtype && now.shape == planned.shape &&
      now.strides == planned.strides && (now.data || !planned.data))
    return Status::ok();
  return Status::invalidArgument(fmt::format(
      "'{}' is {} {} with strides {}, but the plan was made for {} {} with "
      "strides {}; make a plan for these views",
      name, dtypeName(now.dtype), TensorView::formatDims(now.shape),
      TensorView::formatDims(now.strides), dtypeName(planned.dtype),
      TensorView::formatDims(planned.shape),
      TensorView::formatDims(planned.strides)));
}
} // namespace

Status matchPlannedViews(const VariantInfo &v, const AttentionArgs &planned,
                         const AttentionArgs &now,
                         std::vector<MemrefDesc> &captures) {
  for (auto [name, a, b] :
       {std::tuple{"q", &planned.q, &now.q}, std::tuple{"k", &planned.k, &now.k},
        std::tuple{"v", &planned.v, &now.v},
        std::tuple{"out", &planned.out, &now.out}})
    if (Status s = sameView(name, *a, *b); !s)
      return s;
  if ((planned.lse.data != nullptr) != (now.lse.data != nullptr))
    return Status::invalidArgument(
        std::string("'lse' is ") + (now.lse.data ? "given" : "missing") +
        ", but the plan was made " + (planned.lse.data ? "with" : "without") +
        " one");
  if (now.lse.data)
    if (Status s = sameView("lse", planned.lse, now.lse); !s)
      return s;
  if (now.tensors.size() != planned.tensors.size() ||
      now.scalars.size() != planned.scalars.size())
    return Status::invalidArgument(fmt::format(
        "the call binds {} tensors and {} scalars, the plan {} and {}",
        now.tensors.size(), now.scalars.size(), planned.tensors.size(),
        planned.scalars.size()));
  captures.clear();
  for (const ParamSpec &p : v.params) {
    if (p.isTensor) {
      const TensorView *want = nullptr, *got = nullptr;
      for (const auto &[n, t] : planned.tensors)
        if (n == p.name)
          want = &t;
      for (const auto &[n, t] : now.tensors)
        if (n == p.name)
          got = &t;
      if (!want)
        return Status::internal("the plan lacks tensor '" + p.name + "'");
      if (!got)
        return Status::invalidArgument("tensor parameter '" + p.name +
                                       "' is not bound");
      if (Status s = sameView(p.name.c_str(), *want, *got); !s)
        return s;
      captures.push_back(memrefOf(got->data, extent(*got)));
      continue;
    }
    const double *want = nullptr, *got = nullptr;
    for (const auto &[n, x] : planned.scalars)
      if (n == p.name)
        want = &x;
    for (const auto &[n, x] : now.scalars)
      if (n == p.name)
        got = &x;
    if ((want == nullptr) != (got == nullptr) || (want && *want != *got))
      return Status::invalidArgument(fmt::format(
          "scalar '{}' is {}, but the plan was made with {}; make a plan for "
          "it", p.name, got ? fmt::format("{}", *got) : "not bound",
          want ? fmt::format("{}", *want) : "its default"));
  }
  return Status::ok();
}

void initBlockMask(const VariantInfo &v, const KernelSpec &spec,
                   const Problem &p, BlockMask &bm) {
  bm = BlockMask();
  bm.batch = p.B;
  bm.heads = v.maskUsesHead ? p.Hq : 1;
  bm.blockM = spec.blockM;
  bm.blockN = spec.blockN;
  bm.lq = p.Lq;
  bm.numQTiles = (p.Lq + spec.blockM - 1) / spec.blockM;
  bm.numKTiles = (p.Lkv + spec.blockN - 1) / spec.blockN;
  bm.kvLen = p.kvLen;
  bm.qPos0 = p.qPos0;
  bm.kvPos0 = p.kvPos0;
  bm.headPos0 = p.headPos0;
  bm.classes.assign(bm.batch * bm.heads * bm.numQTiles * bm.numKTiles, 0);
}

Status checkBlockMask(const KernelSpec &spec, const Problem &p,
                      const BlockMask &bm) {
  if (bm.blockM != spec.blockM || bm.blockN != spec.blockN || bm.batch != p.B ||
      bm.lq != p.Lq || bm.kvLen != p.kvLen || bm.qPos0 != p.qPos0 ||
      bm.kvPos0 != p.kvPos0 || bm.headPos0 != p.headPos0 ||
      bm.numKTiles != (p.Lkv + spec.blockN - 1) / spec.blockN ||
      (bm.heads != 1 && bm.heads != p.Hq) ||
      bm.classes.size() !=
          static_cast<size_t>(bm.batch * bm.heads * bm.numQTiles * bm.numKTiles))
    return Status::invalidArgument(
        "'blockMask' was built for different lengths, offsets or tile "
        "sizes; rebuild it for these inputs");
  return Status::ok();
}

} // namespace attnc::rt::detail
