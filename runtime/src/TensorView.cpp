//===- TensorView.cpp - Strided views and their validation ---------------===//
#include "attnc/runtime/TensorView.h"

#include <fmt/format.h>

namespace attnc::rt {

std::vector<int64_t>
TensorView::rowMajorStrides(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;)
    s[i - 1] = s[i] * shape[i];
  return s;
}

TensorView TensorView::contiguous(void *data, DType dtype,
                                  std::vector<int64_t> shape) {
  TensorView t;
  t.data = data;
  t.dtype = dtype;
  t.strides = rowMajorStrides(shape);
  t.shape = std::move(shape);
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

int64_t TensorView::offsetOf(const std::vector<int64_t> &index) const {
  int64_t off = 0;
  for (size_t i = 0; i < index.size(); ++i)
    off += index[i] * strides[i];
  return off;
}

std::string TensorView::formatDims(const std::vector<int64_t> &dims) {
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

Status checkShape(const TensorView &t, const std::string &name,
                  const std::vector<int64_t> &shape) {
  if (t.strides.size() != t.shape.size())
    return Status::invalidArgument(fmt::format(
        "'{}' has {} dimensions but {} strides", name, t.shape.size(),
        t.strides.size()));
  for (size_t i = 0; i < t.shape.size(); ++i) {
    if (t.shape[i] < 0)
      return Status::invalidArgument(fmt::format(
          "'{}' has a negative size in dimension {}: shape {}", name, i,
          TensorView::formatDims(t.shape)));
    if (t.strides[i] < 0)
      return Status::invalidArgument(fmt::format(
          "'{}' has a negative stride in dimension {}: strides {}", name, i,
          TensorView::formatDims(t.strides)));
  }
  if (t.shape != shape)
    return Status::invalidArgument(
        fmt::format("'{}' has shape {}, expected {}", name,
                    TensorView::formatDims(t.shape),
                    TensorView::formatDims(shape)));
  if (t.numel() > 0 && !t.data)
    return Status::invalidArgument(
        fmt::format("'{}' has a null data pointer", name));
  return Status::ok();
}

Status checkTensor(const TensorView &t, const std::string &name, DType dtype,
                   const std::vector<int64_t> &shape) {
  if (t.dtype != dtype)
    return Status::invalidArgument(fmt::format(
        "'{}' has dtype {}, expected {}", name, dtypeName(t.dtype),
        dtypeName(dtype)));
  return checkShape(t, name, shape);
}

std::vector<double> TensorView::toDoubles() const {
  std::vector<double> d(static_cast<size_t>(numel()));
  size_t k = 0;
  for (int64_t i0 = 0; i0 < shape[0]; ++i0)
    for (int64_t i1 = 0; i1 < shape[1]; ++i1)
      for (int64_t i2 = 0; i2 < shape[2]; ++i2)
        for (int64_t i3 = 0; i3 < shape[3]; ++i3)
          d[k++] = loadAsDouble(data, dtype,
                                i0 * strides[0] + i1 * strides[1] +
                                    i2 * strides[2] + i3 * strides[3]);
  return d;
}

} // namespace attnc::rt
