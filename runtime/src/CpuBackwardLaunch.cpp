//===- CpuBackwardLaunch.cpp - Running the CPU backward kernels -----------===//
//
// Validates a backward call, computes delta = rowsum(dO * O), launches the
// dK/dV kernel (a gradient buffer per thread; items per (b, kv head) with
// dQ formed there too when there are enough of them for the threads, else
// per KV tile and then the dQ kernel, items per Q tile), accumulating dq,
// dk, dv in f32 into the caller's arrays when they are dense f32, else into
// buffers of their own written out in the caller's dtypes and strides, and
// sums the threads' parameter gradients.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/Backward.h"
#include "attnc/runtime/KernelABI.h"
#include "BackwardCall.h"
#include "CpuLaunch.h"

#include <fmt/format.h>

#include <algorithm>

namespace attnc::rt {

namespace {

/// `n` elements of a row of `t` from element `at`, `step` apart, as floats
/// (the dtype is switched on once per row, not per element).
void loadRow(const TensorView &t, int64_t at, int64_t step, int64_t n,
             float *out) {
  switch (t.dtype) {
  case DType::F32: {
    const float *p = static_cast<const float *>(t.data) + at;
    for (int64_t i = 0; i < n; ++i)
      out[i] = p[i * step];
    return;
  }
  case DType::F16: {
    const uint16_t *p = static_cast<const uint16_t *>(t.data) + at;
    for (int64_t i = 0; i < n; ++i)
      out[i] = halfToFloat(p[i * step]);
    return;
  }
  case DType::BF16: {
    const uint16_t *p = static_cast<const uint16_t *>(t.data) + at;
    for (int64_t i = 0; i < n; ++i)
      out[i] = bfloat16ToFloat(p[i * step]);
    return;
  }
  default:
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(loadAsDouble(t.data, t.dtype, at + i * step));
  }
}

/// `n` floats into a row of `t` from element `at`, `step` apart, in its
/// dtype (loadRow's inverse).
void storeRow(const TensorView &t, int64_t at, int64_t step, int64_t n,
              const float *src) {
  switch (t.dtype) {
  case DType::F32: {
    float *p = static_cast<float *>(t.data) + at;
    for (int64_t i = 0; i < n; ++i)
      p[i * step] = src[i];
    return;
  }
  case DType::F16: {
    uint16_t *p = static_cast<uint16_t *>(t.data) + at;
    for (int64_t i = 0; i < n; ++i)
      p[i * step] = floatToHalf(src[i]);
    return;
  }
  case DType::BF16: {
    uint16_t *p = static_cast<uint16_t *>(t.data) + at;
    for (int64_t i = 0; i < n; ++i)
      p[i * step] = floatToBFloat16(src[i]);
    return;
  }
  default:
    for (int64_t i = 0; i < n; ++i)
      storeFromDouble(t.data, t.dtype, at + i * step, src[i]);
  }
}

/// Writes a dense [n0, n1, n2, n3] f32 buffer into a strided view.
void writeDense(const float *src, const TensorView &dst) {
  for (int64_t i0 = 0; i0 < dst.shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < dst.shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < dst.shape[2]; ++i2, src += dst.shape[3])
        storeRow(dst, dst.offsetOf({i0, i1, i2, 0}), dst.strides[3],
                 dst.shape[3], src);
}

/// Whether `t` is f32 laid out densely, row-major: the kernels' gradient
/// layout, so they can accumulate into it directly.
bool isDenseF32(const TensorView &t) {
  if (t.dtype != DType::F32 || t.rank() != 4)
    return false;
  int64_t step = 1;
  for (int64_t d = 3; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != step)
      return false;
    step *= t.shape[d];
  }
  return true;
}

/// Where the kernels accumulate a gradient of `n` elements: the caller's
/// array itself when it has their layout (zeroed here), else `scratch`
/// (zeroed; writeDense copies it out afterwards).
float *gradientTarget(const TensorView &dst, int64_t n,
                      std::vector<float> &scratch) {
  if (isDenseF32(dst)) {
    std::fill_n(static_cast<float *>(dst.data), n, 0.f);
    return static_cast<float *>(dst.data);
  }
  scratch.assign(static_cast<size_t>(n), 0.f);
  return scratch.data();
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
  // delta = rowsum(dO * O) - dLse, per row (b, h, i), read in place
  // (products summed in double, as the reference does).
  std::vector<float> delta(static_cast<size_t>(p.B * p.Hq * p.Lq));
  {
    const TensorView &dO = a.dOut, &o = f.out;
    std::vector<float> dRowF(static_cast<size_t>(p.Dv)), oRowF(dRowF.size());
    size_t r = 0;
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hq; ++h)
        for (int64_t i = 0; i < p.Lq; ++i, ++r) {
          loadRow(dO, dO.offsetOf({b, h, i, 0}), dO.strides[3], p.Dv, dRowF.data());
          loadRow(o, o.offsetOf({b, h, i, 0}), o.strides[3], p.Dv, oRowF.data());
          double s = 0;
          for (int64_t d = 0; d < p.Dv; ++d)
            s += double(dRowF[size_t(d)]) * double(oRowF[size_t(d)]);
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
  // dq, dk, dv: accumulated in f32 [B, H, L, D], into the caller's arrays
  // when they are exactly that (no copy), else into scratch copied out.
  int64_t nq = p.B * p.Hq * p.Lq * p.Dqk, nk = p.B * p.Hkv * p.Lkv * p.Dqk,
          nv = p.B * p.Hkv * p.Lkv * p.Dv;
  std::vector<float> dqScratch, dkScratch, dvScratch;
  float *dq = gradientTarget(a.dq, nq, dqScratch),
        *dk = gradientTarget(a.dk, nk, dkScratch),
        *dv = gradientTarget(a.dv, nv, dvScratch);
  // Fused, each _bwd_kv item takes every KV tile of one (b, kv head) pair
  // and forms dQ too (its group's rows are its own): S and dP are computed
  // once. Unfused, one KV tile per item and _bwd_q forms dQ: every thread
  // busy, but S and dP computed twice. Fused when its longest thread,
  // ceil(pairs / threads) pairs, takes no longer than the unfused launch's
  // twice-over work shared by all threads, 2 pairs / threads: with as many
  // pairs as threads (training shapes), and with one pair on two threads.
  int64_t nKT = ops.ip[abi::kNumKTiles];
  int64_t pairs = p.B * p.Hkv;
  int64_t threads = detail::launchWorkers(pairs * std::max<int64_t>(nKT, 1),
                                          f.numThreads);
  bool fuse = (pairs + threads - 1) / threads * threads <= 2 * pairs;
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
  operands.push_back(descOf(dq, nq));
  operands.push_back(descOf(dk, nk));
  operands.push_back(descOf(dv, nv));
  operands.push_back(descOf(grads[0].data(), gradElems));
  detail::launchItems(
      entry_.keyValue, operands, kvItems, f.numThreads,
      [&](int t, std::vector<detail::MemrefDesc> &d) {
        d.back() = descOf(grads[static_cast<size_t>(t)].data(), gradElems);
      });
  if (!fuse)
    detail::launchItems(entry_.query, operands,
                        p.B * p.Hq * ops.ip[abi::kNumQTiles], f.numThreads);

  // dk and dv are [B, Hkv, Lkv, D] here as in the caller's views.
  if (!dqScratch.empty())
    writeDense(dq, a.dq);
  if (!dkScratch.empty())
    writeDense(dk, a.dk);
  if (!dvScratch.empty())
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
