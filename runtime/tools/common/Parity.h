//===- Parity.h - A backend's output against the fp64 reference -*- C++ -*-===//
//
// Shared by `attnc check` (CPU JIT, or CUDA through the compiler) and
// `attnc-run` (packages, runtime only): the suite of shapes, the tolerances
// and the comparison, so every backend is held to the same matrix.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TOOLS_PARITY_H
#define ATTNC_TOOLS_PARITY_H

#include "Problem.h"

#include "attnc/runtime/Backward.h"

#include <string>
#include <vector>

namespace attnc::tools {

/// max_abs tolerances vs fp64: f32 1e-5, f16 2e-3, bf16 1.6e-2.
double tolerance(rt::DType t);

struct Row {
  std::string name;
  double maxAbs = 0, meanAbs = 0, tol = 0;
  bool pass = false;
  std::string note;
};

/// A failed row (no numbers) with the reason.
Row failedRow(std::string name, rt::DType dtype, const std::string &why);

/// What f32 scores of a row can move its output by, given its rowScale
/// (referenceAttention): 2 u of it (u = 2^-24: the rounding of each score
/// and of score x log2(e)).
double scoreRoundingTolerance(double rowScale);

/// Compares `in.args.out` and `in.lse` (already computed by a backend) with
/// the fp64 reference on the same inputs: each output element within the
/// larger of the dtype's tolerance and scoreRoundingTolerance of its row
/// (row.tol is the largest row tolerance), the LSE within the dtype's
/// tolerance relative to max(1, |LSE|). A row outside that is compared
/// again with each tolerance widened by 4x the distance of an f32
/// computation (f32 dot products: rt::ReferenceRounding::DotsAndMods) from
/// the fp64 reference: modifiers that amplify rounding (1 / score) move
/// every f32 kernel that far. With `checked`, notes the first gather
/// outside its tensor.
Row compareWithReference(const rt::VariantInfo &v, std::string name,
                         const Inputs &in, bool checked);

/// The backward's tolerance, relative to 1 + the largest |gradient| of a
/// kind (the gradients sum over every key or query): f32 1e-4, f16 and
/// bf16 1e-3, plus half an ulp for 16-bit dq, dk and dv (2^-8 bf16, 2^-11
/// f16). The reference takes D = rowsum(dO * O) from the forward kernel's
/// O, as the kernel does, so this is the backward's own error.
double backwardTolerance(rt::DType t);

/// A backward call on a case whose forward has run: dO seeded from the
/// shape's seed + 1 in its dtype, dq, dk and dv contiguous in `gradType`.
struct BackwardCase {
  std::vector<unsigned char> dOut, dq, dk, dv;
  rt::BackwardArgs args;
  rt::DType gradType = rt::DType::F32;
};
void makeBackwardCase(const Inputs &in, const Shape &shape, rt::DType gradType,
                      BackwardCase &out);

/// Every gradient of `c` (and `params`) against the fp64 backward; the row
/// notes the worst kind.
Row compareBackwardWithReference(const rt::VariantInfo &info, std::string name,
                                 const Inputs &in, const BackwardCase &c,
                                 const rt::ParamGradients &params);

/// {MHA 8/8, GQA 8/2, MQA 8/1} x {prefill, decode, chunk} x `dtypes`, plus
/// GQA 6:1, D=80, Dv != Dqk, BSHD and an f16 chunk; lengths are never
/// multiples of a tile.
std::vector<Shape> suiteShapes(const Shape &base,
                               const std::vector<rt::DType> &dtypes);

/// The GPU parity matrix: `dtypes` x head dims {64, 80, 128, 64:32} x
/// {prefill, decode, chunk} x {MHA 8/8, GQA 8/2, MQA 8/1}. Each case also
/// takes the next of a rotation of lengths (1, odd lengths such as 77 and
/// 129, and 1000 for decode and chunks), of layouts (BHSD, BSHD) and of
/// ragged batches (three sequences of different KV lengths), so that every
/// value of those meets every dtype, head dim and mode somewhere.
std::vector<Shape> matrixShapes(const Shape &base,
                                const std::vector<rt::DType> &dtypes);

/// What --matrix, --suite or neither (the one shape of the options) asks
/// for.
std::vector<Shape> shapesFor(bool matrix, bool suite, const Shape &base,
                             const std::vector<rt::DType> &dtypes);

/// The table (case | max_abs | mean_abs | tolerance | result) and a
/// summary line; returns the number of failures.
int printRows(const std::vector<Row> &rows);

} // namespace attnc::tools

#endif
