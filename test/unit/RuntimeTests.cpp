// Unit tests for the runtime core that needs no compiler: dtypes and their
// conversions, strided tensor views, and argument validation messages.
#include "attnc/runtime/DType.h"
#include "attnc/runtime/Status.h"
#include "attnc/runtime/TensorView.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

using namespace attnc::rt;

TEST_CASE("f16 conversion is exact on representable values", "[dtype]") {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f,
                  5.960464477539063e-08f /* smallest subnormal */}) {
    CHECK(halfToFloat(floatToHalf(v)) == v);
  }
  CHECK(floatToHalf(1.0f) == 0x3c00);
  CHECK(floatToHalf(-2.0f) == 0xc000);
}

TEST_CASE("f16 conversion rounds to nearest even and saturates to inf",
          "[dtype]") {
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties to
  // even keeps 1.0; 1 + 3*2^-11 ties up to 1 + 2^-9.
  CHECK(halfToFloat(floatToHalf(1.0f + std::ldexp(1.0f, -11))) == 1.0f);
  CHECK(halfToFloat(floatToHalf(1.0f + 3 * std::ldexp(1.0f, -11))) ==
        1.0f + std::ldexp(1.0f, -9));
  CHECK(std::isinf(halfToFloat(floatToHalf(70000.0f))));
  CHECK(halfToFloat(floatToHalf(65519.0f)) == 65504.0f);
  CHECK(std::isnan(halfToFloat(floatToHalf(std::nanf("")))));
  CHECK(halfToFloat(floatToHalf(1e-10f)) == 0.0f);
}

TEST_CASE("bf16 conversion keeps the exponent and rounds the mantissa",
          "[dtype]") {
  CHECK(bfloat16ToFloat(floatToBFloat16(1.0f)) == 1.0f);
  CHECK(bfloat16ToFloat(floatToBFloat16(3.0e38f)) ==
        Approx(3.0e38f).epsilon(0.01));
  // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: even wins.
  CHECK(bfloat16ToFloat(floatToBFloat16(1.0f + std::ldexp(1.0f, -8))) == 1.0f);
  CHECK(std::isnan(bfloat16ToFloat(floatToBFloat16(std::nanf("")))));
  CHECK(std::isinf(bfloat16ToFloat(
      floatToBFloat16(std::numeric_limits<float>::infinity()))));
}

TEST_CASE("dtype names round-trip and sizes are right", "[dtype]") {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64,
                  DType::Bool})
    CHECK(parseDType(dtypeName(t)) == t);
  CHECK_FALSE(parseDType("f64").has_value());
  CHECK(dtypeSize(DType::BF16) == 2);
  CHECK(dtypeSize(DType::I64) == 8);
}

TEST_CASE("loadAsDouble and storeFromDouble agree for every dtype",
          "[dtype]") {
  unsigned char buf[64] = {};
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64}) {
    storeFromDouble(buf, t, 3, -6.0);
    CHECK(loadAsDouble(buf, t, 3) == -6.0);
  }
  storeFromDouble(buf, DType::Bool, 1, 2.0);
  CHECK(loadAsDouble(buf, DType::Bool, 1) == 1.0);
}

TEST_CASE("row-major strides and offsets", "[tensor]") {
  float data[2 * 3 * 4];
  TensorView t = TensorView::contiguous(data, DType::F32, {2, 3, 4});
  CHECK(t.strides == std::vector<int64_t>{12, 4, 1});
  CHECK(t.numel() == 24);
  CHECK(t.offsetOf({1, 2, 3}) == 23);
}

TEST_CASE("BSHD and BHSD views of the same data differ only in strides",
          "[tensor]") {
  // B=1, S=5, H=2, D=8 stored as BSHD; viewed as logical [B, H, S, D].
  float data[1 * 5 * 2 * 8];
  TensorView bshd;
  bshd.data = data;
  bshd.shape = {1, 2, 5, 8};
  bshd.strides = {5 * 2 * 8, 8, 2 * 8, 1};
  CHECK(checkTensor(bshd, "q", DType::F32, {1, 2, 5, 8}).isOk());
  CHECK(bshd.offsetOf({0, 1, 3, 2}) == 3 * 16 + 8 + 2);
}

TEST_CASE("checkTensor names the argument and expected vs actual",
          "[tensor]") {
  float data[16];
  TensorView t = TensorView::contiguous(data, DType::F32, {2, 8});
  Status s = checkTensor(t, "k", DType::F32, {2, 4});
  REQUIRE_FALSE(s.isOk());
  CHECK(s.code() == StatusCode::InvalidArgument);
  CHECK(s.message() == "'k' has shape [2, 8], expected [2, 4]");
  Status d = checkTensor(t, "v", DType::BF16, {2, 8});
  CHECK(d.message() == "'v' has dtype f32, expected bf16");
}

TEST_CASE("checkTensor rejects malformed views", "[tensor]") {
  float data[4];
  TensorView t = TensorView::contiguous(data, DType::F32, {2, 2});
  t.strides = {2};
  CHECK(checkShape(t, "q", {2, 2}).message() ==
        "'q' has 2 dimensions but 1 strides");
  TensorView n = TensorView::contiguous(nullptr, DType::F32, {2, 2});
  CHECK(checkShape(n, "o", {2, 2}).message() == "'o' has a null data pointer");
  TensorView neg = TensorView::contiguous(data, DType::F32, {2, 2});
  neg.strides = {-2, 1};
  CHECK(checkShape(neg, "k", {2, 2}).message().find("negative stride") !=
        std::string::npos);
}

TEST_CASE("Status carries a code and a printable message", "[status]") {
  CHECK(Status::ok().isOk());
  CHECK(Status::ok().toString() == "ok");
  Status s = Status::notFound("no variant 'x'");
  CHECK_FALSE(s);
  CHECK(s.toString() == "not found: no variant 'x'");
}
