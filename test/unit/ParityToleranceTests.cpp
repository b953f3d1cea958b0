// attnc check's tolerance against the fp64 reference: the dtype's, or more
// for rows whose scores are large (their f32 rounding alone moves the
// softmax); a wrong output fails at any score magnitude.
#include "Parity.h"
#include "PlainVariant.h"

#include "attnc/runtime/TensorView.h"
#include "attnc/runtime/Variant.h"

#include <catch2/catch.hpp>

using namespace attnc;
using namespace attnc::tools;

namespace {
rt::VariantInfo parsed(const char *text) {
  rt::VariantInfo v;
  REQUIRE(rt::VariantInfo::parse(text, v).isOk());
  return v;
}

// 3000 + 2 x score: |scores| near 3000 (f32 spacing there is 2.4e-4).
const char *kLarge = R"(variant big
mask-kind none
mask-uses
score
  %0 = const.f32 3000
  %1 = const.f32 2
  %2 = arith.mulf %score %1
  %3 = arith.addf %2 %0
  yield %3
mask
  %0 = const.i1 1
  yield %0
end
)";

/// The reference computed with `rounding`, written as a kernel's output
/// (every element moved by `outDelta`, the LSE of row 7 by `lseDelta`),
/// compared with the fp64 reference.
Row referenceAsKernel(const rt::VariantInfo &v, int64_t heads, int64_t qLen,
                      int64_t kvLen, rt::ReferenceRounding rounding,
                      double outDelta, double lseDelta) {
  Shape s;
  s.batch = 1;
  s.heads = heads;
  s.qLen = qLen;
  s.kvLen = kvLen;
  s.dtype = rt::DType::F32;
  s.resolve();
  Inputs in;
  REQUIRE(makeInputs(v, s, {}, {}, in).isOk());
  std::vector<double> out, lse;
  REQUIRE(rt::referenceAttention(v, in.args, out, lse, nullptr, nullptr,
                                 rounding)
              .isOk());
  float *o = static_cast<float *>(in.args.out.data);
  for (size_t i = 0; i < out.size(); ++i)
    o[i] = static_cast<float>(out[i] + outDelta);
  for (size_t i = 0; i < lse.size(); ++i)
    in.lse[i] = static_cast<float>(lse[i]);
  in.lse[7] += static_cast<float>(lseDelta);
  return compareWithReference(v, v.name, in, false);
}

/// The reference's own output, every element moved by `delta`.
Row perturbed(const rt::VariantInfo &v, double delta) {
  return referenceAsKernel(v, 2, 40, 60, rt::ReferenceRounding::Mods, delta, 0);
}
} // namespace

TEST_CASE("the parity tolerance grows with the scores, and only with them",
          "[parity]") {
  rt::VariantInfo big = parsed(kLarge), plain = parsed(kPlainVariant);
  // What rounding f32 scores near 3000 does (~1e-4): within tolerance.
  Row r = perturbed(big, 2e-4);
  CHECK(r.pass);
  CHECK(r.tol > 3e-4);
  CHECK(r.tol < 3e-3);
  // A wrong output fails at that magnitude too.
  CHECK_FALSE(perturbed(big, 2e-2).pass);
  // Small scores keep f32's 1e-5.
  Row p = perturbed(plain, 2e-4);
  CHECK_FALSE(p.pass);
  CHECK(p.tol == 1e-5);
  CHECK(perturbed(plain, 2e-6).pass);
}

namespace {
// PyTorch's poison_mod_fwd: 1 / score under a causal mask. Scores near 0
// give huge, rounding-amplified scores; every f32 kernel's LSE moves by
// more than f32's 1e-5 relative.
const char *kPoison = R"(variant poison
mask-kind closed
mask-uses
score
  %0 = const.f32 1
  %1 = arith.divf %0 %score
  yield %1
mask
  %0 = arith.cmpi sge %q %kv
  yield %0
end
)";

/// An f32 computation of `v` (the reference with f32 dot products, as a
/// kernel computes them) compared with the fp64 reference; `lseDelta` is
/// added to one row's LSE.
Row f32Computation(const rt::VariantInfo &v, double lseDelta) {
  return referenceAsKernel(v, 4, 64, 64, rt::ReferenceRounding::DotsAndMods, 0,
                           lseDelta);
}
} // namespace

TEST_CASE("the LSE tolerance covers the rounding a row's modifiers amplify",
          "[parity]") {
  rt::VariantInfo poison = parsed(kPoison);
  // An f32 computation fails f32's plain 1e-5 and passes within its own
  // error (the note says which test it passed).
  Row r = f32Computation(poison, 0);
  INFO(r.note);
  CHECK(r.pass);
  CHECK(r.note == "within the f32 computation's own error");
  // A wrong LSE still fails.
  Row wrong = f32Computation(poison, 0.5);
  CHECK_FALSE(wrong.pass);
  CHECK_THAT(wrong.note, Catch::StartsWith("lse[0, 0, 7]"));
  // Plain scores never widen: an LSE off by 1e-3 fails.
  Row plain = f32Computation(parsed(kPlainVariant), 1e-3);
  CHECK_FALSE(plain.pass);
}
