// The backward pass. Its foundations, checked by finite differences: the
// compiler's derivative of score_mod (the `grad` section, run by the
// interpreter) against score_mod itself, for every example; and the fp64
// backward (Backward.h) against the fp64 forward, for dQ, dK, dV and every
// float capture and scalar, on prefill, decode and chunk shapes with GQA,
// ragged lengths and rows with no key. Then the CPU backward kernels and
// the GPU backward kernels (on the emulator: memcheck and racecheck on
// every launch) against the fp64 backward, for every example.
#include "Problem.h"

#include "ReferenceCheck.h"
#include "Representative.h"

#include "attnc/Driver/Session.h"
#include "attnc/runtime/Backward.h"
#include "attnc/runtime/cuda/GpuBackward.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <fstream>
#include <random>
#include <sstream>

using namespace attnc;
using attnc::tools::Inputs;
using attnc::tools::Mode;
using attnc::tools::Shape;

namespace {

std::unique_ptr<Session> loadFile(const std::string &path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  std::string diags;
  std::unique_ptr<Session> s;
  rt::Status st = Session::loadSource(path, text.str(), diags, s);
  INFO(path << ": " << diags << st.toString());
  REQUIRE(st.isOk());
  return s;
}

std::unique_ptr<Session> loadText(const std::string &text) {
  std::string diags;
  std::unique_ptr<Session> s;
  rt::Status st = Session::loadSource("t.attn", text, diags, s);
  INFO(diags << st.toString());
  REQUIRE(st.isOk());
  return s;
}

std::vector<std::string> exampleFiles() {
  std::vector<std::string> files;
  for (const auto &e : std::filesystem::directory_iterator(ATTNC_EXAMPLES_DIR))
    if (e.path().extension() == ".attn")
      files.push_back(e.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

/// Calls `fn(session, variant name, info)` for every variant of every
/// example (the sanitizer build's representative ones: Representative.h),
/// with the file and variant in the failure messages.
template <typename F> void forEachExampleVariant(F fn) {
  for (const std::string &file : exampleFiles()) {
    if (!test::runsExample(file))
      continue;
    auto session = loadFile(file);
    for (const std::string &name : session->variants()) {
      rt::VariantInfo info;
      REQUIRE(session->info(name, info).isOk());
      INFO(file << " variant " << name);
      fn(*session, name, info);
    }
  }
}

/// Seeded inputs for `info` at `shape` (captures filled as attnc check
/// fills them), with every float capture perturbed per element so no two
/// elements are alike.
Inputs inputsFor(const rt::VariantInfo &info, Shape shape) {
  shape.resolve();
  Inputs in;
  rt::Status st = tools::makeInputs(info, shape, {}, {}, in);
  INFO(st.toString());
  REQUIRE(st.isOk());
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(-0.2, 0.2);
  for (auto &[name, view] : in.args.tensors)
    if (view.dtype == rt::DType::F32)
      for (int64_t i = 0; i < view.numel(); ++i) {
        float *x = static_cast<float *>(view.data) + i;
        *x = static_cast<float>(*x + u(rng));
      }
  return in;
}

/// A central difference of `f` in the f32 element `*x`, with the steps the
/// f32 rounding actually took.
template <typename F> double centralDifference(float *x, double step, F f) {
  float x0 = *x;
  float up = static_cast<float>(x0 + step), down = static_cast<float>(x0 - step);
  *x = up;
  double fUp = f();
  *x = down;
  double fDown = f();
  *x = x0;
  return (fUp - fDown) / (double(up) - double(down));
}

} // namespace

namespace {

/// Checks score_grad (the `grad` section) against central differences of
/// score_mod, both exact, at seeded points: the gradient into score, and
/// into every element of every f32 parameter.
void checkScoreGradByDifferences(const rt::VariantInfo &info) {
  INFO(info.text);
  REQUIRE(info.hasScoreGrad());
  Shape shape;
  shape.batch = 2;
  shape.heads = 4;
  shape.kvHeads = 2;
  shape.qLen = shape.kvLen = 9;
  shape.headDim = 8;
  Inputs in = inputsFor(info, shape);
  rt::Problem p;
  REQUIRE(rt::resolveProblem(info, nullptr, in.args, p).isOk());
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> score(-3, 3);
  std::uniform_int_distribution<int> pos(0, 8), b(0, 1), h(0, 3);
  for (int trial = 0; trial < 12; ++trial) {
    double x = score(rng);
    int32_t bb = b(rng), hh = h(rng), q = pos(rng), kv = pos(rng);
    INFO("at score " << x << " b " << bb << " h " << hh << " q " << q
                     << " kv " << kv);
    auto f = [&](double s) {
      return rt::evalScoreMod(info, p.params, s, bb, hh, q, kv, nullptr,
                              /*exact=*/true);
    };
    rt::ParamGradients grads;
    double dy = 0.75;
    double dscore = rt::evalScoreGrad(info, p.params, x, bb, hh, q, kv, dy,
                                      &grads, /*exact=*/true);
    double e = 1e-6;
    double fd = dy * (f(x + e) - f(x - e)) / (2 * e);
    CHECK(dscore == Approx(fd).epsilon(1e-6).margin(1e-7));
    auto gradAt = [&](size_t pi, int64_t i) {
      return grads.size() > pi && !grads[pi].empty()
                 ? grads[pi][static_cast<size_t>(i)]
                 : 0.0;
    };
    for (size_t pi = 0; pi < info.params.size(); ++pi) {
      const rt::ParamSpec &ps = info.params[pi];
      if (ps.dtype != rt::DType::F32)
        continue;
      INFO("parameter " << ps.name);
      if (!ps.isTensor) {
        double s0 = p.params[pi].scalar;
        p.params[pi].scalar = s0 + e;
        double up = f(x);
        p.params[pi].scalar = s0 - e;
        double down = f(x);
        p.params[pi].scalar = s0;
        CHECK(gradAt(pi, 0) ==
              Approx(dy * (up - down) / (2 * e)).epsilon(1e-6).margin(1e-7));
        continue;
      }
      const rt::BoundParam &bp = p.params[pi];
      int64_t numel = 1;
      for (int64_t d : bp.shape)
        numel *= d;
      for (int64_t i = 0; i < numel; ++i) { // dense index -> strided offset
        int64_t rest = i, off = 0;
        for (size_t d = bp.shape.size(); d-- > 0;) {
          off += (rest % bp.shape[d]) * bp.strides[d];
          rest /= bp.shape[d];
        }
        float *elem =
            const_cast<float *>(static_cast<const float *>(bp.data)) + off;
        double want = dy * centralDifference(elem, 1e-3, [&] { return f(x); });
        INFO("element " << i);
        CHECK(gradAt(pi, i) == Approx(want).epsilon(1e-5).margin(1e-6));
      }
    }
  }
}

} // namespace

TEST_CASE("score_grad of every example agrees with finite differences of "
          "score_mod",
          "[backward]") {
  forEachExampleVariant([](const Session &, const std::string &,
                           const rt::VariantInfo &info) {
    checkScoreGradByDifferences(info);
  });
}

TEST_CASE("score_grad of every differentiable builtin, a sum and the "
          "operators agrees with finite differences",
          "[backward]") {
  // Smooth where the seeded points fall (kinks of abs, min, max, clamp,
  // floormod and the conditionals are at fixed points, not near them).
  auto session = loadText(R"(
variant builtins(t: f32[H], r: f32[KV, 4], c: f32) {
  score_mod(score, b, h, q, kv) =
      exp2(score * 0.3) + log2(2 + score * score) + sqrt(1.5 + sin(score))
    + rsqrt(3 + cos(score)) + sigmoid(score) * t[h] + tan(score * 0.2)
    + pow(1.5 + 0.5 * sin(score), c) + log1p(score * score)
    + expm1(0.1 * score) + erf(score) + abs(score - 0.3) * t[h]
    + min(score, t[h]) + max(score * c, 0.5) + clamp(score, -1.5, 1.5)
    + (score > 0.1 ? score * c : -score / c) + floormod(score, 0.7 * c)
    + where(score < 1, 2 * score, score) + score % c
    + sum(i < 4: r[kv, i] * score * t[h]) - sign(score) + exp(-score * score)
    + tanh(score) / (1 + score * score) - log(3 + score) + floor(score)
  mask_mod(b, h, q, kv) = true
})");
  rt::VariantInfo info;
  REQUIRE(session->info("builtins", info).isOk());
  checkScoreGradByDifferences(info);
}

namespace {

/// sum(dO * O) of the fp64 forward, exact modifiers.
double loss(const rt::VariantInfo &info, const rt::AttentionArgs &a,
            const std::vector<double> &dO) {
  std::vector<double> out, lse;
  rt::Status st = rt::referenceAttention(info, a, out, lse, nullptr, nullptr,
                                         rt::ReferenceRounding::None);
  REQUIRE(st.isOk());
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i)
    l += dO[i] * out[i];
  return l;
}

/// Checks every gradient of the fp64 backward against central differences
/// of the fp64 forward's loss sum(dO * O).
void checkBackwardByDifferences(const rt::VariantInfo &info, Shape shape,
                                bool expectSomeZeroRows = false) {
  Inputs in = inputsFor(info, shape);
  rt::AttentionArgs &a = in.args;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<float> dOut(static_cast<size_t>(a.out.numel()));
  for (float &x : dOut)
    x = static_cast<float>(u(rng));
  rt::TensorView dO =
      rt::TensorView::contiguous(dOut.data(), rt::DType::F32, a.out.shape);
  std::vector<double> dOd(dOut.begin(), dOut.end());
  rt::AttentionGrads g;
  rt::Status st = rt::referenceAttentionBackward(info, a, dO, g, /*exact=*/true);
  INFO(st.toString());
  REQUIRE(st.isOk());
  auto lossNow = [&] { return loss(info, a, dOd); };
  auto check = [&](const char *what, const rt::TensorView &t,
                   const std::vector<double> &grad) {
    REQUIRE(static_cast<int64_t>(grad.size()) == t.numel());
    double scale = 1e-3;
    for (double x : grad) {
      REQUIRE(std::isfinite(x));
      scale = std::max(scale, std::fabs(x));
    }
    for (int64_t i = 0; i < t.numel(); ++i) {
      // Contiguous views in these tests: the dense index is the offset.
      float *x = static_cast<float *>(t.data) + i;
      double want = centralDifference(x, 1e-3, lossNow);
      INFO(what << "[" << i << "]");
      CHECK(grad[static_cast<size_t>(i)] == Approx(want).margin(2e-4 * scale));
    }
  };
  check("dq", a.q, g.dq);
  check("dk", a.k, g.dk);
  check("dv", a.v, g.dv);
  for (auto &[name, view] : a.tensors) {
    size_t pi = 0;
    while (info.params[pi].name != name)
      ++pi;
    if (view.dtype != rt::DType::F32)
      continue;
    std::vector<double> grad = g.params[pi];
    if (grad.empty())
      grad.assign(static_cast<size_t>(view.numel()), 0.0);
    check(name.c_str(), view, grad);
  }
  for (auto &[name, value] : a.scalars) {
    size_t pi = 0;
    while (info.params[pi].name != name)
      ++pi;
    if (info.params[pi].dtype != rt::DType::F32)
      continue;
    double v0 = value, e = 1e-5;
    value = v0 + e;
    double up = lossNow();
    value = v0 - e;
    double down = lossNow();
    value = v0;
    double got = g.params[pi].empty() ? 0.0 : g.params[pi][0];
    INFO("scalar " << name);
    CHECK(got == Approx((up - down) / (2 * e)).epsilon(1e-4).margin(1e-6));
  }
  if (expectSomeZeroRows) {
    // Rows with no key: dq is exactly 0 there.
    bool zeroRow = false;
    int64_t D = a.q.shape[3];
    for (size_t r = 0; r < g.dq.size() / D; ++r) {
      bool all = true;
      for (int64_t d = 0; d < D; ++d)
        all &= g.dq[r * D + d] == 0.0;
      zeroRow |= all;
    }
    CHECK(zeroRow);
  }
}

} // namespace

TEST_CASE("the fp64 backward agrees with finite differences of the fp64 "
          "forward, every example",
          "[backward]") {
  forEachExampleVariant([](const Session &, const std::string &,
                           const rt::VariantInfo &info) {
      for (Mode mode : {Mode::Prefill, Mode::Decode, Mode::Chunk}) {
        Shape s;
        s.mode = mode;
        s.batch = 2;
        s.heads = 2;
        s.kvHeads = 1; // GQA: dK and dV sum two query heads
        s.kvLen = 7;
        s.qLen = mode == Mode::Chunk ? 3 : -1;
        s.kvLens = {7, 5}; // ragged
        if (mode == Mode::Prefill)
          s.qOffsets = {0}; // 7 queries from position 0 over 7 and 5 keys
        s.headDim = 8;
        s.vHeadDim = mode == Mode::Chunk ? 16 : 8;
        INFO(tools::modeName(mode));
        checkBackwardByDifferences(info, s);
      }
  });
}

TEST_CASE("the fp64 backward: rows with no key have zero gradients, never "
          "NaN",
          "[backward]") {
  // Query 2 of each sequence sees no key.
  auto session = loadText(R"(
variant holes(bias: f32[H, KV], t: f32) {
  score_mod(score, b, h, q, kv) = t * score + bias[h, kv]
  mask_mod(b, h, q, kv) = q != 2 && kv <= q
})");
  rt::VariantInfo info;
  REQUIRE(session->info("holes", info).isOk());
  Shape s;
  s.batch = 1;
  s.heads = 2;
  s.qLen = s.kvLen = 5;
  s.headDim = 8;
  s.qOffsets = {0};
  checkBackwardByDifferences(info, s, /*expectSomeZeroRows=*/true);
}

namespace {

/// ALiBi's session, its program and seeded inputs of one sequence, 2 heads,
/// `len` queries and keys, D = 8: the error tests' call.
struct AlibiCall {
  std::unique_ptr<Session> session;
  rt::VariantInfo info;
  Inputs in;
};
AlibiCall alibiCall(int64_t len) {
  AlibiCall c;
  c.session = loadFile(std::string(ATTNC_EXAMPLES_DIR) + "/alibi.attn");
  REQUIRE(c.session->info("alibi", c.info).isOk());
  Shape shape;
  shape.batch = 1;
  shape.heads = 2;
  shape.qLen = shape.kvLen = len;
  shape.headDim = 8;
  c.in = inputsFor(c.info, shape);
  return c;
}

} // namespace

TEST_CASE("the fp64 backward refuses what it cannot differentiate, by name",
          "[backward]") {
  AlibiCall call = alibiCall(4);
  const rt::VariantInfo &info = call.info;
  Inputs &in = call.in;
  std::vector<float> dOut(static_cast<size_t>(in.args.out.numel()), 1.0f);
  rt::AttentionGrads g;

  rt::TensorView bad = rt::TensorView::contiguous(dOut.data(), rt::DType::F32,
                                                  {1, 2, 4, 4});
  rt::Status st = rt::referenceAttentionBackward(info, in.args, bad, g);
  CHECK(!st.isOk());
  CHECK_THAT(st.message(), Catch::Contains("dOut") &&
                               Catch::Contains("[1, 2, 4, 8]"));

  // A program without a grad section (a package from before the backward).
  std::string text = info.text;
  text = text.substr(0, text.find("grad\n")) + "end\n";
  rt::VariantInfo old;
  REQUIRE(rt::VariantInfo::parse(text, old).isOk());
  CHECK_FALSE(old.hasScoreGrad());
  rt::TensorView dO = rt::TensorView::contiguous(dOut.data(), rt::DType::F32,
                                                 in.args.out.shape);
  st = rt::referenceAttentionBackward(old, in.args, dO, g);
  CHECK_THAT(st.message(), Catch::Contains("no derivative of score_mod"));
}

TEST_CASE("grad sections are checked when parsed", "[backward]") {
  const std::string head = "variant v\nparam t tensor f32 H\nparam n tensor "
                           "i32 H\nparam s scalar f32\nmask-kind none\n"
                           "score\n  yield %score\nmask\n  %0 = const.i1 1\n"
                           "  yield %0\n";
  auto parse = [&](const std::string &grad) {
    rt::VariantInfo v;
    return rt::VariantInfo::parse(head + "grad\n" + grad + "end\n", v);
  };
  CHECK(parse("  %0 = upstream\n  accumulate t %h %0\n  accumulate s %0\n"
              "  yield %0\n")
            .isOk());
  CHECK_THAT(parse("  %0 = upstream\n  accumulate n %h %0\n  yield %0\n")
                 .message(),
             Catch::Contains("not a float parameter"));
  CHECK_THAT(parse("  %0 = upstream\n  accumulate t %0\n  yield %0\n").message(),
             Catch::Contains("takes 1 i32 indices and an f32 value"));
  CHECK_THAT(parse("  %0 = upstream\n  accumulate nope %0\n  yield %0\n")
                 .message(),
             Catch::Contains("unknown parameter 'nope'"));
  rt::VariantInfo v;
  CHECK_THAT(rt::VariantInfo::parse(
                 "variant v\nparam s scalar f32\nmask-kind none\nscore\n"
                 "  %0 = upstream\n  yield %0\nmask\n  %1 = const.i1 1\n"
                 "  yield %1\nend\n",
                 v)
                 .message(),
             Catch::Contains("score op 1"));
  // A value number too long for a long (strtol's LONG_MAX) is refused, not
  // overflowed (UBSan found `n + 5` in fuzz-package).
  for (const char *big : {"%9223372036854775807", "%99999999999999999999999"})
    CHECK_FALSE(rt::VariantInfo::parse(
                    std::string("variant v\nmask-kind none\nscore\n  yield ") +
                        big + "\nmask\n  %0 = const.i1 1\n  yield %0\nend\n",
                    v)
                    .isOk());
}

namespace {

/// The forward and backward CPU kernels of one variant and spec.
struct KernelPair {
  std::unique_ptr<rt::CpuKernel> forward;
  std::unique_ptr<rt::CpuBackwardKernel> backward;
};

KernelPair compilePair(const Session &session, const std::string &name,
                       const rt::KernelSpec &spec) {
  KernelPair k;
  rt::Status st = session.compileCpu(name, spec, k.forward);
  INFO(st.toString());
  REQUIRE(st.isOk());
  st = session.compileCpuBackward(name, spec, k.backward);
  INFO(st.toString());
  REQUIRE(st.isOk());
  return k;
}

/// A backward kernel under test: runs a call whose views are on the host.
using BackwardRun =
    std::function<rt::Status(const rt::BackwardArgs &, rt::ParamGradients &)>;

/// Runs `forward` (for O and LSE) and then `backward` on seeded inputs at
/// `shape`, and compares dQ, dK, dV and every float parameter's gradient
/// with the fp64 backward: max |error| <= tol * (1 + max |reference|), per
/// gradient. dq is written token-major (BSHD strides) in `dqType`, dk and
/// dv contiguous in `dkvType`, all three starting as NaN (keys past a
/// sequence's length must be written 0). `threads`: the CPU threads (0:
/// every core); `drop`: dropout in the forward and the backward (the
/// forward kernel compiled with it).
void checkBackwardKernel(const Session &session, const std::string &name,
                         const rt::CpuKernel &forward,
                         const BackwardRun &backward, Shape shape, double tol,
                         rt::DType dqType, rt::DType dkvType, int threads = 0,
                         const rt::DropoutRequest &drop = {},
                         const std::function<void(rt::AttentionArgs &)> &adjust = {}) {
  rt::VariantInfo info;
  REQUIRE(session.info(name, info).isOk());
  Inputs in = inputsFor(info, shape);
  rt::AttentionArgs &a = in.args;
  a.numThreads = threads;
  a.dropout = drop;
  if (adjust)
    adjust(a);
  REQUIRE(forward.run(a).isOk());

  std::vector<uint8_t> dOut = attnc::test::randomValues(shape.dtype, a.out.numel(), 5);
  rt::BackwardArgs b;
  b.forward = a;
  b.dOut = rt::TensorView::contiguous(dOut.data(), shape.dtype, a.out.shape);
  auto nans = [](rt::DType t, int64_t n) {
    std::vector<uint8_t> v(static_cast<size_t>(n) * rt::dtypeSize(t));
    for (int64_t i = 0; i < n; ++i)
      rt::storeFromDouble(v.data(), t, i, NAN);
    return v;
  };
  std::vector<uint8_t> dq = nans(dqType, a.q.numel()),
                       dk = nans(dkvType, a.k.numel()),
                       dv = nans(dkvType, a.v.numel());
  const auto &qs = a.q.shape;
  b.dq = {dq.data(), dqType, qs, {qs[1] * qs[2] * qs[3], qs[3], qs[1] * qs[3], 1}};
  b.dk = rt::TensorView::contiguous(dk.data(), dkvType, a.k.shape);
  b.dv = rt::TensorView::contiguous(dv.data(), dkvType, a.v.shape);
  rt::ParamGradients grads;
  rt::Status st = backward(b, grads);
  INFO(st.toString());
  REQUIRE(st.isOk());

  rt::AttentionGrads ref;
  // D from the forward kernel's O, as the backward kernel forms it.
  REQUIRE(rt::referenceAttentionBackward(info, a, b.dOut, ref, false, &a.out)
              .isOk());
  auto compare = [&](const char *what, const std::vector<double> &want,
                     auto got, double extra) {
    double scale = 1, err = 0;
    for (double x : want)
      scale = std::max(scale, 1 + std::fabs(x));
    for (size_t i = 0; i < want.size(); ++i) {
      double g = got(i);
      INFO(what << "[" << i << "]");
      REQUIRE_FALSE(std::isnan(g));
      err = std::max(err, std::fabs(g - want[i]));
    }
    INFO(what << ": max |error| " << err << " against a scale of " << scale);
    CHECK(err <= (tol + extra) * scale);
  };
  // A 16-bit gradient also carries its rounding (half an ulp).
  auto rounding = [](rt::DType t) {
    return t == rt::DType::BF16 ? 4e-3 : t == rt::DType::F16 ? 5e-4 : 0.0;
  };
  compare("dq", ref.dq, [&](size_t i) {
    int64_t r = static_cast<int64_t>(i);
    int64_t d = r % qs[3], t = r / qs[3], l = t % qs[2], bh = t / qs[2];
    int64_t h = bh % qs[1], bb = bh / qs[1];
    return rt::loadAsDouble(dq.data(), dqType, b.dq.offsetOf({bb, h, l, d}));
  }, rounding(dqType));
  auto dense = [](const std::vector<uint8_t> &g, rt::DType t) {
    return [&g, t](size_t i) {
      return rt::loadAsDouble(g.data(), t, static_cast<int64_t>(i));
    };
  };
  compare("dk", ref.dk, dense(dk, dkvType), rounding(dkvType));
  compare("dv", ref.dv, dense(dv, dkvType), rounding(dkvType));
  REQUIRE(grads.size() == info.params.size());
  for (size_t i = 0; i < info.params.size(); ++i) {
    INFO("parameter " << info.params[i].name);
    REQUIRE(grads[i].size() == ref.params[i].size());
    compare("parameter", ref.params[i], [&](size_t k) { return grads[i][k]; },
            0);
  }
}

/// The CPU backward kernel of a pair as a BackwardRun.
BackwardRun onCpu(const KernelPair &k) {
  const rt::CpuBackwardKernel *bwd = k.backward.get();
  return [bwd](const rt::BackwardArgs &b, rt::ParamGradients &g) {
    return bwd->run(b, &g);
  };
}

/// The emulated GPU and a variant's GPU backward kernel as a BackwardRun.
struct GpuBackward {
  std::unique_ptr<rt::cuda::Context> ctx;
  std::unique_ptr<rt::cuda::GpuBackwardKernel> kernel;
  rt::GpuBackwardImage image; // spec.warps > 0: the tensor-core form
  GpuBackward(const Session &session, const std::string &name,
              const rt::KernelSpec &spec) {
    REQUIRE(rt::cuda::Context::open(ctx, 0, ATTNC_EMUCUDA_PATH).isOk());
    rt::Status st = session.compileGpuBackward(name, spec, "sm_90", image);
    INFO(st.toString());
    REQUIRE(st.isOk());
    rt::VariantInfo info;
    REQUIRE(session.info(name, info).isOk());
    st = rt::cuda::GpuBackwardKernel::load(*ctx, info, image, kernel);
    INFO(st.toString());
    REQUIRE(st.isOk());
  }
  BackwardRun run() const {
    return [this](const rt::BackwardArgs &b, rt::ParamGradients &g) {
      return rt::cuda::runBackwardFromHost(*ctx, *kernel, b, &g);
    };
  }
};

/// Prefill, decode and chunk shapes with GQA 2:1, a ragged batch and
/// Dv != Dqk: several 16 x 16 tiles each way, with tails.
std::vector<Shape> kernelShapes() {
  std::vector<Shape> shapes;
  for (Mode mode : {Mode::Prefill, Mode::Decode, Mode::Chunk}) {
    Shape s;
    s.mode = mode;
    s.batch = 2;
    s.heads = 4;
    s.kvHeads = 2;
    s.kvLen = 41;
    s.qLen = mode == Mode::Prefill ? 41 : mode == Mode::Chunk ? 9 : -1;
    s.kvLens = {41, 29};
    if (mode == Mode::Prefill)
      s.qOffsets = {0};
    if (mode == Mode::Chunk) // the keys a block starting at 12 and at 4
      s.kvOffsets = {12, 4};
    if (mode == Mode::Decode) { // heads 4..7 of a model with 12
      s.headOffset = 4;
      s.headCount = 12;
    }
    s.headDim = 16;
    s.vHeadDim = 24;
    shapes.push_back(s);
  }
  return shapes;
}

/// kernelShapes() on the tensor-core backward's 64-row tiles: bf16, Dqk
/// 16 and Dv 32, 150 keys (three tiles with a tail; the second sequence,
/// 97 keys, ends inside the second).
std::vector<Shape> tensorCoreShapes() {
  std::vector<Shape> shapes = kernelShapes();
  for (Shape &s : shapes) {
    s.dtype = rt::DType::BF16;
    s.vHeadDim = 32;
    s.kvLen = 150;
    s.kvLens = {150, 97};
    if (s.mode == Mode::Prefill)
      s.qLen = 150;
  }
  return shapes;
}

/// `name`'s tensor-core GPU backward (bf16, Dqk 16, Dv 32: four warps
/// over 64-row tiles) on the emulator against the fp64 backward at each
/// of `shapes` (a chunk's with the kernels of offset keys).
void checkTensorCoreBackward(const Session &session, const std::string &name,
                             const std::vector<Shape> &shapes) {
  rt::KernelSpec spec;
  spec.dtype = rt::DType::BF16;
  spec.headDim = 16;
  spec.vHeadDim = 32;
  KernelPair kernels = compilePair(session, name, spec);
  GpuBackward gpu(session, name, spec);
  REQUIRE(gpu.image.spec.warps == 4);
  REQUIRE(gpu.image.spec.blockM == 64);
  rt::KernelSpec offset = spec; // the chunk's keys are offset
  offset.keyOffsets = true;
  KernelPair offsetKernels = compilePair(session, name, offset);
  GpuBackward offsetGpu(session, name, offset);
  for (const Shape &s : shapes) {
    INFO(s.describe());
    bool off = !s.kvOffsets.empty();
    checkBackwardKernel(session, name, *(off ? offsetKernels : kernels).forward,
                        (off ? offsetGpu : gpu).run(), s, 1e-3, rt::DType::BF16,
                        rt::DType::BF16);
  }
}

} // namespace

TEST_CASE("the CPU backward kernels agree with the fp64 backward, every "
          "example, prefill, decode and chunk",
          "[backward][kernel]") {
  forEachExampleVariant([](const Session &session, const std::string &name,
                           const rt::VariantInfo &) {
      rt::KernelSpec spec; // several tiles each way, with tails
      spec.blockM = spec.blockN = spec.headDim = 16;
      spec.vHeadDim = 24;
      KernelPair kernels = compilePair(session, name, spec);
      // The chunk's keys are offset: kernels that read key offsets.
      rt::KernelSpec offset = spec;
      offset.keyOffsets = true;
      KernelPair offsetKernels = compilePair(session, name, offset);
      // 1 thread: dQ formed in _bwd_kv (a (b, kv head) pair per item); 64
      // threads: more threads than pairs, one KV tile per item and _bwd_q.
      for (int threads : {1, 64})
        for (const Shape &s : kernelShapes()) {
          INFO(tools::modeName(s.mode) << ", " << threads << " threads");
          const KernelPair &k = s.kvOffsets.empty() ? kernels : offsetKernels;
          checkBackwardKernel(session, name, *k.forward, onCpu(k), s, 2e-5,
                              rt::DType::BF16, rt::DType::F32, threads);
        }
  });
}

TEST_CASE("the CPU backward kernels in bf16, and with default tiles",
          "[backward][kernel]") {
  auto session = loadFile(std::string(ATTNC_EXAMPLES_DIR) + "/synaptic.attn");
  Shape s;
  s.batch = 1;
  s.heads = 2;
  s.kvHeads = 1;
  s.qLen = s.kvLen = 100;
  s.headDim = 32;
  for (rt::DType dt : {rt::DType::BF16, rt::DType::F32}) {
    s.dtype = dt;
    rt::KernelSpec spec; // the default tiles
    spec.dtype = dt;
    spec.headDim = spec.vHeadDim = 32;
    KernelPair kernels = compilePair(*session, "synaptic", spec);
    checkBackwardKernel(*session, "synaptic", *kernels.forward, onCpu(kernels),
                        s, dt == rt::DType::F32 ? 2e-5 : 1e-3, rt::DType::BF16,
                        rt::DType::F32);
  }
}

TEST_CASE("the GPU backward kernels agree with the fp64 backward on the "
          "emulator, every example, prefill, decode and chunk",
          "[backward][kernel][gpu-emulated]") {
  forEachExampleVariant([](const Session &session, const std::string &name,
                           const rt::VariantInfo &) {
      rt::KernelSpec spec;
      spec.blockM = spec.blockN = spec.headDim = 16;
      spec.vHeadDim = 24;
      KernelPair kernels = compilePair(session, name, spec);
      GpuBackward gpu(session, name, spec);
      rt::KernelSpec offset = spec; // the chunk's keys are offset
      offset.keyOffsets = true;
      KernelPair offsetKernels = compilePair(session, name, offset);
      GpuBackward offsetGpu(session, name, offset);
      for (const Shape &s : kernelShapes()) {
        INFO(tools::modeName(s.mode));
        bool off = !s.kvOffsets.empty();
        checkBackwardKernel(session, name,
                            *(off ? offsetKernels : kernels).forward,
                            (off ? offsetGpu : gpu).run(), s, 2e-5,
                            rt::DType::F32, rt::DType::F32);
      }
  });
}

TEST_CASE("the tensor-core GPU backward agrees with the fp64 backward on "
          "the emulator, every example, prefill, decode and chunk",
          "[backward][kernel][gpu-emulated]") {
  // The tiles' copies: 16-byte cp.async for contiguous rows in either
  // layout; rows padded by one element take the element-wise copies.
  std::vector<Shape> shapes = tensorCoreShapes();
  Shape tokenMajor = shapes.front(), padded = shapes.front();
  tokenMajor.layout = "bshd";
  padded.pad = 1;
  shapes.push_back(tokenMajor);
  shapes.push_back(padded);
  forEachExampleVariant([&](const Session &session, const std::string &name,
                            const rt::VariantInfo &) {
    checkTensorCoreBackward(session, name, shapes);
  });
}

TEST_CASE("the tensor-core GPU backward sums a query's parameter gradients "
          "per row in _bwd_q, once per item",
          "[backward][kernel][gpu-emulated]") {
  // t[b, h, q] and w[h, q] read the query but not the key: the tensor-core
  // form's _bwd_q (flash.score_grad's accumulate "query") sums their
  // gradients over each row's keys and adds them once per item; _bwd_kv
  // ("others") adds u[kv]'s and c's. Nonzero gradients (unlike synaptic's
  // qamp, which adds the same to each of a row's scores): a sum added
  // twice, or not at all, or a masked pair's term moves them. The shapes
  // of the every-example case (prefill, decode, chunk; GQA, ragged, tails
  // of 64-row tiles, exact tiles under the causal mask).
  auto session = loadText(R"(
variant query_grads(t: f32[B, H, KV], w: f32[H, KV], u: f32[KV], c: f32) {
  score_mod(s, b, h, q, kv) = s * t[b, h, q] + w[h, q] * (kv % 5) + c * u[kv]
  mask_mod(b, h, q, kv) = q >= kv
}
)");
  checkTensorCoreBackward(*session, "query_grads", tensorCoreShapes());
}

TEST_CASE("the GPU backward kernels in bf16 and f16 on the emulator: tensor "
          "cores at 64, 32 and 16 rows, and SIMT",
          "[backward][kernel][gpu-emulated]") {
  auto session = loadFile(std::string(ATTNC_EXAMPLES_DIR) + "/synaptic.attn");
  struct Case {
    rt::DType dtype;
    int64_t d, dv;
    const char *form; // the kernel form asked for ("": the registry's)
    int64_t ask;      // the tile's rows asked for (0: the form's choice)
    int64_t rows;     // the backward's tile (0: SIMT)
    int64_t askStages = 0; // _bwd_q's K/V stages asked for (0: the form's)
    int64_t stages = 2;    // and built (tensor cores)
  };
  // The form's choice is 64 rows wherever the tiles fit the target's
  // dynamic shared memory (sm_90 here: D=256 too), and two K/V stages in
  // _bwd_q where a third pair of tiles fits too (here everywhere: D=256's
  // 64 rows take 203 KB); smaller tiles and one stage when asked for.
  for (Case c : {Case{rt::DType::BF16, 32, 32, "", 0, 64},
                 Case{rt::DType::F16, 128, 128, "", 0, 64},
                 Case{rt::DType::F16, 128, 128, "", 32, 32},
                 Case{rt::DType::F16, 128, 128, "", 64, 64, 1, 1},
                 Case{rt::DType::BF16, 256, 256, "", 0, 64},
                 Case{rt::DType::BF16, 256, 256, "", 16, 16},
                 Case{rt::DType::BF16, 32, 32, "simt", 0, 0},
                 Case{rt::DType::F16, 32, 32, "simt", 0, 0}}) {
    INFO(rt::dtypeName(c.dtype)
         << " D " << c.d << "/" << c.dv << " form " << c.form << " rows "
         << c.ask << " stages " << c.askStages);
    Shape s;
    s.batch = 1;
    s.heads = 2;
    s.kvHeads = 1;
    s.qLen = s.kvLen = 70;
    s.headDim = c.d;
    s.vHeadDim = c.dv;
    s.dtype = c.dtype;
    rt::KernelSpec spec;
    spec.dtype = c.dtype;
    spec.headDim = c.d;
    spec.vHeadDim = c.dv;
    KernelPair kernels = compilePair(*session, "synaptic", spec); // CPU
    spec.form = c.form;
    if (c.ask) {
      spec.blockM = spec.blockN = c.ask;
      spec.warps = c.ask / 16;
      spec.stages = c.askStages;
    }
    GpuBackward gpu(*session, "synaptic", spec);
    CHECK(gpu.image.spec.blockM == (c.rows ? c.rows : 32));
    if (c.rows) { // the name says _bwd_q's stages; its shared memory holds them
      CHECK_THAT(gpu.image.query,
                 Catch::EndsWith("w" + std::to_string(c.rows / 16) + "s" +
                                 std::to_string(c.stages) + "_bwd_q"));
      int64_t pairBytes = c.rows * (c.d + 8 + c.dv + 8) * 2;
      CHECK(gpu.image.queryDynamicSharedBytes >= (1 + c.stages) * pairBytes);
      CHECK(gpu.image.queryDynamicSharedBytes < (2 + c.stages) * pairBytes);
    }
    CHECK(gpu.image.spec.warps == (c.rows ? c.rows / 16 : 0));
    CHECK(gpu.image.queryThreads == (c.rows ? 2 * c.rows : 32));
    checkBackwardKernel(*session, "synaptic", *kernels.forward, gpu.run(), s,
                        1e-3, c.dtype, c.dtype);
  }
}

TEST_CASE("the tensor-core GPU backward's exponent: one FMA where the rows' "
          "LSE log2 e are small, the exact difference where they are not",
          "[backward][kernel][gpu-emulated]") {
  // An exact tile's P is ex2(fma(sm, log2 e, -L)), L = LSE log2 e, when a
  // warp vote finds every row's |L| < 2^10; else the tile takes the
  // flagged path and its exact difference (sm - LSE) log2 e. A scale of
  // 200 puts head 0's rows far past the bound (LSE ~ 200 max s); head 1's
  // Q, scaled down 2000 times, keeps its rows below it. 128 queries and
  // keys: two full 64-row tiles each way, every one exact under `full`
  // (under causal the diagonal tiles are partial). Both heads must match
  // the fp64 backward.
  for (const char *example : {"full", "alibi"})
    for (rt::DType dt : {rt::DType::BF16, rt::DType::F16}) {
      INFO(example << " " << rt::dtypeName(dt));
      auto session = loadFile(std::string(ATTNC_EXAMPLES_DIR) + "/" + example + ".attn");
      const std::string name = session->variants().front();
      Shape s;
      s.batch = 1;
      s.heads = s.kvHeads = 2;
      s.qLen = s.kvLen = 128;
      s.headDim = s.vHeadDim = 64;
      s.dtype = dt;
      rt::KernelSpec spec;
      spec.dtype = dt;
      spec.headDim = spec.vHeadDim = 64;
      KernelPair kernels = compilePair(*session, name, spec); // CPU forward
      GpuBackward gpu(*session, name, spec);
      REQUIRE(gpu.image.spec.blockM == 64);
      double bigRows = 0;
      checkBackwardKernel(
          *session, name, *kernels.forward, gpu.run(), s, 1e-3, dt, dt, 0, {},
          [&](rt::AttentionArgs &a) {
            a.scale = 200.0;
            for (int64_t i = 128 * 64; i < 2 * 128 * 64; ++i)
              rt::storeFromDouble(a.q.data, dt, i,
                                  rt::loadAsDouble(a.q.data, dt, i) / 2000.0);
            // Head 0's rows: |LSE log2 e| >= max(s) 200 log2 e, above 2^10
            // where max(s) > 3.55.
            for (int64_t i = 0; i < 128; ++i) {
              double m = -INFINITY;
              for (int64_t j = 0; j < 128; ++j) {
                double dot = 0;
                for (int64_t d = 0; d < 64; ++d)
                  dot += rt::loadAsDouble(a.q.data, dt, i * 64 + d) *
                         rt::loadAsDouble(a.k.data, dt, j * 64 + d);
                m = std::max(m, dot);
              }
              bigRows += m > 3.55;
            }
          });
      CHECK(bigRows > 64); // the exact difference is taken
    }
}

TEST_CASE("the tensor-core GPU backward's separable logs: ln x per query and "
          "lg2 y per key where every factor is in range, per pair elsewhere",
          "[backward][kernel][gpu-emulated]") {
  // synaptic's log(qamp[q] * key_factor[kv]) in an exact chunk whose
  // warp's factors are all in [2^-62, 2^62] is ln qamp + lg2 kf ln 2 (one
  // FMA per pair); elsewhere the chunk takes the flagged path and the log
  // of f32's product. Its score_grad is dy / qamp and dy / kf, 1/qamp once
  // per query column (_bwd_kv) or row (_bwd_q). 128 queries and keys, GQA
  // 2:1: the causal mask's tile (1, 0) is exact. Three kinds of factors:
  // in range (the separated path; a wrong sign or a missing term moves
  // every gradient); negative, their products positive (the separated
  // path would be NaN); out of range, 2^70 on even queries and 2^-80 on
  // every third key (products in f32's range: the flagged path's logs).
  // (Not tiny factors on both sides: log qamp[q] adds the same to each of
  // a row's scores, so qamp's exact gradient is 0 and both sides' are
  // rounding noise, times 1/qamp.)
  auto session = loadFile(std::string(ATTNC_EXAMPLES_DIR) + "/synaptic.attn");
  for (rt::DType dt : {rt::DType::BF16, rt::DType::F16})
    for (int data = 0; data < 3; ++data) {
      INFO(rt::dtypeName(dt) << " data " << data);
      Shape s;
      s.batch = 1;
      s.heads = 2;
      s.kvHeads = 1;
      s.qLen = s.kvLen = 128;
      s.headDim = s.vHeadDim = 64;
      s.dtype = dt;
      rt::KernelSpec spec;
      spec.dtype = dt;
      spec.headDim = spec.vHeadDim = 64;
      KernelPair kernels = compilePair(*session, "synaptic", spec);
      GpuBackward gpu(*session, "synaptic", spec);
      REQUIRE(gpu.image.spec.blockM == 64);
      checkBackwardKernel(*session, "synaptic", *kernels.forward, gpu.run(), s,
                          1e-3, dt, dt, 0, {}, [&](rt::AttentionArgs &a) {
                            for (auto &[name, t] : a.tensors) {
                              bool query = name == "qamp";
                              float *x = static_cast<float *>(t.data);
                              for (int64_t i = 0; i < t.numel(); ++i) {
                                int64_t pos = i % t.shape.back();
                                if (data == 1)
                                  x[i] = -x[i];
                                if (data == 2 &&
                                    (query ? pos % 2 == 0 : pos % 3 == 0))
                                  x[i] *= query ? 0x1p70f : 0x1p-80f;
                              }
                            }
                          });
    }
}

TEST_CASE("the CPU backward kernels refuse bad calls by name",
          "[backward][kernel]") {
  AlibiCall call = alibiCall(8);
  Session &session = *call.session;
  Inputs &in = call.in;
  rt::KernelSpec spec;
  spec.headDim = spec.vHeadDim = 8;
  std::unique_ptr<rt::CpuBackwardKernel> bwd;
  REQUIRE(session.compileCpuBackward("alibi", spec, bwd).isOk());
  std::vector<float> g(static_cast<size_t>(in.args.q.numel()), 0.f),
      dk(g.size()), dv(g.size()), dq(g.size());
  rt::BackwardArgs b;
  b.forward = in.args;
  b.dOut = rt::TensorView::contiguous(g.data(), rt::DType::F32, in.args.out.shape);
  b.dq = rt::TensorView::contiguous(dq.data(), rt::DType::F32, in.args.q.shape);
  b.dk = rt::TensorView::contiguous(dk.data(), rt::DType::F32, in.args.k.shape);
  b.dv = rt::TensorView::contiguous(dv.data(), rt::DType::F32, in.args.v.shape);
  rt::BackwardArgs noLse = b;
  noLse.forward.lse = {};
  CHECK_THAT(bwd->run(noLse).message(), Catch::Contains("lse"));
  rt::BackwardArgs badDk = b;
  badDk.dk.shape = {1, 2, 8, 16};
  CHECK_THAT(bwd->run(badDk).message(),
             Catch::Contains("dk") && Catch::Contains("[1, 2, 8, 8]"));
  rt::BackwardArgs badDOut = b;
  badDOut.dOut.dtype = rt::DType::BF16;
  CHECK_THAT(bwd->run(badDOut).message(), Catch::Contains("dOut"));
  CHECK(bwd->run(b).isOk());

  // The GPU backward writes dq, dk and dv in the kernel's dtype only.
  GpuBackward gpu(session, "alibi", spec);
  rt::ParamGradients grads;
  std::vector<uint16_t> half(g.size());
  rt::BackwardArgs bf16Dq = b;
  bf16Dq.dq = rt::TensorView::contiguous(half.data(), rt::DType::BF16,
                                         in.args.q.shape);
  CHECK_THAT(gpu.run()(bf16Dq, grads).message(),
             Catch::Contains("dq") && Catch::Contains("expected dtype f32"));
  CHECK_THAT(gpu.run()(noLse, grads).message(), Catch::Contains("lse"));
  CHECK(gpu.run()(b, grads).isOk());
}

TEST_CASE("dropout in the backward: CPU and emulated GPU kernels (SIMT and "
          "tensor cores) regenerate the forward's mask",
          "[backward][kernel][dropout]") {
  // dV takes P z and dP becomes z dP; every gradient against the fp64
  // backward with the same mask (Dropout.h), with 35% of the pairs dropped.
  const rt::DropoutRequest drop{0.35, 99, 3};
  std::vector<Shape> shapes = kernelShapes();
  for (const char *file : {"causal.attn", "synaptic.attn"}) {
    auto session = loadFile(std::string(ATTNC_EXAMPLES_DIR) + "/" + file);
    for (const std::string &name : session->variants()) {
      INFO(file << " variant " << name);
      rt::KernelSpec spec;
      spec.blockM = spec.blockN = spec.headDim = 16;
      spec.vHeadDim = 24;
      spec.dropout = true;
      // The chunk's keys are offset (by multiples of 4: Philox blocks of
      // four keys start at such positions): dropout with key offsets.
      spec.keyOffsets = true;
      KernelPair kernels = compilePair(*session, name, spec);
      spec.form = "simt";
      GpuBackward simt(*session, name, spec);
      for (const Shape &s : shapes) {
        INFO(tools::modeName(s.mode));
        checkBackwardKernel(*session, name, *kernels.forward, onCpu(kernels),
                            s, 2e-5, rt::DType::F32, rt::DType::F32, 2, drop);
        checkBackwardKernel(*session, name, *kernels.forward, simt.run(), s,
                            2e-5, rt::DType::F32, rt::DType::F32, 0, drop);
      }
      // Tensor cores: bf16, 64-row tiles over 150 keys.
      rt::KernelSpec bf = spec;
      bf.dtype = rt::DType::BF16;
      bf.vHeadDim = 32;
      bf.form = "";
      KernelPair bfKernels = compilePair(*session, name, bf);
      GpuBackward mma(*session, name, bf);
      REQUIRE(mma.image.spec.warps > 0);
      for (const Shape &s : tensorCoreShapes()) {
        INFO(tools::modeName(s.mode) << " bf16");
        checkBackwardKernel(*session, name, *bfKernels.forward, mma.run(), s,
                            1e-3, rt::DType::BF16, rt::DType::BF16, 0, drop);
      }
    }
  }
}
