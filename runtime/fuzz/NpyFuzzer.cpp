//===- NpyFuzzer.cpp - libFuzzer target for the .npy reader --------------===//
//
// Feeds arbitrary bytes to parseNpy (the header dictionary, shapes, data
// sizes) and writes back what it accepts. Any crash, hang, leak or
// sanitizer report is a bug.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/Npy.h"

#include <cstddef>
#include <cstdint>
#include <string>

using namespace attnc::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  NpyArray a;
  Status s = parseNpy(std::string(reinterpret_cast<const char *>(data), size),
                      "fuzz.npy", a);
  if (s) {
    // What was accepted is consistent: the bytes are what the shape says.
    size_t n = dtypeSize(a.dtype);
    for (int64_t d : a.shape)
      n *= static_cast<size_t>(d);
    if (n != a.bytes.size())
      __builtin_trap();
  }
  return 0;
}
