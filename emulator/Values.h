//===- Values.h - Typed reads and writes of register slots ---------------===//
#ifndef ATTNC_EMU_VALUES_H
#define ATTNC_EMU_VALUES_H

#include "Float16.h"
#include "Machine.h"

#include <cmath>
#include <cstring>
#include <type_traits>

namespace attnc::emu {

/// The low sizeof(T) bytes of a slot as T.
template <typename T> inline T get(const Warp &w, int32_t s, int lane) {
  uint64_t v = slot(w, s, lane);
  T x;
  std::memcpy(&x, &v, sizeof(T));
  return x;
}
/// Writes T zero-extended into a slot.
template <typename T> inline void put(Warp &w, int32_t s, int lane, T x) {
  uint64_t v = 0;
  std::memcpy(&v, &x, sizeof(T));
  slot(w, s, lane) = v;
}

template <typename T> using Unsigned = std::make_unsigned_t<T>;

// Flags in Instr::aux of floating-point instructions.
constexpr uint32_t kFtz = 1, kSat = 2, kNaN = 4;

inline float flushF(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x;
}
inline double flushF(double x) { return x; } // .ftz is f32 only
/// PTX arithmetic returns the canonical NaN (0x7fffffff).
inline float canon(float x) { return x != x ? bitsFloat(0x7fffffffu) : x; }
inline double canon(double x) {
  return x != x ? bitsDouble(0x7fffffffffffffffull) : x;
}
template <typename T> inline T saturate(T x) {
  if (x != x)
    return T(0);
  return x < T(0) ? T(0) : x > T(1) ? T(1) : x;
}

} // namespace attnc::emu

#endif
