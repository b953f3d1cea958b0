//===- DType.cpp - Element types and half/bfloat16 conversions -----------===//
#include "attnc/runtime/DType.h"

#include <cmath>
#include <cstring>

namespace attnc::rt {

std::string_view dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "f32";
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  case DType::Bool: return "bool";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view n) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::I64,
                  DType::Bool})
    if (dtypeName(t) == n)
      return t;
  return std::nullopt;
}

size_t dtypeSize(DType t) {
  switch (t) {
  case DType::F32:
  case DType::I32: return 4;
  case DType::F16:
  case DType::BF16: return 2;
  case DType::I64: return 8;
  case DType::Bool: return 1;
  }
  return 0;
}

static uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
static float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t floatToHalf(float f) {
  uint32_t x = bitsOf(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) // inf or NaN (keep NaN quiet and non-zero)
    return static_cast<uint16_t>(sign | 0x7c00u | (mant ? 0x200u : 0u));
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 31) // overflow -> inf
    return static_cast<uint16_t>(sign | 0x7c00u);
  if (e <= 0) { // subnormal or zero in half
    if (e < -10)
      return static_cast<uint16_t>(sign);
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u)))
      ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u)))
    ++half; // may carry into the exponent, which is still correct
  return static_cast<uint16_t>(sign | half);
}

float halfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0)
      return floatOf(sign);
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31)
    return floatOf(sign | 0x7f800000u | (mant << 13));
  return floatOf(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t floatToBFloat16(float f) {
  uint32_t x = bitsOf(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) // NaN: keep it a NaN
    return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float bfloat16ToFloat(uint16_t b) {
  return floatOf(static_cast<uint32_t>(b) << 16);
}

double loadAsDouble(const void *base, DType t, int64_t i) {
  switch (t) {
  case DType::F32: return static_cast<const float *>(base)[i];
  case DType::F16: return halfToFloat(static_cast<const uint16_t *>(base)[i]);
  case DType::BF16:
    return bfloat16ToFloat(static_cast<const uint16_t *>(base)[i]);
  case DType::I32: return static_cast<const int32_t *>(base)[i];
  case DType::I64:
    return static_cast<double>(static_cast<const int64_t *>(base)[i]);
  case DType::Bool: return static_cast<const uint8_t *>(base)[i] ? 1.0 : 0.0;
  }
  return 0.0;
}

void storeFromDouble(void *base, DType t, int64_t i, double v) {
  switch (t) {
  case DType::F32: static_cast<float *>(base)[i] = static_cast<float>(v); break;
  case DType::F16:
    static_cast<uint16_t *>(base)[i] = floatToHalf(static_cast<float>(v));
    break;
  case DType::BF16:
    static_cast<uint16_t *>(base)[i] = floatToBFloat16(static_cast<float>(v));
    break;
  case DType::I32: static_cast<int32_t *>(base)[i] = static_cast<int32_t>(v);
    break;
  case DType::I64: static_cast<int64_t *>(base)[i] = static_cast<int64_t>(v);
    break;
  case DType::Bool: static_cast<uint8_t *>(base)[i] = v != 0.0; break;
  }
}

} // namespace attnc::rt
