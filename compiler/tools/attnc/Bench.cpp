//===- Bench.cpp - `attnc bench`: timing the fused kernel ----------------===//
//
// Times the JIT-compiled kernel (warm-up, then timed iterations: median and
// range), counts FLOPs over the tiles it visits and dense-equivalent, and
// compares in the same run with the unfused OpenBLAS baseline (bench/),
// cross-checking outputs so that no speed is reported for a wrong result.
// Our runs go first for every length, so that their peak RSS is not the
// baseline's O(T^2) score matrices.
//
//===----------------------------------------------------------------------===//
#include "Check.h"
#include "LoadVariants.h"
#include "Options.h"
#include "Problem.h"

#include "attnc/Driver/Session.h"
#include "attnc/runtime/cuda/GpuKernel.h"
#ifdef ATTNC_HAVE_BASELINE
#include "Unfused.h"
#endif

#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <unistd.h>
#include <cmath>
#include <iostream>
#include <sstream>
#include <thread>

namespace attnc::tools {

namespace {

const char *kBenchUsage = R"(usage: attnc bench FILE.attn [options]

Times a variant's fused kernel and, where bench/ has one, the unfused
OpenBLAS baseline over the same inputs, in one run.

  --variant NAME        one variant (default: every variant in the file)
  --backend cpu         (GPU timing: attnc-run PACKAGE --bench, runtime only)
  --sweep T1,T2,...     sequence lengths (prefill: Lq = Lkv = T)
  --batch --heads --kv-heads --q-len --kv-len --head-dim --v-head-dim
  --dtype --layout --mode --seed --set NAME=VALUE --page-size N --splits N
                        as for attnc check
  --warmup N --iters N  (default 3 and 10)
  --block-m N --block-n N  tile sizes (default 64 x 64; on the GPU the
                           configuration table's)
  --warps N                warps per block of the tensor-core form
  --threads N           CPU threads (default: all)
  --no-baseline         skip the unfused baseline
  --json                one JSON object per row instead of the table
  --jit-latency [--target=sm_XX]
                        instead of running: the cost of compiling each
                        variant for the GPU (--dtype, default bf16, and
                        --head-dim): front end, cold lowering to PTX, kernel
                        cache hits from disk and memory, and with a device
                        the driver's module load
FLOP/s: "visited" counts 2*(Dqk + Dv) per score over the tiles the kernel
visits (live query rows, key padding included); "dense" counts every
(q, kv) pair as if nothing were masked. Peak RSS is the process's
(getrusage). K+V GB/s: the K and V bytes a call reads once (every
sequence's keys, every KV head) per second, what bounds decode.
)";

double peakRssMB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

struct Timing {
  double median = 0, min = 0, max = 0;
};

template <typename F> Timing timeIt(int warmup, int iters, F &&run) {
  for (int i = 0; i < warmup; ++i)
    run();
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    run();
    ms.push_back(std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - t0)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return {ms[ms.size() / 2], ms.front(), ms.back()};
}

struct Row {
  std::string variant;
  Shape shape;
  Timing ours;
  double visitedFlops = 0, denseFlops = 0, tokens = 0, rssMB = 0;
  std::array<int64_t, 3> tiles{0, 0, 0};
  bool haveBase = false;
  Timing base;
  double baseRssMB = 0, baseMaxAbs = 0;
  std::string note;
};

/// The K and V bytes a call must read once (every sequence's keys, every
/// KV head): the memory traffic decode is bound by.
double kvBytes(const Shape &s) {
  double keys = 0;
  for (int64_t l : s.kvLens)
    keys += static_cast<double>(l);
  if (s.kvLens.empty())
    keys = static_cast<double>(s.batch * s.kvLen);
  return keys * static_cast<double>(s.kvHeads * (s.headDim + s.vHeadDim) *
                                    rt::dtypeSize(s.dtype));
}

double msSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now() - t0)
      .count();
}

/// --jit-latency: what compiling a variant for the GPU costs, cold and from
/// the kernel cache, and (with a device) loading the PTX into the driver.
int runJitLatency(const Options &o, const std::string &target) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() /
                 ("attnc-jit-latency-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  std::unique_ptr<rt::cuda::Context> gpu;
  rt::Status gpuStatus = rt::cuda::Context::open(gpu);
  rt::KernelSpec spec;
  spec.dtype = o.shape.dtype == rt::DType::F32 ? rt::DType::BF16 : o.shape.dtype;
  spec.headDim = o.shape.headDim;
  spec.vHeadDim = o.shape.vHeadDim > 0 ? o.shape.vHeadDim : o.shape.headDim;
  std::unique_ptr<Session> probe;
  std::vector<std::string> variants;
  if (!loadVariants(o, probe, variants))
    return 1;
  if (!o.json)
    std::cout << fmt::format(
        "{:<20} | {:>13} | {:>13} | {:>13} | {:>13} | {:>15}\n", "variant",
        "front end ms", "cold PTX ms", "disk hit ms", "memory hit ms",
        "driver load ms");
  int status = 0;
  for (const std::string &v : variants) {
    std::string diags;
    std::unique_ptr<Session> s;
    auto t0 = std::chrono::steady_clock::now();
    if (rt::Status st = Session::load(o.positional[0], diags, s); !st)
      return 1;
    double front = msSince(t0);
    rt::GpuKernelImage image;
    s->setKernelCache(std::make_shared<rt::KernelCache>(dir.string()));
    t0 = std::chrono::steady_clock::now();
    rt::Status st = s->compileGpu(v, spec, target, image); // miss: compile + store
    double cold = msSince(t0);
    s->setKernelCache(std::make_shared<rt::KernelCache>(dir.string()));
    t0 = std::chrono::steady_clock::now();
    if (st)
      st = s->compileGpu(v, spec, target, image); // a fresh cache: from disk
    double disk = msSince(t0);
    t0 = std::chrono::steady_clock::now();
    if (st)
      st = s->compileGpu(v, spec, target, image); // from memory
    double memory = msSince(t0);
    if (!st) {
      std::cerr << "attnc: error: " << st.message() << "\n";
      status = 1;
      continue;
    }
    std::string load = "no device";
    if (gpu) {
      rt::VariantInfo info;
      std::unique_ptr<rt::cuda::GpuKernel> k;
      t0 = std::chrono::steady_clock::now();
      if (rt::Status ls = s->info(v, info); ls)
        ls = rt::cuda::GpuKernel::load(*gpu, info, image, k);
      load = fmt::format("{:.2f}", msSince(t0));
    }
    if (o.json)
      std::cout << fmt::format(
          "{{\"variant\": \"{}\", \"target\": \"{}\", \"kernel\": \"{}\", "
          "\"front_end_ms\": {:.3f}, \"cold_ptx_ms\": {:.3f}, "
          "\"disk_hit_ms\": {:.3f}, \"memory_hit_ms\": {:.4f}, "
          "\"driver_load_ms\": {}}}\n",
          v, target, image.kernel, front, cold, disk, memory,
          gpu ? load : "null");
    else
      std::cout << fmt::format(
          "{:<20} | {:>13.1f} | {:>13.1f} | {:>13.2f} | {:>13.3f} | {:>15}\n", v,
          front, cold, disk, memory, load);
  }
  if (!gpu && !o.json)
    std::cout << "driver load: not measured (" << gpuStatus.message() << ")\n";
  fs::remove_all(dir);
  return status;
}

} // namespace

int runBench(const std::vector<std::string> &argvIn) {
  // --sweep is bench-only; take it out before the shared parser.
  std::vector<std::string> argv;
  std::string sweepText, jitTarget;
  bool jit = false;
  for (size_t i = 0; i < argvIn.size(); ++i) {
    if (argvIn[i] == "--jit-latency")
      jit = true;
    else if (argvIn[i].rfind("--target=", 0) == 0)
      jitTarget = argvIn[i].substr(9);
    else if (argvIn[i] == "--sweep" && i + 1 < argvIn.size())
      sweepText = argvIn[++i];
    else if (argvIn[i].rfind("--sweep=", 0) == 0)
      sweepText = argvIn[i].substr(8);
    else
      argv.push_back(argvIn[i]);
  }
  Options o;
  std::string err;
  if (!o.parse(argv, err))
    return usage("attnc bench", err);
  if (o.help) {
    std::cout << kBenchUsage;
    return 0;
  }
  if (o.positional.size() != 1)
    return usage("attnc bench", "'bench' needs exactly one input file");
  if (jit || !jitTarget.empty()) {
    if (!jit)
      return usage("attnc bench", "--target is for --jit-latency");
    if (jitTarget.empty())
      jitTarget = "sm_90";
    if (jitTarget != "sm_80" && jitTarget != "sm_86" && jitTarget != "sm_89" &&
        jitTarget != "sm_90")
      return usage("attnc bench", "unknown --target '" + jitTarget + "'");
    return runJitLatency(o, jitTarget);
  }
  if (o.backend != "cpu") {
    std::cerr << "attnc: error: attnc bench times the CPU backend; time GPU "
                 "kernels with attnc-run PACKAGE --bench\n";
    return 2;
  }
  std::vector<int64_t> sweep;
  if (!sweepText.empty() && (sweep = parseSweep(sweepText, err)).empty())
    return usage("attnc bench", err);
  std::unique_ptr<Session> session;
  std::vector<std::string> variants;
  if (!loadVariants(o, session, variants))
    return 1;
  std::vector<Shape> shapes = sweepShapes(o.shape, sweep);

  std::vector<Row> rows;
  // One JIT compile per (variant, kernel spec), shared by both passes.
  std::map<std::string, std::unique_ptr<rt::CpuKernel>> kernels;
  auto kernelFor = [&](const std::string &v, const Shape &s,
                       rt::Status &st) -> const rt::CpuKernel * {
    rt::KernelSpec spec;
    spec.dtype = s.dtype;
    spec.headDim = s.headDim;
    spec.vHeadDim = s.vHeadDim;
    if (o.blockM)
      spec.blockM = o.blockM;
    if (o.blockN)
      spec.blockN = o.blockN;
    spec.warps = o.warps;
    std::string key = fmt::format("{}/{}/{}/{}", v, rt::dtypeName(s.dtype),
                                  s.headDim, s.vHeadDim);
    auto it = kernels.find(key);
    if (it == kernels.end()) {
      std::unique_ptr<rt::CpuKernel> k;
      if (!(st = session->compileCpu(v, spec, k)))
        return nullptr;
      it = kernels.emplace(key, std::move(k)).first;
    }
    return it->second.get();
  };
  int failures = 0;
  // Pass 1: the fused kernel.
  for (const std::string &v : variants) {
    rt::VariantInfo info;
    if (rt::Status s = session->info(v, info); !s) {
      std::cerr << "attnc: error: " << s.message() << "\n";
      return 1;
    }
    for (const Shape &s : shapes) {
      Row row;
      row.variant = v;
      row.shape = s;
      rt::Status compiled;
      const rt::CpuKernel *kernel = kernelFor(v, s, compiled);
      if (!kernel) {
        std::cerr << "attnc: error: " << compiled.message() << "\n";
        return 1;
      }
      const rt::KernelSpec &spec = kernel->spec();
      Inputs in;
      if (rt::Status st = makeInputs(info, s, o.sets, o.inputs, in); !st) {
        std::cerr << "attnc: error: " << st.message() << "\n";
        return 1;
      }
      in.args.numThreads = o.threads;
      in.args.lse = rt::TensorView();
      rt::BlockMask bm;
      if (info.maskKind == rt::MaskKind::Data) {
        if (rt::Status st = kernel->buildBlockMask(in.args, bm); !st) {
          std::cerr << "attnc: error: " << st.message() << "\n";
          return 1;
        }
        in.args.blockMask = &bm;
        row.tiles = bm.histogram();
        if (bm.heads == 1)
          for (int64_t &c : row.tiles)
            c *= s.heads;
      } else {
        // The scalars as the runtime validates them (an i32 in range),
        // before any is converted.
        rt::Problem checked;
        if (rt::Status st = rt::resolveProblem(info, &spec, in.args, checked); !st) {
          std::cerr << "attnc: error: " << st.message() << "\n";
          return 1;
        }
        std::map<std::string, int64_t> scalars;
        for (size_t i = 0; i < info.params.size(); ++i)
          if (!info.params[i].isTensor && info.params[i].dtype == rt::DType::I32)
            scalars[info.params[i].name] = static_cast<int64_t>(checked.params[i].scalar);
        std::vector<int32_t> kvLen(s.batch, int32_t(s.kvLen)),
            qPos0(s.batch, int32_t(s.kvLen - s.qLen));
        if (rt::Status st = session->countTiles(v, spec, s.heads, s.qLen, kvLen,
                                                qPos0, scalars, row.tiles);
            !st) {
          std::cerr << "attnc: error: " << st.message() << "\n";
          return 1;
        }
      }
      rt::Status runStatus;
      row.ours = timeIt(o.warmup, o.iters, [&] { runStatus = kernel->run(in.args); });
      if (!runStatus) {
        std::cerr << "attnc: error: " << runStatus.message() << "\n";
        return 1;
      }
      row.rssMB = peakRssMB();
      double perScore = 2.0 * (s.headDim + s.vHeadDim);
      // Live query rows per tile (a decode tile has one), KV padding kept.
      row.visitedFlops = double(row.tiles[1] + row.tiles[2]) *
                         std::min(spec.blockM, s.qLen) * spec.blockN * perScore;
      row.denseFlops = double(s.batch) * s.heads * s.qLen * s.kvLen * perScore;
      row.tokens = double(s.batch) * s.qLen;
      rows.push_back(row);
    }
  }
#ifdef ATTNC_HAVE_BASELINE
  // Pass 2: the unfused baseline, on the same inputs, cross-checked.
  if (o.baseline)
    for (Row &row : rows) {
      const Shape &s = row.shape;
      if (!bench::hasUnfusedBaseline(row.variant) || s.dtype != rt::DType::F32 ||
          s.mode != Mode::Prefill || !s.defaultLayout()) {
        row.note = "no unfused baseline for this case";
        continue;
      }
      // Pass 1 compiled this kernel and made these inputs once already.
      rt::Status st;
      const rt::CpuKernel *kernel = kernelFor(row.variant, s, st);
      Inputs in;
      if (st)
        st = makeInputs(kernel->variant(), s, o.sets, o.inputs, in);
      in.args.numThreads = o.threads;
      if (st)
        st = kernel->run(in.args);
      if (!st) {
        row.note = st.message();
        ++failures;
        continue;
      }
      std::vector<unsigned char> ours = in.out;
      row.base = timeIt(std::min(o.warmup, 1), std::min(o.iters, 3), [&] {
        st = bench::runUnfused(row.variant, in.args, o.threads);
      });
      if (!st) {
        row.note = st.message();
        continue;
      }
      row.baseRssMB = peakRssMB();
      const float *a = reinterpret_cast<const float *>(ours.data());
      const float *b = reinterpret_cast<const float *>(in.out.data());
      for (size_t i = 0; i < ours.size() / 4; ++i)
        row.baseMaxAbs = std::max<double>(row.baseMaxAbs, std::fabs(a[i] - b[i]));
      row.haveBase = row.baseMaxAbs <= 1e-4;
      if (!row.haveBase) {
        row.note = fmt::format("baseline disagrees (max_abs {:.2e}); not timed",
                               row.baseMaxAbs);
        ++failures;
      }
    }
#endif
  if (o.json) {
    for (const Row &r : rows) {
      std::cout << fmt::format(
          "{{\"variant\": \"{}\", \"backend\": \"cpu\", \"dtype\": \"{}\", "
          "\"batch\": {}, \"heads\": {}, \"kv_heads\": {}, \"q_len\": {}, "
          "\"kv_len\": {}, \"head_dim\": {}, \"v_head_dim\": {}, "
          "\"mode\": \"{}\", \"ms_median\": {:.4f}, \"ms_min\": {:.4f}, "
          "\"ms_max\": {:.4f}, \"gflops_visited\": {:.3f}, "
          "\"gflops_dense\": {:.3f}, \"tokens_per_s\": {:.1f}, "
          "\"peak_rss_mb\": {:.1f}, \"tiles_empty\": {}, \"tiles_partial\": {}, "
          "\"tiles_full\": {}, \"kv_gbs\": {:.3f}, \"baseline_ms_median\": {}, "
          "\"baseline_peak_rss_mb\": {}}}\n",
          r.variant, rt::dtypeName(r.shape.dtype), r.shape.batch, r.shape.heads,
          r.shape.kvHeads, r.shape.qLen, r.shape.kvLen, r.shape.headDim,
          r.shape.vHeadDim, modeName(r.shape.mode), r.ours.median, r.ours.min,
          r.ours.max, r.visitedFlops / r.ours.median / 1e6,
          r.denseFlops / r.ours.median / 1e6, r.tokens / r.ours.median * 1e3,
          r.rssMB, r.tiles[0], r.tiles[1], r.tiles[2],
          kvBytes(r.shape) / r.ours.median / 1e6,
          r.haveBase ? fmt::format("{:.4f}", r.base.median) : "null",
          r.haveBase ? fmt::format("{:.1f}", r.baseRssMB) : "null");
    }
    return failures ? 1 : 0;
  }
  std::cout << fmt::format(
      "{:<16} | {:>6} | {:>5} | {:>24} | {:>8} | {:>8} | {:>10} | {:>8} | "
      "{:>8} | {:>10} | {:>8} | {:>7}\n",
      "variant", "T", "D", "attnc ms med [min..max]", "GF/s vis", "GF/s den",
      "tokens/s", "K+V GB/s", "RSS MB", "unfused ms", "RSS MB", "speedup");
  for (const Row &r : rows) {
    std::string range = fmt::format("{:.2f} [{:.2f}..{:.2f}]", r.ours.median,
                                    r.ours.min, r.ours.max);
    std::cout << fmt::format(
        "{:<16} | {:>6} | {:>5} | {:>24} | {:>8.2f} | {:>8.2f} | {:>10.0f} | "
        "{:>8.2f} | {:>8.1f} | {:>10} | {:>8} | {:>7}\n",
        r.variant, r.shape.kvLen, r.shape.headDim, range,
        r.visitedFlops / r.ours.median / 1e6, r.denseFlops / r.ours.median / 1e6,
        r.tokens / r.ours.median * 1e3, kvBytes(r.shape) / r.ours.median / 1e6,
        r.rssMB,
        r.haveBase ? fmt::format("{:.2f}", r.base.median) : "-",
        r.haveBase ? fmt::format("{:.1f}", r.baseRssMB) : "-",
        r.haveBase ? fmt::format("{:.2f}x", r.base.median / r.ours.median) : "-");
    if (!r.note.empty() && r.note != "no unfused baseline for this case")
      std::cout << "    " << r.note << "\n";
  }
  std::cout << fmt::format("({} {} B={} H={}/{} {} threads, warmup {}, iters "
                           "{}; tiles {}x{})\n",
                           modeName(shapes[0].mode),
                           rt::dtypeName(shapes[0].dtype), shapes[0].batch,
                           shapes[0].heads, shapes[0].kvHeads,
                           o.threads ? o.threads : int(std::thread::hardware_concurrency()),
                           o.warmup, o.iters,
                           o.blockM ? o.blockM : rt::KernelSpec().blockM,
                           o.blockN ? o.blockN : rt::KernelSpec().blockN);
  return failures ? 1 : 0;
}

} // namespace attnc::tools
