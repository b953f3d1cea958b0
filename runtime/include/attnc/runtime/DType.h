//===- DType.h - Element types the runtime moves ----------------*- C++ -*-===//
#ifndef ATTNC_RUNTIME_DTYPE_H
#define ATTNC_RUNTIME_DTYPE_H

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace attnc::rt {

enum class DType { F32, F16, BF16, I32, I64, Bool };

std::string_view dtypeName(DType t);
std::optional<DType> parseDType(std::string_view name);
size_t dtypeSize(DType t);
/// f32, f16 or bf16: the types that hold gradients.
inline bool isFloatDType(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16;
}

/// IEEE binary16 and bfloat16 conversions, round-to-nearest-even, with
/// NaN and infinities preserved. Plain bit manipulation: no hardware needed.
uint16_t floatToHalf(float f);
float halfToFloat(uint16_t h);
uint16_t floatToBFloat16(float f);
float bfloat16ToFloat(uint16_t b);

/// Reads element `index` of a buffer of type `t` as double (bool: 0/1).
double loadAsDouble(const void *base, DType t, int64_t index);
/// Writes `v` rounded to `t` at element `index`.
void storeFromDouble(void *base, DType t, int64_t index, double v);

} // namespace attnc::rt

#endif
