// Soak (docs/reliability.md): a serving loop run long and bounded --
// sequences join with a random prefill, decode a token per step and finish
// after a random length; one plan per step, one run per layer; on the GPU
// every eighth step is also captured as a graph and replayed. Resident
// memory, the page pools' occupancy and (on the emulator) live device
// allocations are sampled: flat after warm-up, and every page back in its
// pool once the last sequence finishes. Outputs are checked against the
// fp64 reference at intervals.
#include "attnc/Driver/Session.h"
#include "attnc/runtime/PagedKVCache.h"
#include "attnc/runtime/cuda/DevicePagedKVCache.h"
#include "PagedCaches.h"
#include "ReferenceCheck.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <random>

using namespace attnc;
using namespace attnc::rt;

namespace {

constexpr int64_t kHq = 4, kHkv = 2, kD = 32, kPage = 8, kPages = 48,
                  kLayers = 2;

/// Resident memory of this process, in KiB (/proc/self/statm).
int64_t residentKiB() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/// A batch whose membership changes: the host caches (every layer) and,
/// on a device, their device twins, driven by one seeded schedule.
struct Batch {
  const cuda::Context *ctx = nullptr;
  std::vector<PagedKVCache> host;
  std::vector<cuda::DevicePagedKVCache> dev;
  std::map<int32_t, std::pair<int32_t, int32_t>> live; // id -> (length, end)
  std::mt19937_64 rng{11};

  explicit Batch(const cuda::Context *gpu) : ctx(gpu) {
    test::createLayerCaches(DType::F32, kHkv, kD, kPage, kPages, kLayers, ctx, host,
                            dev);
  }

  void append(const std::vector<int32_t> &ids, int64_t T) {
    test::appendRandomRows(host, dev, ctx, DType::F32, rng, ids, T, kHkv, kD);
    for (int32_t id : ids)
      live[id].first += static_cast<int32_t>(T);
  }
  /// One step's membership: finished sequences leave, new ones join while
  /// pages allow, and every live sequence gets one token.
  void advance() {
    for (auto it = live.begin(); it != live.end();) {
      if (it->second.first < it->second.second) {
        ++it;
        continue;
      }
      for (PagedKVCache &c : host)
        REQUIRE(c.release(it->first).isOk());
      for (cuda::DevicePagedKVCache &c : dev)
        REQUIRE(c.release(it->first).isOk());
      it = live.erase(it);
    }
    while (live.size() < 4 && host[0].pages().freePages() >= 8) {
      int32_t id = host[0].addSequence();
      for (size_t l = 1; l < host.size(); ++l)
        REQUIRE(host[l].addSequence() == id);
      for (cuda::DevicePagedKVCache &c : dev)
        REQUIRE(c.addSequence() == id);
      int32_t prefill = 1 + static_cast<int32_t>(rng() % 24);
      live[id] = {0, prefill + 1 + static_cast<int32_t>(rng() % 24)};
      append({id}, prefill);
    }
    append(ids(), 1);
  }
  /// Every live sequence finishes.
  void advanceLeavesOnly() {
    for (auto &[id, lengths] : live) {
      for (PagedKVCache &c : host)
        REQUIRE(c.release(id).isOk());
      for (cuda::DevicePagedKVCache &c : dev)
        REQUIRE(c.release(id).isOk());
    }
    live.clear();
  }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> out;
    for (const auto &[id, l] : live)
      out.push_back(id);
    return out;
  }
  std::vector<int32_t> offsets() const { // the newest token of each
    std::vector<int32_t> out;
    for (const auto &[id, l] : live)
      out.push_back(l.first - 1);
    return out;
  }
};

std::unique_ptr<Session> causalSession() {
  std::string diags;
  std::unique_ptr<Session> s;
  REQUIRE(Session::loadSource(
              "soak.attn", "variant causal() { mask_mod(b, h, q, kv) = q >= kv }",
              diags, s)
              .isOk());
  s->setKernelCache(nullptr);
  return s;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true; // freed memory sits in quarantine
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

/// Samples taken after warm-up must not grow by more than `slackKiB`.
/// Under AddressSanitizer resident memory grows with its quarantine of
/// freed blocks whatever the code does: there LeakSanitizer checks leaks
/// instead, and the samples are not compared.
void checkFlat(const std::vector<int64_t> &rss, int64_t slackKiB) {
  REQUIRE(rss.size() >= 2);
  if (kAddressSanitizer) {
    WARN("AddressSanitizer build: resident memory not compared (LeakSanitizer "
         "checks leaks)");
    return;
  }
  int64_t lo = *std::min_element(rss.begin(), rss.end());
  int64_t hi = *std::max_element(rss.begin(), rss.end());
  INFO("resident KiB after warm-up: " << lo << ".." << hi << ", last "
                                      << rss.back());
  CHECK(hi - lo <= slackKiB);
}

} // namespace

TEST_CASE("soak: a long serving loop on the CPU keeps memory flat",
          "[soak][cpu]") {
  auto session = causalSession();
  std::unique_ptr<CpuKernel> k;
  REQUIRE(session->compileCpu("causal", [] {
    KernelSpec s;
    s.headDim = s.vHeadDim = kD;
    return s;
  }(), k).isOk());
  Batch batch(nullptr);
  std::vector<int64_t> rss;
  int checked = 0;
  const int kSteps = 4000, kWarmUp = 200;
  for (int step = 0; step < kSteps; ++step) {
    batch.advance();
    PageTable table;
    REQUIRE(batch.host[0].table(batch.ids(), table).isOk());
    int64_t B = static_cast<int64_t>(batch.live.size());
    auto q = test::randomValues(DType::F32, B * kHq * kD, 1000 + step);
    std::vector<float> out(B * kHq * kD);
    AttentionArgs a;
    a.q = TensorView::contiguous(q.data(), DType::F32, {B, kHq, 1, kD});
    a.out = TensorView::contiguous(out.data(), DType::F32, {B, kHq, 1, kD});
    a.pages = &table;
    a.qOffsets = batch.offsets();
    CpuPlan plan;
    a.k = batch.host[0].keys();
    a.v = batch.host[0].values();
    REQUIRE(k->plan(a, plan).isOk());
    for (int l = 0; l < kLayers; ++l) {
      a.k = batch.host[l].keys();
      a.v = batch.host[l].values();
      REQUIRE(k->run(plan, a).isOk());
      if (step % 200 == 0) {
        CHECK(test::maxErrorVsReference(k->variant(), a) < 1e-5);
        ++checked;
      }
    }
    if (step >= kWarmUp && step % 100 == 0)
      rss.push_back(residentKiB());
  }
  batch.advanceLeavesOnly();
  for (PagedKVCache &c : batch.host)
    CHECK(c.pages().freePages() == kPages); // every page back in its pool
  CHECK(checked >= 10);
  checkFlat(rss, 4096);
}

TEST_CASE("soak: a long serving loop on the emulated GPU keeps host and "
          "device memory flat",
          "[soak][gpu-emulated]") {
  void *lib = dlopen(ATTNC_EMUCUDA_PATH, RTLD_NOW | RTLD_LOCAL);
  REQUIRE(lib);
  auto liveAllocations =
      reinterpret_cast<int (*)()>(dlsym(lib, "attnc_emu_live_allocations"));
  auto clearLaunches =
      reinterpret_cast<void (*)()>(dlsym(lib, "attnc_emu_clear_launches"));
  REQUIRE((liveAllocations && clearLaunches));
  std::unique_ptr<cuda::Context> ctx;
  REQUIRE(cuda::Context::open(ctx, 0, ATTNC_EMUCUDA_PATH).isOk());
  auto session = causalSession();
  KernelSpec spec;
  spec.headDim = spec.vHeadDim = kD;
  GpuKernelImage image;
  REQUIRE(session->compileGpu("causal", spec, "sm_80", image).isOk());
  VariantInfo info;
  REQUIRE(session->info("causal", info).isOk());
  std::unique_ptr<cuda::GpuKernel> k;
  REQUIRE(cuda::GpuKernel::load(*ctx, info, image, k).isOk());
  const cuda::DriverApi &api = ctx->driver().api();
  cuda::CUstream stream = nullptr;
  REQUIRE(api.cuStreamCreate(&stream, 0) == 0);
  Batch batch(ctx.get());
  std::vector<int64_t> rss, device;
  const int kSteps = 800, kWarmUp = 80;
  int checked = 0, graphs = 0;
  for (int step = 0; step < kSteps; ++step) {
    batch.advance();
    PageTable table;
    REQUIRE(batch.dev[0].table(batch.ids(), table).isOk());
    int64_t B = static_cast<int64_t>(batch.live.size());
    auto q = test::randomValues(DType::F32, B * kHq * kD, 2000 + step);
    cuda::DeviceBuffer dq, dout;
    REQUIRE(cuda::DeviceBuffer::allocate(*ctx, q.size(), dq).isOk());
    REQUIRE(cuda::DeviceBuffer::allocate(*ctx, q.size(), dout).isOk());
    REQUIRE(dq.upload(q.data(), q.size()).isOk());
    AttentionArgs a;
    a.q = TensorView::contiguous(dq.data(), DType::F32, {B, kHq, 1, kD});
    a.out = TensorView::contiguous(dout.data(), DType::F32, {B, kHq, 1, kD});
    a.pages = &table;
    a.qOffsets = batch.offsets();
    a.k = batch.dev[0].keys();
    a.v = batch.dev[0].values();
    cuda::GpuPlan plan;
    REQUIRE(k->plan(a, plan, stream).isOk());
    for (int l = 0; l < kLayers; ++l) {
      a.k = batch.dev[l].keys();
      a.v = batch.dev[l].values();
      bool graph = step % 8 == 7;
      if (graph) {
        REQUIRE(api.cuStreamBeginCapture(stream, 0) == 0);
        REQUIRE(k->run(plan, a, stream).isOk());
        cuda::CUgraph g = nullptr;
        REQUIRE(api.cuStreamEndCapture(stream, &g) == 0);
        cuda::CUgraphExec exec = nullptr;
        REQUIRE(api.cuGraphInstantiateWithFlags(&exec, g, 0) == 0);
        REQUIRE(api.cuGraphLaunch(exec, stream) == 0);
        REQUIRE(api.cuStreamSynchronize(stream) == 0);
        REQUIRE(api.cuGraphExecDestroy(exec) == 0);
        REQUIRE(api.cuGraphDestroy(g) == 0);
        ++graphs;
      } else {
        REQUIRE(k->run(plan, a, stream).isOk());
      }
      if (step % 40 == 0 || graph) {
        REQUIRE(api.cuStreamSynchronize(stream) == 0);
        std::vector<float> out(static_cast<size_t>(B * kHq * kD));
        REQUIRE(dout.download(out.data(), out.size() * 4).isOk());
        AttentionArgs h = a;
        h.q = TensorView::contiguous(q.data(), DType::F32, {B, kHq, 1, kD});
        h.out = TensorView::contiguous(out.data(), DType::F32, {B, kHq, 1, kD});
        h.k = batch.host[l].keys();
        h.v = batch.host[l].values();
        CHECK(test::maxErrorVsReference(info, h) < 1e-5);
        ++checked;
      }
    }
    REQUIRE(api.cuStreamSynchronize(stream) == 0);
    clearLaunches(); // the emulator's launch log is a test hook: it grows
    if (step >= kWarmUp && step % 40 == 0) {
      rss.push_back(residentKiB());
      device.push_back(liveAllocations());
    }
  }
  batch.advanceLeavesOnly();
  for (cuda::DevicePagedKVCache &c : batch.dev)
    CHECK(c.pages().freePages() == kPages);
  CHECK(graphs >= 20);
  CHECK(checked >= 30);
  // Device allocations between steps: the caches' pools and the kernel's
  // slot ring only, the same at every sample.
  CHECK(*std::min_element(device.begin(), device.end()) ==
        *std::max_element(device.begin(), device.end()));
  checkFlat(rss, 2048);
  REQUIRE(api.cuStreamDestroy(stream) == 0);
}
