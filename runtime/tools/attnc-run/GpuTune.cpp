//===- GpuTune.cpp - attnc-run --tune: timing tile candidates ------------===//
//
// Each candidate kernel is checked before it is timed, so that no wrong
// kernel is ever recorded as fast: a failed check is recorded as such and
// `attnc tune` excludes the candidate.
//
//===----------------------------------------------------------------------===//
#include "GpuTune.h"
#include "GpuBench.h"
#include "Parity.h"

#include "attnc/runtime/Tuning.h"

#include <fmt/format.h>

#include <iostream>
#include <map>

namespace attnc::tools {

namespace {

/// The images of `v` for this dtype and head dims at the highest target
/// the device runs.
std::vector<const rt::GpuKernelImage *>
candidatesFor(const rt::PackageVariant &v, int cc, const Shape &s) {
  int best = -1;
  for (const rt::GpuKernelImage &k : v.kernels)
    if (k.spec.dtype == s.dtype && k.spec.headDim == s.headDim &&
        k.spec.vHeadDim == s.vHeadDim && rt::targetNumber(k.target) <= cc)
      best = std::max(best, rt::targetNumber(k.target));
  std::vector<const rt::GpuKernelImage *> out;
  for (const rt::GpuKernelImage &k : v.kernels)
    if (k.spec.dtype == s.dtype && k.spec.headDim == s.headDim &&
        k.spec.vHeadDim == s.vHeadDim && rt::targetNumber(k.target) == best)
      out.push_back(&k);
  return out;
}

} // namespace

int runGpuTune(const rt::cuda::Context &ctx,
               const std::vector<const rt::PackageVariant *> &variants,
               const Options &o, const std::vector<Shape> &shapes,
               std::ostream &records) {
  int cc = ctx.device().computeCapability();
  int failures = 0;
  // Each kernel is loaded and checked once: (image) -> module, error ("" =
  // passed).
  std::map<const rt::GpuKernelImage *, std::unique_ptr<rt::cuda::GpuKernel>>
      loaded;
  std::map<const rt::GpuKernelImage *, std::string> checked;
  for (const rt::PackageVariant *v : variants)
    for (const Shape &s : shapes) {
      std::vector<const rt::GpuKernelImage *> cands = candidatesFor(*v, cc, s);
      if (cands.empty()) {
        std::cerr << fmt::format("attnc-run: {} {}: the package has no kernel "
                                 "for sm_{} {} D={}/{}\n",
                                 v->info.name, s.describe(), cc,
                                 rt::dtypeName(s.dtype), s.headDim, s.vHeadDim);
        ++failures;
        continue;
      }
      for (const rt::GpuKernelImage *image : cands) {
        rt::TuningRecord r;
        r.shape = {image->target, s.dtype, s.headDim, s.vHeadDim};
        r.config = rt::tileConfigOf(*image);
        r.gpu = ctx.device().name();
        r.variant = v->info.name;
        r.workload = s.describe();
        rt::Status st;
        std::unique_ptr<rt::cuda::GpuKernel> &k = loaded[image];
        if (!k)
          st = rt::cuda::GpuKernel::load(ctx, v->info, *image, k);
        auto it = checked.find(image);
        if (st && it == checked.end()) {
          // A small problem of the same kind, against the fp64 reference.
          Shape small = s;
          small.batch = 1;
          small.qLen = small.kvLen = -1;
          small.kvLens.clear();
          small.resolve();
          Inputs in;
          std::string why;
          if (rt::Status m = makeInputs(v->info, small, o.sets, o.inputs, in); !m)
            why = m.message();
          else if (rt::Status run = rt::cuda::runFromHost(ctx, *k, in.args); !run)
            why = run.message();
          else if (Row row = compareWithReference(v->info, image->kernel, in,
                                                  false);
                   !row.pass)
            why = fmt::format("max_abs {:.3g} over tolerance {:.3g} on {}",
                              row.maxAbs, row.tol, small.describe());
          it = checked.emplace(image, why).first;
        }
        if (!st)
          r.error = st.message();
        else if (!it->second.empty())
          r.error = it->second;
        else {
          Inputs in;
          rt::cuda::DeviceMirror mirror;
          std::vector<float> ms;
          double blockMaskMs = 0;
          st = makeInputs(v->info, s, o.sets, o.inputs, in);
          if (st)
            st = timeKernel(ctx, *k, in.args, o.warmup, o.iters, mirror, ms,
                            blockMaskMs);
          if (st) {
            r.passed = true;
            r.msMedian = ms[ms.size() / 2];
          } else {
            r.error = st.message();
          }
        }
        if (!r.passed)
          ++failures;
        records << rt::formatTuningRecord(r) << "\n";
        std::cerr << fmt::format("  {:<16} {:<44} {:<14} {}\n", r.variant,
                                 r.workload, r.config.name(),
                                 r.passed ? fmt::format("{:.4f} ms", r.msMedian)
                                          : "FAILED: " + r.error);
      }
    }
  records.flush();
  return failures ? 1 : 0;
}

} // namespace attnc::tools
