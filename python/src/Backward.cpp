//===- Backward.cpp - The backward call on arrays (runtime side) ----------===//
//
// What a backward call needs from the runtime alone: its views, the
// parameters' gradients by name, and the GPU backward kernel's binding,
// which kernels compiled here (Compiler.cpp) and kernels read from a
// package (Runtime.cpp) share.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"
#include "attnc/runtime/cuda/GpuBackward.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

namespace attnc::python {

using namespace nb::literals;

/// A backward call's views (on the device of `q`).
rt::BackwardArgs backwardArgs(const Array &q, const Array &k, const Array &v,
                              const Array &out, const Array &lse,
                              const Array &dOut, const std::optional<Array> &dLse,
                              const OutArray &dq, const OutArray &dk,
                              const OutArray &dv, const CallArgs &c) {
  Where at = whereOf(q);
  rt::BackwardArgs b;
  b.forward = makeArgs(q, k, v, c);
  b.forward.out = viewOf(out, "out", at);
  b.forward.lse = viewOf(lse, "lse", at);
  b.dOut = viewOf(dOut, "dOut", at);
  if (dLse)
    b.dLse = viewOf(*dLse, "dLse", at);
  b.dq = viewOf(dq, "dq", at);
  b.dk = viewOf(dk, "dk", at);
  b.dv = viewOf(dv, "dv", at);
  return b;
}

/// Each float parameter's gradient by name (float64 host arrays: an array
/// of the capture's shape, or a float for a scalar).
nb::dict gradientsByName(const rt::VariantInfo &info, rt::ParamGradients &grads,
                         const CallArgs &c) {
  nb::dict result;
  for (size_t i = 0; i < info.params.size(); ++i) {
    if (grads[i].empty())
      continue;
    const std::string &name = info.params[i].name;
    if (!info.params[i].isTensor) {
      result[name.c_str()] = grads[i][0];
      continue;
    }
    std::vector<size_t> shape;
    const Array &t = c.tensors.at(name);
    for (size_t d = 0; d < t.ndim(); ++d)
      shape.push_back(t.shape(d));
    auto *data = new std::vector<double>(std::move(grads[i]));
    nb::capsule own(data, [](void *p) noexcept {
      delete static_cast<std::vector<double> *>(p);
    });
    result[name.c_str()] = Float64Array(data->data(), shape.size(),
                                        shape.data(), own);
  }
  return result;
}

namespace {

/// The backward pass on CUDA arrays, on `stream` (it waits for its work):
/// writes dq, dk, dv and returns the float parameters' gradients (host).
nb::dict runGpuBackward(const DeviceBackwardKernel &kernel, const Array &q,
                        const Array &k, const Array &v, const Array &out,
                        const Array &lse, const Array &dOut,
                        std::optional<Array> dLse, const OutArray &dq,
                        const OutArray &dk, const OutArray &dv,
                        const CallArgs &c, uintptr_t stream) {
  Where at = whereOf(q);
  if (!at.isCuda() || at.id != kernel.device)
    throw Error("this backward runs on cuda:" + std::to_string(kernel.device) +
                "; 'q' is on " + at.str());
  rt::BackwardArgs b = backwardArgs(q, k, v, out, lse, dOut, dLse, dq, dk, dv, c);
  rt::ParamGradients grads;
  rt::Status st;
  {
    nb::gil_scoped_release release;
    st = kernel.kernel->run(b, &grads,
                            reinterpret_cast<rt::cuda::CUstream>(stream));
  }
  check(st);
  return gradientsByName(kernel.kernel->variant(), grads, c);
}

} // namespace

void bindBackward(nb::module_ &m) {
  nb::class_<DeviceBackwardKernel>(m, "GpuBackwardKernel")
      .def_ro("device", &DeviceBackwardKernel::device)
      .def_prop_ro("target", [](const DeviceBackwardKernel &k) {
        return k.kernel->image().target;
      })
      .def("run", &runGpuBackward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a,
           "d_out"_a, "d_lse"_a.none(), "dq"_a, "dk"_a, "dv"_a, "args"_a,
           "stream"_a = 0,
           "The backward pass on CUDA arrays, on `stream` (waits for it): "
           "writes dq, dk, dv (the kernel's dtype); returns the float "
           "parameters' gradients by name.");
}

} // namespace attnc::python
