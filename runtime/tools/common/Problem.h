//===- Problem.h - Shapes, seeded inputs and options for check/bench -*- C++ -*-===//
#ifndef ATTNC_TOOLS_PROBLEM_H
#define ATTNC_TOOLS_PROBLEM_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Package.h"

#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace attnc::tools {

enum class Mode { Prefill, Decode, Chunk };

struct Shape {
  int64_t batch = 2, heads = 8, kvHeads = -1, qLen = -1, kvLen = -1;
  int64_t headDim = 64, vHeadDim = -1;
  rt::DType dtype = rt::DType::F32;
  /// Memory order of q, k, v and out, outermost first: a permutation of
  /// the letters b, h, s, d (bhsd: contiguous [B, H, S, D]; bshd: the
  /// token-major layout; d need not be innermost). `pad` elements follow
  /// each innermost row, so no view is contiguous.
  std::string layout = "bhsd";
  int64_t pad = 0;
  /// The element strides of a [B, h, len, d] view in this layout, and the
  /// elements its buffer spans.
  std::vector<int64_t> stridesFor(const std::vector<int64_t> &dims,
                                  int64_t &span) const;
  bool defaultLayout() const { return layout == "bhsd" && pad == 0; }
  /// K and V in a page pool of `pageSize` rows per page (0: contiguous):
  /// each sequence's pages drawn at random from a pool with spare pages
  /// (NaN-filled, never to be read); the pool is [pages, h, pageSize, d]
  /// in --layout's order with b standing for the page (bshd: NHD).
  int64_t pageSize = 0;
  /// KV splits (AttentionArgs::numSplits): 0 the planner's choice, 1 none.
  int64_t splits = 0;
  Mode mode = Mode::Prefill;
  uint64_t seed = 42;
  /// Per-sequence KV lengths (a ragged batch), each <= kvLen; empty: all
  /// kvLen. Queries sit at the end of each sequence's keys.
  std::vector<int64_t> kvLens;
  /// Absolute position of each sequence's first query (one value: every
  /// sequence); empty: the end of its keys (kvLen - qLen). With explicit
  /// positions Lq may exceed Lkv (FlexAttention's convention is 0).
  std::vector<int64_t> qOffsets;
  /// Absolute position of each sequence's first key (one value: every
  /// sequence); empty: 0. Captures' KV dims then span the positions, up to
  /// the last key's; the queries' default end follows the keys'.
  std::vector<int64_t> kvOffsets;
  /// The query heads are heads headOffset.. of a model with headCount
  /// (0: headOffset + heads), as the modifiers see them; captures over H
  /// and HKV take the model's sizes (AttentionArgs::headOffset).
  int64_t headOffset = 0, headCount = 0;
  /// Fills in the defaults that depend on the mode: lengths that are not
  /// multiples of any tile size.
  void resolve();
  std::string describe() const;
  /// The kernel options this shape needs (key offsets when a sequence's
  /// first key is not at position 0).
  rt::KernelNeeds needs() const {
    rt::KernelNeeds n;
    for (int64_t o : kvOffsets)
      n.keyOffsets |= o != 0;
    return n;
  }
};

const char *modeName(Mode m);

/// Owns the buffers of one attention call and the views onto them.
struct Inputs {
  std::vector<unsigned char> q, k, v, out;
  std::vector<float> lse;
  std::vector<std::vector<unsigned char>> captures;
  std::shared_ptr<rt::PageTable> pages; // with Shape::pageSize: args.pages
  rt::AttentionArgs args;
};

/// Fills Q, K, V from the seed and every capture with its default fill
/// (docs/check.md): floats uniform in [0.5, 1.5] (so log of a product of
/// fills is finite), integers as non-decreasing segment ids along the last
/// axis (document-like), bools 70% true. Scalars default to 1.0 (f32), true (bool) or
/// max(1, Lkv / 3) (i32). `sets` overrides scalars; `npy` names files for
/// q, k, v or captures.
rt::Status makeInputs(const rt::VariantInfo &v, const Shape &s,
                      const std::map<std::string, double> &sets,
                      const std::map<std::string, std::string> &npy,
                      Inputs &in);

/// "1024,4096" -> {1024, 4096}; empty with `err` set unless every item is a
/// length in [1, 2^22].
std::vector<int64_t> parseSweep(const std::string &text, std::string &err);

/// One shape per swept length T (prefill: Lq = Lkv = T; decode: Lkv = T;
/// chunk: Lkv = T and Lq = min(T, base Lq or 128)), or `base` alone when
/// `sweep` is empty; all resolved.
std::vector<Shape> sweepShapes(const Shape &base,
                               const std::vector<int64_t> &sweep);

/// Writes a [B, H, Lq, Dv] output view (any dtype and strides) as an f32
/// row-major .npy file.
rt::Status writeOutputNpy(const rt::TensorView &out, const std::string &path);

} // namespace attnc::tools

#endif
