//===- Dropout.cpp - Philox 4x32-10 and the dropout parameters --------------===//
#include "attnc/runtime/Dropout.h"

#include <fmt/format.h>

#include <cmath>

namespace attnc::rt {

std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c,
                                      std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    uint64_t p0 = uint64_t(kM0) * c[0], p1 = uint64_t(kM1) * c[2];
    uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0);
    uint32_t hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

Status resolveDropout(const DropoutRequest &r, DropoutParams &out) {
  out = DropoutParams();
  if (!(r.p >= 0.0 && r.p < 1.0))
    return Status::invalidArgument(fmt::format(
        "'dropout_p' must be in [0, 1), got {}", r.p));
  double t = std::floor(r.p * 4294967296.0);
  out.threshold = t >= 4294967295.0 ? 0xFFFFFFFFu : uint32_t(t);
  out.scale = float(1.0 / (1.0 - r.p));
  uint64_t key = r.seed + r.offset * 0x9E3779B97F4A7C15ull;
  out.key0 = uint32_t(key);
  out.key1 = uint32_t(key >> 32);
  return Status::ok();
}

bool dropoutKeeps(const DropoutParams &d, int32_t b, int32_t h, int32_t q,
                  int32_t kv) {
  if (!d.active())
    return true;
  auto words = philox4x32_10({uint32_t(kv) >> 2, uint32_t(q), uint32_t(h),
                              uint32_t(b)},
                             {d.key0, d.key1});
  return words[uint32_t(kv) & 3] >= d.threshold;
}

} // namespace attnc::rt
