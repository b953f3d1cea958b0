//===- ThreadStress.cpp - The runtime under ThreadSanitizer ----------------===//
//
// Built with -fsanitize=thread by scripts/tsan.sh together with the
// emulator (so the driver's own threads are instrumented too) and run by
// ctest (`tsan-runtime`): threads sharing kernels loaded from a package,
// each running calls through the emulated driver and checking them
// against the fp64 reference, while other threads store and look up
// entries of one kernel cache. Any data race, lock-order inversion or
// wrong answer fails the run. The compiler's Session is covered by
// ConcurrencyTests.cpp and the Python tests (LLVM is not instrumented).
//
//   usage: attnc-thread-stress PACKAGE LIBCUDA CACHE_DIR
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/KernelCache.h"
#include "attnc/runtime/Package.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

using namespace attnc::rt;

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ATTNC_UNDER_TSAN 1
#endif
#endif

namespace {

#ifdef ATTNC_UNDER_TSAN
constexpr const char *kSanitizer = "under ThreadSanitizer";
#else
constexpr const char *kSanitizer = "WITHOUT ThreadSanitizer";
#endif

std::atomic<int> failures{0};

void fail(const std::string &what) {
  std::fprintf(stderr, "FAIL: %s\n", what.c_str());
  ++failures;
}

std::vector<uint8_t> randomValues(DType dt, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<uint8_t> x(static_cast<size_t>(n) * dtypeSize(dt));
  for (int64_t i = 0; i < n; ++i)
    storeFromDouble(x.data(), dt, i, u(rng));
  return x;
}

/// `calls` calls of `kernel` on host data of thread `t`, each checked.
void runCalls(const cuda::Context &ctx, const cuda::GpuKernel &kernel, int t,
              int calls, double tol) {
  DType dt = kernel.image().spec.dtype;
  const int64_t B = 1, H = 2, D = 64;
  for (int c = 0; c < calls; ++c) {
    int64_t L = 8 + (t * 5 + c * 3) % 40;
    auto q = randomValues(dt, B * H * L * D, 100 * t + c),
         k = randomValues(dt, B * H * L * D, 100 * t + c + 1),
         v = randomValues(dt, B * H * L * D, 100 * t + c + 2);
    std::vector<uint8_t> out(q.size());
    std::vector<float> lse(B * H * L);
    AttentionArgs a;
    a.q = TensorView::contiguous(q.data(), dt, {B, H, L, D});
    a.k = TensorView::contiguous(k.data(), dt, {B, H, L, D});
    a.v = TensorView::contiguous(v.data(), dt, {B, H, L, D});
    a.out = TensorView::contiguous(out.data(), dt, {B, H, L, D});
    a.lse = TensorView::contiguous(lse.data(), DType::F32, {B, H, L});
    for (const ParamSpec &p : kernel.variant().params)
      if (!p.isTensor)
        a.scalars.emplace_back(p.name, 8.0);
    if (Status s = cuda::runFromHost(ctx, kernel, a); !s) {
      fail("thread " + std::to_string(t) + ": " + s.message());
      return;
    }
    std::vector<double> ref, refLse;
    if (Status s = referenceAttention(kernel.variant(), a, ref, refLse); !s) {
      fail(s.message());
      return;
    }
    for (size_t i = 0; i < ref.size(); ++i)
      if (!(std::fabs(loadAsDouble(out.data(), dt, int64_t(i)) - ref[i]) <= tol)) {
        fail("thread " + std::to_string(t) + " call " + std::to_string(c) +
             ": output " + std::to_string(i) + " differs from the reference");
        return;
      }
  }
}

} // namespace

int main(int argc, char **argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s PACKAGE LIBCUDA CACHE_DIR\n", argv[0]);
    return 2;
  }
  Package pkg;
  if (Status s = Package::read(argv[1], pkg); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  std::unique_ptr<cuda::Context> ctx;
  if (Status s = cuda::Context::open(ctx, 0, argv[2]); !s) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  // Every variant's kernels for sm_80, one object each, shared by threads.
  std::vector<std::unique_ptr<cuda::GpuKernel>> kernels;
  for (const PackageVariant &v : pkg.variants)
    for (DType dt : {DType::F32, DType::BF16}) {
      const GpuKernelImage *image = nullptr;
      if (!selectKernel(v, 80, dt, 64, 64, image))
        continue;
      std::unique_ptr<cuda::GpuKernel> k;
      if (Status s = cuda::GpuKernel::load(*ctx, v.info, *image, k); !s) {
        std::fprintf(stderr, "%s\n", s.message().c_str());
        return 1;
      }
      kernels.push_back(std::move(k));
    }
  if (kernels.size() < 2) {
    std::fprintf(stderr, "the package has fewer than two sm_80 kernels\n");
    return 1;
  }
  KernelCache cache(argv[3]);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      const cuda::GpuKernel &k = *kernels[static_cast<size_t>(t) % kernels.size()];
      runCalls(*ctx, k, t, 4,
               k.image().spec.dtype == DType::F32 ? 2e-5 : 2e-2);
    });
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        std::string key = "key " + std::to_string(i % 7);
        std::string payload = "payload of " + key;
        if (Status s = cache.store(key, payload); !s)
          fail("cache store: " + s.message());
        std::optional<std::string> hit = cache.lookup(key);
        if (hit && *hit != payload)
          fail("cache: entry '" + key + "' came back as '" + *hit + "'");
        (void)t;
      }
    });
  for (std::thread &t : threads)
    t.join();
  if (failures) {
    std::fprintf(stderr, "%d failures\n", failures.load());
    return 1;
  }
  std::printf("thread stress %s: %zu kernels x 8 threads, 4 cache threads: "
              "ok\n",
              kSanitizer, kernels.size());
  return 0;
}
