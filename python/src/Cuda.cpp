//===- Cuda.cpp - CUDA devices and device arrays for Python ---------------===//
//
// One context per device ordinal (the primary context, the one torch uses),
// opened through the runtime's dlopen'ed driver ($ATTNC_LIBCUDA picks
// another libcuda, such as the emulator). Device arrays made here are
// DLPack arrays that own their memory: what NumPy users (and the tests, on
// the emulator) use where torch users have CUDA tensors.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <climits>
#include <cstdint>
#include <mutex>

namespace attnc::python {

using rt::cuda::Context;
using rt::cuda::DeviceBuffer;

const Context &contextFor(int ordinal) {
  static std::mutex mu;
  // Never destroyed: device arrays and kernels may outlive the module.
  static auto *contexts = new std::map<int, std::unique_ptr<Context>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = contexts->find(ordinal);
  if (it != contexts->end())
    return *it->second;
  std::unique_ptr<Context> ctx;
  check(Context::open(ctx, ordinal));
  return *contexts->emplace(ordinal, std::move(ctx)).first->second;
}

namespace {

/// The bytes of an array of `shape`, or an error when that many bytes (or
/// elements) do not fit in an int64 (a wrapped size would allocate a tiny
/// buffer under a huge array).
size_t byteSize(const std::vector<size_t> &shape, rt::DType t) {
  uint64_t n = rt::dtypeSize(t);
  bool empty = false;
  bool overflow = false;
  for (size_t s : shape) {
    empty = empty || s == 0;
    overflow = overflow || __builtin_mul_overflow(n, uint64_t(s), &n);
  }
  if (!empty && (overflow || n > uint64_t(INT64_MAX))) {
    std::string dims;
    for (size_t s : shape)
      dims += (dims.empty() ? "" : ", ") + std::to_string(s);
    throw Error("'shape' [" + dims + "] of " + std::string(rt::dtypeName(t)) +
                " is more than 2^63 bytes");
  }
  return empty ? 0 : size_t(n);
}

/// A DLPack array (nanobind's: __dlpack__ and __dlpack_device__ only;
/// attnc/cuda.py wraps it with a shape and a dtype).
using RawArray = nb::ndarray<nb::array_api>;

/// An uninitialized C-contiguous device array that owns its memory.
RawArray deviceEmpty(const std::vector<size_t> &shape, const std::string &dtype,
                     int device) {
  auto t = rt::parseDType(dtype);
  if (!t)
    throw Error("unknown dtype '" + dtype +
                "' (f32, f16, bf16, i32, i64 or bool)");
  auto buf = std::make_unique<DeviceBuffer>();
  check(DeviceBuffer::allocate(contextFor(device), byteSize(shape, *t), *buf));
  void *data = buf->data();
  nb::capsule owner(buf.release(), [](void *p) noexcept {
    delete static_cast<DeviceBuffer *>(p);
  });
  return RawArray(data, shape.size(), shape.data(), owner, nullptr,
                  dlpackOf(*t), nb::device::cuda::value, device);
}

bool contiguous(const Array &a) {
  int64_t expect = 1;
  for (size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expect)
      return false;
    expect *= static_cast<int64_t>(a.shape(d));
  }
  return true;
}

/// A device copy of a C-contiguous host array.
RawArray toDevice(const Array &host, int device) {
  if (whereOf(host).isCuda())
    throw Error("to_device takes a host array; this one is on " +
                whereOf(host).str());
  if (!contiguous(host))
    throw Error("to_device takes a C-contiguous array (numpy.ascontiguousarray)");
  rt::DType t = dtypeOf(host.dtype(), "array");
  std::vector<size_t> shape(host.shape_ptr(), host.shape_ptr() + host.ndim());
  RawArray out = deviceEmpty(shape, std::string(rt::dtypeName(t)), device);
  const Context &ctx = contextFor(device);
  check(ctx.makeCurrent());
  check(ctx.driver().check(
      ctx.driver().api().cuMemcpyHtoD(
          reinterpret_cast<rt::cuda::CUdeviceptr>(out.data()), host.data(),
          byteSize(shape, t)),
      "cuMemcpyHtoD"));
  return out;
}

/// A host copy of a C-contiguous device array, after the device's work so
/// far is done.
RawArray toHost(const Array &dev) {
  Where w = whereOf(dev);
  if (!w.isCuda())
    throw Error("to_host takes a CUDA array; this one is on " + w.str());
  if (!contiguous(dev))
    throw Error("to_host takes a C-contiguous device array");
  rt::DType t = dtypeOf(dev.dtype(), "array");
  std::vector<size_t> shape(dev.shape_ptr(), dev.shape_ptr() + dev.ndim());
  size_t bytes = byteSize(shape, t);
  auto host = std::make_unique<std::vector<unsigned char>>(std::max<size_t>(bytes, 1));
  const Context &ctx = contextFor(w.id);
  check(ctx.makeCurrent());
  check(ctx.synchronize());
  check(ctx.driver().check(
      ctx.driver().api().cuMemcpyDtoH(
          host->data(), reinterpret_cast<rt::cuda::CUdeviceptr>(dev.data()), bytes),
      "cuMemcpyDtoH"));
  void *data = host->data();
  nb::capsule owner(host.release(), [](void *p) noexcept {
    delete static_cast<std::vector<unsigned char> *>(p);
  });
  return RawArray(data, shape.size(), shape.data(), owner, nullptr,
                  dlpackOf(t), nb::device::cpu::value);
}

} // namespace

void bindCuda(nb::module_ &m) {
  using namespace nb::literals;
  m.def("cuda_device", [](int device) {
    const Context &ctx = contextFor(device);
    return std::make_tuple(ctx.device().name(), ctx.device().computeCapability());
  }, "device"_a = 0,
  "(name, compute capability) of CUDA device `device`; opens it (the "
  "primary context) on first use. attnc.Error when there is no driver or "
  "device.");
  m.def("cuda_empty", &deviceEmpty, "shape"_a, "dtype"_a, "device"_a = 0,
        "An uninitialized C-contiguous device array (a DLPack array that "
        "owns its memory).");
  m.def("to_device", &toDevice, "array"_a, "device"_a = 0,
        "A device copy of a C-contiguous host array.");
  m.def("to_host", &toHost, "array"_a,
        "A host copy (a DLPack array) of a C-contiguous device array, once "
        "the device's work so far is done.");
  m.def("cuda_synchronize", [](int device) {
    const Context &ctx = contextFor(device);
    nb::gil_scoped_release release;
    check(ctx.makeCurrent());
    check(ctx.synchronize());
  }, "device"_a = 0, "Waits for all work on CUDA device `device`.");
}

} // namespace attnc::python
