//===- CpuBackwardLaunch.cpp - Running the CPU backward kernels -----------===//
//
// Validates a backward call, computes delta = rowsum(dO * O), launches the
// dK/dV kernel (a gradient buffer per thread; items per (b, kv head) with
// dQ formed there too when there are enough of them for the threads, else
// per KV tile and then the dQ kernel, items per Q tile) over f32 buffers
// of their own, then writes the caller's dq, dk, dv in their dtypes and
// strides and sums the threads' parameter gradients.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/Backward.h"
#include "attnc/runtime/KernelABI.h"
#include "BackwardCall.h"
#include "CpuLaunch.h"

#include <fmt/format.h>

namespace attnc::rt {

namespace {

/// Writes a dense [n0, n1, n2, n3] f32 buffer into a strided view.
void writeDense(const std::vector<float> &src, const TensorView &dst) {
  size_t k = 0;
  for (int64_t i0 = 0; i0 < dst.shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < dst.shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < dst.shape[2]; ++i2)
        for (int64_t i3 = 0; i3 < dst.shape[3]; ++i3)
          storeFromDouble(dst.data, dst.dtype,
                          i0 * dst.strides[0] + i1 * dst.strides[1] +
                              i2 * dst.strides[2] + i3 * dst.strides[3],
                          src[k++]);
}

} // namespace

Status CpuBackwardKernel::run(const BackwardArgs &a,
                              ParamGradients *paramGrads) const {
  if (!entry_.keyValue || !entry_.query)
    return Status::internal("the CPU backward kernel has no entry points");
  const AttentionArgs &f = a.forward;
  Problem p;
  if (Status s = detail::checkBackwardCall(variant_, spec_, a, p); !s)
    return s;
  // delta = rowsum(dO * O) - dLse, per row (b, h, i), read in place.
  std::vector<float> delta(static_cast<size_t>(p.B * p.Hq * p.Lq));
  {
    const TensorView &dO = a.dOut, &o = f.out;
    size_t r = 0;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i, ++r) {
          int64_t dRow = dO.offsetOf({b, h, i, 0}), oRow = o.offsetOf({b, h, i, 0});
          double s = 0;
          for (int64_t d = 0; d < p.Dv; ++d)
            s += loadAsDouble(dO.data, dO.dtype, dRow + d * dO.strides[3]) *
                 loadAsDouble(o.data, o.dtype, oRow + d * o.strides[3]);
          if (a.dLse.data)
            s -= static_cast<const float *>(a.dLse.data)[a.dLse.offsetOf({b, h, i})];
          delta[r] = static_cast<float>(s);
        }
  }
  BlockMask bm;
  bool hasBlockMask = variant_.maskKind == MaskKind::Data;
  if (hasBlockMask) {
    if (!entry_.maskBuilder)
      return Status::internal("the CPU backward kernel has no block-mask builder");
    detail::fillBlockMask(entry_.maskBuilder, variant_, spec_, f, p, bm);
  }
  // dO in O's place: the kernels read it through kOStride.
  AttentionArgs withDOut = f;
  withDOut.out = a.dOut;
  detail::Operands ops = detail::buildOperands(
      variant_, spec_, withDOut, p, hasBlockMask ? &bm : nullptr, 1);

  // The threads' gradient buffers: the float parameters' gradients
  // concatenated in declaration order, as zeroParamGradients sizes them and
  // the kernel lays them out (KernelABI.h).
  ParamGradients layout = zeroParamGradients(variant_, p.params);
  std::vector<int64_t> gradBase;
  int64_t gradElems = detail::paramGradientLayout(layout, gradBase);
  std::vector<float> dq(static_cast<size_t>(p.B * p.Hq * p.Lq * p.Dqk), 0.f),
      dk(static_cast<size_t>(p.B * p.Hkv * p.Lkv * p.Dqk), 0.f),
      dv(static_cast<size_t>(p.B * p.Hkv * p.Lkv * p.Dv), 0.f);
  // With at least as many (b, kv head) pairs as threads, each _bwd_kv item
  // takes every KV tile of one pair and forms dQ too (its group's rows are
  // its own): S and dP are computed once instead of twice. Else one KV tile
  // per item, and _bwd_q forms dQ.
  int64_t nKT = ops.ip[abi::kNumKTiles];
  bool fuse = p.B * p.Hkv >= detail::launchWorkers(p.B * p.Hkv * nKT,
                                                   f.numThreads);
  std::vector<int64_t> slots(abi::kBwdSlots, 0);
  slots[abi::kBwdTilesPerItem] = fuse ? std::max<int64_t>(nKT, 1) : 1;
  slots[abi::kBwdFuseQuery] = fuse;
  ops.ip.insert(ops.ip.end(), slots.begin(), slots.end());
  int64_t kvItems = fuse ? p.B * p.Hkv : p.B * p.Hkv * nKT;
  int workers = detail::launchWorkers(kvItems, f.numThreads);
  std::vector<std::vector<float>> grads(
      static_cast<size_t>(workers),
      std::vector<float>(static_cast<size_t>(gradElems), 0.f));

  using detail::descOf;
  auto view = [](const TensorView &t) { return descOf(t.data, detail::extent(t)); };
  std::vector<detail::MemrefDesc> operands = {
      view(f.q), view(f.k), view(f.v), view(a.dOut), view(f.lse),
      descOf(ops.ip.data(), ops.ip.size()),
      descOf(ops.fp.data(), ops.fp.size()),
      hasBlockMask ? descOf(bm.classes.data(), bm.classes.size())
                   : descOf(nullptr, 0)};
  std::vector<detail::MemrefDesc> caps;
  detail::appendCaptures(variant_, p, caps);
  for (const detail::MemrefDesc &c : caps)
    operands.push_back(descOf(c.aligned, c.size));
  operands.push_back(descOf(delta.data(), delta.size()));
  operands.push_back(descOf(dq.data(), dq.size()));
  operands.push_back(descOf(dk.data(), dk.size()));
  operands.push_back(descOf(dv.data(), dv.size()));
  operands.push_back(descOf(grads[0].data(), gradElems));
  detail::launchItems(
      entry_.keyValue, operands, kvItems, f.numThreads,
      [&](int t, std::vector<detail::MemrefDesc> &d) {
        d.back() = descOf(grads[static_cast<size_t>(t)].data(), gradElems);
      });
  if (!fuse)
    detail::launchItems(entry_.query, operands,
                        p.B * p.Hq * ops.ip[abi::kNumQTiles], f.numThreads);

  writeDense(dq, a.dq);
  // dk and dv are [B, Hkv, Lkv, D] here as in the caller's views.
  writeDense(dk, a.dk);
  writeDense(dv, a.dv);
  if (paramGrads) {
    for (size_t i = 0; i < layout.size(); ++i)
      for (const std::vector<float> &t : grads) // in thread order
        for (size_t k = 0; k < layout[i].size(); ++k)
          layout[i][k] += t[static_cast<size_t>(gradBase[i]) + k];
    *paramGrads = std::move(layout);
  }
  return Status::ok();
}

} // namespace attnc::rt
