//===- Bindings.h - What the extension's files share -----------*- C++ -*-===//
//
// attnc._attnc is built from a file per job: Arrays.cpp (arrays in, errors
// out, the fp64 reference), Runtime.cpp (CPU and GPU kernels, packages),
// Cuda.cpp (devices and device arrays), Compiler.cpp (compiling .attn,
// only when the compiler is built in) and Module.cpp (the module).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_PYTHON_BINDINGS_H
#define ATTNC_PYTHON_BINDINGS_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/cuda/GpuBackward.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace attnc::python {

namespace nb = nanobind;

/// A failed Status or a language error, raised as attnc.Error.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Raises `s` as attnc.Error unless it is ok.
void check(const rt::Status &s);

using Array = nb::ndarray<nb::ro>; // inputs: read-only views accepted
using OutArray = nb::ndarray<>;    // outputs: writable only

/// Where an array lives, in DLPack's terms: (kDLCPU, 0) or (kDLCUDA, n).
struct Where {
  int type = nb::device::cpu::value;
  int id = 0;
  bool isCuda() const { return type == nb::device::cuda::value; }
  bool operator==(const Where &o) const {
    return type == o.type && (type == nb::device::cpu::value || id == o.id);
  }
  std::string str() const;
};

template <typename A> Where whereOf(const A &a) {
  return Where{a.device_type(), a.device_id()};
}

/// The runtime's dtype of a DLPack dtype, or an error naming the argument.
rt::DType dtypeOf(nb::dlpack::dtype t, const std::string &name);
nb::dlpack::dtype dlpackOf(rt::DType t);

/// A borrowed view of an array that must live at `expected` (the query's
/// place): the CPU kernels read host memory, the GPU kernels device memory.
template <typename A>
rt::TensorView viewOf(const A &a, const std::string &name,
                      const Where &expected) {
  Where w = whereOf(a);
  if (!(w == expected))
    throw Error("'" + name + "' is on " + w.str() + " but the query is on " +
                expected.str() + "; every tensor of a call must be on one device");
  if (!w.isCuda() && w.type != nb::device::cpu::value)
    throw Error("'" + name + "' is on " + w.str() +
                "; attnc takes CPU and CUDA arrays");
  rt::TensorView t;
  t.data = const_cast<void *>(static_cast<const void *>(a.data()));
  t.dtype = dtypeOf(a.dtype(), name);
  for (size_t d = 0; d < a.ndim(); ++d) {
    t.shape.push_back(static_cast<int64_t>(a.shape(d)));
    t.strides.push_back(static_cast<int64_t>(a.stride(d)));
  }
  return t;
}

/// What every run and the reference take besides q, k, v.
struct CallArgs {
  std::optional<double> scale;
  std::optional<std::vector<int32_t>> kvLens, qOffsets, kvOffsets;
  int32_t headOffset = 0, headCount = 0; // AttentionArgs'
  std::map<std::string, Array> tensors;
  std::map<std::string, double> scalars;
  /// K/V in pages (PageTable.h; the page size is k's dim 2): FlashInfer's
  /// kv_indptr, kv_indices, kv_last_page_len.
  std::optional<std::vector<int32_t>> kvIndptr, kvIndices, kvLastPageLen;
  mutable rt::PageTable table; // what makeArgs points the call to
  int numSplits = 0;           // AttentionArgs::numSplits
  double dropoutP = 0.0;       // AttentionArgs::dropout
  uint64_t dropoutSeed = 0, dropoutOffset = 0;
};

/// The runtime's arguments; every array must be where q is.
rt::AttentionArgs makeArgs(const Array &q, const Array &k, const Array &v,
                           const CallArgs &c);

/// Each parameter as (name, "tensor" | "scalar", dtype, dims).
using Signature = std::vector<
    std::tuple<std::string, std::string, std::string, std::vector<std::string>>>;
Signature signatureOf(const rt::VariantInfo &info);

/// The fp64 oracle over host arrays: (out [B, Hq, Lq, Dv], lse [B, Hq, Lq]).
using Float64Array = nb::ndarray<nb::numpy, double>;
/// With `violation`, the first gather outside its tensor is recorded there
/// (the checked mode).
std::pair<Float64Array, Float64Array>
referenceOf(const rt::VariantInfo &info, const Array &q, const Array &k,
            const Array &v, const CallArgs &c,
            rt::GatherViolation *violation = nullptr);

/// The checked mode: the first gather of the call's modifiers outside its
/// tensor, as (capture, index, shape), or None (runs the fp64 oracle).
nb::object outOfRangeGather(const rt::VariantInfo &info, const Array &q,
                            const Array &k, const Array &v, const CallArgs &c);

/// A GPU kernel loaded on one device (the context it was loaded into).
struct DeviceKernel {
  std::unique_ptr<rt::cuda::GpuKernel> kernel;
  int device = 0;
};

/// The GPU backward of a variant on CUDA device `device` (compiled, or read
/// from a package).
struct DeviceBackwardKernel {
  std::unique_ptr<rt::cuda::GpuBackwardKernel> kernel;
  int device = 0;
};

/// The context of CUDA device `ordinal`, opened on first use and kept for
/// the life of the process (kernels and device arrays point to it).
const rt::cuda::Context &contextFor(int ordinal);

/// A backward call's views (on the device of `q`), and the float
/// parameters' gradients by name (float64 host arrays: an array of the
/// capture's shape, or a float for a scalar). Backward.cpp.
rt::BackwardArgs backwardArgs(const Array &q, const Array &k, const Array &v,
                              const Array &out, const Array &lse,
                              const Array &dOut, const std::optional<Array> &dLse,
                              const OutArray &dq, const OutArray &dk,
                              const OutArray &dv, const CallArgs &c);
nb::dict gradientsByName(const rt::VariantInfo &info, rt::ParamGradients &grads,
                         const CallArgs &c);

void bindRuntime(nb::module_ &m);
void bindBackward(nb::module_ &m);
void bindCuda(nb::module_ &m);
void bindCompiler(nb::module_ &m);

} // namespace attnc::python

#endif
