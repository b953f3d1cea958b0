//===- Check.cpp - `attnc check`: a backend against the fp64 reference ---===//
#include "Check.h"
#include "LoadVariants.h"
#include "Options.h"
#include "Parity.h"
#include "Problem.h"

#include "attnc/Driver/Session.h"
#include "attnc/runtime/Backward.h"
#include "attnc/runtime/Npy.h"
#include "attnc/runtime/cuda/GpuBackward.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <random>

namespace attnc::tools {

namespace {

const char *kCheckUsage = R"(usage: attnc check FILE.attn [options]

Runs a variant on a backend and on the fp64 reference over the same seeded
inputs and prints  case | max_abs | mean_abs | tolerance | PASS/FAIL.
Exit status 0 only if every case passes.

  --variant NAME          one variant (default: every variant in the file)
  --backend cpu|cuda      backend to check (default cpu); cuda compiles for
                          the device's target and says so, or falls back
                          to the CPU, with the reason, when there is no
                          CUDA driver or device
  --batch N --heads N --kv-heads N --q-len N --kv-len N
  --head-dim N --v-head-dim N
  --kv-lens L1,L2,...     per-sequence KV lengths (a ragged batch; one per
                          --batch entry, each <= --kv-len)
  --q-offsets P[,P2,...]  absolute position of each sequence's first query
                          (one for all, or one per --batch entry; default:
                          the end of its keys). With them --q-len may
                          exceed --kv-len (FlexAttention's convention: 0)
  --kv-offsets P[,P2,...] absolute position of each sequence's first key
                          (one for all, or one per --batch entry; default
                          0): the keys are a block of a longer sequence
  --head-offset N --head-count N
                          the query heads are heads N.. of a model with
                          --head-count of them (default: offset + heads),
                          as the modifiers see them (a head-parallel shard)
  --dtype f32|f16|bf16    input/output dtype (default f32)
  --layout ORDER          memory order of q, k, v, out, outermost first: any
                          order of b, h, s, d (default bhsd; bshd is
                          token-major; d need not be innermost)
  --pad N                 N elements after each innermost row (no view is
                          contiguous; default 0)
  --page-size N           K and V in a pool of N-row pages through a page
                          table, pages shuffled, spare pages NaN (with
                          --suite and --matrix too)
  --splits N              split each sequence's keys in N parts, merged by
                          LSE (default: the planner's choice; 1: never)
  --mode prefill|decode|chunk
  --seed N                input seed (default 42)
  --set NAME=VALUE        a scalar parameter
  --input NAME=FILE.npy   q, k, v or a capture from a file
  --output FILE.npy       write the backend's output (f32, [B, H, Lq, Dv])
  --checked               report the first gather outside its tensor
  --threads N             CPU threads (default: all)
  --block-m N --block-n N --warps N
                          tiles (default: 64 x 64 on the CPU, the
                          configuration table's on the GPU)
  --suite                 the matrix {MHA 8/8, GQA 8/2, MQA 8/1} x {prefill,
                          decode, chunk} x {f32, bf16} ({f32, f16, bf16}
                          on cuda), plus GQA 6:1, D=80,
                          Dv != Dqk and BSHD cases
  --matrix                the GPU parity matrix (dtypes as --suite) x head
                          dims {64, 80, 128, 64:32} x {prefill, decode,
                          chunk} x {MHA, GQA, MQA}, with lengths, layouts
                          and ragged batches in rotation (docs/check.md)
  --backward              check the backward pass instead: the forward
                          kernel's O and LSE, then dQ, dK, dV and every float
                          parameter's gradient against the fp64 backward,
                          for a seeded dO; max_abs is the largest error,
                          tolerance the dtype's (f32 1e-4, f16 and bf16
                          1e-3) times 1 + the largest |gradient| of that
                          kind (D = rowsum(dO O) from the kernel's O); on
                          cuda dq, dk, dv are in the kernel's dtype, and
                          16-bit ones add half an ulp. --splits,
                          --page-size, --checked and --output do not apply
Tolerances (max_abs vs fp64): f32 1e-5, f16 2e-3, bf16 1.6e-2.
)";

struct KernelKey {
  std::string variant;
  rt::DType dtype;
  int64_t d, dv;
  bool keyOffsets; // a case with --kv-offsets needs a kernel that reads them
  bool operator<(const KernelKey &o) const {
    return std::tie(variant, dtype, d, dv, keyOffsets) <
           std::tie(o.variant, o.dtype, o.d, o.dv, o.keyOffsets);
  }
};

class Checker {
public:
  Checker(const Session &s, int threads, const rt::cuda::Context *gpu,
          const rt::KernelSpec &tiles)
      : session_(s), threads_(threads), gpu_(gpu), tiles_(tiles) {}

  Row runCase(const std::string &variant, const Shape &shape,
              const std::map<std::string, double> &sets,
              const std::map<std::string, std::string> &npy,
              const std::string &output, bool checked) {
    std::string name = variant + " " + shape.describe();
    rt::VariantInfo info;
    Inputs in;
    rt::KernelSpec spec;
    if (rt::Status s = prepareCase(variant, shape, sets, npy, info, in, spec); !s)
      return failedRow(name, shape.dtype, s.message());
    KernelKey key{variant, shape.dtype, shape.headDim, shape.vHeadDim,
                  spec.keyOffsets};
    if (rt::Status s = gpu_ ? runGpu(key, info, spec, in) : runCpu(key, spec, in);
        !s)
      return failedRow(name, shape.dtype, s.message());
    Row row = compareWithReference(info, name, in, checked);
    if (!output.empty())
      if (rt::Status s = writeOutputNpy(in.args.out, output); !s) {
        row.note = s.message(); // the case fails: its output is lost
        row.pass = false;
      }
    return row;
  }

  /// The backward pass (CPU, or the GPU with its forward) against the fp64
  /// backward.
  Row runBackwardCase(const std::string &variant, const Shape &shape,
                      const std::map<std::string, double> &sets,
                      const std::map<std::string, std::string> &npy) {
    std::string name = variant + " backward " + shape.describe();
    if (shape.pageSize || shape.splits > 1)
      return failedRow(name, shape.dtype,
                       "the backward takes neither pages nor splits");
    rt::VariantInfo info;
    Inputs in;
    rt::KernelSpec spec;
    if (rt::Status s = prepareCase(variant, shape, sets, npy, info, in, spec); !s)
      return failedRow(name, shape.dtype, s.message());
    KernelKey key{variant, shape.dtype, shape.headDim, shape.vHeadDim,
                  spec.keyOffsets};
    if (rt::Status s = gpu_ ? runGpu(key, info, spec, in) : runCpu(key, spec, in);
        !s)
      return failedRow(name, shape.dtype, s.message());
    // Gradients into f32 buffers on the CPU, the kernel's dtype on the GPU
    // (which writes no other).
    BackwardCase c;
    makeBackwardCase(in, shape, gpu_ ? shape.dtype : rt::DType::F32, c);
    rt::ParamGradients params;
    if (rt::Status s = runBackward(key, info, spec, c.args, params); !s)
      return failedRow(name, shape.dtype, s.message());
    return compareBackwardWithReference(info, name, in, c, params);
  }

private:
  /// A case's first steps: the variant's program, seeded inputs, the
  /// kernel configuration.
  rt::Status prepareCase(const std::string &variant, const Shape &shape,
                         const std::map<std::string, double> &sets,
                         const std::map<std::string, std::string> &npy,
                         rt::VariantInfo &info, Inputs &in,
                         rt::KernelSpec &spec) {
    if (rt::Status s = session_.info(variant, info); !s)
      return s;
    if (rt::Status s = makeInputs(info, shape, sets, npy, in); !s)
      return s;
    in.args.numThreads = threads_;
    spec = tiles_;
    spec.dtype = shape.dtype;
    spec.headDim = shape.headDim;
    spec.vHeadDim = shape.vHeadDim;
    spec.keyOffsets = !shape.kvOffsets.empty();
    return rt::Status::ok();
  }

  rt::Status runCpu(const KernelKey &key, const rt::KernelSpec &spec,
                    Inputs &in) {
    auto it = cpu_.find(key);
    if (it == cpu_.end()) {
      std::unique_ptr<rt::CpuKernel> k;
      if (rt::Status s = session_.compileCpu(key.variant, spec, k); !s)
        return s;
      it = cpu_.emplace(key, std::move(k)).first;
    }
    return it->second->run(in.args);
  }
  rt::Status runGpu(const KernelKey &key, const rt::VariantInfo &info,
                    const rt::KernelSpec &spec, Inputs &in) {
    auto it = gpuKernels_.find(key);
    if (it == gpuKernels_.end()) {
      rt::GpuKernelImage image;
      std::string target = gpuTargetFor(gpu_->device().computeCapability());
      if (rt::Status s = session_.compileGpu(key.variant, spec, target, image);
          !s)
        return s;
      std::unique_ptr<rt::cuda::GpuKernel> k;
      if (rt::Status s = rt::cuda::GpuKernel::load(*gpu_, info, image, k); !s)
        return s;
      it = gpuKernels_.emplace(key, std::move(k)).first;
    }
    return rt::cuda::runFromHost(*gpu_, *it->second, in.args);
  }
  rt::Status runBackward(const KernelKey &key, const rt::VariantInfo &info,
                         const rt::KernelSpec &spec, const rt::BackwardArgs &b,
                         rt::ParamGradients &params) {
    if (!gpu_) {
      auto it = cpuBackward_.find(key);
      if (it == cpuBackward_.end()) {
        std::unique_ptr<rt::CpuBackwardKernel> k;
        if (rt::Status s = session_.compileCpuBackward(key.variant, spec, k); !s)
          return s;
        it = cpuBackward_.emplace(key, std::move(k)).first;
      }
      return it->second->run(b, &params);
    }
    auto it = gpuBackward_.find(key);
    if (it == gpuBackward_.end()) {
      rt::GpuBackwardImage image;
      std::string target = gpuTargetFor(gpu_->device().computeCapability());
      if (rt::Status s =
              session_.compileGpuBackward(key.variant, spec, target, image);
          !s)
        return s;
      std::unique_ptr<rt::cuda::GpuBackwardKernel> k;
      if (rt::Status s = rt::cuda::GpuBackwardKernel::load(*gpu_, info, image, k);
          !s)
        return s;
      it = gpuBackward_.emplace(key, std::move(k)).first;
    }
    return rt::cuda::runBackwardFromHost(*gpu_, *it->second, b, &params);
  }

  const Session &session_;
  int threads_;
  const rt::cuda::Context *gpu_;
  rt::KernelSpec tiles_; // block_m, block_n, warps as asked
  std::map<KernelKey, std::unique_ptr<rt::CpuKernel>> cpu_;
  std::map<KernelKey, std::unique_ptr<rt::cuda::GpuKernel>> gpuKernels_;
  std::map<KernelKey, std::unique_ptr<rt::CpuBackwardKernel>> cpuBackward_;
  std::map<KernelKey, std::unique_ptr<rt::cuda::GpuBackwardKernel>> gpuBackward_;
};

} // namespace

int runCheck(const std::vector<std::string> &argv) {
  Options o;
  std::string err;
  if (!o.parse(argv, err))
    return usage("attnc check", err);
  if (o.help) {
    std::cout << kCheckUsage;
    return 0;
  }
  if (o.positional.size() != 1)
    return usage("attnc check", "'check' needs exactly one input file");
  std::unique_ptr<rt::cuda::Context> gpu;
  if (o.backend == "cuda") {
    // Without a driver or a device, say so and use the CPU.
    if (rt::Status s = rt::cuda::Context::open(gpu); !s) {
      std::cerr << "attnc: " << s.message() << "; using the CPU backend\n";
      o.backend = "cpu";
    } else {
      std::cerr << "attnc: running on " << gpu->device().name() << " (sm_"
                << gpu->device().computeCapability() << ", "
                << gpuTargetFor(gpu->device().computeCapability())
                << " kernels)\n";
      if (gpu->device().computeCapability() < 80)
        return usage("attnc check", "the CUDA backend needs sm_80 or newer");
    }
  }
  if (o.backend != "cpu" && o.backend != "cuda")
    return usage("attnc check", "unknown backend '" + o.backend + "'");
  if (o.backward && (o.checked || !o.output.empty()))
    return usage("attnc check", "--checked and --output do not apply to "
                                "--backward");
  std::unique_ptr<Session> session;
  std::vector<std::string> variants;
  if (!loadVariants(o, session, variants))
    return 1;
  rt::KernelSpec tiles;
  if (o.blockM)
    tiles.blockM = o.blockM;
  if (o.blockN)
    tiles.blockN = o.blockN;
  tiles.warps = o.warps;
  Checker checker(*session, o.threads, gpu.get(), tiles);
  // The GPU suite adds f16 to every row of the matrix.
  std::vector<rt::DType> dtypes = {rt::DType::F32, rt::DType::BF16};
  if (gpu)
    dtypes = {rt::DType::F32, rt::DType::F16, rt::DType::BF16};
  std::vector<Row> rows;
  for (const std::string &v : variants) {
    std::vector<Shape> shapes = shapesFor(o.matrix, o.suite, o.shape, dtypes);
    for (Shape s : shapes) {
      s.resolve();
      rows.push_back(o.backward
                         ? checker.runBackwardCase(v, s, o.sets, o.inputs)
                         : checker.runCase(v, s, o.sets, o.inputs,
                                           o.suite || o.matrix ? "" : o.output,
                                           o.checked));
    }
  }
  return printRows(rows) ? 1 : 0;
}

} // namespace attnc::tools
