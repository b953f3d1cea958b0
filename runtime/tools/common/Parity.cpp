//===- Parity.cpp - A backend's output against the fp64 reference --------===//
#include "Parity.h"

#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <random>

namespace attnc::tools {

double backwardTolerance(rt::DType t) {
  switch (t) {
  case rt::DType::F16:
  case rt::DType::BF16: return 1e-3;
  default: return 1e-4;
  }
}

void makeBackwardCase(const Inputs &in, const Shape &shape, rt::DType gradType,
                      BackwardCase &c) {
  std::mt19937_64 rng(shape.seed + 1);
  std::uniform_real_distribution<double> u(-1, 1);
  const rt::AttentionArgs &a = in.args;
  c.gradType = gradType;
  c.dOut.assign(static_cast<size_t>(a.out.numel()) * rt::dtypeSize(shape.dtype),
                0);
  for (int64_t i = 0; i < a.out.numel(); ++i)
    rt::storeFromDouble(c.dOut.data(), shape.dtype, i, u(rng));
  auto buffer = [&](const rt::TensorView &t) {
    return std::vector<unsigned char>(static_cast<size_t>(t.numel()) *
                                      rt::dtypeSize(gradType));
  };
  c.dq = buffer(a.q);
  c.dk = buffer(a.k);
  c.dv = buffer(a.v);
  c.args = rt::BackwardArgs();
  c.args.forward = a;
  c.args.dOut = rt::TensorView::contiguous(c.dOut.data(), shape.dtype, a.out.shape);
  c.args.dq = rt::TensorView::contiguous(c.dq.data(), gradType, a.q.shape);
  c.args.dk = rt::TensorView::contiguous(c.dk.data(), gradType, a.k.shape);
  c.args.dv = rt::TensorView::contiguous(c.dv.data(), gradType, a.v.shape);
}

Row compareBackwardWithReference(const rt::VariantInfo &info, std::string name,
                                 const Inputs &in, const BackwardCase &c,
                                 const rt::ParamGradients &params) {
  const rt::AttentionArgs &a = in.args;
  rt::DType dtype = a.q.dtype, gt = c.gradType;
  rt::AttentionGrads ref;
  // D = rowsum(dO * O) from the O the forward kernel wrote, as the
  // backward kernel forms it (Backward.h).
  if (rt::Status s = rt::referenceAttentionBackward(info, a, c.args.dOut, ref,
                                                    false, &a.out);
      !s)
    return failedRow(name, dtype, s.message());
  Row row;
  row.name = std::move(name);
  row.pass = true;
  double tol = backwardTolerance(dtype), worst = -1, sum = 0;
  int64_t count = 0;
  // 16-bit gradients are also off by their rounding (half an ulp).
  double rounding = gt == rt::DType::BF16  ? std::ldexp(1.0, -8)
                    : gt == rt::DType::F16 ? std::ldexp(1.0, -11)
                                           : 0.0;
  auto compare = [&](const std::string &what, const std::vector<double> &want,
                     auto got, double tol) {
    double scale = 1, err = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, 1 + std::fabs(want[i]));
      double e = std::fabs(got(i) - want[i]);
      err = std::isnan(e) ? INFINITY : std::max(err, e);
      sum += std::isnan(e) ? INFINITY : e;
    }
    count += static_cast<int64_t>(want.size());
    double ratio = err / (tol * scale);
    if (ratio > worst) {
      worst = ratio;
      row.maxAbs = err;
      row.tol = tol * scale;
      row.note = "worst: " + what;
    }
    row.pass &= err <= tol * scale;
  };
  auto at = [&](const std::vector<unsigned char> &g) {
    return [&g, gt](size_t i) {
      return rt::loadAsDouble(g.data(), gt, static_cast<int64_t>(i));
    };
  };
  compare("dq", ref.dq, at(c.dq), tol + rounding);
  compare("dk", ref.dk, at(c.dk), tol + rounding);
  compare("dv", ref.dv, at(c.dv), tol + rounding);
  for (size_t i = 0; i < info.params.size(); ++i)
    if (!ref.params[i].empty()) {
      if (i >= params.size() || params[i].size() != ref.params[i].size())
        return failedRow(row.name, dtype,
                         "the kernel gave no gradient of '" +
                             info.params[i].name + "'");
      compare("d" + info.params[i].name, ref.params[i],
              [&](size_t k) { return params[i][k]; }, tol);
    }
  row.meanAbs = count ? sum / static_cast<double>(count) : 0;
  return row;
}

double tolerance(rt::DType t) {
  switch (t) {
  case rt::DType::F16: return 2e-3;
  case rt::DType::BF16: return 1.6e-2;
  default: return 1e-5;
  }
}

Row failedRow(std::string name, rt::DType dtype, const std::string &why) {
  Row r;
  r.name = std::move(name);
  r.tol = tolerance(dtype);
  r.pass = false;
  r.maxAbs = r.meanAbs = NAN;
  r.note = why;
  return r;
}

double scoreRoundingTolerance(double rowScale) {
  return 2.0 * 0x1p-24 * rowScale;
}

namespace {

/// The comparison of compareWithReference against one reference. With
/// `out32`/`lse32` (the reference with f32 dot products), each row's
/// tolerance also covers kYardstick times that reference's own distance
/// from the fp64 one: the rounding a row's modifiers amplify.
constexpr double kYardstick = 4;

Row compareRows(std::string name, const rt::AttentionArgs &args,
                const std::vector<float> &gotLse,
                const std::vector<double> &ref,
                const std::vector<double> &refLse,
                const std::vector<double> &rowScale,
                const std::vector<double> *out32,
                const std::vector<double> *lse32) {
  Row row;
  row.name = std::move(name);
  row.tol = tolerance(args.out.dtype);
  // Compare O (in the logical [B, H, Lq, Dv] order) and the LSE. A row's
  // tolerance is the dtype's, or more where its scores are large: the
  // kernels round them to f32 (score x log2(e), score_mod's arithmetic),
  // which moves the softmax weights by about u x |score| (u = 2^-24)
  // however exact the kernel.
  const rt::TensorView &o = args.out;
  const double base = row.tol;
  double sum = 0, worst = 0; // worst: the largest excess over the row's tolerance
  int64_t n = 0;
  bool bad = false, nanSeen = false;
  for (int64_t b = 0; b < o.shape[0]; ++b)
    for (int64_t h = 0; h < o.shape[1]; ++h)
      for (int64_t i = 0; i < o.shape[2]; ++i) {
        int64_t li = (b * o.shape[1] + h) * o.shape[2] + i;
        double rowTol = std::max(base, scoreRoundingTolerance(rowScale[li]));
        if (out32)
          for (int64_t d = 0; d < o.shape[3]; ++d) {
            size_t at = static_cast<size_t>(li * o.shape[3] + d);
            double e = std::fabs((*out32)[at] - ref[at]);
            if (std::isfinite(e))
              rowTol = std::max(rowTol, kYardstick * e);
          }
        row.tol = std::max(row.tol, rowTol);
        for (int64_t d = 0; d < o.shape[3]; ++d) {
          double got = rt::loadAsDouble(o.data, o.dtype, o.offsetOf({b, h, i, d}));
          double want = ref[static_cast<size_t>(li * o.shape[3] + d)];
          if (std::isnan(want)) {
            // Non-finite scores: the reference's row is NaN; so must be ours.
            if (!std::isnan(got) && !bad) {
              bad = true;
              row.note = fmt::format("out[{}, {}, {}, {}] is {} but the "
                                     "reference has nan (non-finite scores)",
                                     b, h, i, d, got);
            }
            continue;
          }
          double e = std::fabs(got - want);
          if (std::isnan(got) && !nanSeen) {
            nanSeen = bad = true;
            row.note = fmt::format("out[{}, {}, {}, {}] is nan but the "
                                   "reference has {} (never written?)",
                                   b, h, i, d, want);
          }
          row.maxAbs = std::max(row.maxAbs, e);
          worst = std::max(worst, e - rowTol);
          sum += e;
          ++n;
        }
        double got = gotLse[static_cast<size_t>(li)];
        double want = refLse[static_cast<size_t>(li)];
        if (std::isnan(want) || std::isnan(got)) {
          if (std::isnan(want) != std::isnan(got) && !bad) {
            bad = true;
            row.note = fmt::format("lse[{}, {}, {}] is {} but the reference "
                                   "has {}", b, h, i, got, want);
          }
        } else if (std::isinf(want) || std::isinf(got)) {
          if (got != want && !nanSeen) {
            bad = true;
            row.note = fmt::format("lse[{}, {}, {}] is {} but the reference "
                                   "has {}", b, h, i, got, want);
          }
        } else {
          // LSE is compared relative to its magnitude (it grows with log n),
          // widened by the f32 reference's own error where it is given.
          double tol = base * std::max(1.0, std::fabs(want));
          if (lse32 && std::isfinite((*lse32)[static_cast<size_t>(li)]))
            tol += kYardstick *
                   std::fabs((*lse32)[static_cast<size_t>(li)] - want);
          if ((std::isnan(got) || std::fabs(got - want) > tol) && !nanSeen) {
            bad = true;
            row.note = fmt::format("lse[{}, {}, {}] is {} but the reference "
                                   "has {}", b, h, i, got, want);
          }
        }
      }
  row.meanAbs = n ? sum / n : 0;
  if (nanSeen)
    row.maxAbs = row.meanAbs = NAN;
  row.pass = !bad && worst <= 0;
  return row;
}

} // namespace

Row compareWithReference(const rt::VariantInfo &v, std::string name,
                         const Inputs &in, bool checked) {
  std::vector<double> ref, refLse, rowScale;
  rt::GatherViolation violation;
  if (rt::Status s = rt::referenceAttention(v, in.args, ref, refLse,
                                            checked ? &violation : nullptr,
                                            &rowScale);
      !s)
    return failedRow(name, in.args.out.dtype, s.message());
  Row row = compareRows(name, in.args, in.lse, ref, refLse, rowScale, nullptr,
                        nullptr);
  if (!row.pass && !std::isnan(row.maxAbs)) {
    // Before calling a row wrong: what an f32 computation of the same
    // scores gives. A modifier that amplifies rounding (1 / score near 0)
    // moves every f32 kernel's result that far; only more is an error
    // (PyTorch's tests use the f32 result's error as the yardstick too).
    std::vector<double> out32, lse32;
    if (rt::referenceAttention(v, in.args, out32, lse32, nullptr, nullptr,
                               rt::ReferenceRounding::DotsAndMods)
            .isOk()) {
      Row widened = compareRows(name, in.args, in.lse, ref, refLse, rowScale,
                                &out32, &lse32);
      if (widened.pass)
        widened.note = "within the f32 computation's own error";
      row = widened;
    }
  }
  if (checked && !violation.capture.empty()) {
    std::string idx, shp;
    for (size_t i = 0; i < violation.index.size(); ++i) {
      idx += (i ? ", " : "") + std::to_string(violation.index[i]);
      shp += (i ? ", " : "") + std::to_string(violation.shape[i]);
    }
    row.note = fmt::format("checked: variant '{}' reads '{}' at [{}] "
                           "outside its shape [{}] (clamped)",
                           v.name, violation.capture, idx, shp);
  }
  return row;
}

std::vector<Shape> suiteShapes(const Shape &base,
                               const std::vector<rt::DType> &dtypes) {
  std::vector<Shape> out;
  for (rt::DType dt : dtypes)
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
  extra([](Shape &s) { s.layout = "bshd"; s.mode = Mode::Chunk; }); // BSHD
  extra([](Shape &s) { s.dtype = rt::DType::F16; s.mode = Mode::Chunk; });
  // A key block of a longer sequence (context parallelism, an evicted
  // cache prefix): the modifiers see the keys' true positions.
  extra([](Shape &s) { s.mode = Mode::Chunk; s.kvOffsets = {36}; });
  // Heads 8..15 of a model with 24 (a head-parallel shard): the modifiers
  // see the model's h, H and HKV.
  extra([](Shape &s) { s.headOffset = 8; s.headCount = 24; });
  // Several whole 64 x 64 tiles off the diagonal and before the tails,
  // in 16 bits: the tensor-core kernels' exact (unmasked, unpredicated)
  // loop versions, which the 100-token shapes above barely reach.
  extra([](Shape &s) {
    s.dtype = rt::DType::BF16;
    s.qLen = s.kvLen = 250;
    s.heads = 2;
    s.kvHeads = 1;
    s.batch = 1;
  });
  return out;
}

std::vector<Shape> matrixShapes(const Shape &base,
                                const std::vector<rt::DType> &dtypes) {
  struct Dims { int64_t d, dv; };
  const Dims dims[] = {{64, 64}, {80, 80}, {128, 128}, {64, 32}};
  const std::pair<int64_t, int64_t> heads[] = {{8, 8}, {8, 2}, {8, 1}};
  // (Lq, Lkv) per mode, in rotation.
  const std::pair<int64_t, int64_t> prefill[] = {{77, 77}, {129, 129}, {1, 1}, {100, 100}};
  const std::pair<int64_t, int64_t> decode[] = {{1, 1000}, {1, 77}, {1, 129}, {1, 1}};
  const std::pair<int64_t, int64_t> chunk[] = {{23, 1000}, {77, 129}, {5, 77}, {64, 200}};
  std::vector<Shape> out;
  int i = 0;
  for (rt::DType dt : dtypes)
    for (const Dims &d : dims)
      for (Mode m : {Mode::Prefill, Mode::Decode, Mode::Chunk})
        for (auto [h, hk] : heads) {
          Shape s = base;
          s.dtype = dt;
          s.headDim = d.d;
          s.vHeadDim = d.dv;
          s.mode = m;
          s.heads = h;
          s.kvHeads = hk;
          s.batch = 2;
          s.kvLens.clear();
          auto len = m == Mode::Prefill ? prefill[i % 4]
                     : m == Mode::Decode ? decode[i % 4]
                                         : chunk[i % 4];
          s.qLen = len.first;
          s.kvLen = len.second;
          s.layout = i % 2 == 1 ? "bshd" : "bhsd";
          // One sequence for the long chunks keeps the matrix quick to
          // emulate; ragged: three sequences with their own KV lengths,
          // each at least Lq (the queries are the last Lq of each).
          if (m == Mode::Chunk && s.kvLen >= 1000)
            s.batch = 1;
          else if (m != Mode::Prefill && i % 3 == 1) {
            s.batch = 3;
            s.kvLens = {s.kvLen, std::max(s.qLen, s.kvLen * 2 / 3),
                        std::max(s.qLen, s.kvLen / 3)};
          }
          s.resolve();
          out.push_back(s);
          ++i;
        }
  return out;
}

std::vector<Shape> shapesFor(bool matrix, bool suite, const Shape &base,
                             const std::vector<rt::DType> &dtypes) {
  if (matrix)
    return matrixShapes(base, dtypes);
  if (suite)
    return suiteShapes(base, dtypes);
  return {base};
}

int printRows(const std::vector<Row> &rows) {
  size_t width = 4;
  for (const Row &r : rows)
    width = std::max(width, r.name.size());
  std::cout << fmt::format("{:<{}} | {:>9} | {:>9} | {:>9} | {}\n", "case",
                           width, "max_abs", "mean_abs", "tolerance", "result");
  std::cout << std::string(width, '-')
            << "-|-----------|-----------|-----------|-------\n";
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
  return failed;
}

} // namespace attnc::tools
