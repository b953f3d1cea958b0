//===- Float16.h - f16/bf16 <-> f32 conversions, round to nearest even ----===//
//
// The emulator stores half-precision values as their 16 bits. These are the
// exact conversions PTX specifies: widening is exact, narrowing rounds to
// nearest, ties to even, with overflow to infinity and NaNs kept quiet.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_FLOAT16_H
#define ATTNC_EMU_FLOAT16_H

#include <cstdint>
#include <cstring>

namespace attnc::emu {

inline uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint64_t doubleBits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
inline double bitsDouble(uint64_t u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

inline float bf16ToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

inline uint16_t floatToBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) // NaN: canonical quiet NaN
    return 0x7fff;
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float f16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) // inf / NaN
    return bitsFloat(sign | 0x7f800000u | (man << 13) | (man ? 0x400000u : 0));
  if (exp == 0) {
    if (man == 0)
      return bitsFloat(sign);
    // Subnormal: value = man * 2^-24, exact in f32.
    float v = float(man) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return bitsFloat(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t floatToF16(float f) {
  uint32_t u = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u)
    return 0x7fff; // canonical NaN
  if (a >= 0x477ff000u) // >= 65520 rounds to infinity
    return sign | 0x7c00u;
  if (a < 0x38800000u) { // below the smallest normal 2^-14: subnormal or 0
    // Round |f| * 2^24 to an integer, ties to even (exact in double).
    double scaled = double(bitsFloat(a)) * 16777216.0;
    double fl = static_cast<double>(static_cast<uint32_t>(scaled));
    double rem = scaled - fl;
    uint32_t m = static_cast<uint32_t>(fl);
    if (rem > 0.5 || (rem == 0.5 && (m & 1u)))
      ++m;
    return static_cast<uint16_t>(sign | m); // m == 0x400 is the smallest normal
  }
  uint32_t exp = (a >> 23) - 112, man = a & 0x7fffffu;
  uint32_t h = (exp << 10) | (man >> 13);
  uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u)))
    ++h;
  return static_cast<uint16_t>(sign | h);
}

} // namespace attnc::emu

#endif
