//===- Compiler.cpp - Compiling .attn programs from Python ----------------===//
//
// A Program is a .attn file (or source text) parsed, checked and lowered
// once by the compiler built into the extension; its variants compile to
// CPU kernels (host JIT) and to GPU kernels for a device (PTX, through the
// kernel cache). Absent from runtime-only builds.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"
#include "attnc/Driver/Session.h"
#include "attnc/runtime/cuda/GpuBackward.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

namespace attnc::python {

namespace {

using namespace nb::literals;

rt::KernelSpec specOf(const std::string &dtype, int64_t headDim,
                      int64_t vHeadDim, bool dropout = false,
                      bool keyOffsets = false) {
  auto dt = rt::parseDType(dtype);
  if (!dt || (*dt != rt::DType::F32 && *dt != rt::DType::F16 &&
              *dt != rt::DType::BF16))
    throw Error("dtype must be f32, f16 or bf16, got '" + dtype + "'");
  rt::KernelSpec spec;
  spec.dtype = *dt;
  spec.headDim = headDim;
  spec.vHeadDim = vHeadDim;
  spec.dropout = dropout;
  spec.keyOffsets = keyOffsets;
  return spec;
}

/// The device's compute capability (90 for sm_90); refuses one older than
/// sm_80.
int computeCapabilityOf(const rt::cuda::Context &ctx) {
  int cc = ctx.device().computeCapability();
  if (cc < 80)
    throw Error("attnc's GPU kernels need sm_80 or newer; " +
                ctx.device().name() + " is sm_" + std::to_string(cc));
  return cc;
}

class Program {
public:
  Program(std::unique_ptr<Session> s, std::string name)
      : session_(std::move(s)), name_(std::move(name)) {}

  static std::unique_ptr<Program> load(const std::string &name,
                                       std::optional<std::string> source) {
    std::string diagnostics;
    std::unique_ptr<Session> s;
    rt::Status st = source ? Session::loadSource(name, *source, diagnostics, s)
                           : Session::load(name, diagnostics, s);
    if (!st)
      throw Error(diagnostics.empty() ? st.message() : diagnostics);
    return std::make_unique<Program>(std::move(s), name);
  }

  std::vector<std::string> variants() const { return session_->variants(); }

  rt::VariantInfo info(const std::string &variant) const {
    rt::VariantInfo info;
    check(session_->info(variant, info));
    return info;
  }

  std::unique_ptr<rt::CpuKernel> compileCpu(const std::string &variant,
                                            const std::string &dtype,
                                            int64_t headDim,
                                            int64_t vHeadDim,
                                            bool dropout,
                     bool keyOffsets) const {
    rt::KernelSpec spec =
        specOf(dtype, headDim, vHeadDim, dropout, keyOffsets);
    std::unique_ptr<rt::CpuKernel> k;
    nb::gil_scoped_release release;
    check(session_->compileCpu(variant, spec, k));
    return k;
  }

  /// Session::classifyBlock: "empty", "partial" or "full".
  std::string blockClass(const std::string &variant,
                         const std::map<std::string, int64_t> &sizes,
                         int64_t batch, int64_t heads, int64_t qlo, int64_t qhi,
                         int64_t klo, int64_t khi) const {
    rt::abi::TileClass c;
    check(session_->classifyBlock(variant, sizes, batch, heads, qlo, qhi, klo,
                                  khi, c));
    return c == rt::abi::kEmpty ? "empty" : c == rt::abi::kFull ? "full"
                                                                 : "partial";
  }

  std::unique_ptr<rt::CpuBackwardKernel>
  compileCpuBackward(const std::string &variant, const std::string &dtype,
                     int64_t headDim, int64_t vHeadDim, bool dropout,
                     bool keyOffsets) const {
    rt::KernelSpec spec =
        specOf(dtype, headDim, vHeadDim, dropout, keyOffsets);
    std::unique_ptr<rt::CpuBackwardKernel> k;
    nb::gil_scoped_release release;
    check(session_->compileCpuBackward(variant, spec, k));
    return k;
  }

  /// PTX for the device's newest target attnc knows, loaded on the device.
  std::unique_ptr<DeviceKernel> compileGpu(const std::string &variant,
                                           const std::string &dtype,
                                           int64_t headDim, int64_t vHeadDim,
                                           int device, bool dropout,
                     bool keyOffsets) const {
    rt::KernelSpec spec =
        specOf(dtype, headDim, vHeadDim, dropout, keyOffsets);
    const rt::cuda::Context &ctx = contextFor(device);
    int cc = computeCapabilityOf(ctx);
    rt::VariantInfo vi = info(variant);
    auto k = std::make_unique<DeviceKernel>();
    k->device = device;
    nb::gil_scoped_release release;
    rt::GpuKernelImage image;
    check(session_->compileGpu(variant, spec, gpuTargetFor(cc), image));
    check(rt::cuda::GpuKernel::load(ctx, vi, image, k->kernel));
    return k;
  }

  /// The backward pass for the device's newest target, loaded on it.
  std::unique_ptr<DeviceBackwardKernel>
  compileGpuBackward(const std::string &variant, const std::string &dtype,
                     int64_t headDim, int64_t vHeadDim, int device,
                     bool dropout,
                     bool keyOffsets) const {
    rt::KernelSpec spec =
        specOf(dtype, headDim, vHeadDim, dropout, keyOffsets);
    const rt::cuda::Context &ctx = contextFor(device);
    int cc = computeCapabilityOf(ctx);
    rt::VariantInfo vi = info(variant);
    auto k = std::make_unique<DeviceBackwardKernel>();
    k->device = device;
    nb::gil_scoped_release release;
    rt::GpuBackwardImage image;
    check(session_->compileGpuBackward(variant, spec, gpuTargetFor(cc), image));
    check(rt::cuda::GpuBackwardKernel::load(ctx, vi, image, k->kernel));
    return k;
  }

  /// Every variant for every target, dtype and (D, Dv), with the
  /// configuration table's tiles (as `attnc compile --emit=package`), in
  /// one package file; with `backward`, the backward's kernels too.
  void writePackage(const std::string &path,
                    const std::vector<std::string> &targets,
                    const std::vector<std::string> &dtypes,
                    const std::vector<std::pair<int64_t, int64_t>> &dims,
                    bool backward, const std::vector<bool> &keyOffsets) const {
    if (targets.empty() || dtypes.empty() || dims.empty())
      throw Error("a package needs at least one target, dtype and head dim");
    rt::Package pkg;
    pkg.compiler = Session::compilerId();
    pkg.source = name_.substr(name_.find_last_of('/') + 1);
    for (const std::string &variant : variants()) {
      rt::PackageVariant pv;
      pv.info = info(variant);
      for (const std::string &target : targets)
        for (const std::string &dtype : dtypes)
          for (auto [d, dv] : dims)
          for (bool offsets : keyOffsets) {
            rt::KernelSpec spec = specOf(dtype, d, dv, false, offsets);
            rt::GpuKernelImage image;
            rt::Status st;
            {
              nb::gil_scoped_release release;
              st = session_->compileGpu(variant, spec, target, image);
            }
            check(st);
            pv.kernels.push_back(std::move(image));
            if (!backward)
              continue;
            rt::GpuBackwardImage bwd;
            {
              nb::gil_scoped_release release;
              st = session_->compileGpuBackward(variant, spec, target, bwd);
            }
            check(st);
            pv.backward.push_back(std::move(bwd));
          }
      pkg.variants.push_back(std::move(pv));
    }
    check(pkg.write(path));
  }

private:
  std::unique_ptr<Session> session_;
  std::string name_;
};

/// The backward pass on host arrays: writes dq, dk, dv and returns each
/// float parameter's gradient by name.
nb::dict runCpuBackward(const rt::CpuBackwardKernel &kernel, const Array &q,
                        const Array &k, const Array &v, const Array &out,
                        const Array &lse, const Array &dOut,
                        std::optional<Array> dLse, const OutArray &dq,
                        const OutArray &dk, const OutArray &dv,
                        const CallArgs &c, int numThreads) {
  Where at = whereOf(q);
  if (at.isCuda())
    throw Error("this is the CPU backward; 'q' is on " + at.str());
  rt::BackwardArgs b = backwardArgs(q, k, v, out, lse, dOut, dLse, dq, dk, dv, c);
  b.forward.numThreads = numThreads;
  rt::ParamGradients grads;
  rt::Status st;
  {
    nb::gil_scoped_release release;
    st = kernel.run(b, &grads);
  }
  check(st);
  return gradientsByName(kernel.variant(), grads, c);
}

} // namespace

void bindCompiler(nb::module_ &m) {
  nb::class_<rt::CpuBackwardKernel>(m, "CpuBackwardKernel")
      .def("run", &runCpuBackward, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a,
           "d_out"_a, "d_lse"_a.none(), "dq"_a, "dk"_a, "dv"_a, "args"_a,
           "num_threads"_a = 0,
           "The backward pass: writes dq, dk, dv; returns the float "
           "parameters' gradients by name.");
  nb::class_<Program>(m, "Program")
      .def_static("load", &Program::load, "name"_a, "source"_a.none() = nb::none(),
                  "Parses, checks and lowers a .attn file (or `source` text, "
                  "named `name` in diagnostics).")
      .def_prop_ro("variants", &Program::variants)
      .def("signature", [](const Program &p, const std::string &variant) {
        return signatureOf(p.info(variant));
      }, "variant"_a)
      .def("block_class", &Program::blockClass, "variant"_a, "sizes"_a,
           "batch"_a, "heads"_a, "qlo"_a, "qhi"_a, "klo"_a, "khi"_a,
           "The mask's class over queries [qlo, qhi] x keys [klo, khi] "
           "(positions, inclusive) for every b < batch, h < heads.")
      .def("cpu_kernel", &Program::compileCpu, "variant"_a, "dtype"_a,
           "head_dim"_a, "v_head_dim"_a, "dropout"_a = false, "key_offsets"_a = false)
      .def("cpu_backward_kernel", &Program::compileCpuBackward, "variant"_a,
           "dtype"_a, "head_dim"_a, "v_head_dim"_a, "dropout"_a = false, "key_offsets"_a = false)
      .def("gpu_kernel", &Program::compileGpu, "variant"_a, "dtype"_a,
           "head_dim"_a, "v_head_dim"_a, "device"_a = 0, "dropout"_a = false, "key_offsets"_a = false)
      .def("gpu_backward_kernel", &Program::compileGpuBackward, "variant"_a,
           "dtype"_a, "head_dim"_a, "v_head_dim"_a, "device"_a = 0,
           "dropout"_a = false, "key_offsets"_a = false)
      .def("write_package", &Program::writePackage, "path"_a, "targets"_a,
           "dtypes"_a, "head_dims"_a, "backward"_a = false,
           "key_offsets"_a = std::vector<bool>{false})
      .def("reference", [](const Program &p, const std::string &variant,
                           const Array &q, const Array &k, const Array &v,
                           const CallArgs &c) {
        return referenceOf(p.info(variant), q, k, v, c);
      }, "variant"_a, "q"_a, "k"_a, "v"_a, "args"_a)
      .def("out_of_range_gather", [](const Program &p, const std::string &variant,
                                     const Array &q, const Array &k,
                                     const Array &v, const CallArgs &c) {
        return outOfRangeGather(p.info(variant), q, k, v, c);
      }, "variant"_a, "q"_a, "k"_a, "v"_a, "args"_a);
}

} // namespace attnc::python
