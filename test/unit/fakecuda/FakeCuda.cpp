// A stand-in for libcuda.so.1 with the entry points the runtime resolves,
// so the loader and the launcher can be tested on machines without a GPU.
//   FAKE_CUDA_INIT_ERROR=<code>  cuInit fails with it
//   FAKE_CUDA_DEVICES=<n>        device count (default 1)
//   FAKE_CUDA_CC=<nn>            compute capability (default 90)
//   FAKE_CUDA_ALLOC_FAIL=1       cuMemAlloc reports out of memory
//   FAKE_CUDA_ZERO_OUT=<bytes>   attention launches zero their output operand
//                                (elements of that size), so that paths
//                                after a launch (timing) can be exercised
// "Device" memory is host memory (so tests can read what was uploaded).
// Modules are PTX text: loading fails, with a JIT log, for text without an
// `.entry` or containing FAKE_JIT_ERROR. Launches run nothing; they are
// recorded (function, grid, block, parameters) for the tests to inspect
// through fake_cuda_* below.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {
int env(const char *n, int dflt) {
  const char *v = std::getenv(n);
  return v ? std::atoi(v) : dflt;
}
struct Module {
  std::string ptx;
};
struct Function {
  std::string name;
  int params = 0;
};
struct Launch {
  std::string name;
  unsigned grid = 0, block = 0, smem = 0;
  std::vector<unsigned long long> params;
};
std::mutex mu;
std::vector<Launch> launches;
std::set<void *> live;
} // namespace

extern "C" {
using R = int;
R cuInit(unsigned) { return env("FAKE_CUDA_INIT_ERROR", 0); }
R cuDriverGetVersion(int *v) { *v = 13000; return 0; }
R cuDeviceGetCount(int *n) { *n = env("FAKE_CUDA_DEVICES", 1); return 0; }
R cuDeviceGet(int *d, int o) { *d = o; return 0; }
R cuDeviceGetName(char *s, int n, int) {
  std::strncpy(s, "Fake GPU", n);
  return 0;
}
R cuDeviceGetAttribute(int *v, int attr, int) {
  int cc = env("FAKE_CUDA_CC", 90);
  *v = attr == 75 ? cc / 10 : attr == 76 ? cc % 10 : 0;
  return 0;
}
R cuDevicePrimaryCtxRetain(void **c, int) { static int ctx; *c = &ctx; return 0; }
R cuDevicePrimaryCtxRelease_v2(int) { return 0; }
R cuCtxSetCurrent(void *) { return 0; }
R cuCtxSynchronize() { return 0; }
R cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts,
                     void **vals) {
  std::string ptx(static_cast<const char *>(image));
  if (ptx.find(".entry") == std::string::npos ||
      ptx.find("FAKE_JIT_ERROR") != std::string::npos) {
    for (unsigned i = 0; i < n; ++i)
      if (opts[i] == 5) // CU_JIT_ERROR_LOG_BUFFER
        std::strcpy(static_cast<char *>(vals[i]),
                    "ptxas application ptx input, line 1; fatal   : fake JIT "
                    "failure\n");
    return 218;
  }
  *m = new Module{ptx};
  return 0;
}
R cuModuleUnload(void *m) { delete static_cast<Module *>(m); return 0; }
R cuModuleGetFunction(void **f, void *m, const char *name) {
  const std::string &ptx = static_cast<Module *>(m)->ptx;
  size_t at = ptx.find(std::string(".entry ") + name + "(");
  if (at == std::string::npos)
    return 500; // CUDA_ERROR_NOT_FOUND
  size_t end = ptx.find(')', at);
  int params = 0;
  for (size_t p = ptx.find(".param", at); p < end; p = ptx.find(".param", p + 1))
    ++params;
  static std::mutex fmu;
  static std::vector<Function *> keep; // functions live as long as the test
  std::lock_guard<std::mutex> lock(fmu);
  keep.push_back(new Function{name, params});
  *f = keep.back();
  return 0;
}
R cuFuncSetAttribute(void *, int, int) { return 0; }
R cuLaunchKernel(void *f, unsigned gx, unsigned, unsigned, unsigned bx,
                 unsigned, unsigned, unsigned smem, void *, void **params,
                 void **) {
  auto *fn = static_cast<Function *>(f);
  Launch l{fn->name, gx, bx, smem, {}};
  int zero = env("FAKE_CUDA_ZERO_OUT", 0);
  bool builder = fn->name.size() > 11 &&
                 fn->name.compare(fn->name.size() - 11, 11, "_block_mask") == 0;
  if (zero > 0 && !builder && fn->params > 19) {
    // Operand 3 (out): parameters 15..19; aligned pointer 16, size 18.
    unsigned long long ptr = 0, n = 0;
    std::memcpy(&ptr, params[16], 8);
    std::memcpy(&n, params[18], 8);
    std::memset(reinterpret_cast<void *>(ptr), 0, n * size_t(zero));
  }
  for (int i = 0; i < fn->params; ++i) {
    unsigned long long v = 0;
    std::memcpy(&v, params[i], 8);
    l.params.push_back(v);
  }
  std::lock_guard<std::mutex> lock(mu);
  launches.push_back(std::move(l));
  return 0;
}
R cuMemAlloc_v2(unsigned long long *p, size_t n) {
  if (env("FAKE_CUDA_ALLOC_FAIL", 0))
    return 2;
  void *m = std::calloc(1, n);
  std::lock_guard<std::mutex> lock(mu);
  live.insert(m);
  *p = reinterpret_cast<unsigned long long>(m);
  return 0;
}
R cuMemFree_v2(unsigned long long p) {
  std::lock_guard<std::mutex> lock(mu);
  live.erase(reinterpret_cast<void *>(p));
  std::free(reinterpret_cast<void *>(p));
  return 0;
}
R cuMemcpyHtoD_v2(unsigned long long d, const void *s, size_t n) {
  std::memcpy(reinterpret_cast<void *>(d), s, n);
  return 0;
}
R cuMemcpyDtoH_v2(void *d, unsigned long long s, size_t n) {
  std::memcpy(d, reinterpret_cast<void *>(s), n);
  return 0;
}
R cuMemsetD8_v2(unsigned long long d, unsigned char v, size_t n) {
  std::memset(reinterpret_cast<void *>(d), v, n);
  return 0;
}
R cuMemGetInfo_v2(size_t *free, size_t *total) {
  *total = size_t(80) << 30;
  *free = *total - (size_t(1) << 30);
  return 0;
}
R cuStreamSynchronize(void *) { return 0; }
R cuEventCreate(void **e, unsigned) { static int ev; *e = &ev; return 0; }
R cuEventRecord(void *, void *) { return 0; }
R cuEventSynchronize(void *) { return 0; }
R cuEventElapsedTime(float *ms, void *, void *) { *ms = 0.5f; return 0; }
R cuEventDestroy_v2(void *) { return 0; }
R cuGetErrorName(R r, const char **s) {
  *s = r == 100 ? "CUDA_ERROR_NO_DEVICE"
       : r == 218 ? "CUDA_ERROR_INVALID_PTX"
       : r == 500 ? "CUDA_ERROR_NOT_FOUND"
       : r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
R cuGetErrorString(R r, const char **s) {
  *s = r == 100 ? "no CUDA-capable device is detected"
       : r == 218 ? "a PTX JIT compilation failed"
       : r == 500 ? "named symbol not found"
       : r == 2 ? "out of memory" : "unknown error";
  return 0;
}

// ---- For the tests ----
int fake_cuda_launch_count() {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<int>(launches.size());
}
void fake_cuda_clear_launches() {
  std::lock_guard<std::mutex> lock(mu);
  launches.clear();
}
/// Launch i: its function name, grid.x and block.x; its parameters go to
/// `params` (up to `max`), and the count is returned.
int fake_cuda_launch(int i, const char **name, unsigned *grid, unsigned *block,
                     unsigned long long *params, int max) {
  std::lock_guard<std::mutex> lock(mu);
  const Launch &l = launches.at(i);
  *name = l.name.c_str();
  *grid = l.grid;
  *block = l.block;
  int n = static_cast<int>(l.params.size());
  for (int k = 0; k < n && k < max; ++k)
    params[k] = l.params[k];
  return n;
}
int fake_cuda_live_allocations() {
  std::lock_guard<std::mutex> lock(mu);
  return static_cast<int>(live.size());
}
}
