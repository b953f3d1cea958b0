//===- Unfused.cpp - OpenBLAS GEMMs + elementwise modifiers + softmax ----===//
#include "Unfused.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <thread>
#include <vector>

namespace attnc::bench {

namespace {

struct Ctx {
  const rt::AttentionArgs &a;
  double scalar(const std::string &n) const {
    for (auto &[k, v] : a.scalars)
      if (k == n)
        return v;
    return 0;
  }
  const float *tensor(const std::string &n) const {
    for (auto &[k, t] : a.tensors)
      if (k == n)
        return static_cast<const float *>(t.data);
    return nullptr;
  }
};

/// Applies score_mod and mask_mod to one row of scores, in place.
using RowMod = std::function<void(const Ctx &, int64_t b, int64_t h, int64_t q,
                                  float *row, int64_t n)>;

RowMod modFor(const std::string &v) {
  const float ninf = -std::numeric_limits<float>::infinity();
  if (v == "full")
    return [](const Ctx &, int64_t, int64_t, int64_t, float *, int64_t) {};
  if (v == "causal")
    return [=](const Ctx &, int64_t, int64_t, int64_t q, float *s, int64_t n) {
      for (int64_t j = q + 1; j < n; ++j)
        s[j] = ninf;
    };
  if (v == "sliding_window")
    return [=](const Ctx &c, int64_t, int64_t, int64_t q, float *s, int64_t n) {
      int64_t w = static_cast<int64_t>(c.scalar("window"));
      for (int64_t j = 0; j < n; ++j)
        if (j > q || q - j >= w)
          s[j] = ninf;
    };
  if (v == "synaptic")
    return [=](const Ctx &c, int64_t b, int64_t h, int64_t q, float *s,
               int64_t n) {
      const rt::TensorView &qa = c.a.tensors[0].second;
      const rt::TensorView &kf = c.a.tensors[1].second;
      const float *qamp = static_cast<const float *>(qa.data);
      const float *key = static_cast<const float *>(kf.data);
      float barrier = static_cast<float>(c.scalar("barrier"));
      float qv = qamp[qa.offsetOf({b, h, q})];
      const float *krow = key + kf.offsetOf({b, h, 0});
      for (int64_t j = 0; j < n; ++j)
        s[j] = j > q ? ninf
                     : s[j] + std::log(qv * krow[j]) -
                           barrier * static_cast<float>(q - j);
    };
  return nullptr;
}

} // namespace

bool hasUnfusedBaseline(const std::string &v) { return modFor(v) != nullptr; }

rt::Status runUnfused(const std::string &variant, const rt::AttentionArgs &a,
                      int threads) {
  RowMod mod = modFor(variant);
  if (!mod)
    return rt::Status::notFound("no unfused baseline for '" + variant + "'");
  int64_t B = a.q.shape[0], H = a.q.shape[1], L = a.q.shape[2],
          D = a.q.shape[3], HK = a.k.shape[1], S = a.k.shape[2],
          DV = a.v.shape[3];
  if (a.q.dtype != rt::DType::F32 || L != S)
    return rt::Status::invalidArgument("the unfused baseline is f32 prefill only");
  float scale = static_cast<float>(1.0 / std::sqrt(double(D)));
  // Every score matrix at once, as an eager framework holds [B, H, L, S].
  std::vector<float> scores(static_cast<size_t>(B * H) * L * S);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float *q = static_cast<const float *>(a.q.data) + a.q.offsetOf({b, h, 0, 0});
      const float *k = static_cast<const float *>(a.k.data) +
                       a.k.offsetOf({b, h / (H / HK), 0, 0});
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, L, S, D, scale, q,
                  D, k, D, 0.f, &scores[(b * H + h) * L * S], S);
    }
  Ctx ctx{a};
  int n = std::max(1, threads > 0 ? threads
                                  : static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < n; ++t)
    pool.emplace_back([&, t] {
      for (int64_t row = t; row < B * H * L; row += n) {
        int64_t b = row / (H * L), h = (row / L) % H, i = row % L;
        float *s = &scores[row * S];
        mod(ctx, b, h, i, s, S);
        float mx = *std::max_element(s, s + S);
        float sum = 0;
        for (int64_t j = 0; j < S; ++j) {
          s[j] = std::isinf(mx) ? 0.f : std::exp(s[j] - mx);
          sum += s[j];
        }
        float inv = sum > 0 ? 1.f / sum : 0.f;
        for (int64_t j = 0; j < S; ++j)
          s[j] *= inv;
      }
    });
  for (auto &t : pool)
    t.join();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float *v = static_cast<const float *>(a.v.data) +
                       a.v.offsetOf({b, h / (H / HK), 0, 0});
      float *o = static_cast<float *>(a.out.data) + a.out.offsetOf({b, h, 0, 0});
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, L, DV, S, 1.f,
                  &scores[(b * H + h) * L * S], S, v, DV, 0.f, o, DV);
    }
  return rt::Status::ok();
}

} // namespace attnc::bench
