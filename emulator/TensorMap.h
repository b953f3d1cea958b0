//===- TensorMap.h - The emulator's CUtensorMap: encoding and validation --===//
//
// cuTensorMapEncodeTiled writes a driver-private 128-byte object that TMA
// instructions read (from a kernel parameter or global memory). The
// emulator's object holds the arguments themselves behind a magic word;
// the driver's checks of those arguments live here, so that the emulated
// driver refuses what a real one refuses, naming the argument. A TMA load
// (ExecAsync.cpp) decodes the object and faults on anything else.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_TENSORMAP_H
#define ATTNC_EMU_TENSORMAP_H

#include <cstdint>
#include <string>

namespace attnc::emu {

constexpr int kTensorMapBytes = 128;
constexpr int kTensorMapMaxRank = 5;

/// The arguments of cuTensorMapEncodeTiled (enums as the driver numbers
/// them: CUtensorMapDataType, CUtensorMapInterleave, CUtensorMapSwizzle,
/// CUtensorMapL2promotion, CUtensorMapFloatOOBfill).
struct TensorMapDesc {
  uint32_t dtype = 0, rank = 0;
  uint64_t global = 0;
  uint64_t dims[kTensorMapMaxRank] = {};    // elements, innermost first
  uint64_t strides[kTensorMapMaxRank] = {}; // bytes, of dims 1..rank-1
  uint32_t box[kTensorMapMaxRank] = {};     // elements
  uint32_t elementStrides[kTensorMapMaxRank] = {};
  uint32_t interleave = 0, swizzle = 0, l2Promotion = 0, oobFill = 0;
};

/// Bytes per element of a CUtensorMapDataType; 0 for an unknown type.
int tensorMapElementBytes(uint32_t dtype);
/// True for the floating-point types (NaN fill applies to them).
bool tensorMapIsFloat(uint32_t dtype);
/// The swizzle span in bytes: 0 (none), 32, 64 or 128.
uint32_t swizzleSpan(uint32_t swizzle);
/// A shared address after the swizzle of `span` bytes (bits [4, 4 + b)
/// xor bits [7, 7 + b), b = log2(span / 16)), as wgmma reads it too.
inline uint32_t swizzleAddress(uint32_t a, uint32_t span) {
  return span ? a ^ (((a >> 7) & (span / 16 - 1)) << 4) : a;
}

/// The driver's checks (CUDA 13 documentation of cuTensorMapEncodeTiled):
/// "" when `d` is valid, else what is wrong, naming the argument. Sets
/// `unsupported` (and says so) for valid maps the emulator does not model
/// (interleaved layouts, element strides other than 1, a swizzled box
/// whose inner dimension is narrower than the swizzle span).
std::string checkTensorMap(const TensorMapDesc &d, bool &unsupported);
void encodeTensorMap(const TensorMapDesc &d, uint8_t out[kTensorMapBytes]);
/// False when the bytes are not a map encodeTensorMap wrote.
bool decodeTensorMap(const uint8_t in[kTensorMapBytes], TensorMapDesc &d);

} // namespace attnc::emu

#endif
