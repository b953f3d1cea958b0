// A stand-in for libcuda.so.1 with the entry points the runtime resolves,
// so the loader's paths can be tested on machines without a GPU.
// FAKE_CUDA_INIT_ERROR=<code> makes cuInit fail; FAKE_CUDA_DEVICES=<n> sets
// the device count (default 1).
#include <cstdlib>
#include <cstring>

extern "C" {
using R = int;
static int env(const char *n, int dflt) {
  const char *v = std::getenv(n);
  return v ? std::atoi(v) : dflt;
}
R cuInit(unsigned) { return env("FAKE_CUDA_INIT_ERROR", 0); }
R cuDriverGetVersion(int *v) { *v = 13000; return 0; }
R cuDeviceGetCount(int *n) { *n = env("FAKE_CUDA_DEVICES", 1); return 0; }
R cuDeviceGet(int *d, int o) { *d = o; return 0; }
R cuDeviceGetName(char *s, int n, int) {
  std::strncpy(s, "Fake GPU", n);
  return 0;
}
R cuDeviceGetAttribute(int *v, int attr, int) {
  *v = attr == 75 ? 9 : 0; // compute capability 9.0
  return 0;
}
R cuDevicePrimaryCtxRetain(void **c, int) { static int ctx; *c = &ctx; return 0; }
R cuDevicePrimaryCtxRelease_v2(int) { return 0; }
R cuCtxSetCurrent(void *) { return 0; }
R cuModuleLoadDataEx(void **, const void *, unsigned, int *, void **) { return 218; }
R cuModuleUnload(void *) { return 0; }
R cuModuleGetFunction(void **, void *, const char *) { return 500; }
R cuFuncSetAttribute(void *, int, int) { return 0; }
R cuLaunchKernel(void *, unsigned, unsigned, unsigned, unsigned, unsigned,
                 unsigned, unsigned, void *, void **, void **) { return 0; }
R cuMemAlloc_v2(unsigned long long *, size_t) { return 2; }
R cuMemFree_v2(unsigned long long) { return 0; }
R cuMemcpyHtoD_v2(unsigned long long, const void *, size_t) { return 0; }
R cuMemcpyDtoH_v2(void *, unsigned long long, size_t) { return 0; }
R cuStreamSynchronize(void *) { return 0; }
R cuEventCreate(void **, unsigned) { return 0; }
R cuEventRecord(void *, void *) { return 0; }
R cuEventSynchronize(void *) { return 0; }
R cuEventElapsedTime(float *ms, void *, void *) { *ms = 0; return 0; }
R cuEventDestroy_v2(void *) { return 0; }
R cuGetErrorName(R r, const char **s) {
  *s = r == 100 ? "CUDA_ERROR_NO_DEVICE"
       : r == 218 ? "CUDA_ERROR_INVALID_PTX"
       : r == 2 ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_UNKNOWN";
  return 0;
}
R cuGetErrorString(R r, const char **s) {
  *s = r == 100 ? "no CUDA-capable device is detected"
       : r == 218 ? "a PTX JIT compilation failed"
       : r == 2 ? "out of memory" : "unknown error";
  return 0;
}
}
