//===- GpuBench.cpp - attnc-run --bench: timing packaged kernels ---------===//
//
// FLOPs: "dense" counts 2 (Dqk + Dv) per (query, key) pair; "useful"
// scales it by the mask's density, sampled with the fp64 interpreter on a
// grid of at most 256 x 256 (query, key) pairs of sequence 0, head 0 —
// what a user would call the attention's real work (causal: about half).
// Decode rows also report the K and V bytes read per second.
//
//===----------------------------------------------------------------------===//
#include "GpuBench.h"
#include "Problem.h"

#include "attnc/runtime/Npy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>

namespace attnc::tools {

using rt::cuda::Context;
using rt::cuda::GpuKernel;

double maskDensity(const rt::VariantInfo &v, const rt::Problem &p) {
  if (v.maskKind == rt::MaskKind::None)
    return 1.0;
  int64_t kv = p.kvLen[0], nq = std::min<int64_t>(p.Lq, 256),
          nk = std::min<int64_t>(kv, 256);
  if (kv == 0)
    return 0.0;
  int64_t keep = 0;
  for (int64_t i = 0; i < nq; ++i)
    for (int64_t j = 0; j < nk; ++j) {
      int64_t q = p.qPos0[0] + i * p.Lq / nq, k = j * kv / nk;
      keep += rt::evalMaskMod(v, p.params, 0, 0, int32_t(q), int32_t(k));
    }
  return double(keep) / double(nq * nk);
}

rt::Status timeKernel(const Context &ctx, const GpuKernel &k,
                      const rt::AttentionArgs &host, int warmup, int iters,
                      rt::cuda::DeviceMirror &mirror, std::vector<float> &ms,
                      double &blockMaskMs) {
  ms.clear();
  blockMaskMs = 0;
  rt::Status st = rt::cuda::DeviceMirror::create(ctx, host, mirror);
  rt::AttentionArgs dev = mirror.args();
  rt::BlockMask blockMask;
  if (st && k.variant().maskKind == rt::MaskKind::Data) {
    auto t0 = std::chrono::steady_clock::now();
    st = k.buildBlockMask(dev, blockMask);
    blockMaskMs = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - t0).count();
    dev.blockMask = &blockMask;
  }
  for (int i = 0; st && i < warmup; ++i)
    st = k.run(dev);
  if (st)
    st = ctx.synchronize();
  if (st)
    st = timeCalls(ctx, iters, [&] { return k.run(dev); }, ms);
  return st;
}

rt::Status timeCalls(const Context &ctx, int iters,
                     const std::function<rt::Status()> &call,
                     std::vector<float> &ms) {
  const rt::cuda::DriverApi &api = ctx.driver().api();
  ms.clear();
  rt::cuda::CUevent a = nullptr, b = nullptr;
  rt::Status st = ctx.driver().check(api.cuEventCreate(&a, 0), "cuEventCreate");
  if (st)
    st = ctx.driver().check(api.cuEventCreate(&b, 0), "cuEventCreate");
  for (int i = 0; st && i < iters; ++i) {
    api.cuEventRecord(a, nullptr);
    st = call();
    api.cuEventRecord(b, nullptr);
    float t = 0;
    if (st)
      st = ctx.driver().check(api.cuEventSynchronize(b), "cuEventSynchronize");
    if (st)
      st = ctx.driver().check(api.cuEventElapsedTime(&t, a, b),
                              "cuEventElapsedTime");
    ms.push_back(t);
  }
  if (a)
    api.cuEventDestroy(a);
  if (b)
    api.cuEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return st;
}

int runGpuBench(const Context &ctx,
                const std::vector<const rt::PackageVariant *> &variants,
                const Options &o, const std::vector<Shape> &shapes, bool lse) {
  const rt::cuda::DriverApi &api = ctx.driver().api();
  int cc = ctx.device().computeCapability();
  if (!o.json)
    std::cout << fmt::format(
        "{:<16} {:>5} {:>4} {:>7} {:>7} {:>4} | {:>9} {:>9} {:>9} | {:>8} "
        "{:>8} | {:>9} {:>6} | {:>8}\n",
        "variant", "B", "H", "Lq", "Lkv", "D", "ms med", "ms min", "ms max",
        "TF/s dns", "TF/s use", "KV GB/s", "%peak", "dev MB");
  int failures = 0;
  for (const rt::PackageVariant *v : variants)
    for (const Shape &s : shapes) {
      auto fail = [&](const std::string &why) {
        std::cerr << "attnc-run: " << v->info.name << " " << s.describe()
                  << ": " << why << "\n";
        ++failures;
      };
      const rt::GpuKernelImage *image = nullptr;
      std::unique_ptr<GpuKernel> k;
      rt::Status st =
          rt::selectKernel(*v, cc, s.dtype, s.headDim, s.vHeadDim, image,
                           s.needs());
      if (st)
        st = GpuKernel::load(ctx, v->info, *image, k);
      Inputs in;
      if (st)
        st = makeInputs(v->info, s, o.sets, o.inputs, in);
      if (!lse)
        in.args.lse = {}; // inference's calls: no LSE asked for
      rt::Problem p;
      if (st)
        st = rt::resolveProblem(v->info, &image->spec, in.args, p);
      if (st)
        st = rt::checkCaptureValues(v->info, p);
      if (!st) {
        fail(st.message());
        continue;
      }
      rt::cuda::DeviceMirror mirror;
      std::vector<float> ms;
      double blockMaskMs = 0;
      if (st)
        st = timeKernel(ctx, *k, in.args, o.warmup, o.iters, mirror, ms,
                        blockMaskMs);
      size_t freeB = 0, totalB = 0;
      api.cuMemGetInfo(&freeB, &totalB);
      // The output comes back for a finiteness check (and --output).
      if (st)
        st = mirror.downloadOutputs(in.args);
      if (!st) {
        fail(st.message());
        continue;
      }
      bool finite = true;
      for (int64_t i = 0; finite && i < in.args.out.numel(); ++i)
        finite = std::isfinite(rt::loadAsDouble(in.args.out.data,
                                                in.args.out.dtype, i));
      if (!finite) {
        fail("the output has NaN or infinite values: no timing is reported");
        continue;
      }
      if (!o.output.empty())
        if (rt::Status e = writeOutputNpy(in.args.out, o.output); !e)
          fail(e.message());
      double med = ms[ms.size() / 2], sec = med * 1e-3;
      double dense = 2.0 * p.B * p.Hq * p.Lq * double(p.Lkv) * (p.Dqk + p.Dv);
      double useful = dense * maskDensity(v->info, p);
      // Each sequence's keys, read once (what bounds decode).
      double keys = 0;
      for (int32_t len : p.kvLen)
        keys += len;
      double kvBytes = keys * p.Hkv * (p.Dqk + p.Dv) * rt::dtypeSize(s.dtype);
      double peak = ctx.device().peakMemoryGBs();
      double ofPeak = peak > 0 ? kvBytes / sec / 1e9 / peak : 0;
      double devMB = double(totalB - freeB) / (1 << 20);
      if (o.json)
        std::cout << fmt::format(
            "{{\"system\": \"attnc\", \"variant\": \"{}\", \"kernel\": \"{}\", "
            "\"gpu\": \"{}\", \"B\": {}, \"H\": {}, \"HKV\": {}, \"Lq\": {}, "
            "\"Lkv\": {}, \"D\": {}, \"Dv\": {}, \"dtype\": \"{}\", "
            "\"lse\": {}, "
            "\"ms_median\": {:.5f}, \"ms_min\": {:.5f}, \"ms_max\": {:.5f}, "
            "\"tflops_dense\": {:.4f}, \"tflops_useful\": {:.4f}, "
            "\"tokens_per_s\": {:.1f}, \"kv_gbs\": {:.2f}, "
            "\"kv_peak_fraction\": {:.4f}, \"splits\": {}, "
            "\"device_mb_used\": {:.1f}, \"block_mask_ms\": {:.4f}, "
            "\"warmup\": {}, \"iters\": {}}}\n",
            v->info.name, image->kernel, ctx.device().name(), p.B, p.Hq, p.Hkv,
            p.Lq, p.Lkv, p.Dqk, p.Dv, rt::dtypeName(s.dtype), lse, med,
            ms.front(), ms.back(), dense / sec / 1e12, useful / sec / 1e12,
            p.B * p.Lq / sec, kvBytes / sec / 1e9, ofPeak, s.splits, devMB,
            blockMaskMs, o.warmup, o.iters);
      else
        std::cout << fmt::format(
            "{:<16} {:>5} {:>4} {:>7} {:>7} {:>4} | {:>9.4f} {:>9.4f} {:>9.4f} "
            "| {:>8.2f} {:>8.2f} | {:>9.1f} {:>6.1f} | {:>8.0f}\n",
            v->info.name, p.B, p.Hq, p.Lq, p.Lkv, p.Dqk, med, ms.front(),
            ms.back(), dense / sec / 1e12, useful / sec / 1e12,
            kvBytes / sec / 1e9, 100 * ofPeak, devMB);
    }
  return failures ? 1 : 0;
}

} // namespace attnc::tools
