//===- ReferenceBackward.cpp - The fp64 backward pass ---------------------===//
//
// Naive and exact: per query row, the scores and the softmax are
// recomputed in double, then the gradients follow Backward.h's formulas.
// O(B Hq Lq Lkv (Dqk + Dv)) time.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/Backward.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

namespace attnc::rt {

Status referenceAttentionBackward(const VariantInfo &v, const AttentionArgs &a,
                                  const TensorView &dOut, AttentionGrads &g,
                                  bool exact, const TensorView *forwardOut) {
  Problem p;
  if (Status s = resolveProblem(v, nullptr, a, p); !s)
    return s;
  if (Status s = checkCaptureValues(v, p); !s)
    return s;
  if (!v.program)
    return Status::invalidArgument("the variant has no modifier program");
  if (!v.hasScoreGrad())
    return Status::invalidArgument(fmt::format(
        "variant '{}' has no derivative of score_mod (no 'grad' section in "
        "its program): compile it, or export its package, with an attnc "
        "that builds one",
        v.name));
  if (p.pages)
    return Status::invalidArgument(
        "backward: paged K/V (args.pages) is not supported; pass contiguous "
        "k and v");
  if (!isFloatDType(dOut.dtype))
    return Status::invalidArgument(
        fmt::format("dOut: expected dtype f32, f16 or bf16, got {}",
                    dtypeName(dOut.dtype)));
  if (Status s = checkShape(dOut, "dOut", {p.B, p.Hq, p.Lq, p.Dv}); !s)
    return s;
  if (forwardOut)
    if (Status s = checkShape(*forwardOut, "out", {p.B, p.Hq, p.Lq, p.Dv}); !s)
      return s;

  const int64_t G = p.Hq / p.Hkv, Lkv = p.Lkv, Dqk = p.Dqk, Dv = p.Dv;
  const std::vector<double> q = a.q.toDoubles(), k = a.k.toDoubles(),
                            vv = a.v.toDoubles(), dO = dOut.toDoubles();
  const std::vector<double> givenO =
      forwardOut ? forwardOut->toDoubles() : std::vector<double>();
  g.dq.assign(static_cast<size_t>(p.B * p.Hq * p.Lq * Dqk), 0.0);
  g.dk.assign(static_cast<size_t>(p.B * p.Hkv * Lkv * Dqk), 0.0);
  g.dv.assign(static_cast<size_t>(p.B * p.Hkv * Lkv * Dv), 0.0);
  g.params = zeroParamGradients(v, p.params);
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> x(Lkv), s(Lkv), dP(Lkv);
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        const int32_t qpos = p.qPos0[b] + static_cast<int32_t>(i);
        // Key j's position, as the modifiers and dropout see it.
        auto kpos = [&](int64_t j) { return p.kvPos0[b] + int32_t(j); };
        const size_t row = static_cast<size_t>((b * p.Hq + h) * p.Lq + i);
        const size_t kvHead = static_cast<size_t>((b * p.Hkv + h / G) * Lkv);
        const double *qr = &q[row * Dqk];
        const double *dOr = &dO[row * Dv];
        double mx = ninf;
        for (int64_t j = 0; j < p.kvLen[b]; ++j) {
          const double *kr = &k[(kvHead + j) * Dqk];
          double dot = 0;
          for (int64_t d = 0; d < Dqk; ++d)
            dot += qr[d] * kr[d];
          x[j] = dot * p.scale;
          bool keep = evalMaskMod(v, p.params, int32_t(b), p.headPos0 + int32_t(h), qpos,
                                  kpos(j));
          s[j] = keep ? evalScoreMod(v, p.params, x[j], int32_t(b),
                                     p.headPos0 + int32_t(h), qpos, kpos(j), nullptr,
                                     exact)
                      : ninf;
          mx = std::isnan(s[j]) || std::isnan(mx) ? std::nan("")
                                                  : std::max(mx, s[j]);
        }
        if (mx == ninf)
          continue; // no key: every gradient of the row is 0
        double sum = 0;
        for (int64_t j = 0; j < p.kvLen[b]; ++j)
          sum += s[j] == ninf ? 0.0 : std::exp(s[j] - mx);
        const double lse = mx + std::log(sum);
        // Dropout: O = sum_j P_j z_j V_j with z_j the kept pair's factor
        // or 0, so dV_j = P_j z_j dO and dP_j = z_j dO.V_j, and
        // D = rowsum(dO * O) = sum_j P_j dP_j still.
        auto factor = [&](int64_t j) {
          if (!p.dropout.active())
            return 1.0;
          return dropoutKeeps(p.dropout, int32_t(b), p.headPos0 + int32_t(h), qpos,
                              kpos(j))
                     ? double(p.dropout.scale)
                     : 0.0;
        };
        double D = 0; // rowsum(dO * O) = sum_j P_j dP_j
        for (int64_t j = 0; j < p.kvLen[b]; ++j) {
          if (s[j] == ninf)
            continue;
          const double *vr = &vv[(kvHead + j) * Dv];
          dP[j] = 0;
          for (int64_t d = 0; d < Dv; ++d)
            dP[j] += dOr[d] * vr[d];
          dP[j] *= factor(j);
          D += std::exp(s[j] - lse) * dP[j];
        }
        if (forwardOut) { // D from the given O instead
          D = 0;
          for (int64_t d = 0; d < Dv; ++d)
            D += dOr[d] * givenO[row * Dv + d];
        }
        double *dq = &g.dq[row * Dqk];
        for (int64_t j = 0; j < p.kvLen[b]; ++j) {
          if (s[j] == ninf)
            continue; // masked: no gradient
          const double P = std::exp(s[j] - lse), kept = P * factor(j);
          double *dv = &g.dv[(kvHead + j) * Dv];
          for (int64_t d = 0; d < Dv; ++d)
            dv[d] += kept * dOr[d];
          const double dS = P * (dP[j] - D);
          const double dx =
              evalScoreGrad(v, p.params, x[j], int32_t(b), p.headPos0 + int32_t(h), qpos,
                            kpos(j), dS, &g.params, exact) *
              p.scale;
          const double *kr = &k[(kvHead + j) * Dqk];
          double *dk = &g.dk[(kvHead + j) * Dqk];
          for (int64_t d = 0; d < Dqk; ++d) {
            dq[d] += dx * kr[d];
            dk[d] += dx * qr[d];
          }
        }
      }
  return Status::ok();
}

} // namespace attnc::rt
