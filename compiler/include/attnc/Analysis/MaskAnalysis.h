//===- MaskAnalysis.h - Classify mask_mod into tile classes ----*- C++ -*-===//
//
// A mask built from &&, ||, ! of comparisons between affine forms of q and
// kv (integer coefficients) plus terms that do not depend on q or kv
// (constants, scalars, b, h, gathers indexed by those) is classified per
// (Q tile, KV tile) in closed form: over a box q in [qlo, qhi], kv in
// [klo, khi] an affine form's range is known from its corners, so each
// comparison is always-true, always-false or mixed, and three-valued logic
// combines them. Anything else is data-dependent and needs a block mask.
//
// The language's i32 arithmetic wraps. A comparison is decided over a tile
// only when none of the i32 values it computes from q and kv (every sum,
// product and quotient on the way to its two sides) can leave the i32 range
// there; otherwise the tile is partial and the mask is evaluated per
// element, which wraps exactly as the reference does.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ANALYSIS_MASKANALYSIS_H
#define ATTNC_ANALYSIS_MASKANALYSIS_H

#include "attn/AttnDialect.h"
#include "attnc/runtime/KernelABI.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnc {

struct AffineForm;

/// coef * (inner / divisor) with a constant divisor > 0. Truncating division
/// by a positive constant is monotone, so the term's range over a tile is
/// the inner form's range divided: chunked-local masks (q / C == kv / C)
/// stay closed-form.
struct DivTerm {
  std::shared_ptr<AffineForm> inner;
  int64_t divisor = 1;
  int64_t coef = 1;
};

/// cq * q + ckv * kv + c0 + sum(coef * inv) + sum(div terms): the invariant
/// terms are i32 values of the mask region that do not depend on q or kv.
struct AffineForm {
  int64_t cq = 0, ckv = 0, c0 = 0;
  std::vector<std::pair<mlir::Value, int64_t>> inv;
  std::vector<DivTerm> divs;
};

/// |coefficients| * 2^31 + |constants| over a form and its division terms:
/// a bound on any value the form's range computation meets when positions
/// and invariants are i32 (exact in i64 below 2^62).
__int128 magnitudeBound(const AffineForm &f);

struct MaskNode {
  enum Kind { True, False, Atom, And, Or, Not, Invariant } kind;
  mlir::arith::CmpIPredicate pred = mlir::arith::CmpIPredicate::eq;
  AffineForm form;          // Atom: (lhs - rhs) `pred` 0
  /// Atom: the i32 values computed from q or kv on the way to lhs and rhs;
  /// the atom is decided only where all of them stay in the i32 range.
  std::vector<AffineForm> checks;
  mlir::Value value;        // Invariant: an i1 that does not depend on q, kv
  int lhs = -1, rhs = -1;   // And, Or: children; Not: lhs
  MaskNode(Kind k) : kind(k) {}
};

struct MaskAnalysis {
  rt::MaskKind kind = rt::MaskKind::None;
  std::vector<MaskNode> nodes; // Closed: the formula, root last
  bool usesBatch = false, usesHead = false;
  /// The formula in words, e.g. "(q - kv >= 0)"; "data-dependent", "none".
  std::string describe() const;
};

MaskAnalysis analyzeMask(mlir::attn::VariantOp variant);

/// Classifies one tile of a closed-form mask with concrete values for the
/// scalars and the problem sizes (both by name: `window`, `Q`, `KV`...), b
/// and h. Invariants that are not computable from
/// those (e.g. gathers) make their atoms partial. q and kv ranges are
/// inclusive.
rt::abi::TileClass classifyTile(const MaskAnalysis &m,
                                const std::map<std::string, int64_t> &scalars,
                                int64_t b, int64_t h, int64_t qlo, int64_t qhi,
                                int64_t klo, int64_t khi);

} // namespace attnc

#endif
