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

#include <fmt/format.h>

#include <cstring>

namespace attnc::rt::cuda {

Status GpuKernel::plan(const AttentionArgs &a, GpuPlan &out,
                       CUstream stream) const {
  Problem p;
  if (Status s = resolveProblem(variant_, &image_.spec, a, p); !s)
    return s;
  if (Status s = ctx_->makeCurrent(); !s)
    return s;
  BlockMask built;
  const BlockMask *bm = nullptr;
  if (variant_.maskKind == MaskKind::Data) {
    if (a.blockMask) {
      if (Status s = detail::checkBlockMask(image_.spec, p, *a.blockMask); !s)
        return s;
      bm = a.blockMask;
    } else {
      detail::initBlockMask(variant_, image_.spec, p, built);
      bm = &built;
    }
  }
  detail::Operands ops = baseOperands(a, p, bm);
  SplitPlan split;
  if (Status s = detail::planLaunchSplits(
          p, ops, ctx_->device().multiprocessors(), a.numSplits, split);
      !s)
    return s;
  detail::applySplit(p, split, ops);
  SlotLayout at = slotLayout(ops, bm, p, image_.spec, split);

  GpuPlan plan;
  if (Status s = DeviceBuffer::allocate(*ctx_, at.total, plan.buf_); !s)
    return s;
  std::vector<unsigned char> host(at.partials, 0);
  std::memcpy(host.data(), ops.ip.data(), ops.ip.size() * 8);
  std::memcpy(host.data() + at.fp, ops.fp.data(), ops.fp.size() * 4);
  if (bm && bm == a.blockMask)
    std::memcpy(host.data() + at.bm, bm->classes.data(), bm->classes.size());
  if (Status s = plan.buf_.upload(host.data(), host.size()); !s)
    return s;
  plan.kernel_ = this;
  plan.planned_ = a;
  plan.planned_.pages = nullptr; // copied to the device; may go away
  plan.planned_.blockMask = nullptr;
  plan.splits_ = split.splits;
  plan.items_ = detail::numItems(p, ops);
  plan.rows_ = p.B * p.Hq * p.Lq;
  plan.ipCount_ = static_cast<int64_t>(ops.ip.size());
  plan.fpCount_ = static_cast<int64_t>(ops.fp.size());
  plan.bmBytes_ = bm ? static_cast<int64_t>(bm->classes.size()) : 0;
  plan.fpAt_ = at.fp;
  plan.bmAt_ = at.bm;
  plan.partialsAt_ = at.partials;
  plan.lseAt_ = at.lse;
  if (split.splits > 1) {
    plan.lseElems_ = detail::partialRows(p, split.splits);
    plan.partialElems_ = plan.lseElems_ * p.Dv;
  }
  if (bm == &built) {
    // The device builds the block mask into the plan's buffer.
    auto base = static_cast<unsigned char *>(plan.buf_.data());
    std::vector<detail::MemrefDesc> d = {
        detail::memrefOf(base, plan.ipCount_),
        detail::memrefOf(base + at.fp, plan.fpCount_),
        detail::memrefOf(base + at.bm, plan.bmBytes_)};
    detail::appendCaptures(variant_, p, d);
    if (Status s = launch(maskBuilder_, d, bm->batch * bm->heads * bm->numQTiles,
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
  std::vector<const void *> captures;
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
  size_t c = 0;
  for (const ParamSpec &ps : variant_.params) {
    if (!ps.isTensor)
      continue;
    for (const auto &[name, t] : plan.planned_.tensors)
      if (name == ps.name)
        d.push_back(detail::memrefOf(const_cast<void *>(captures[c]),
                                     detail::extent(t)));
    ++c;
  }
  if (Status s = launch(kernel_, d, plan.items_, stream); !s)
    return s;
  if (plan.splits_ > 1)
    return launch(merge_, merge, plan.rows_, stream);
  return Status::ok();
}

} // namespace attnc::rt::cuda
