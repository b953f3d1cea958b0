//===- TensorView.h - Borrowed, strided views of caller memory --*- C++ -*-===//
//
// A view never owns memory. Strides are in elements, so BHSD and BSHD
// layouts of the same data are two views with different strides; checks
// compare shapes and strides explicitly instead of reinterpreting memory.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TENSORVIEW_H
#define ATTNC_RUNTIME_TENSORVIEW_H

#include "attnc/runtime/DType.h"
#include "attnc/runtime/Status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace attnc::rt {

struct TensorView {
  void *data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides; // elements, not bytes

  /// A view with row-major (contiguous) strides.
  static TensorView contiguous(void *data, DType dtype,
                               std::vector<int64_t> shape);
  /// Row-major strides for `shape`.
  static std::vector<int64_t> rowMajorStrides(const std::vector<int64_t> &shape);

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numel() const;
  /// Element offset of a multi-index (no bounds check).
  int64_t offsetOf(const std::vector<int64_t> &index) const;
  /// "[2, 8, 128, 64]"
  static std::string formatDims(const std::vector<int64_t> &dims);
  /// The elements of a rank-4 view, widened to double, row-major (the
  /// fp64 reference's operands).
  std::vector<double> toDoubles() const;
};

/// Checks that `t`, the argument named `name`, is well-formed (non-null when
/// non-empty, strides match the rank, non-negative sizes and strides) and
/// has dtype `dtype` and shape `shape`. The message names the argument and
/// the expected versus actual value.
Status checkTensor(const TensorView &t, const std::string &name, DType dtype,
                   const std::vector<int64_t> &shape);
/// As checkTensor, without the dtype.
Status checkShape(const TensorView &t, const std::string &name,
                  const std::vector<int64_t> &shape);

/// Whether some byte lies under an element of both views (Overlap.cpp;
/// exact for array layouts, "yes" when undecided).
bool sharesMemory(const TensorView &a, const TensorView &b);
/// Whether two elements of `t` can share a byte (a zero stride, or strides
/// that do not nest): such a view cannot be written in parallel.
bool hasInternalOverlap(const TensorView &t);
/// Refuses an output that overlaps itself, another output or an input,
/// naming both.
Status checkWritesDisjoint(
    const std::vector<std::pair<const TensorView *, std::string>> &written,
    const std::vector<std::pair<const TensorView *, std::string>> &read);

} // namespace attnc::rt

#endif
