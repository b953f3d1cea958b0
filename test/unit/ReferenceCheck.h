// Helpers of the Catch2 tests that run JIT-compiled kernels: a CPU kernel
// from source, seeded random tensors in any dtype, and a call's error
// against the fp64 reference.
#ifndef ATTNC_TEST_REFERENCECHECK_H
#define ATTNC_TEST_REFERENCECHECK_H

#include "attnc/Driver/Session.h"
#include "attnc/runtime/Attention.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace attnc::test {

/// `variant` of the .attn source `src`, JIT-compiled for this CPU.
inline std::unique_ptr<rt::CpuKernel>
compileCpuKernel(const std::string &src, const std::string &variant,
                 rt::KernelSpec spec = {}) {
  std::string diags;
  std::unique_ptr<Session> s;
  rt::Status st = Session::loadSource("t.attn", src, diags, s);
  INFO(diags << st.toString());
  REQUIRE(st.isOk());
  std::unique_ptr<rt::CpuKernel> k;
  st = s->compileCpu(variant, spec, k);
  INFO(st.toString());
  REQUIRE(st.isOk());
  return k;
}

/// `n` values uniform in [-1, 1] stored as `dt`.
inline std::vector<uint8_t> randomValues(rt::DType dt, int64_t n,
                                         uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<uint8_t> x(static_cast<size_t>(n) * rt::dtypeSize(dt));
  for (int64_t i = 0; i < n; ++i)
    rt::storeFromDouble(x.data(), dt, i, u(rng));
  return x;
}

/// max |out - reference| of a finished call whose `out` is host memory,
/// contiguous; infinite when an output is NaN.
inline double maxErrorVsReference(const rt::VariantInfo &info,
                                  const rt::AttentionArgs &a) {
  std::vector<double> ref, lse;
  rt::Status s = rt::referenceAttention(info, a, ref, lse);
  INFO(s.toString());
  REQUIRE(s.isOk());
  double m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double got =
        rt::loadAsDouble(a.out.data, a.out.dtype, static_cast<int64_t>(i));
    if (std::isnan(got))
      return INFINITY;
    m = std::max(m, std::fabs(got - ref[i]));
  }
  return m;
}

} // namespace attnc::test

#endif
