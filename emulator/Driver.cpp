//===- Driver.cpp - The CUDA Driver API over the emulator -----------------===//
//
// libattnc-emucuda.so exports the cu* entry points attnc's runtime resolves
// (and a few more), so that it loads exactly as libcuda.so.1 does, through
// $ATTNC_LIBCUDA. Modules are PTX text, parsed and decoded at load; launches
// and asynchronous copies are queued on their streams and run when waited
// for (Streams.h); a kernel's fault is returned by the call that waits for
// it, with a report on stderr.
//
//   ATTNC_EMU_CC=<nn>         compute capability (default 90)
//   ATTNC_EMU_DEVICES=<n>     device count (default 1)
//   ATTNC_EMU_INIT_ERROR=<e>  cuInit fails with CUDA error e
//   ATTNC_EMU_ALLOC_FAIL=1    cuMemAlloc reports out of memory
//   ATTNC_EMU_EVENT_MS=<ms>   cuEventElapsedTime reports this (default:
//                             host time)
//   ATTNC_EMU_QUIET=1         no reports on stderr
//   ATTNC_EMU_SYNC=1          run launches and copies as they are issued
//   ATTNC_EMU_SMS=<n>         the SM count the device reports
//   ATTNC_EMU_THREADS, ATTNC_EMU_RACECHECK, ATTNC_EMU_MAX_STEPS: Launch.h
//
// For tests: attnc_emu_* below (launch log, live allocations, last report,
// call counts and injected failures: attnc_emu_fail_call makes the nth
// call of an entry point return an error without doing anything).
//
//===----------------------------------------------------------------------===//
#include "DeviceMemory.h"
#include "Launch.h"
#include "Program.h"
#include "Streams.h"
#include "TensorMap.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

using namespace attnc::emu;

constexpr int kSuccess = 0, kInvalidValue = 1, kOutOfMemory = 2,
              kNotInitialized = 3, kNoDevice = 100, kInvalidDevice = 101,
              kInvalidHandle = 400, kNotFound = 500, kNotSupported = 801;

int env(const char *n, int dflt) {
  const char *v = std::getenv(n);
  return v && *v ? std::atoi(v) : dflt;
}
int deviceCc() { return env("ATTNC_EMU_CC", 90); }

struct LaunchRecord {
  std::string name;
  unsigned grid[3], block[3], smem;
  std::vector<unsigned long long> params;
};

struct State {
  std::mutex mu;
  bool initialized = false;
  std::vector<LaunchRecord> launches;
  std::string lastReport;
  std::map<std::string, long> calls; // per entry point, since the last reset
  std::string failName;              // attnc_emu_fail_call's entry point
  long failAt = 0;                   // ... its call number (0: none)
  int failError = 0;
};
State &state() {
  static State s; // destroyed when the library is unloaded
  return s;
}

struct EmuModule {
  std::unique_ptr<Module> module;
};

/// Counts a call of `name`; true (with the error in `err`) when it is the
/// one attnc_emu_fail_call chose to fail.
bool injectedFault(const char *name, int &err) {
  std::lock_guard<std::mutex> lock(state().mu);
  long n = ++state().calls[name];
  if (state().failAt == 0 || n != state().failAt || state().failName != name)
    return false;
  err = state().failError;
  return true;
}

void report(const std::string &what) {
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().lastReport = what;
  }
  if (!env("ATTNC_EMU_QUIET", 0))
    std::fprintf(stderr, "emucuda: %s\n", what.c_str());
}

bool inAllocation(unsigned long long p, size_t n, const char *call) {
  Allocation a;
  if (n == 0 || DeviceMemory::get().find(p, n, a))
    return true;
  MemoryMap m = DeviceMemory::get().snapshot();
  report(std::string(call) + " of " + std::to_string(n) + " bytes at device address " +
         std::to_string(p) + ": " + m.describe(p, n));
  return false;
}

void writeLog(unsigned n, int *opts, void **vals, int bufOpt, int sizeOpt,
              const std::string &text) {
  char *buf = nullptr;
  size_t size = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == bufOpt)
      buf = static_cast<char *>(vals[i]);
    if (opts[i] == sizeOpt)
      size = reinterpret_cast<uintptr_t>(vals[i]);
  }
  if (!buf || !size)
    return;
  size_t k = std::min(size - 1, text.size());
  std::memcpy(buf, text.data(), k);
  buf[k] = 0;
}

} // namespace

namespace attnc::emu {
void reportFault(const std::string &what) { report(what); }
} // namespace attnc::emu

// The entry points a test can fail (the frees and destroys cannot: as on
// a device, they do not fail for valid handles).
#define ATTNC_EMU_FAULT_POINT(name)                                            \
  do {                                                                         \
    int injected_ = 0;                                                         \
    if (injectedFault(name, injected_))                                        \
      return injected_;                                                        \
  } while (0)

extern "C" {
using R = int;

R cuInit(unsigned) {
  if (int e = env("ATTNC_EMU_INIT_ERROR", 0))
    return e;
  std::lock_guard<std::mutex> lock(state().mu);
  state().initialized = true;
  return kSuccess;
}
R cuDriverGetVersion(int *v) {
  if (!v)
    return kInvalidValue;
  *v = 13000;
  return kSuccess;
}
R cuDeviceGetCount(int *n) {
  if (!n)
    return kInvalidValue;
  *n = env("ATTNC_EMU_DEVICES", 1);
  return kSuccess;
}
R cuDeviceGet(int *d, int ordinal) {
  if (ordinal < 0 || ordinal >= env("ATTNC_EMU_DEVICES", 1))
    return kInvalidDevice;
  *d = ordinal;
  return kSuccess;
}
R cuDeviceGetName(char *s, int n, int) {
  if (!s || n <= 0)
    return kInvalidValue;
  std::snprintf(s, static_cast<size_t>(n), "attnc-emucuda");
  return kSuccess;
}
R cuDeviceTotalMem_v2(size_t *bytes, int) {
  *bytes = size_t(80) << 30;
  return kSuccess;
}
R cuDeviceGetAttribute(int *v, int attr, int) {
  int cc = deviceCc();
  int optin = cc >= 90 ? 232448 : cc == 80 || cc == 87 ? 166912 : cc >= 80 ? 101376 : 65536;
  switch (attr) {
  case 1: *v = 1024; break;              // MAX_THREADS_PER_BLOCK
  case 2: case 3: *v = 1024; break;      // MAX_BLOCK_DIM_X/Y
  case 4: *v = 64; break;                // MAX_BLOCK_DIM_Z
  case 5: *v = 2147483647; break;        // MAX_GRID_DIM_X
  case 6: case 7: *v = 65535; break;     // MAX_GRID_DIM_Y/Z
  case 8: *v = 49152; break;             // MAX_SHARED_MEMORY_PER_BLOCK
  case 10: *v = 32; break;               // WARP_SIZE
  case 12: *v = 65536; break;            // MAX_REGISTERS_PER_BLOCK
  case 16:                               // MULTIPROCESSOR_COUNT
    *v = env("ATTNC_EMU_SMS", cc >= 90 ? 132 : 108);
    break;
  case 36: *v = cc >= 90 ? 2619000 : 1593000; break; // MEMORY_CLOCK_RATE, kHz
  case 37: *v = 5120; break;                          // GLOBAL_MEMORY_BUS_WIDTH
  case 39: *v = 2048; break;             // MAX_THREADS_PER_MULTIPROCESSOR
  case 75: *v = cc / 10; break;          // COMPUTE_CAPABILITY_MAJOR
  case 76: *v = cc % 10; break;          // COMPUTE_CAPABILITY_MINOR
  case 81: *v = optin + 1024; break;     // MAX_SHARED_MEMORY_PER_MULTIPROCESSOR
  case 97: *v = optin; break;            // MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
  default: return kInvalidValue;
  }
  return kSuccess;
}
R cuDevicePrimaryCtxRetain(void **c, int) {
  static int ctx;
  *c = &ctx;
  return kSuccess;
}
R cuDevicePrimaryCtxRelease_v2(int) { return kSuccess; }
R cuCtxSetCurrent(void *) { return kSuccess; }
R cuCtxGetCurrent(void **c) {
  static int ctx;
  *c = &ctx;
  return kSuccess;
}
R cuCtxSynchronize() {
  ATTNC_EMU_FAULT_POINT("cuCtxSynchronize");
  return Streams::get().syncAll();
}

R cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts, void **vals) {
  ATTNC_EMU_FAULT_POINT("cuModuleLoadDataEx");
  if (!m || !image)
    return kInvalidValue;
  if (!state().initialized)
    return kNotInitialized;
  auto em = new EmuModule();
  std::string log;
  int r = loadModuleCode(static_cast<const char *>(image), deviceCc(), em->module, log);
  if (r) {
    delete em;
    writeLog(n, opts, vals, 5, 6, log); // CU_JIT_ERROR_LOG_BUFFER(_SIZE_BYTES)
    return r;
  }
  writeLog(n, opts, vals, 3, 4, "emucuda: module loaded for sm_" + std::to_string(deviceCc()));
  *m = em;
  return kSuccess;
}
R cuModuleLoadData(void **m, const void *image) {
  return cuModuleLoadDataEx(m, image, 0, nullptr, nullptr);
}
R cuModuleUnload(void *m) {
  if (!m)
    return kInvalidHandle;
  int r = Streams::get().syncAll(); // queued launches of its kernels run first
  delete static_cast<EmuModule *>(m);
  return r;
}
R cuModuleGetFunction(void **f, void *m, const char *name) {
  ATTNC_EMU_FAULT_POINT("cuModuleGetFunction");
  if (!m || !f || !name)
    return kInvalidValue;
  const Kernel *k = static_cast<EmuModule *>(m)->module->find(name);
  if (!k)
    return kNotFound;
  *f = const_cast<Kernel *>(k);
  return kSuccess;
}
R cuFuncSetAttribute(void *f, int attr, int value) {
  ATTNC_EMU_FAULT_POINT("cuFuncSetAttribute");
  auto *k = static_cast<Kernel *>(f);
  if (!k)
    return kInvalidHandle;
  if (attr == 8) { // MAX_DYNAMIC_SHARED_SIZE_BYTES
    int optin = 0;
    cuDeviceGetAttribute(&optin, 97, 0);
    if (value < 0 || uint64_t(value) + k->staticShared > uint64_t(optin))
      return kInvalidValue;
    k->maxDynamicShared = static_cast<uint32_t>(value);
    return kSuccess;
  }
  if (attr == 9) // PREFERRED_SHARED_MEMORY_CARVEOUT: a hint
    return kSuccess;
  return kInvalidValue;
}
R cuFuncGetAttribute(int *v, int attr, void *f) {
  auto *k = static_cast<Kernel *>(f);
  if (!k || !v)
    return kInvalidValue;
  switch (attr) {
  case 0: *v = std::min(1024, k->maxThreads); break;
  case 1: *v = static_cast<int>(k->staticShared); break;
  case 3: *v = static_cast<int>(k->localBytes); break;
  case 4: *v = 0; break; // registers are not modelled
  case 8: *v = static_cast<int>(k->maxDynamicShared ? k->maxDynamicShared : 49152 - k->staticShared); break;
  default: return kInvalidValue;
  }
  return kSuccess;
}

} // extern "C"

namespace {

int launchKernel(const char *entry, void *f, const unsigned grid[3],
                 const unsigned block[3], unsigned smem, void *stream,
                 void **params, void **extra, bool programmatic) {
  auto *k = static_cast<Kernel *>(f);
  if (!k)
    return kInvalidHandle;
  if (extra) {
    report(std::string(entry) +
           ": 'extra' parameter buffers are not supported by the emulator");
    return kInvalidValue;
  }
  LaunchRecord rec{k->name,
                   {grid[0], grid[1], grid[2]},
                   {block[0], block[1], block[2]},
                   smem,
                   {}};
  for (size_t i = 0; params && i < k->params.size(); ++i) {
    unsigned long long v = 0;
    std::memcpy(&v, params[i], std::min<size_t>(8, k->params[i].size));
    rec.params.push_back(v);
  }
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().launches.push_back(rec);
  }
  LaunchShape s;
  s.grid[0] = grid[0];
  s.grid[1] = grid[1];
  s.grid[2] = grid[2];
  s.block[0] = block[0];
  s.block[1] = block[1];
  s.block[2] = block[2];
  s.dynamicShared = smem;
  std::string what;
  if (int r = checkLaunch(*k, s, what)) {
    report(what);
    return r;
  }
  if (!params && !k->params.empty()) {
    report(std::string(entry) + " of " + k->name + " without its parameters");
    return kInvalidValue;
  }
  Streams::get().launch(stream, *k, s, params, programmatic);
  return kSuccess;
}

/// cuda.h's CUlaunchConfig and CUlaunchAttribute (a 4-byte id, padding,
/// a 64-byte value union).
struct LaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmaticStreamSerializationAllowed;
  } value;
};
struct LaunchConfig {
  unsigned grid[3], block[3], sharedMemBytes;
  void *stream;
  LaunchAttribute *attrs;
  unsigned numAttrs;
};
constexpr int kAttrProgrammaticStreamSerialization = 6;

} // namespace

extern "C" {

R cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                 unsigned by, unsigned bz, unsigned smem, void *stream,
                 void **params, void **extra) {
  ATTNC_EMU_FAULT_POINT("cuLaunchKernel");
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return launchKernel("cuLaunchKernel", f, grid, block, smem, stream, params,
                      extra, false);
}

/// Launch attributes: programmatic stream serialization (the launch may
/// overlap the kernel ahead of it; GridDependency.h), and no other.
R cuLaunchKernelEx(const LaunchConfig *config, void *f, void **params,
                   void **extra) {
  ATTNC_EMU_FAULT_POINT("cuLaunchKernelEx");
  if (!config || (config->numAttrs && !config->attrs))
    return kInvalidValue;
  bool programmatic = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const LaunchAttribute &a = config->attrs[i];
    if (a.id != kAttrProgrammaticStreamSerialization) {
      report("cuLaunchKernelEx: launch attribute " + std::to_string(a.id) +
             " is not supported by the emulator (only 6, programmatic "
             "stream serialization)");
      return kNotSupported;
    }
    programmatic = a.value.programmaticStreamSerializationAllowed != 0;
  }
  if (programmatic && deviceCc() < 90) {
    report("cuLaunchKernelEx: programmatic stream serialization needs "
           "compute capability 9.0 or later (the device has " +
           std::to_string(deviceCc()) + ")");
    return kNotSupported;
  }
  return launchKernel("cuLaunchKernelEx", f, config->grid, config->block,
                      config->sharedMemBytes, config->stream, params, extra,
                      programmatic);
}

R cuMemAlloc_v2(unsigned long long *p, size_t n) {
  ATTNC_EMU_FAULT_POINT("cuMemAlloc_v2");
  if (!p)
    return kInvalidValue;
  if (env("ATTNC_EMU_ALLOC_FAIL", 0))
    return kOutOfMemory;
  if (int r = Streams::get().refuseDuringCapture("cuMemAlloc"))
    return r;
  uint64_t a = DeviceMemory::get().allocate(n);
  if (!a)
    return kOutOfMemory;
  *p = a;
  return kSuccess;
}
R cuMemFree_v2(unsigned long long p) {
  if (!p)
    return kSuccess;
  // As on a device, freeing waits for the work that may still use it.
  if (int r = Streams::get().syncAll())
    return r;
  if (!DeviceMemory::get().release(p)) {
    report("cuMemFree of " + std::to_string(p) + ", which is not a live allocation");
    return kInvalidValue;
  }
  return kSuccess;
}
R cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) {
  ATTNC_EMU_FAULT_POINT("cuMemcpyHtoD_v2");
  // Synchronous: waits for the work of the legacy stream(s) first.
  if (int r = Streams::get().sync(nullptr))
    return r;
  if (!inAllocation(d, n, "cuMemcpyHtoD"))
    return kInvalidValue;
  if (n)
    std::memcpy(reinterpret_cast<void *>(d), s, n);
  return kSuccess;
}
R cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) {
  ATTNC_EMU_FAULT_POINT("cuMemcpyDtoH_v2");
  // Synchronous: waits for the work of the legacy stream(s) first.
  if (int r = Streams::get().sync(nullptr))
    return r;
  if (!inAllocation(s, n, "cuMemcpyDtoH"))
    return kInvalidValue;
  if (n)
    std::memcpy(d, reinterpret_cast<void *>(s), n);
  return kSuccess;
}
R cuMemcpyDtoD_v2(unsigned long long d, unsigned long long s, size_t n) {
  ATTNC_EMU_FAULT_POINT("cuMemcpyDtoD_v2");
  // Synchronous: waits for the work of the legacy stream(s) first.
  if (int r = Streams::get().sync(nullptr))
    return r;
  if (!inAllocation(d, n, "cuMemcpyDtoD") || !inAllocation(s, n, "cuMemcpyDtoD"))
    return kInvalidValue;
  if (n)
    std::memmove(reinterpret_cast<void *>(d), reinterpret_cast<void *>(s), n);
  return kSuccess;
}
R cuMemcpyHtoDAsync_v2(unsigned long long d, const void *s, size_t n, void *stream) {
  ATTNC_EMU_FAULT_POINT("cuMemcpyHtoDAsync_v2");
  if (!inAllocation(d, n, "cuMemcpyHtoDAsync"))
    return kInvalidValue;
  return Streams::get().copyToDevice(stream, d, s, n);
}
R cuMemcpyDtoHAsync_v2(void *d, unsigned long long s, size_t n, void *stream) {
  ATTNC_EMU_FAULT_POINT("cuMemcpyDtoHAsync_v2");
  if (!inAllocation(s, n, "cuMemcpyDtoHAsync"))
    return kInvalidValue;
  return Streams::get().copyToHost(stream, d, s, n);
}
R cuMemsetD8_v2(unsigned long long d, unsigned char v, size_t n) {
  ATTNC_EMU_FAULT_POINT("cuMemsetD8_v2");
  // Synchronous: waits for the work of the legacy stream(s) first.
  if (int r = Streams::get().sync(nullptr))
    return r;
  if (!inAllocation(d, n, "cuMemsetD8"))
    return kInvalidValue;
  if (n)
    std::memset(reinterpret_cast<void *>(d), v, n);
  return kSuccess;
}
R cuMemsetD32_v2(unsigned long long d, unsigned v, size_t n) {
  ATTNC_EMU_FAULT_POINT("cuMemsetD32_v2");
  // Synchronous: waits for the work of the legacy stream(s) first.
  if (int r = Streams::get().sync(nullptr))
    return r;
  if (d % 4 || !inAllocation(d, n * 4, "cuMemsetD32"))
    return kInvalidValue;
  auto *p = reinterpret_cast<unsigned *>(d);
  for (size_t i = 0; i < n; ++i)
    p[i] = v;
  return kSuccess;
}
R cuMemGetInfo_v2(size_t *free, size_t *total) {
  *total = size_t(80) << 30;
  *free = *total - std::min(*total, DeviceMemory::get().bytesInUse());
  return kSuccess;
}
R cuStreamCreate(void **s, unsigned flags) {
  ATTNC_EMU_FAULT_POINT("cuStreamCreate");
  if (!s)
    return kInvalidValue;
  auto *st = new Stream();
  st->nonBlocking = flags & 1; // CU_STREAM_NON_BLOCKING
  *s = st;
  return kSuccess;
}
R cuStreamDestroy_v2(void *s) {
  int r = Streams::get().sync(s); // its work still runs
  if (reinterpret_cast<uintptr_t>(s) > 2) {
    Streams::get().forget(s);
    delete static_cast<Stream *>(s);
  }
  return r;
}
R cuStreamSynchronize(void *s) {
  ATTNC_EMU_FAULT_POINT("cuStreamSynchronize");
  return Streams::get().sync(s);
}
R cuStreamBeginCapture_v2(void *s, int /*mode*/) {
  ATTNC_EMU_FAULT_POINT("cuStreamBeginCapture_v2");
  return Streams::get().beginCapture(s);
}
R cuStreamEndCapture(void *s, void **graph) {
  if (!graph)
    return kInvalidValue;
  Graph *g = nullptr;
  int r = Streams::get().endCapture(s, &g);
  // An injected failure still ends the capture (as a failed end does on a
  // device: the stream is no longer capturing), and returns no graph.
  int injected = 0;
  if (injectedFault("cuStreamEndCapture", injected)) {
    delete g;
    *graph = nullptr;
    return injected;
  }
  *graph = g;
  return r;
}
R cuGraphInstantiateWithFlags(void **exec, void *graph, unsigned long long) {
  ATTNC_EMU_FAULT_POINT("cuGraphInstantiateWithFlags");
  if (!exec || !graph)
    return kInvalidValue;
  *exec = new Graph(*static_cast<Graph *>(graph));
  return kSuccess;
}
R cuGraphLaunch(void *exec, void *stream) {
  ATTNC_EMU_FAULT_POINT("cuGraphLaunch");
  if (!exec)
    return kInvalidHandle;
  return Streams::get().launchGraph(stream, *static_cast<Graph *>(exec));
}
R cuGraphExecDestroy(void *exec) {
  delete static_cast<Graph *>(exec);
  return kSuccess;
}
R cuGraphDestroy(void *graph) {
  delete static_cast<Graph *>(graph);
  return kSuccess;
}
R cuEventCreate(void **e, unsigned) {
  *e = new Event();
  return kSuccess;
}
R cuEventRecord(void *e, void *stream) {
  ATTNC_EMU_FAULT_POINT("cuEventRecord");
  if (!e)
    return kInvalidHandle;
  Streams::get().record(stream, static_cast<Event *>(e));
  return kSuccess;
}
R cuEventSynchronize(void *) {
  ATTNC_EMU_FAULT_POINT("cuEventSynchronize");
  return Streams::get().syncAll();
}
R cuEventElapsedTime(float *ms, void *a, void *b) {
  if (!ms || !a || !b)
    return kInvalidHandle;
  if (int r = Streams::get().syncAll())
    return r;
  auto *ea = static_cast<Event *>(a), *eb = static_cast<Event *>(b);
  if (!ea->recorded || !eb->recorded)
    return kInvalidHandle; // CUDA_ERROR_INVALID_HANDLE for unrecorded events
  if (const char *v = std::getenv("ATTNC_EMU_EVENT_MS"); v && *v) {
    *ms = static_cast<float>(std::atof(v));
    return kSuccess;
  }
  *ms = std::chrono::duration<float, std::milli>(eb->t - ea->t).count();
  return kSuccess;
}
R cuEventDestroy_v2(void *e) {
  Streams::get().syncAll(); // a queued record may still point at it
  delete static_cast<Event *>(e);
  return kSuccess;
}

R cuTensorMapEncodeTiled(void *map, int dtype, unsigned rank, void *global,
                         const unsigned long long *dims, const unsigned long long *strides,
                         const unsigned *box, const unsigned *elementStrides,
                         int interleave, int swizzle, int l2Promotion, int oobFill) {
  ATTNC_EMU_FAULT_POINT("cuTensorMapEncodeTiled");
  if (!map || !dims || !box || !elementStrides || (rank > 1 && !strides)) {
    report("cuTensorMapEncodeTiled: a null tensorMap, globalDim, globalStrides, boxDim "
           "or elementStrides");
    return kInvalidValue;
  }
  if (reinterpret_cast<uintptr_t>(map) % 64) {
    report("cuTensorMapEncodeTiled: tensorMap is not 64-byte aligned");
    return kInvalidValue;
  }
  TensorMapDesc d;
  d.dtype = uint32_t(dtype);
  d.rank = rank;
  d.global = reinterpret_cast<uintptr_t>(global);
  d.interleave = uint32_t(interleave);
  d.swizzle = uint32_t(swizzle);
  d.l2Promotion = uint32_t(l2Promotion);
  d.oobFill = uint32_t(oobFill);
  for (unsigned i = 0; i < rank && i < kTensorMapMaxRank; ++i) {
    d.dims[i] = dims[i];
    d.box[i] = box[i];
    d.elementStrides[i] = elementStrides[i];
    if (i > 0)
      d.strides[i - 1] = strides[i - 1];
  }
  bool unsupported = false;
  std::string why = checkTensorMap(d, unsupported);
  if (!why.empty()) {
    report("cuTensorMapEncodeTiled: " + why);
    return unsupported ? kNotSupported : kInvalidValue;
  }
  encodeTensorMap(d, static_cast<uint8_t *>(map));
  return kSuccess;
}

static const char *errorName(R r) {
  switch (r) {
  case 0: return "CUDA_SUCCESS";
  case 1: return "CUDA_ERROR_INVALID_VALUE";
  case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
  case 3: return "CUDA_ERROR_NOT_INITIALIZED";
  case 100: return "CUDA_ERROR_NO_DEVICE";
  case 101: return "CUDA_ERROR_INVALID_DEVICE";
  case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
  case 218: return "CUDA_ERROR_INVALID_PTX";
  case 400: return "CUDA_ERROR_INVALID_HANDLE";
  case 401: return "CUDA_ERROR_ILLEGAL_STATE";
  case 500: return "CUDA_ERROR_NOT_FOUND";
  case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
  case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
  case 715: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
  case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
  case 719: return "CUDA_ERROR_LAUNCH_FAILED";
  case 801: return "CUDA_ERROR_NOT_SUPPORTED";
  case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
  case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
  case 999: return "CUDA_ERROR_UNKNOWN";
  default: return nullptr;
  }
}
static const char *errorText(R r) {
  switch (r) {
  case 0: return "no error";
  case 1: return "invalid argument";
  case 2: return "out of memory";
  case 3: return "initialization error";
  case 100: return "no CUDA-capable device is detected";
  case 101: return "invalid device ordinal";
  case 209: return "no kernel image is available for execution on the device";
  case 218: return "a PTX JIT compilation failed";
  case 400: return "invalid resource handle";
  case 401: return "the operation is not permitted in this state";
  case 900: return "operation not permitted when stream is capturing";
  case 901: return "operation failed due to a previous error during capture";
  case 999: return "unknown error";
  case 500: return "named symbol not found";
  case 700: return "an illegal memory access was encountered";
  case 702: return "the launch timed out and was terminated";
  case 715: return "an illegal instruction was encountered";
  case 716: return "misaligned address";
  case 719: return "unspecified launch failure";
  case 801: return "operation not supported";
  default: return nullptr;
  }
}
R cuGetErrorName(R r, const char **s) {
  *s = errorName(r);
  return *s ? kSuccess : kInvalidValue;
}
R cuGetErrorString(R r, const char **s) {
  *s = errorText(r);
  return *s ? kSuccess : kInvalidValue;
}

// ---- For tests ----
/// The wgmma operand layouts executed since the last call with clear != 0
/// (attnc::emu::wgmmaLayoutsSeen): what a conformance test covered.
unsigned long long attnc_emu_tma_loads(int clear) {
  return attnc::emu::tmaLoadsIssued(clear != 0);
}
unsigned attnc_emu_wgmma_layouts(int clear) {
  return attnc::emu::wgmmaLayoutsSeen(clear != 0);
}
int attnc_emu_launch_count() {
  std::lock_guard<std::mutex> lock(state().mu);
  return static_cast<int>(state().launches.size());
}
void attnc_emu_clear_launches() {
  std::lock_guard<std::mutex> lock(state().mu);
  state().launches.clear();
}
/// Launch i: its kernel, grid.x, block.x; its parameters (each read as up to
/// 8 bytes) go to `params` (up to `max`); returns their count, -1 if no
/// such launch.
int attnc_emu_launch(int i, const char **name, unsigned *grid, unsigned *block,
                     unsigned long long *params, int max) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (i < 0 || i >= static_cast<int>(state().launches.size()))
    return -1;
  const LaunchRecord &l = state().launches[static_cast<size_t>(i)];
  *name = l.name.c_str();
  *grid = l.grid[0];
  *block = l.block[0];
  int n = static_cast<int>(l.params.size());
  for (int k = 0; k < n && k < max; ++k)
    params[k] = l.params[static_cast<size_t>(k)];
  return n;
}
/// Makes the `nth` call (counted from the last attnc_emu_reset_calls) of
/// entry point `name` (e.g. "cuMemAlloc_v2") return `error` and do
/// nothing; nth = 0 fails nothing.
void attnc_emu_fail_call(const char *name, long nth, int error) {
  std::lock_guard<std::mutex> lock(state().mu);
  state().failName = name ? name : "";
  state().failAt = nth;
  state().failError = error;
}
/// Calls of `name` since the last reset.
long attnc_emu_call_count(const char *name) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().calls.find(name);
  return it == state().calls.end() ? 0 : it->second;
}
/// Zeroes the call counts and fails nothing.
void attnc_emu_reset_calls() {
  std::lock_guard<std::mutex> lock(state().mu);
  state().calls.clear();
  state().failAt = 0;
}
int attnc_emu_live_allocations() {
  return static_cast<int>(DeviceMemory::get().live());
}
/// The last fault or misuse reported (empty if none); the pointer stays
/// valid until the next report.
const char *attnc_emu_last_report() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().lastReport.c_str();
}
void attnc_emu_clear_report() {
  std::lock_guard<std::mutex> lock(state().mu);
  state().lastReport.clear();
}
}
