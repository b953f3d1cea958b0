//===- GpuPlan.cpp - Plan once per batch, run per layer (CUDA graphs) ----===//
//
// plan() does everything run() must not: validation (lengths, the page
// table), the parameter arrays, the split plan, one device allocation and
// its upload, the device block mask. run() checks the views against the
// plan's in O(views + params) and launches.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/cuda/GpuKernel.h"
#include "attnc/runtime/KernelABI.h"
#include "../KernelOperands.h"
#include "CallBuffer.h"
#include "KvTensorMaps.h"

#include <fmt/format.h>

#include <cstring>

namespace attnc::rt::cuda {

Status GpuKernel::plan(const AttentionArgs &a, GpuPlan &out,
                       CUstream stream) const {
  Call c;
  if (Status s = prepare(a, false, c); !s)
    return s;
  const Problem &p = c.p;
  const detail::Operands &ops = c.ops;
  SlotLayout at = c.layout(image_.spec);
  GpuPlan plan;
  if (Status s = DeviceBuffer::allocate(*ctx_, at.total, plan.buf_); !s)
    return s;
  std::vector<unsigned char> host(at.partials, 0);
  std::memcpy(host.data(), ops.ip.data(), ops.ip.size() * 8);
  std::memcpy(host.data() + at.fp, ops.fp.data(), ops.fp.size() * 4);
  if (c.bm && !c.buildsMask())
    std::memcpy(host.data() + at.bm, c.bm->classes.data(), c.bm->classes.size());
  if (Status s = plan.buf_.upload(host.data(), host.size()); !s)
    return s;
  plan.kernel_ = this;
  plan.planned_ = a;
  plan.planned_.pages = nullptr; // copied to the device; may go away
  plan.planned_.blockMask = nullptr;
  plan.splits_ = c.split.splits;
  plan.items_ = detail::numItems(p, ops);
  plan.rows_ = p.B * p.Hq * p.Lq;
  plan.ipCount_ = static_cast<int64_t>(ops.ip.size());
  plan.fpCount_ = static_cast<int64_t>(ops.fp.size());
  plan.bmBytes_ = c.bm ? static_cast<int64_t>(c.bm->classes.size()) : 0;
  if (kvMaps_)
    plan.kvIp_.assign(ops.ip.begin(), ops.ip.begin() + abi::kFixedEnd);
  plan.fpAt_ = at.fp;
  plan.bmAt_ = at.bm;
  plan.partialsAt_ = at.partials;
  plan.lseAt_ = at.lse;
  if (c.split.splits > 1) {
    plan.lseElems_ = detail::partialRows(p, c.split.splits);
    plan.partialElems_ = plan.lseElems_ * p.Dv;
  }
  if (c.buildsMask()) {
    // The device builds the block mask into the plan's buffer.
    auto base = static_cast<unsigned char *>(plan.buf_.data());
    std::vector<detail::MemrefDesc> d = {
        detail::memrefOf(base, plan.ipCount_),
        detail::memrefOf(base + at.fp, plan.fpCount_),
        detail::memrefOf(base + at.bm, plan.bmBytes_)};
    detail::appendCaptures(variant_, p, d);
    const BlockMask &bm = c.built;
    if (Status s = launch(maskBuilder_, d, bm.batch * bm.heads * bm.numQTiles,
                          stream);
        !s)
      return s;
  }
  out = std::move(plan);
  return Status::ok();
}

Status GpuKernel::run(const GpuPlan &plan, const AttentionArgs &a,
                      CUstream stream) const {
  if (plan.kernel_ != this)
    return Status::invalidArgument(
        plan.kernel_ ? "the plan was made by another kernel"
                     : "the plan is empty: make it with GpuKernel::plan");
  std::vector<detail::MemrefDesc> captures;
  if (Status s = detail::matchPlannedViews(variant_, plan.planned_, a, captures);
      !s)
    return s;
  if (Status s = ctx_->makeCurrent(); !s)
    return s;
  auto base = static_cast<unsigned char *>(plan.buf_.data());
  auto view = [](const TensorView &t) {
    return detail::memrefOf(t.data, detail::extent(t));
  };
  detail::MemrefDesc o = view(a.out);
  detail::MemrefDesc lse = a.lse.data ? view(a.lse) : detail::memrefOf(base, 0);
  detail::MemrefDesc ip = detail::memrefOf(base, plan.ipCount_);
  std::vector<detail::MemrefDesc> merge;
  if (plan.splits_ > 1) {
    detail::MemrefDesc opart =
        detail::memrefOf(base + plan.partialsAt_, plan.partialElems_);
    detail::MemrefDesc lpart =
        detail::memrefOf(base + plan.lseAt_, plan.lseElems_);
    merge = {opart, lpart, o, lse, ip};
    o = opart;
    lse = lpart;
  }
  std::vector<detail::MemrefDesc> d = {
      view(a.q), view(a.k), view(a.v), o, lse, ip,
      detail::memrefOf(base + plan.fpAt_, plan.fpCount_),
      detail::memrefOf(base + plan.bmAt_, plan.bmBytes_)};
  d.insert(d.end(), captures.begin(), captures.end());
  KvTensorMaps maps;
  if (kvMaps_)
    maps = kvCache_->get(ctx_->driver().api(), a.k, a.v, plan.kvIp_.data(),
                         image_.spec.dtype, image_.spec.headDim,
                         image_.spec.vHeadDim, image_.spec.blockN);
  if (Status s = launch(kernel_, d, plan.items_, stream, kvMaps_ ? &maps : nullptr);
      !s)
    return s;
  if (plan.splits_ > 1)
    return launch(merge_, merge, plan.rows_, stream);
  return Status::ok();
}

} // namespace attnc::rt::cuda
