//===- Module.cpp - attnc's Python extension: compiler and CPU runtime ----===//
//
// The `attnc._attnc` module: a Program (a .attn file, compiled with the
// compiler built in), its CPU kernels, and the fp64 reference. Tensors come
// in through nanobind's ndarray (DLPack and the buffer protocol: NumPy
// arrays, torch tensors), any strides, never copied. The Python layer
// (attnc/__init__.py) allocates outputs and binds captures by name.
//
//===----------------------------------------------------------------------===//
#include "attnc/Driver/Session.h"
#include "attnc/runtime/Attention.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/variant.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <stdexcept>

namespace nb = nanobind;
using namespace nb::literals;
using attnc::rt::DType;
using attnc::rt::Status;
using attnc::rt::TensorView;

namespace {

/// A failed Status or a language error, raised as attnc.Error.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void check(const Status &s) {
  if (!s)
    throw Error(s.message());
}

using Array = nb::ndarray<nb::ro>;  // inputs: read-only views accepted
using OutArray = nb::ndarray<>;     // outputs: writable only

/// The runtime's dtype of an array, or an error naming the argument.
template <typename A> DType dtypeOf(const A &a, const std::string &name) {
  nb::dlpack::dtype t = a.dtype();
  using C = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (t.code == uint8_t(C::Float) && t.bits == 32) return DType::F32;
    if (t.code == uint8_t(C::Float) && t.bits == 16) return DType::F16;
    if (t.code == uint8_t(C::Bfloat) && t.bits == 16) return DType::BF16;
    if (t.code == uint8_t(C::Int) && t.bits == 32) return DType::I32;
    if (t.code == uint8_t(C::Int) && t.bits == 64) return DType::I64;
    if (t.code == uint8_t(C::Bool) && t.bits == 8) return DType::Bool;
  }
  throw Error("'" + name + "' has an unsupported dtype (code " +
              std::to_string(t.code) + ", " + std::to_string(t.bits) +
              " bits); expected float32, float16, bfloat16, int32, int64 or "
              "bool");
}

/// A borrowed view of a host array (the CPU kernels read host memory).
template <typename A> TensorView viewOf(const A &a, const std::string &name) {
  if (a.device_type() != nb::device::cpu::value)
    throw Error("'" + name + "' is not in host memory (device type " +
                std::to_string(a.device_type()) +
                "); the CPU kernels take CPU tensors");
  TensorView t;
  t.data = const_cast<void *>(a.data());
  t.dtype = dtypeOf(a, name);
  for (size_t d = 0; d < a.ndim(); ++d) {
    t.shape.push_back(static_cast<int64_t>(a.shape(d)));
    t.strides.push_back(static_cast<int64_t>(a.stride(d)));
  }
  return t;
}

/// What every run and the reference take besides q, k, v.
struct CallArgs {
  std::optional<double> scale;
  std::optional<std::vector<int32_t>> kvLens, qOffsets;
  std::map<std::string, Array> tensors;
  std::map<std::string, double> scalars;
};

attnc::rt::AttentionArgs makeArgs(const Array &q, const Array &k,
                                  const Array &v, const CallArgs &c) {
  attnc::rt::AttentionArgs a;
  a.q = viewOf(q, "q");
  a.k = viewOf(k, "k");
  a.v = viewOf(v, "v");
  a.scale = c.scale.value_or(0.0);
  if (c.kvLens)
    a.kvLens = *c.kvLens;
  if (c.qOffsets)
    a.qOffsets = *c.qOffsets;
  for (const auto &[name, t] : c.tensors)
    a.tensors.emplace_back(name, viewOf(t, name));
  for (const auto &[name, x] : c.scalars)
    a.scalars.emplace_back(name, x);
  return a;
}

/// A .attn file, parsed, checked and lowered once.
class Program {
public:
  explicit Program(std::unique_ptr<attnc::Session> s) : session_(std::move(s)) {}

  static std::unique_ptr<Program> load(const std::string &name,
                                       std::optional<std::string> source) {
    std::string diagnostics;
    std::unique_ptr<attnc::Session> s;
    Status st = source ? attnc::Session::loadSource(name, *source, diagnostics, s)
                       : attnc::Session::load(name, diagnostics, s);
    if (!st)
      throw Error(diagnostics.empty() ? st.message() : diagnostics);
    return std::make_unique<Program>(std::move(s));
  }

  std::vector<std::string> variants() const { return session_->variants(); }

  /// Each parameter as (name, "tensor" | "scalar", dtype, dims).
  std::vector<std::tuple<std::string, std::string, std::string,
                         std::vector<std::string>>>
  signature(const std::string &variant) const {
    attnc::rt::VariantInfo info;
    check(session_->info(variant, info));
    std::vector<std::tuple<std::string, std::string, std::string,
                           std::vector<std::string>>>
        out;
    for (const auto &p : info.params) {
      std::vector<std::string> dims;
      for (const auto &d : p.dims)
        dims.push_back(d.symbol.empty() ? std::to_string(d.size) : d.symbol);
      out.emplace_back(p.name, p.isTensor ? "tensor" : "scalar",
                       attnc::rt::dtypeName(p.dtype), dims);
    }
    return out;
  }

  std::unique_ptr<attnc::rt::CpuKernel>
  compileCpu(const std::string &variant, const std::string &dtype,
             int64_t headDim, int64_t vHeadDim) const {
    attnc::rt::KernelSpec spec;
    auto dt = attnc::rt::parseDType(dtype);
    if (!dt || (*dt != DType::F32 && *dt != DType::F16 && *dt != DType::BF16))
      throw Error("dtype must be f32, f16 or bf16, got '" + dtype + "'");
    spec.dtype = *dt;
    spec.headDim = headDim;
    spec.vHeadDim = vHeadDim;
    std::unique_ptr<attnc::rt::CpuKernel> k;
    check(session_->compileCpu(variant, spec, k));
    return k;
  }

  /// The fp64 oracle: (out [B, Hq, Lq, Dv], lse [B, Hq, Lq]) as float64.
  std::pair<nb::ndarray<nb::numpy, double>, nb::ndarray<nb::numpy, double>>
  reference(const std::string &variant, const Array &q, const Array &k,
            const Array &v, const CallArgs &c) const {
    attnc::rt::VariantInfo info;
    check(session_->info(variant, info));
    attnc::rt::AttentionArgs a = makeArgs(q, k, v, c);
    // The reference validates an output view (it writes its own arrays).
    if (q.ndim() != 4 || v.ndim() != 4)
      throw Error("q and v must be 4-d [B, H, S, D]");
    size_t B = q.shape(0), H = q.shape(1), L = q.shape(2), DV = v.shape(3);
    std::vector<unsigned char> scratch(
        std::max<size_t>(1, B * H * L * DV * attnc::rt::dtypeSize(a.q.dtype)));
    a.out = TensorView::contiguous(scratch.data(), a.q.dtype,
                                   {int64_t(B), int64_t(H), int64_t(L),
                                    int64_t(DV)});
    auto *out = new std::vector<double>(), *lse = new std::vector<double>();
    Status st;
    {
      nb::gil_scoped_release release;
      st = attnc::rt::referenceAttention(info, a, *out, *lse);
    }
    if (!st) {
      delete out;
      delete lse;
      check(st);
    }
    nb::capsule ownOut(out, [](void *p) noexcept {
      delete static_cast<std::vector<double> *>(p);
    });
    nb::capsule ownLse(lse, [](void *p) noexcept {
      delete static_cast<std::vector<double> *>(p);
    });
    return {nb::ndarray<nb::numpy, double>(out->data(), {B, H, L, DV}, ownOut),
            nb::ndarray<nb::numpy, double>(lse->data(), {B, H, L}, ownLse)};
  }

private:
  std::unique_ptr<attnc::Session> session_;
};

void runCpu(const attnc::rt::CpuKernel &kernel, const Array &q, const Array &k,
            const Array &v, const OutArray &out, std::optional<OutArray> lse,
            const CallArgs &c, int numThreads) {
  attnc::rt::AttentionArgs a = makeArgs(q, k, v, c);
  a.out = viewOf(out, "out");
  if (lse)
    a.lse = viewOf(*lse, "lse");
  a.numThreads = numThreads;
  Status st;
  {
    nb::gil_scoped_release release;
    st = kernel.run(a);
  }
  check(st);
}

} // namespace

NB_MODULE(_attnc, m) {
  m.doc() = "attnc: the attention-variant compiler and its runtime";
  nb::exception<Error>(m, "Error", PyExc_ValueError);

  nb::class_<CallArgs>(m, "CallArgs")
      .def(nb::init<>())
      .def_rw("scale", &CallArgs::scale)
      .def_rw("kv_lens", &CallArgs::kvLens)
      .def_rw("q_offsets", &CallArgs::qOffsets)
      .def_rw("tensors", &CallArgs::tensors)
      .def_rw("scalars", &CallArgs::scalars);

  nb::class_<attnc::rt::CpuKernel>(m, "CpuKernel")
      .def("run", &runCpu, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
           "args"_a, "num_threads"_a = 0,
           "Runs attention into `out` (and `lse`); validates every argument "
           "first and touches nothing on error.");

  nb::class_<Program>(m, "Program")
      .def_static("load", &Program::load, "name"_a, "source"_a.none() = nb::none(),
                  "Parses, checks and lowers a .attn file (or `source` text, "
                  "named `name` in diagnostics).")
      .def_prop_ro("variants", &Program::variants)
      .def("signature", &Program::signature, "variant"_a)
      .def("compile_cpu", &Program::compileCpu, "variant"_a, "dtype"_a,
           "head_dim"_a, "v_head_dim"_a)
      .def("reference", &Program::reference, "variant"_a, "q"_a, "k"_a, "v"_a,
           "args"_a);

  m.def("dtype_of", [](const Array &a, const std::string &name) {
    return std::string(attnc::rt::dtypeName(dtypeOf(a, name)));
  }, "array"_a, "name"_a);
}
