//===- Check.cpp - `attnc check`: a backend against the fp64 reference ---===//
#include "Check.h"
#include "Options.h"
#include "Problem.h"

#include "attnc/Driver/Session.h"
#include "attnc/runtime/Npy.h"
#include "attnc/runtime/cuda/CudaDriver.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <map>
#include <memory>

namespace attnc::tools {

namespace {

const char *kCheckUsage = R"(usage: attnc check FILE.attn [options]

Runs a variant on a backend and on the fp64 reference over the same seeded
inputs and prints  case | max_abs | mean_abs | tolerance | PASS/FAIL.
Exit status 0 only if every case passes.

  --variant NAME          one variant (default: every variant in the file)
  --backend cpu|cuda      backend to check (default cpu)
  --batch N --heads N --kv-heads N --q-len N --kv-len N
  --head-dim N --v-head-dim N
  --dtype f32|f16|bf16    input/output dtype (default f32)
  --layout bhsd|bshd      memory layout of q, k, v, out (default bhsd)
  --mode prefill|decode|chunk
  --seed N                input seed (default 42)
  --set NAME=VALUE        a scalar parameter
  --input NAME=FILE.npy   q, k, v or a capture from a file
  --output FILE.npy       write the backend's output (f32, [B, H, Lq, Dv])
  --checked               report the first gather outside its tensor
  --threads N             CPU threads (default: all)
  --suite                 the matrix {MHA 8/8, GQA 8/2, MQA 8/1} x {prefill,
                          decode, chunk} x {f32, bf16}, plus GQA 6:1, D=80,
                          Dv != Dqk and BSHD cases
Tolerances (max_abs vs fp64): f32 1e-5, f16 2e-3, bf16 1.6e-2.
)";

double tolerance(rt::DType t) {
  switch (t) {
  case rt::DType::F16: return 2e-3;
  case rt::DType::BF16: return 1.6e-2;
  default: return 1e-5;
  }
}

struct Row {
  std::string name;
  double maxAbs = 0, meanAbs = 0, tol = 0;
  bool pass = false;
  std::string note;
};

struct KernelKey {
  std::string variant;
  rt::DType dtype;
  int64_t d, dv;
  bool operator<(const KernelKey &o) const {
    return std::tie(variant, dtype, d, dv) <
           std::tie(o.variant, o.dtype, o.d, o.dv);
  }
};

class Checker {
public:
  Checker(const Session &s, int threads) : session_(s), threads_(threads) {}

  Row runCase(const std::string &variant, const Shape &shape,
              const std::map<std::string, double> &sets,
              const std::map<std::string, std::string> &npy,
              const std::string &output, bool checked) {
    Row row;
    row.name = variant + " " + shape.describe();
    row.tol = tolerance(shape.dtype);
    rt::VariantInfo info;
    if (rt::Status s = session_.info(variant, info); !s)
      return fail(row, s.message());
    Inputs in;
    if (rt::Status s = makeInputs(info, shape, sets, npy, in); !s)
      return fail(row, s.message());
    in.args.numThreads = threads_;
    KernelKey key{variant, shape.dtype, shape.headDim, shape.vHeadDim};
    auto it = kernels_.find(key);
    if (it == kernels_.end()) {
      rt::KernelSpec spec;
      spec.dtype = shape.dtype;
      spec.headDim = shape.headDim;
      spec.vHeadDim = shape.vHeadDim;
      std::unique_ptr<rt::CpuKernel> k;
      if (rt::Status s = session_.compileCpu(variant, spec, k); !s)
        return fail(row, s.message());
      it = kernels_.emplace(key, std::move(k)).first;
    }
    if (rt::Status s = it->second->run(in.args); !s)
      return fail(row, s.message());
    std::vector<double> ref, refLse;
    rt::GatherViolation violation;
    if (rt::Status s = rt::referenceAttention(info, in.args, ref, refLse,
                                              checked ? &violation : nullptr);
        !s)
      return fail(row, s.message());
    if (checked && !violation.capture.empty()) {
      std::string idx, shp;
      for (size_t i = 0; i < violation.index.size(); ++i) {
        idx += (i ? ", " : "") + std::to_string(violation.index[i]);
        shp += (i ? ", " : "") + std::to_string(violation.shape[i]);
      }
      row.note = fmt::format("checked: variant '{}' reads '{}' at [{}] "
                             "outside its shape [{}] (clamped)",
                             variant, violation.capture, idx, shp);
    }
    // Compare O (in the logical [B, H, Lq, Dv] order) and the LSE.
    const rt::TensorView &o = in.args.out;
    double sum = 0;
    int64_t n = 0;
    bool bad = false;
    for (int64_t b = 0; b < o.shape[0]; ++b)
      for (int64_t h = 0; h < o.shape[1]; ++h)
        for (int64_t i = 0; i < o.shape[2]; ++i) {
          for (int64_t d = 0; d < o.shape[3]; ++d) {
            double got = rt::loadAsDouble(o.data, o.dtype, o.offsetOf({b, h, i, d}));
            double want = ref[((b * o.shape[1] + h) * o.shape[2] + i) * o.shape[3] + d];
            double e = std::fabs(got - want);
            if (std::isnan(got))
              bad = true;
            row.maxAbs = std::max(row.maxAbs, e);
            sum += e;
            ++n;
          }
          int64_t li = (b * o.shape[1] + h) * o.shape[2] + i;
          double got = in.lse[li], want = refLse[li];
          if (std::isinf(want) || std::isinf(got)) {
            if (got != want) {
              bad = true;
              row.note = fmt::format("lse[{}, {}, {}] is {} but the reference "
                                     "has {}", b, h, i, got, want);
            }
          } else {
            // LSE is compared relative to its magnitude (it grows with log n).
            double e = std::fabs(got - want) / std::max(1.0, std::fabs(want));
            if (std::isnan(got) || e > row.tol) {
              bad = true;
              row.note = fmt::format("lse[{}, {}, {}] is {} but the reference "
                                     "has {}", b, h, i, got, want);
            }
          }
        }
    row.meanAbs = n ? sum / n : 0;
    row.pass = !bad && row.maxAbs <= row.tol;
    if (!output.empty()) {
      rt::NpyArray a;
      a.dtype = rt::DType::F32;
      a.shape = o.shape;
      a.bytes.resize(o.numel() * 4);
      int64_t k = 0;
      for (int64_t b = 0; b < o.shape[0]; ++b)
        for (int64_t h = 0; h < o.shape[1]; ++h)
          for (int64_t i = 0; i < o.shape[2]; ++i)
            for (int64_t d = 0; d < o.shape[3]; ++d)
              rt::storeFromDouble(a.bytes.data(), rt::DType::F32, k++,
                                  rt::loadAsDouble(o.data, o.dtype,
                                                   o.offsetOf({b, h, i, d})));
      if (rt::Status s = rt::writeNpy(output, a); !s)
        row.note = s.message();
    }
    return row;
  }

private:
  static Row fail(Row r, const std::string &why) {
    r.pass = false;
    r.maxAbs = r.meanAbs = NAN;
    r.note = why;
    return r;
  }
  const Session &session_;
  int threads_;
  std::map<KernelKey, std::unique_ptr<rt::CpuKernel>> kernels_;
};

std::vector<Shape> suiteShapes(const Shape &base) {
  std::vector<Shape> out;
  for (rt::DType dt : {rt::DType::F32, rt::DType::BF16})
    for (auto [h, hk] : {std::pair{8, 8}, std::pair{8, 2}, std::pair{8, 1}})
      for (Mode m : {Mode::Prefill, Mode::Decode, Mode::Chunk}) {
        Shape s = base;
        s.heads = h;
        s.kvHeads = hk;
        s.dtype = dt;
        s.mode = m;
        s.qLen = s.kvLen = -1;
        s.resolve();
        out.push_back(s);
      }
  auto extra = [&](auto edit) {
    Shape s = base;
    s.heads = 8;
    s.kvHeads = 8;
    s.dtype = rt::DType::F32;
    s.qLen = s.kvLen = -1;
    s.mode = Mode::Prefill;
    edit(s);
    s.resolve();
    out.push_back(s);
  };
  extra([](Shape &s) { s.heads = 6; s.kvHeads = 1; });            // GQA 6:1
  extra([](Shape &s) { s.headDim = 80; s.vHeadDim = 80; });       // D = 80
  extra([](Shape &s) { s.headDim = 64; s.vHeadDim = 32; });       // Dv != Dqk
  extra([](Shape &s) { s.bshd = true; s.mode = Mode::Chunk; });   // BSHD
  extra([](Shape &s) { s.dtype = rt::DType::F16; s.mode = Mode::Chunk; });
  return out;
}

} // namespace

int runCheck(const std::vector<std::string> &argv) {
  Options o;
  std::string err;
  if (!o.parse(argv, err))
    return usage("check", err);
  if (o.help) {
    std::cout << kCheckUsage;
    return 0;
  }
  if (o.positional.size() != 1)
    return usage("check", "'check' needs exactly one input file");
  if (o.backend == "cuda") {
    // Without a driver or a device, say so and use the CPU; with one, the
    // missing piece is ours: the CUDA code generator is not built yet.
    std::unique_ptr<rt::cuda::Driver> driver;
    std::unique_ptr<rt::cuda::Device> device;
    rt::Status s = rt::cuda::Driver::open(driver);
    if (s)
      s = rt::cuda::Device::open(*driver, 0, device);
    if (!s) {
      std::cerr << "attnc: " << s.message() << "; using the CPU backend\n";
      o.backend = "cpu";
    } else {
      std::cerr << "attnc: error: found " << device->name() << " (sm_"
                << device->computeCapability()
                << "), but the CUDA code generator is not built yet; use "
                   "--backend cpu\n";
      return 2;
    }
  }
  if (o.backend != "cpu")
    return usage("check", "unknown backend '" + o.backend + "'");
  std::unique_ptr<Session> session;
  std::vector<std::string> variants;
  if (!loadVariants(o, session, variants))
    return 1;
  Checker checker(*session, o.threads);
  std::vector<Row> rows;
  for (const std::string &v : variants) {
    std::vector<Shape> shapes = o.suite ? suiteShapes(o.shape)
                                        : std::vector<Shape>{o.shape};
    for (Shape s : shapes) {
      s.resolve();
      rows.push_back(checker.runCase(v, s, o.sets, o.inputs,
                                     o.suite ? "" : o.output, o.checked));
    }
  }
  size_t width = 4;
  for (const Row &r : rows)
    width = std::max(width, r.name.size());
  std::cout << fmt::format("{:<{}} | {:>9} | {:>9} | {:>9} | {}\n", "case",
                           width, "max_abs", "mean_abs", "tolerance", "result");
  std::cout << std::string(width, '-') << "-|-----------|-----------|-----------|-------\n";
  int passed = 0, failed = 0;
  for (const Row &r : rows) {
    std::cout << fmt::format("{:<{}} | {:>9.2e} | {:>9.2e} | {:>9.1e} | {}\n",
                             r.name, width, r.maxAbs, r.meanAbs, r.tol,
                             r.pass ? "PASS" : "FAIL");
    if (!r.note.empty())
      std::cout << "    " << r.note << "\n";
    (r.pass ? passed : failed)++;
  }
  std::cout << passed << " passed, " << failed << " failed\n";
  return failed ? 1 : 0;
}

} // namespace attnc::tools
