//===- GpuBackwardRun.cpp - attnc-run --backward: check and time ---------===//
#include "GpuBackwardRun.h"
#include "GpuBench.h"
#include "Parity.h"
#include "Problem.h"

#include "attnc/runtime/cuda/GpuBackward.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <tuple>

namespace attnc::tools {

namespace {

using rt::cuda::Context;
using rt::cuda::GpuBackwardKernel;
using rt::cuda::GpuKernel;

/// The packaged forward and backward kernels of (variant, dtype, dims),
/// loaded once each.
class KernelPairs {
public:
  explicit KernelPairs(const Context &ctx) : ctx_(ctx) {}
  rt::Status get(const rt::PackageVariant &v, const Shape &s,
                 const GpuKernel *&fwd, const GpuBackwardKernel *&bwd) {
    Key key{&v, s.dtype, s.headDim, s.vHeadDim, s.needs().keyOffsets};
    auto it = pairs_.find(key);
    if (it == pairs_.end()) {
      int cc = ctx_.device().computeCapability();
      const rt::GpuKernelImage *fi = nullptr;
      const rt::GpuBackwardImage *bi = nullptr;
      Pair p;
      rt::Status st =
          rt::selectKernel(v, cc, s.dtype, s.headDim, s.vHeadDim, fi, s.needs());
      if (st)
        st = rt::selectBackward(v, cc, s.dtype, s.headDim, s.vHeadDim, bi,
                                s.needs());
      if (st)
        st = GpuKernel::load(ctx_, v.info, *fi, p.forward);
      if (st)
        st = GpuBackwardKernel::load(ctx_, v.info, *bi, p.backward);
      if (!st)
        return st;
      it = pairs_.emplace(key, std::move(p)).first;
    }
    fwd = it->second.forward.get();
    bwd = it->second.backward.get();
    return rt::Status::ok();
  }

private:
  using Key = std::tuple<const rt::PackageVariant *, rt::DType, int64_t,
                         int64_t, bool>;
  struct Pair {
    std::unique_ptr<GpuKernel> forward;
    std::unique_ptr<GpuBackwardKernel> backward;
  };
  const Context &ctx_;
  std::map<Key, Pair> pairs_;
};

/// The case's inputs, its forward on the device (O and LSE back on the
/// host) and its backward call (BackwardCase).
rt::Status prepare(const Context &ctx, const rt::PackageVariant &v,
                   const Shape &s, const Options &o, const GpuKernel &fwd,
                   Inputs &in, BackwardCase &c) {
  if (s.pageSize || s.splits > 1)
    return rt::Status::invalidArgument(
        "the backward takes neither pages nor splits");
  if (rt::Status st = makeInputs(v.info, s, o.sets, o.inputs, in); !st)
    return st;
  if (rt::Status st = rt::cuda::runFromHost(ctx, fwd, in.args); !st)
    return st;
  makeBackwardCase(in, s, s.dtype, c);
  return rt::Status::ok();
}

} // namespace

int runGpuBackwardCheck(const Context &ctx,
                        const std::vector<const rt::PackageVariant *> &variants,
                        const Options &o, const std::vector<Shape> &shapes) {
  KernelPairs kernels(ctx);
  std::vector<Row> rows;
  for (const rt::PackageVariant *v : variants)
    for (Shape s : shapes) {
      s.resolve();
      std::string name = v->info.name + " backward " + s.describe();
      const GpuKernel *fwd = nullptr;
      const GpuBackwardKernel *bwd = nullptr;
      Inputs in;
      BackwardCase c;
      rt::ParamGradients params;
      rt::Status st = kernels.get(*v, s, fwd, bwd);
      if (st)
        st = prepare(ctx, *v, s, o, *fwd, in, c);
      if (st)
        st = rt::cuda::runBackwardFromHost(ctx, *bwd, c.args, &params);
      rows.push_back(st ? compareBackwardWithReference(v->info, name, in, c,
                                                       params)
                        : failedRow(name, s.dtype, st.message()));
    }
  return printRows(rows);
}

int runGpuBackwardBench(const Context &ctx,
                        const std::vector<const rt::PackageVariant *> &variants,
                        const Options &o, const std::vector<Shape> &shapes) {
  KernelPairs kernels(ctx);
  if (!o.json)
    std::cout << fmt::format("{:<16} {:>5} {:>4} {:>7} {:>7} {:>4} | {:>9} "
                             "{:>9} {:>9} | {:>8} {:>8}\n",
                             "variant (bwd)", "B", "H", "Lq", "Lkv", "D",
                             "ms med", "ms min", "ms max", "TF/s dns",
                             "TF/s use");
  int failures = 0;
  for (const rt::PackageVariant *v : variants)
    for (Shape s : shapes) {
      s.resolve();
      auto fail = [&](const std::string &why) {
        std::cerr << "attnc-run: " << v->info.name << " backward "
                  << s.describe() << ": " << why << "\n";
        ++failures;
      };
      const GpuKernel *fwd = nullptr;
      const GpuBackwardKernel *bwd = nullptr;
      Inputs in;
      BackwardCase c;
      rt::Problem p;
      rt::cuda::BackwardMirror mirror;
      rt::Status st = kernels.get(*v, s, fwd, bwd);
      if (st)
        st = prepare(ctx, *v, s, o, *fwd, in, c);
      if (st)
        st = rt::resolveProblem(v->info, &fwd->image().spec, in.args, p);
      if (st)
        st = rt::cuda::BackwardMirror::create(ctx, c.args, mirror);
      std::vector<float> ms;
      rt::ParamGradients params;
      for (int i = 0; st && i < o.warmup; ++i)
        st = bwd->run(mirror.args(), &params);
      if (st)
        st = timeCalls(ctx, o.iters,
                       [&] { return bwd->run(mirror.args(), nullptr); }, ms);
      if (st)
        st = mirror.downloadGradients(c.args);
      // No timing for gradients that are not finite (the fp64 check is
      // the check mode's: at benchmark lengths it would take hours).
      if (st)
        for (const rt::TensorView *g : {&c.args.dq, &c.args.dk, &c.args.dv})
          for (int64_t i = 0; st && i < g->numel(); ++i)
            if (!std::isfinite(rt::loadAsDouble(g->data, g->dtype, i)))
              st = rt::Status::internal(
                  "the gradients have NaN or infinite values: no timing is "
                  "reported");
      if (!st || ms.empty()) {
        fail(st ? "no timed iterations" : st.message());
        continue;
      }
      double med = ms[ms.size() / 2], sec = med * 1e-3;
      double dense =
          2.0 * p.B * p.Hq * p.Lq * double(p.Lkv) * (3 * p.Dqk + 2 * p.Dv);
      double useful = dense * maskDensity(v->info, p);
      if (o.json)
        std::cout << fmt::format(
            "{{\"system\": \"attnc\", \"pass\": \"backward\", \"variant\": "
            "\"{}\", \"kernel\": \"{}\", \"gpu\": \"{}\", \"B\": {}, \"H\": "
            "{}, \"HKV\": {}, \"Lq\": {}, \"Lkv\": {}, \"D\": {}, \"Dv\": {}, "
            "\"dtype\": \"{}\", \"ms_median\": {:.5f}, \"ms_min\": {:.5f}, "
            "\"ms_max\": {:.5f}, \"tflops_dense\": {:.4f}, \"tflops_useful\": "
            "{:.4f}, \"warmup\": {}, \"iters\": {}}}\n",
            v->info.name, bwd->image().query, ctx.device().name(), p.B, p.Hq,
            p.Hkv, p.Lq, p.Lkv, p.Dqk, p.Dv, rt::dtypeName(s.dtype), med,
            ms.front(), ms.back(), dense / sec / 1e12, useful / sec / 1e12,
            o.warmup, o.iters);
      else
        std::cout << fmt::format("{:<16} {:>5} {:>4} {:>7} {:>7} {:>4} | "
                                 "{:>9.4f} {:>9.4f} {:>9.4f} | {:>8.2f} "
                                 "{:>8.2f}\n",
                                 v->info.name, p.B, p.Hq, p.Lq, p.Lkv, p.Dqk,
                                 med, ms.front(), ms.back(), dense / sec / 1e12,
                                 useful / sec / 1e12);
    }
  return failures ? 1 : 0;
}

} // namespace attnc::tools
