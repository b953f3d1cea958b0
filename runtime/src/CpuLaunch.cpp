//===- CpuLaunch.cpp - Running JIT-compiled kernels on the host -----------===//
//
// A call is planned (validation, parameters, block mask, split plan,
// partial buffers) and then run; CpuKernel::run(args) does both, and
// plan/run lets a serving loop plan once per batch and run per layer.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/Attention.h"
#include "attnc/runtime/KernelABI.h"
#include "CpuLaunch.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <thread>

namespace attnc::rt {

using Desc = detail::MemrefDesc;

namespace detail {

Desc descOf(const void *p, int64_t n) {
  static int64_t dummy = 0;
  return memrefOf(const_cast<void *>(p ? p : &dummy), n);
}

int launchWorkers(int64_t items, int threads) {
  int n = threads > 0 ? threads
                      : static_cast<int>(std::thread::hardware_concurrency());
  return static_cast<int>(std::clamp<int64_t>(n, 1, std::max<int64_t>(items, 1)));
}

void launchItems(void (*fn)(void **), const std::vector<Desc> &operands,
                 int64_t items, int threads,
                 const std::function<void(int, std::vector<Desc> &)> &perThread) {
  if (items <= 0)
    return;
  int n = launchWorkers(items, threads);
  std::atomic<int64_t> next{0};
  // Each thread builds its argument array once and then only changes the
  // item range.
  auto worker = [&](int t) {
    std::vector<Desc> descs = operands;
    if (perThread)
      perThread(t, descs);
    int64_t begin = 0, end = 0;
    std::vector<void *> ptrs = memrefWords(descs);
    ptrs.push_back(&begin);
    ptrs.push_back(&end);
    for (int64_t i; (i = next.fetch_add(1)) < items;) {
      begin = i;
      end = i + 1;
      fn(ptrs.data());
    }
  };
  if (n <= 1) {
    worker(0);
    return;
  }
  std::vector<std::thread> pool;
  for (int t = 0; t < n; ++t)
    pool.emplace_back(worker, t);
  for (auto &t : pool)
    t.join();
}

void fillBlockMask(void (*builder)(void **), const VariantInfo &v,
                   const KernelSpec &spec, const AttentionArgs &a,
                   const Problem &p, BlockMask &bm) {
  initBlockMask(v, spec, p, bm);
  Operands ops = buildOperands(v, spec, a, p, &bm);
  std::vector<Desc> operands = {descOf(ops.ip.data(), ops.ip.size()),
                                descOf(ops.fp.data(), ops.fp.size()),
                                descOf(bm.classes.data(), bm.classes.size())};
  std::vector<Desc> caps;
  appendCaptures(v, p, caps);
  for (const Desc &d : caps)
    operands.push_back(descOf(d.aligned, d.size));
  // The builder's items are (b * heads + h) * numQTiles + qt; it learns
  // `heads` from kBMStrideH (0 when shared by every head).
  launchItems(builder, operands, bm.batch * bm.heads * bm.numQTiles,
              a.numThreads);
}

} // namespace detail

using detail::descOf;
using detail::launchItems;

Status CpuKernel::buildBlockMask(const AttentionArgs &a, BlockMask &bm) const {
  if (variant_.maskKind != MaskKind::Data || !entry_.maskBuilder)
    return Status::invalidArgument(fmt::format(
        "variant '{}' has no data-dependent mask; it needs no block mask",
        variant_.name));
  Problem p;
  if (Status s = resolveProblem(variant_, &spec_, a, p); !s)
    return s;
  if (Status s = checkCaptureValues(variant_, p); !s)
    return s;
  fillBlockMask(a, p, bm);
  return Status::ok();
}

void CpuKernel::fillBlockMask(const AttentionArgs &a, const Problem &p,
                              BlockMask &bm) const {
  detail::fillBlockMask(entry_.maskBuilder, variant_, spec_, a, p, bm);
}

Status CpuKernel::plan(const AttentionArgs &a, CpuPlan &out) const {
  if (!entry_.kernel)
    return Status::internal("the CPU kernel has no entry point");
  Problem p;
  if (Status s = resolveProblem(variant_, &spec_, a, p); !s)
    return s;
  if (Status s = checkCaptureValues(variant_, p); !s)
    return s;
  CpuPlan plan;
  if (variant_.maskKind == MaskKind::Data) {
    if (a.blockMask) {
      if (Status s = detail::checkBlockMask(spec_, p, *a.blockMask); !s)
        return s;
      plan.bm_ = *a.blockMask;
    } else {
      if (!entry_.maskBuilder)
        return Status::internal("the CPU kernel has no block-mask builder");
      fillBlockMask(a, p, plan.bm_);
    }
    plan.hasBlockMask_ = true;
  }
  const BlockMask *bm = plan.hasBlockMask_ ? &plan.bm_ : nullptr;
  detail::Operands ops = detail::buildOperands(
      variant_, spec_, a, p, bm, detail::packedHeads(variant_, spec_, p, bm));
  int64_t workers = a.numThreads > 0
                        ? a.numThreads
                        : static_cast<int64_t>(std::thread::hardware_concurrency());
  SplitPlan split;
  if (Status s = detail::planLaunchSplits(p, ops, workers, a.numSplits, split);
      !s)
    return s;
  if (split.splits > 1 && !entry_.merge)
    return Status::internal("the CPU kernel has no split-KV merge");
  detail::applySplit(p, split, ops);
  plan.kernel_ = this;
  plan.planned_ = a;
  plan.planned_.pages = nullptr; // copied into ip
  plan.planned_.blockMask = nullptr;
  plan.ip_ = std::move(ops.ip);
  plan.fp_ = std::move(ops.fp);
  plan.splits_ = split.splits;
  plan.items_ = p.B * (p.Hq / plan.ip_[abi::kPackHeads]) *
                plan.ip_[abi::kNumQTiles] * split.splits;
  plan.rows_ = p.B * p.Hq * p.Lq;
  if (split.splits > 1) {
    int64_t rows = detail::partialRows(p, split.splits);
    plan.opart_.resize(static_cast<size_t>(rows * p.Dv) * dtypeSize(spec_.dtype));
    plan.lpart_.resize(static_cast<size_t>(rows));
  }
  out = std::move(plan);
  return Status::ok();
}

Status CpuKernel::run(const CpuPlan &plan, const AttentionArgs &a) const {
  if (plan.kernel_ != this)
    return Status::invalidArgument(
        plan.kernel_ ? "the plan was made by another kernel"
                     : "the plan is empty: make it with CpuKernel::plan");
  std::vector<Desc> captures;
  if (Status s = detail::matchPlannedViews(variant_, plan.planned_, a, captures);
      !s)
    return s;
  auto view = [](const TensorView &t) { return descOf(t.data, detail::extent(t)); };
  Desc out = view(a.out);
  Desc lse = a.lse.data ? view(a.lse) : descOf(nullptr, 0);
  Desc ip = descOf(plan.ip_.data(), plan.ip_.size());
  bool split = plan.splits_ > 1;
  Desc opart = descOf(plan.opart_.data(), static_cast<int64_t>(
                                              plan.opart_.size() / dtypeSize(spec_.dtype)));
  Desc lpart = descOf(plan.lpart_.data(), static_cast<int64_t>(plan.lpart_.size()));
  std::vector<Desc> operands = {
      view(a.q), view(a.k), view(a.v), split ? opart : out,
      split ? lpart : lse, ip, descOf(plan.fp_.data(), plan.fp_.size()),
      plan.hasBlockMask_ ? descOf(plan.bm_.classes.data(), plan.bm_.classes.size())
                         : descOf(nullptr, 0)};
  for (const Desc &c : captures) // empty captures get a valid address too
    operands.push_back(descOf(c.aligned, c.size));
  launchItems(entry_.kernel, operands, plan.items_, a.numThreads);
  if (split)
    launchItems(entry_.merge, {opart, lpart, out, lse, ip}, plan.rows_,
                a.numThreads);
  return Status::ok();
}

Status CpuKernel::run(const AttentionArgs &a) const {
  CpuPlan plan;
  if (Status s = this->plan(a, plan); !s)
    return s;
  return run(plan, a);
}

} // namespace attnc::rt
