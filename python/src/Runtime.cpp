//===- Runtime.cpp - Kernels and packages for Python (no compiler) --------===//
//
// What the extension offers with the runtime alone: running CPU kernels
// (compiled by Compiler.cpp) and GPU kernels on arrays, and kernel packages
// compiled ahead of time (`attnc compile --emit=package`), whose GPU
// kernels and fp64 reference need no LLVM.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"
#include "attnc/runtime/Package.h"

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

/// Lays out `out` and `lse` beside makeArgs' views, all where q is.
rt::AttentionArgs callArgs(const Array &q, const Array &k, const Array &v,
                           const OutArray &out, const std::optional<OutArray> &lse,
                           const CallArgs &c) {
  rt::AttentionArgs a = makeArgs(q, k, v, c);
  a.out = viewOf(out, "out", whereOf(q));
  if (lse)
    a.lse = viewOf(*lse, "lse", whereOf(q));
  return a;
}

/// A CPU kernel's call: q must be on the host.
rt::AttentionArgs cpuCall(const Array &q, const Array &k, const Array &v,
                          const OutArray &out, const std::optional<OutArray> &lse,
                          const CallArgs &c, int numThreads) {
  if (whereOf(q).isCuda())
    throw Error("this is a CPU kernel; 'q' is on " + whereOf(q).str());
  rt::AttentionArgs a = callArgs(q, k, v, out, lse, c);
  a.numThreads = numThreads;
  return a;
}

/// A GPU kernel's call: q must be on the kernel's device.
rt::AttentionArgs gpuCall(const DeviceKernel &kernel, const Array &q,
                          const Array &k, const Array &v, const OutArray &out,
                          const std::optional<OutArray> &lse, const CallArgs &c) {
  Where at = whereOf(q);
  if (!at.isCuda() || at.id != kernel.device)
    throw Error("this kernel runs on cuda:" + std::to_string(kernel.device) +
                "; 'q' is on " + at.str());
  return callArgs(q, k, v, out, lse, c);
}

/// Runs `work` (a runtime call) without the GIL; its error becomes
/// attnc.Error.
template <typename Work> void released(Work work) {
  rt::Status st;
  {
    nb::gil_scoped_release release;
    st = work();
  }
  check(st);
}

rt::cuda::CUstream streamOf(uintptr_t stream) {
  return reinterpret_cast<rt::cuda::CUstream>(stream);
}

void runCpu(const rt::CpuKernel &kernel, const Array &q, const Array &k,
            const Array &v, const OutArray &out, std::optional<OutArray> lse,
            const CallArgs &c, int numThreads) {
  rt::AttentionArgs a = cpuCall(q, k, v, out, lse, c, numThreads);
  released([&] { return kernel.run(a); });
}

void runGpu(const DeviceKernel &kernel, const Array &q, const Array &k,
            const Array &v, const OutArray &out, std::optional<OutArray> lse,
            const CallArgs &c, uintptr_t stream) {
  rt::AttentionArgs a = gpuCall(kernel, q, k, v, out, lse, c);
  released([&] { return kernel.kernel->run(a, streamOf(stream)); });
}

/// Plan/run: a batch's call planned once (rt::CpuPlan), run per layer.
std::unique_ptr<rt::CpuPlan> planCpu(const rt::CpuKernel &kernel, const Array &q,
                                     const Array &k, const Array &v,
                                     const OutArray &out,
                                     std::optional<OutArray> lse,
                                     const CallArgs &c, int numThreads) {
  rt::AttentionArgs a = cpuCall(q, k, v, out, lse, c, numThreads);
  auto plan = std::make_unique<rt::CpuPlan>();
  released([&] { return kernel.plan(a, *plan); });
  return plan;
}

void runCpuPlanned(const rt::CpuKernel &kernel, const rt::CpuPlan &plan,
                   const Array &q, const Array &k, const Array &v,
                   const OutArray &out, std::optional<OutArray> lse,
                   const CallArgs &c, int numThreads) {
  rt::AttentionArgs a = cpuCall(q, k, v, out, lse, c, numThreads);
  released([&] { return kernel.run(plan, a); });
}

/// A GPU plan and the device it lives on.
struct DevicePlan {
  rt::cuda::GpuPlan plan;
  int device = 0;
};

std::unique_ptr<DevicePlan> planGpu(const DeviceKernel &kernel, const Array &q,
                                    const Array &k, const Array &v,
                                    const OutArray &out,
                                    std::optional<OutArray> lse,
                                    const CallArgs &c, uintptr_t stream) {
  rt::AttentionArgs a = gpuCall(kernel, q, k, v, out, lse, c);
  auto plan = std::make_unique<DevicePlan>();
  plan->device = kernel.device;
  released([&] { return kernel.kernel->plan(a, plan->plan, streamOf(stream)); });
  return plan;
}

void runGpuPlanned(const DeviceKernel &kernel, const DevicePlan &plan,
                   const Array &q, const Array &k, const Array &v,
                   const OutArray &out, std::optional<OutArray> lse,
                   const CallArgs &c, uintptr_t stream) {
  rt::AttentionArgs a = gpuCall(kernel, q, k, v, out, lse, c);
  released([&] { return kernel.kernel->run(plan.plan, a, streamOf(stream)); });
}

/// A kernel package read from its JSON file.
struct PackageFile {
  rt::Package package;

  static std::unique_ptr<PackageFile> load(const std::string &path) {
    auto p = std::make_unique<PackageFile>();
    check(rt::Package::read(path, p->package));
    return p;
  }

  const rt::PackageVariant &find(const std::string &variant) const {
    if (const rt::PackageVariant *v = package.find(variant))
      return *v;
    std::string names;
    for (const auto &v : package.variants)
      names += (names.empty() ? "" : ", ") + v.info.name;
    throw Error("the package has no variant '" + variant + "' (it has " +
                names + ")");
  }

  std::vector<std::string> variants() const {
    std::vector<std::string> out;
    for (const auto &v : package.variants)
      out.push_back(v.info.name);
    return out;
  }

  /// A dtype's name, parsed.
  static rt::DType dtypeNamed(const std::string &dtype) {
    auto t = rt::parseDType(dtype);
    if (!t)
      throw Error("unknown dtype '" + dtype + "'");
    return *t;
  }

  /// Picks the package's kernel for the device, the inputs and the options
  /// a call needs (dropout, key offsets), and loads it.
  std::unique_ptr<DeviceKernel> loadGpu(const std::string &variant,
                                        const std::string &dtype, int64_t d,
                                        int64_t dv, int device, bool dropout,
                                        bool keyOffsets) const {
    const rt::PackageVariant &v = find(variant);
    rt::DType t = dtypeNamed(dtype);
    const rt::cuda::Context &ctx = contextFor(device);
    const rt::GpuKernelImage *image = nullptr;
    check(rt::selectKernel(v, ctx.device().computeCapability(), t, d, dv, image,
                           {keyOffsets, dropout}));
    auto k = std::make_unique<DeviceKernel>();
    k->device = device;
    nb::gil_scoped_release release;
    check(rt::cuda::GpuKernel::load(ctx, v.info, *image, k->kernel));
    return k;
  }

  /// The package's backward kernel for the device and the inputs (a
  /// package written with --backward), loaded.
  std::unique_ptr<DeviceBackwardKernel>
  loadGpuBackward(const std::string &variant, const std::string &dtype,
                  int64_t d, int64_t dv, int device, bool dropout,
                  bool keyOffsets) const {
    const rt::PackageVariant &v = find(variant);
    rt::DType t = dtypeNamed(dtype);
    const rt::cuda::Context &ctx = contextFor(device);
    const rt::GpuBackwardImage *image = nullptr;
    check(rt::selectBackward(v, ctx.device().computeCapability(), t, d, dv,
                             image, {keyOffsets, dropout}));
    auto k = std::make_unique<DeviceBackwardKernel>();
    k->device = device;
    nb::gil_scoped_release release;
    check(rt::cuda::GpuBackwardKernel::load(ctx, v.info, *image, k->kernel));
    return k;
  }
};

} // namespace

void bindRuntime(nb::module_ &m) {
  nb::class_<CallArgs>(m, "CallArgs")
      .def(nb::init<>())
      .def_rw("scale", &CallArgs::scale)
      .def_rw("kv_lens", &CallArgs::kvLens)
      .def_rw("q_offsets", &CallArgs::qOffsets)
      .def_rw("kv_offsets", &CallArgs::kvOffsets)
      .def_rw("head_offset", &CallArgs::headOffset)
      .def_rw("head_count", &CallArgs::headCount)
      .def_rw("tensors", &CallArgs::tensors)
      .def_rw("scalars", &CallArgs::scalars)
      .def_rw("kv_indptr", &CallArgs::kvIndptr)
      .def_rw("kv_indices", &CallArgs::kvIndices)
      .def_rw("kv_last_page_len", &CallArgs::kvLastPageLen)
      .def_rw("num_splits", &CallArgs::numSplits)
      .def_rw("dropout_p", &CallArgs::dropoutP)
      .def_rw("dropout_seed", &CallArgs::dropoutSeed)
      .def_rw("dropout_offset", &CallArgs::dropoutOffset);

  nb::class_<rt::CpuPlan>(m, "CpuPlan")
      .def_prop_ro("splits", &rt::CpuPlan::splits);
  nb::class_<DevicePlan>(m, "GpuPlan")
      .def_ro("device", &DevicePlan::device)
      .def_prop_ro("splits", [](const DevicePlan &p) { return p.plan.splits(); });

  nb::class_<rt::CpuKernel>(m, "CpuKernel")
      .def("run", &runCpu, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
           "args"_a, "num_threads"_a = 0,
           "Runs attention into `out` (and `lse`); validates every argument "
           "first and touches nothing on error.")
      .def("plan", &planCpu, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
           "args"_a, "num_threads"_a = 0,
           "Validates a call and plans it once (lengths, page table, "
           "scalars, split plan): run_planned then runs it per layer.")
      .def("run_planned", &runCpuPlanned, "plan"_a, "q"_a, "k"_a, "v"_a,
           "out"_a, "lse"_a.none(), "args"_a, "num_threads"_a = 0,
           "Runs a plan with this layer's arrays, which must have the "
           "planned views' dtypes, shapes and strides.");

  nb::class_<DeviceKernel>(m, "GpuKernel")
      .def_ro("device", &DeviceKernel::device)
      .def_prop_ro("target", [](const DeviceKernel &k) {
        return k.kernel->image().target;
      })
      .def_prop_ro("name", [](const DeviceKernel &k) {
        return k.kernel->image().kernel;
      }, "The kernel's entry (its name says its options and tiles).")
      .def("run", &runGpu, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
           "args"_a, "stream"_a = 0,
           "Validates every argument, then enqueues attention on `stream` "
           "(a CUstream as an integer; 0: the null stream) and returns "
           "without waiting. Device-resident i64 captures are not "
           "range-checked.")
      .def("plan", &planGpu, "q"_a, "k"_a, "v"_a, "out"_a, "lse"_a.none(),
           "args"_a, "stream"_a = 0,
           "Validates a call and makes it resident on the device once: "
           "run_planned then only launches.")
      .def("run_planned", &runGpuPlanned, "plan"_a, "q"_a, "k"_a, "v"_a,
           "out"_a, "lse"_a.none(), "args"_a, "stream"_a = 0,
           "Enqueues a plan's kernel on `stream` with this layer's arrays "
           "(the planned views' dtypes, shapes and strides).");

  nb::class_<PackageFile>(m, "Package")
      .def_static("load", &PackageFile::load, "path"_a,
                  "Reads and checks a package written by `attnc compile "
                  "--emit=package`.")
      .def_prop_ro("variants", &PackageFile::variants)
      .def_prop_ro("source", [](const PackageFile &p) { return p.package.source; })
      .def("signature", [](const PackageFile &p, const std::string &variant) {
        return signatureOf(p.find(variant).info);
      }, "variant"_a)
      .def("gpu_kernel", &PackageFile::loadGpu, "variant"_a, "dtype"_a,
           "head_dim"_a, "v_head_dim"_a, "device"_a = 0, "dropout"_a = false,
           "key_offsets"_a = false)
      .def("gpu_backward_kernel", &PackageFile::loadGpuBackward, "variant"_a,
           "dtype"_a, "head_dim"_a, "v_head_dim"_a, "device"_a = 0,
           "dropout"_a = false, "key_offsets"_a = false)
      .def("reference", [](const PackageFile &p, const std::string &variant,
                           const Array &q, const Array &k, const Array &v,
                           const CallArgs &c) {
        return referenceOf(p.find(variant).info, q, k, v, c);
      }, "variant"_a, "q"_a, "k"_a, "v"_a, "args"_a)
      .def("out_of_range_gather", [](const PackageFile &p, const std::string &variant,
                                     const Array &q, const Array &k,
                                     const Array &v, const CallArgs &c) {
        return outOfRangeGather(p.find(variant).info, q, k, v, c);
      }, "variant"_a, "q"_a, "k"_a, "v"_a, "args"_a);

  m.def("dtype_of", [](const Array &a, const std::string &name) {
    return std::string(rt::dtypeName(dtypeOf(a.dtype(), name)));
  }, "array"_a, "name"_a);
}

} // namespace attnc::python
