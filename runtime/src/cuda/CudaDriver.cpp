//===- CudaDriver.cpp - dlopen'ed CUDA Driver API ------------------------===//
#include "attnc/runtime/cuda/CudaDriver.h"

#include <fmt/format.h>

#include <dlfcn.h>

#include <cstdlib>

namespace attnc::rt::cuda {

namespace {
constexpr CUresult kSuccess = 0;
constexpr int kAttrCcMajor = 75; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
constexpr int kAttrCcMinor = 76;
// CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
constexpr int kAttrSharedOptIn = 97;
constexpr int kAttrMultiprocessors = 16; // CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
// CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE (kHz), _GLOBAL_MEMORY_BUS_WIDTH (bits)
constexpr int kAttrMemoryClock = 36, kAttrMemoryBusWidth = 37;

template <typename F> bool resolve(void *h, const char *name, F &fn) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  return fn != nullptr;
}
} // namespace

Driver::~Driver() {
  if (handle_)
    dlclose(handle_);
}

Status Driver::check(CUresult r, const char *call) const {
  if (r == kSuccess)
    return Status::ok();
  const char *name = nullptr, *text = nullptr;
  if (api_.cuGetErrorName)
    api_.cuGetErrorName(r, &name);
  if (api_.cuGetErrorString)
    api_.cuGetErrorString(r, &text);
  return Status::unavailable(fmt::format("{} failed: {} ({})", call,
                                         name ? name : fmt::format("error {}", r),
                                         text ? text : "no description"));
}

Status Driver::open(std::unique_ptr<Driver> &out, const std::string &pathIn) {
  std::string path = pathIn;
  if (path.empty()) {
    const char *env = std::getenv("ATTNC_LIBCUDA");
    path = env && *env ? env : "libcuda.so.1";
  }
  auto d = std::unique_ptr<Driver>(new Driver());
  d->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!d->handle_) {
    const char *why = dlerror();
    return Status::unavailable(fmt::format(
        "no CUDA driver: cannot open '{}' ({})", path, why ? why : "unknown"));
  }
  DriverApi &a = d->api_;
  void *h = d->handle_;
  struct Entry {
    const char *name;
    bool ok;
  };
  // The _v2 names are the ABI the current cuda.h maps these calls to.
  Entry entries[] = {
      {"cuInit", resolve(h, "cuInit", a.cuInit)},
      {"cuDriverGetVersion", resolve(h, "cuDriverGetVersion", a.cuDriverGetVersion)},
      {"cuDeviceGetCount", resolve(h, "cuDeviceGetCount", a.cuDeviceGetCount)},
      {"cuDeviceGet", resolve(h, "cuDeviceGet", a.cuDeviceGet)},
      {"cuDeviceGetName", resolve(h, "cuDeviceGetName", a.cuDeviceGetName)},
      {"cuDeviceGetAttribute", resolve(h, "cuDeviceGetAttribute", a.cuDeviceGetAttribute)},
      {"cuDevicePrimaryCtxRetain", resolve(h, "cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease_v2", resolve(h, "cuDevicePrimaryCtxRelease_v2", a.cuDevicePrimaryCtxRelease)},
      {"cuCtxSetCurrent", resolve(h, "cuCtxSetCurrent", a.cuCtxSetCurrent)},
      {"cuModuleLoadDataEx", resolve(h, "cuModuleLoadDataEx", a.cuModuleLoadDataEx)},
      {"cuModuleUnload", resolve(h, "cuModuleUnload", a.cuModuleUnload)},
      {"cuModuleGetFunction", resolve(h, "cuModuleGetFunction", a.cuModuleGetFunction)},
      {"cuFuncSetAttribute", resolve(h, "cuFuncSetAttribute", a.cuFuncSetAttribute)},
      {"cuLaunchKernel", resolve(h, "cuLaunchKernel", a.cuLaunchKernel)},
      {"cuMemAlloc_v2", resolve(h, "cuMemAlloc_v2", a.cuMemAlloc)},
      {"cuMemFree_v2", resolve(h, "cuMemFree_v2", a.cuMemFree)},
      {"cuMemcpyHtoD_v2", resolve(h, "cuMemcpyHtoD_v2", a.cuMemcpyHtoD)},
      {"cuMemcpyDtoH_v2", resolve(h, "cuMemcpyDtoH_v2", a.cuMemcpyDtoH)},
      {"cuMemsetD8_v2", resolve(h, "cuMemsetD8_v2", a.cuMemsetD8)},
      {"cuMemGetInfo_v2", resolve(h, "cuMemGetInfo_v2", a.cuMemGetInfo)},
      {"cuCtxSynchronize", resolve(h, "cuCtxSynchronize", a.cuCtxSynchronize)},
      {"cuStreamSynchronize", resolve(h, "cuStreamSynchronize", a.cuStreamSynchronize)},
      {"cuStreamCreate", resolve(h, "cuStreamCreate", a.cuStreamCreate)},
      {"cuStreamDestroy_v2", resolve(h, "cuStreamDestroy_v2", a.cuStreamDestroy)},
      {"cuMemcpyHtoDAsync_v2", resolve(h, "cuMemcpyHtoDAsync_v2", a.cuMemcpyHtoDAsync)},
      {"cuEventCreate", resolve(h, "cuEventCreate", a.cuEventCreate)},
      {"cuEventRecord", resolve(h, "cuEventRecord", a.cuEventRecord)},
      {"cuEventSynchronize", resolve(h, "cuEventSynchronize", a.cuEventSynchronize)},
      {"cuEventElapsedTime", resolve(h, "cuEventElapsedTime", a.cuEventElapsedTime)},
      {"cuEventDestroy_v2", resolve(h, "cuEventDestroy_v2", a.cuEventDestroy)},
      {"cuStreamBeginCapture_v2", resolve(h, "cuStreamBeginCapture_v2", a.cuStreamBeginCapture)},
      {"cuStreamEndCapture", resolve(h, "cuStreamEndCapture", a.cuStreamEndCapture)},
      {"cuGraphInstantiateWithFlags", resolve(h, "cuGraphInstantiateWithFlags", a.cuGraphInstantiateWithFlags)},
      {"cuGraphLaunch", resolve(h, "cuGraphLaunch", a.cuGraphLaunch)},
      {"cuGraphExecDestroy", resolve(h, "cuGraphExecDestroy", a.cuGraphExecDestroy)},
      {"cuGraphDestroy", resolve(h, "cuGraphDestroy", a.cuGraphDestroy)},
      {"cuGetErrorName", resolve(h, "cuGetErrorName", a.cuGetErrorName)},
      {"cuGetErrorString", resolve(h, "cuGetErrorString", a.cuGetErrorString)},
  };
  // Optional entry points: null where the driver has none.
  resolve(h, "cuTensorMapEncodeTiled", a.cuTensorMapEncodeTiled);
  resolve(h, "cuLaunchKernelEx", a.cuLaunchKernelEx);
  for (const Entry &e : entries)
    if (!e.ok)
      return Status::unavailable(fmt::format(
          "no CUDA driver: '{}' has no symbol '{}' (is it libcuda?)", path,
          e.name));
  if (Status s = d->check(a.cuInit(0), "cuInit"); !s)
    return Status::unavailable("no CUDA driver: " + s.message());
  if (Status s = d->check(a.cuDriverGetVersion(&d->version_),
                          "cuDriverGetVersion");
      !s)
    return s;
  out = std::move(d);
  return Status::ok();
}

Status Driver::deviceCount(int &count) const {
  count = 0;
  return check(api_.cuDeviceGetCount(&count), "cuDeviceGetCount");
}

Device::~Device() {
  if (ctx_ && driver_)
    driver_->api().cuDevicePrimaryCtxRelease(dev_);
}

Status Device::open(const Driver &driver, int ordinal,
                    std::unique_ptr<Device> &out) {
  int count = 0;
  if (Status s = driver.deviceCount(count); !s)
    return s;
  if (count == 0)
    return Status::unavailable("no CUDA device: the driver reports 0 devices");
  if (ordinal < 0 || ordinal >= count)
    return Status::invalidArgument(fmt::format(
        "CUDA device {} does not exist ({} device(s))", ordinal, count));
  auto d = std::unique_ptr<Device>(new Device());
  d->driver_ = &driver;
  const DriverApi &a = driver.api();
  if (Status s = driver.check(a.cuDeviceGet(&d->dev_, ordinal), "cuDeviceGet"); !s)
    return s;
  char name[256] = {};
  if (Status s = driver.check(a.cuDeviceGetName(name, sizeof name - 1, d->dev_),
                              "cuDeviceGetName");
      !s)
    return s;
  d->name_ = name;
  int major = 0, minor = 0;
  if (Status s = driver.check(a.cuDeviceGetAttribute(&major, kAttrCcMajor, d->dev_),
                              "cuDeviceGetAttribute");
      !s)
    return s;
  if (Status s = driver.check(a.cuDeviceGetAttribute(&minor, kAttrCcMinor, d->dev_),
                              "cuDeviceGetAttribute");
      !s)
    return s;
  d->cc_ = major * 10 + minor;
  if (Status s = driver.check(
          a.cuDeviceGetAttribute(&d->sharedOptIn_, kAttrSharedOptIn, d->dev_),
          "cuDeviceGetAttribute");
      !s)
    return s;
  if (Status s = driver.check(
          a.cuDeviceGetAttribute(&d->smCount_, kAttrMultiprocessors, d->dev_),
          "cuDeviceGetAttribute");
      !s)
    return s;
  int clockKHz = 0, busBits = 0;
  if (a.cuDeviceGetAttribute(&clockKHz, kAttrMemoryClock, d->dev_) == kSuccess &&
      a.cuDeviceGetAttribute(&busBits, kAttrMemoryBusWidth, d->dev_) == kSuccess)
    d->peakGBs_ = 2.0 * clockKHz * 1e3 * (busBits / 8.0) / 1e9;
  if (Status s = driver.check(a.cuDevicePrimaryCtxRetain(&d->ctx_, d->dev_),
                              "cuDevicePrimaryCtxRetain");
      !s)
    return s;
  if (Status s = driver.check(a.cuCtxSetCurrent(d->ctx_), "cuCtxSetCurrent"); !s)
    return s;
  out = std::move(d);
  return Status::ok();
}

Status Device::makeCurrent() const {
  return driver_->check(driver_->api().cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
}

Status Context::open(std::unique_ptr<Context> &out, int ordinal,
                     const std::string &libraryPath) {
  auto c = std::unique_ptr<Context>(new Context());
  if (Status s = Driver::open(c->driver_, libraryPath); !s)
    return s;
  if (Status s = Device::open(*c->driver_, ordinal, c->device_); !s)
    return s;
  out = std::move(c);
  return Status::ok();
}

Status Context::synchronize() const {
  return driver_->check(driver_->api().cuCtxSynchronize(), "cuCtxSynchronize");
}

} // namespace attnc::rt::cuda
