//===- TensorMap.cpp - cuTensorMapEncodeTiled's checks and encoding ------===//
#include "TensorMap.h"

#include <cstring>

namespace attnc::emu {

namespace {
constexpr uint32_t kMagic = 0x504d5441; // "ATMP"

// The encoded layout: magic, then the fields at fixed offsets.
struct Encoded {
  uint32_t magic;
  uint8_t dtype, rank, interleave, swizzle, l2Promotion, oobFill;
  uint8_t elementStrides[kTensorMapMaxRank];
  uint8_t box[kTensorMapMaxRank]; // box - 1
  uint64_t global;
  uint64_t dims[kTensorMapMaxRank];
  uint64_t strides[kTensorMapMaxRank - 1];
};
static_assert(sizeof(Encoded) <= kTensorMapBytes, "the map is 128 bytes");
} // namespace

int tensorMapElementBytes(uint32_t dtype) {
  static const int bytes[] = {1, 2, 4, 4, 8, 8, 2, 4, 8, 2, 4, 4, 4};
  return dtype < sizeof bytes / sizeof bytes[0] ? bytes[dtype] : 0;
}

bool tensorMapIsFloat(uint32_t dtype) { return dtype >= 6 && dtype <= 12; }

uint32_t swizzleSpan(uint32_t swizzle) {
  return swizzle == 1 ? 32 : swizzle == 2 ? 64 : swizzle == 3 ? 128 : 0;
}

std::string checkTensorMap(const TensorMapDesc &d, bool &unsupported) {
  unsupported = false;
  int eb = tensorMapElementBytes(d.dtype);
  if (!eb)
    return "tensorDataType " + std::to_string(d.dtype) + " is not a CUtensorMapDataType";
  if (d.rank < 1 || d.rank > kTensorMapMaxRank)
    return "tensorRank " + std::to_string(d.rank) + " is not in 1..5";
  if (d.interleave > 2)
    return "interleave " + std::to_string(d.interleave) + " is not a CUtensorMapInterleave";
  if (d.swizzle > 3)
    return "swizzle " + std::to_string(d.swizzle) +
           " is not a CUtensorMapSwizzle this device supports (0..3)";
  if (d.l2Promotion > 3)
    return "l2Promotion " + std::to_string(d.l2Promotion) + " is not a CUtensorMapL2promotion";
  if (d.oobFill > 1)
    return "oobFill " + std::to_string(d.oobFill) + " is not a CUtensorMapFloatOOBfill";
  if (d.oobFill == 1 && !tensorMapIsFloat(d.dtype))
    return "oobFill NAN_REQUEST_ZERO_FMA needs a floating-point tensorDataType";
  uint64_t addrAlign = d.interleave == 2 ? 32 : 16;
  if (d.global % addrAlign)
    return "globalAddress " + std::to_string(d.global) + " is not " +
           std::to_string(addrAlign) + "-byte aligned";
  for (uint32_t i = 0; i < d.rank; ++i) {
    std::string at = "[" + std::to_string(i) + "]";
    if (d.dims[i] == 0 || d.dims[i] > (uint64_t(1) << 32))
      return "globalDim" + at + " = " + std::to_string(d.dims[i]) + " is not in 1..2^32";
    if (i > 0) {
      uint64_t s = d.strides[i - 1];
      std::string sat = "[" + std::to_string(i - 1) + "]";
      if (s % (d.interleave == 2 ? 32 : 16))
        return "globalStrides" + sat + " = " + std::to_string(s) +
               " is not a multiple of " + (d.interleave == 2 ? "32" : "16") + " bytes";
      if (s >= (uint64_t(1) << 40))
        return "globalStrides" + sat + " = " + std::to_string(s) + " is not below 2^40";
    }
    if (d.box[i] == 0 || d.box[i] > 256)
      return "boxDim" + at + " = " + std::to_string(d.box[i]) + " is not in 1..256";
    if (d.elementStrides[i] == 0 || d.elementStrides[i] > 8)
      return "elementStrides" + at + " = " + std::to_string(d.elementStrides[i]) +
             " is not in 1..8";
  }
  uint64_t inner = uint64_t(d.box[0]) * uint64_t(eb);
  if (d.interleave == 0 && inner % 16)
    return "boxDim[0] * element size = " + std::to_string(inner) +
           " bytes is not a multiple of 16 (interleave NONE)";
  uint32_t span = swizzleSpan(d.swizzle);
  if (d.interleave == 0 && span && inner > span)
    return "boxDim[0] * element size = " + std::to_string(inner) +
           " bytes exceeds the swizzle span of " + std::to_string(span) + " bytes";
  // Valid for the driver; not modeled here.
  unsupported = true;
  if (d.interleave != 0)
    return "interleaved tensor maps are not supported by the emulator";
  for (uint32_t i = 0; i < d.rank; ++i)
    if (d.elementStrides[i] != 1)
      return "elementStrides other than 1 are not supported by the emulator";
  if (span && inner != span)
    return "a swizzled box whose inner dimension (" + std::to_string(inner) +
           " bytes) is narrower than the swizzle span (" + std::to_string(span) +
           ") is not supported by the emulator";
  unsupported = false;
  return "";
}

void encodeTensorMap(const TensorMapDesc &d, uint8_t out[kTensorMapBytes]) {
  Encoded e;
  std::memset(&e, 0, sizeof e);
  e.magic = kMagic;
  e.dtype = uint8_t(d.dtype);
  e.rank = uint8_t(d.rank);
  e.interleave = uint8_t(d.interleave);
  e.swizzle = uint8_t(d.swizzle);
  e.l2Promotion = uint8_t(d.l2Promotion);
  e.oobFill = uint8_t(d.oobFill);
  e.global = d.global;
  for (uint32_t i = 0; i < d.rank; ++i) {
    e.elementStrides[i] = uint8_t(d.elementStrides[i]);
    e.box[i] = uint8_t(d.box[i] - 1);
    e.dims[i] = d.dims[i];
    if (i > 0)
      e.strides[i - 1] = d.strides[i - 1];
  }
  std::memset(out, 0, kTensorMapBytes);
  std::memcpy(out, &e, sizeof e);
}

bool decodeTensorMap(const uint8_t in[kTensorMapBytes], TensorMapDesc &d) {
  Encoded e;
  std::memcpy(&e, in, sizeof e);
  if (e.magic != kMagic || e.rank < 1 || e.rank > kTensorMapMaxRank)
    return false;
  d = TensorMapDesc();
  d.dtype = e.dtype;
  d.rank = e.rank;
  d.interleave = e.interleave;
  d.swizzle = e.swizzle;
  d.l2Promotion = e.l2Promotion;
  d.oobFill = e.oobFill;
  d.global = e.global;
  for (uint32_t i = 0; i < d.rank; ++i) {
    d.elementStrides[i] = e.elementStrides[i];
    d.box[i] = uint32_t(e.box[i]) + 1;
    d.dims[i] = e.dims[i];
    if (i > 0)
      d.strides[i - 1] = e.strides[i - 1];
  }
  return true;
}

} // namespace attnc::emu
