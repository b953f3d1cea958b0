//===- Dropout.h - Attention dropout: the keep mask as a pure function ------===//
//
// Dropout on the attention probabilities (FlashAttention-2's and SDPA's
// `dropout_p`): after the softmax, each probability P[b,h,q,kv] is kept
// and multiplied by 1 / (1 - p), or dropped to 0. Whether a pair is kept
// is a pure function of (key, b, h, q, kv), so every kernel form, tile
// shape, thread count and KV split draws the same mask, the backward
// regenerates it instead of storing it, and the fp64 reference reproduces
// it bit for bit.
//
// The generator is Philox 4x32-10 (Salmon et al., SC'11; Random123's
// constants) keyed by the 64-bit key = seed + offset * 0x9E3779B97F4A7C15
// (mod 2^64; key word 0 is its low half). Pair (b, h, q, kv) reads word
// kv % 4 of the block at counter (kv / 4, q, h, b), the positions as the
// modifiers see them (h the query head, q the absolute query position):
// four neighbouring keys share one block. The pair is kept iff that word
// is >= threshold = min(floor(p * 2^32), 2^32 - 1), so the keep
// probability is 1 - p to within 2^-32.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_DROPOUT_H
#define ATTNC_RUNTIME_DROPOUT_H

#include "attnc/runtime/Status.h"

#include <array>
#include <cstdint>

namespace attnc::rt {

/// What a caller asks for: p in [0, 1), and the stream's seed and offset.
struct DropoutRequest {
  double p = 0.0;
  uint64_t seed = 0;
  uint64_t offset = 0;
};

/// What the kernels read (KernelABI.h's dropout slots).
struct DropoutParams {
  uint32_t threshold = 0; // a word below it drops the pair
  float scale = 1.0f;     // a kept pair's factor, 1 / (1 - p) in f32
  uint32_t key0 = 0, key1 = 0;
  bool active() const { return threshold != 0; }
};

/// Philox 4x32-10 of `counter` under `key`.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter,
                                      std::array<uint32_t, 2> key);

/// Checks p (finite, in [0, 1)) and derives the kernels' parameters.
Status resolveDropout(const DropoutRequest &request, DropoutParams &out);

/// Whether pair (b, h, q, kv) is kept.
bool dropoutKeeps(const DropoutParams &d, int32_t b, int32_t h, int32_t q,
                  int32_t kv);

} // namespace attnc::rt

#endif
