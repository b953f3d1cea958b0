//===- Npy.h - NumPy .npy files for inputs and outputs ----------*- C++ -*-===//
#ifndef ATTNC_RUNTIME_NPY_H
#define ATTNC_RUNTIME_NPY_H

#include "attnc/runtime/DType.h"
#include "attnc/runtime/Status.h"

#include <string>
#include <vector>

namespace attnc::rt {

/// A C-ordered array read from or written to a .npy file (format 1.0/2.0).
/// Supported: <f4 <f2 <i4 <i8 |b1 (f32 f16 i32 i64 bool). NumPy has no
/// bfloat16: write bf16 data as f32.
struct NpyArray {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<unsigned char> bytes;
};

Status readNpy(const std::string &path, NpyArray &out);
/// The same, from the bytes of a file (`origin` names it in errors).
Status parseNpy(const std::string &bytes, const std::string &origin,
                NpyArray &out);
Status writeNpy(const std::string &path, const NpyArray &a);

} // namespace attnc::rt

#endif
