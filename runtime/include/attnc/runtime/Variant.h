//===- Variant.h - A compiled variant's signature and program --*- C++ -*-===//
//
// What the compiler hands the runtime about a variant, in a plain text form
// (the "modifier program") that the runtime parses without LLVM:
//
//   variant synaptic
//   param qamp tensor f32 B H Q
//   param barrier scalar f32
//   mask closed            (or: none | data)
//   score
//     %0 = gather qamp %b %h %q
//     %1 = arith.mulf %0 %score
//     yield %1
//   mask
//     %0 = arith.cmpi sge %q %kv
//     yield %0
//   grad
//     %0 = upstream
//     %1 = gather qamp %b %h %q
//     %2 = arith.mulf %0 %score
//     accumulate qamp %b %h %q %2
//     %3 = arith.mulf %0 %1
//     yield %3
//   end
//
// Values are `%score %b %h %q %kv` (modifier arguments) or `%N`; every
// instruction is `%N = OP [ATTR] OPERANDS...` with a type-directed meaning
// documented in ModProgram.cpp. The optional `grad` section is score_mod's
// derivative (the compiler's score_grad region): `upstream` reads the
// gradient dy flowing into score_mod's result, the section yields dy times
// the derivative with respect to score, and `accumulate P INDICES... V`
// adds V into float parameter P's gradient. The runtime evaluates it in fp64 for the
// reference, and uses the signature to bind captures and scalars by name.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_VARIANT_H
#define ATTNC_RUNTIME_VARIANT_H

#include "attnc/runtime/DType.h"
#include "attnc/runtime/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnc::rt {

/// One dimension of a captured tensor: a symbol (B, H, HKV, Q, KV, or a
/// free name) or a fixed size.
struct DimSpec {
  std::string symbol; // empty when fixed
  int64_t size = 0;
};

struct ParamSpec {
  std::string name;
  bool isTensor = false;
  DType dtype = DType::F32; // element type (tensor) or scalar type (f32/i32)
  std::vector<DimSpec> dims;
};

/// How the mask is classified into tiles.
enum class MaskKind {
  None,   // no mask: every tile is full
  Closed, // affine: classified per tile in closed form, no per-call pass
  Data,   // data-dependent: a block mask is built by evaluating it
};

class ModProgram; // defined in ModProgram.cpp

struct VariantInfo {
  std::string name;
  std::vector<ParamSpec> params;
  MaskKind maskKind = MaskKind::None;
  bool maskUsesBatch = true; // whether the mask reads `b` (block-mask shape)
  bool maskUsesHead = true;  // whether the mask reads `h`
  std::shared_ptr<const ModProgram> program;

  const ParamSpec *findParam(const std::string &name) const;
  /// Whether the program has score_mod's derivative (a `grad` section).
  bool hasScoreGrad() const;
  /// The text form (parse(toText()) round-trips).
  std::string text;

  /// Parses the text form. Errors name the line.
  static Status parse(const std::string &text, VariantInfo &out);
};

/// The values a modifier reads at run time: captured tensors and scalars,
/// indexed like VariantInfo::params, then the problem sizes
/// (kProblemSizeNames) as i32 scalars where the caller binds them
/// (resolveProblem does; a size not bound reads as 0).
struct BoundParam {
  const void *data = nullptr;      // tensors
  DType dtype = DType::F32;
  std::vector<int64_t> shape;      // tensors
  std::vector<int64_t> strides;    // tensors, elements
  double scalar = 0.0;             // scalars
};

/// The fixed problem sizes a modifier can read (`attn.size`), in the order
/// they follow the declared parameters in a bound parameter list (batch,
/// query heads, key/value heads, query length, key/value capacity). Free
/// dimensions are read from the shape of a capture that names them.
inline constexpr const char *kProblemSizeNames[] = {"B", "H", "HKV", "Q", "KV"};

/// A gather outside its tensor, as seen by the checked mode.
struct GatherViolation {
  std::string capture;
  std::vector<int64_t> index;
  std::vector<int64_t> shape;
};

/// Evaluates score_mod / mask_mod in fp64 (integers in wrapping i32).
/// Out-of-range gathers are clamped, as the kernels do; the first one is
/// recorded in `violation` when it is non-null. Float results are rounded
/// to f32 after every op, as the kernels compute, unless `exact` (for
/// finite differences of the program's own function).
double evalScoreMod(const VariantInfo &v, const std::vector<BoundParam> &params,
                    double score, int32_t b, int32_t h, int32_t q, int32_t kv,
                    GatherViolation *violation = nullptr, bool exact = false);

/// Gradients of a variant's parameters, indexed like VariantInfo::params:
/// for a float parameter, dense row-major over its bound shape (a scalar
/// has one element); empty for the others.
using ParamGradients = std::vector<std::vector<double>>;

/// Zero gradients for every float parameter of `v` (sized by the bound
/// shapes in `params`); the others empty. The CPU backward kernels lay
/// their per-thread buffers out the same way, concatenated in parameter
/// order (KernelABI.h).
ParamGradients zeroParamGradients(const VariantInfo &v,
                                  const std::vector<BoundParam> &params);

/// Evaluates the `grad` section (v.hasScoreGrad() must hold): returns dy *
/// d score_mod / d score at (score, b, h, q, kv) and, when `grads` is not
/// null, adds dy * d score_mod / d p into the gradient of every float
/// parameter p it read (at the clamped indices the forward read); `grads`
/// is empty (sized here) or as zeroParamGradients made it.
double evalScoreGrad(const VariantInfo &v, const std::vector<BoundParam> &params,
                     double score, int32_t b, int32_t h, int32_t q, int32_t kv,
                     double dy, ParamGradients *grads, bool exact = false);
bool evalMaskMod(const VariantInfo &v, const std::vector<BoundParam> &params,
                 int32_t b, int32_t h, int32_t q, int32_t kv,
                 GatherViolation *violation = nullptr);

} // namespace attnc::rt

#endif
