//===- CudaDriver.h - The CUDA Driver API, loaded at run time ---*- C++ -*-===//
//
// Nothing in attnc links against CUDA: the driver library is opened with
// dlopen and its entry points resolved by name, so everything builds and
// runs on machines without the toolkit or a driver. Every failure is a
// Status naming the call and the driver's own error name and text.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDA_CUDADRIVER_H
#define ATTNC_RUNTIME_CUDA_CUDADRIVER_H

#include "attnc/runtime/Status.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace attnc::rt::cuda {

// The few Driver API types we use, declared here so no CUDA header is
// needed (they match cuda.h's ABI).
using CUresult = int;
using CUdevice = int;
using CUcontext = struct CUctx_st *;
using CUmodule = struct CUmod_st *;
using CUfunction = struct CUfunc_st *;
using CUstream = struct CUstream_st *;
using CUevent = struct CUevent_st *;
using CUdeviceptr = unsigned long long;
using CUgraph = struct CUgraph_st *;
using CUgraphExec = struct CUgraphExec_st *;

/// cuLaunchKernelEx's configuration (cuda.h's CUlaunchAttribute: a 4-byte
/// id, padding, a 64-byte value union; CUlaunchConfig).
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value;
};
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute *attrs;
  unsigned numAttrs;
};
/// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
constexpr int kLaunchAttrProgrammaticStreamSerialization = 6;

/// The Driver API entry points attnc uses.
struct DriverApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int *);
  CUresult (*cuDeviceGetCount)(int *);
  CUresult (*cuDeviceGet)(CUdevice *, int);
  CUresult (*cuDeviceGetName)(char *, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *,
                                 void **);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned,
                             unsigned, unsigned, unsigned, unsigned, CUstream,
                             void **, void **);
  CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t);
  CUresult (*cuMemsetD8)(CUdeviceptr, unsigned char, size_t);
  CUresult (*cuMemGetInfo)(size_t *, size_t *);
  CUresult (*cuCtxSynchronize)();
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamCreate)(CUstream *, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
  CUresult (*cuEventCreate)(CUevent *, unsigned);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
  CUresult (*cuEventDestroy)(CUevent);
  // Stream capture and CUDA graphs (apps, tests and tools capture runs).
  CUresult (*cuStreamBeginCapture)(CUstream, int);
  CUresult (*cuStreamEndCapture)(CUstream, CUgraph *);
  CUresult (*cuGraphInstantiateWithFlags)(CUgraphExec *, CUgraph,
                                          unsigned long long);
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream);
  CUresult (*cuGraphExecDestroy)(CUgraphExec);
  CUresult (*cuGraphDestroy)(CUgraph);
  CUresult (*cuGetErrorName)(CUresult, const char **);
  CUresult (*cuGetErrorString)(CUresult, const char **);
  /// Optional (CUDA 12+; null when the driver lacks it): the tensor maps
  /// of TMA kernels (enums as the driver numbers them).
  CUresult (*cuTensorMapEncodeTiled)(void *map, int dtype, unsigned rank,
                                     void *global, const uint64_t *dims,
                                     const uint64_t *strides,
                                     const unsigned *box,
                                     const unsigned *elementStrides,
                                     int interleave, int swizzle,
                                     int l2Promotion, int oobFill);
  /// Optional (CUDA 11.8+): launches with attributes (the split-KV merge
  /// as a programmatic dependent launch).
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **,
                               void **);
};

/// An opened driver library with every entry point resolved.
class Driver {
public:
  ~Driver();
  /// Opens `path` (default: $ATTNC_LIBCUDA, else "libcuda.so.1"), resolves
  /// the entry points and calls cuInit. Errors say "no CUDA driver: ..."
  /// when the library or a symbol is missing.
  static Status open(std::unique_ptr<Driver> &out, const std::string &path = "");
  const DriverApi &api() const { return api_; }
  int version() const { return version_; }
  /// Number of devices ("no CUDA device" when 0 is an error for callers).
  Status deviceCount(int &count) const;
  /// "cuModuleLoadDataEx failed: CUDA_ERROR_INVALID_PTX (a PTX JIT
  /// compilation failed)" for a failed call; ok for CUDA_SUCCESS.
  Status check(CUresult r, const char *call) const;

private:
  Driver() = default;
  void *handle_ = nullptr;
  DriverApi api_{};
  int version_ = 0;
};

/// A device with its primary context made current.
class Device {
public:
  ~Device();
  /// Opens device `ordinal`: "no CUDA device" when there is none.
  static Status open(const Driver &driver, int ordinal,
                     std::unique_ptr<Device> &out);
  const std::string &name() const { return name_; }
  int computeCapability() const { return cc_; } // e.g. 90 for sm_90
  /// Shared memory a block may opt in to (bytes).
  int sharedOptIn() const { return sharedOptIn_; }
  /// Streaming multiprocessors (what the split-KV planner fills).
  int multiprocessors() const { return smCount_; }
  /// Peak memory bandwidth in GB/s from the memory clock and bus width
  /// (2 transfers per clock); 0 when the driver does not say.
  double peakMemoryGBs() const { return peakGBs_; }
  const Driver &driver() const { return *driver_; }
  /// Makes the primary context current on the calling thread (the runtime
  /// does so before each call, so any thread may run kernels).
  Status makeCurrent() const;

private:
  Device() = default;
  const Driver *driver_ = nullptr;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  std::string name_;
  int cc_ = 0;
  int sharedOptIn_ = 0;
  int smCount_ = 0;
  double peakGBs_ = 0;
};

/// A driver and one device with its primary context current: what apps
/// hold to load kernels and allocate memory.
class Context {
public:
  /// "no CUDA driver: ..." or "no CUDA device: ..." (StatusCode::Unavailable)
  /// when there is nothing to run on.
  static Status open(std::unique_ptr<Context> &out, int ordinal = 0,
                     const std::string &libraryPath = "");
  const Driver &driver() const { return *driver_; }
  const Device &device() const { return *device_; }
  /// Waits for all work of the context.
  Status synchronize() const;
  /// Makes this context current on the calling thread.
  Status makeCurrent() const { return device_->makeCurrent(); }

private:
  std::unique_ptr<Driver> driver_;
  std::unique_ptr<Device> device_;
};

} // namespace attnc::rt::cuda

#endif
