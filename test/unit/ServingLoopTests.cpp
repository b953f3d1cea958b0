// A serving loop through the public API, on the CPU and on the emulated
// GPU: a batch of sequences prefilled into paged caches (PagedKVCache,
// DevicePagedKVCache: one per layer), then
// decoded token by token while sequences finish, with one plan per step
// (the page table changes) and one run per layer; every output against the
// fp64 reference. On the GPU the last step's runs are also captured in a
// CUDA graph and replayed: the emulator fails the capture if run() copies,
// allocates or synchronizes.
#include "attnc/Driver/Session.h"
#include "attnc/runtime/PagedKVCache.h"
#include "attnc/runtime/cuda/DevicePagedKVCache.h"
#include "PagedCaches.h"
#include "ReferenceCheck.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>
#include <random>

using namespace attnc;
using namespace attnc::rt;

namespace {

constexpr int64_t kHq = 8, kHkv = 2, kD = 64, kPage = 16, kPages = 24,
                  kLayers = 2;

const char *kServingSource = R"(
variant causal() { mask_mod(b, h, q, kv) = q >= kv }
)";

/// Every layer's paged caches: a host PagedKVCache per layer (the CPU's
/// pools, and the fp64 reference's on the GPU) and, with a device, a
/// DevicePagedKVCache per layer given the same rows. The caches take the
/// same decisions, so one table serves them all.
struct PagedPool {
  DType dt;
  const cuda::Context *ctx;
  std::vector<PagedKVCache> host;
  std::vector<cuda::DevicePagedKVCache> device;
  std::map<int32_t, int32_t> length; // live sequences, in id order
  std::mt19937_64 rng{3};

  PagedPool(DType d, const cuda::Context *gpu = nullptr) : dt(d), ctx(gpu) {
    test::createLayerCaches(dt, kHkv, kD, kPage, kPages, kLayers, ctx, host,
                            device);
  }

  int32_t add() {
    int32_t id = host[0].addSequence();
    for (size_t l = 1; l < host.size(); ++l)
      REQUIRE(host[l].addSequence() == id);
    for (cuda::DevicePagedKVCache &c : device)
      REQUIRE(c.addSequence() == id);
    length[id] = 0;
    return id;
  }
  /// Appends `T` random K/V rows to each of `ids`, in every layer.
  void append(const std::vector<int32_t> &ids, int64_t T) {
    test::appendRandomRows(host, device, ctx, dt, rng, ids, T, kHkv, kD);
    for (int32_t id : ids)
      length[id] += static_cast<int32_t>(T);
  }
  void finish(int32_t id) {
    for (PagedKVCache &c : host)
      REQUIRE(c.release(id).isOk());
    for (cuda::DevicePagedKVCache &c : device)
      REQUIRE(c.release(id).isOk());
    length.erase(id);
  }
  std::vector<int32_t> ids() const {
    std::vector<int32_t> out;
    for (const auto &[id, len] : length)
      out.push_back(id);
    return out;
  }
  PageTable table() const {
    PageTable t;
    REQUIRE(host[0].table(ids(), t).isOk());
    return t;
  }
  int64_t batch() const { return static_cast<int64_t>(length.size()); }
};

/// One layer's call on the host: q and out for the live batch, the views
/// of the layer's host pools.
struct LayerCall {
  std::vector<uint8_t> q, out;
  AttentionArgs args;
};

LayerCall layerCall(PagedPool &pool, int layer, int64_t lq, uint64_t seed) {
  LayerCall c;
  int64_t B = pool.batch();
  c.q = test::randomValues(pool.dt, B * kHq * lq * kD, seed);
  c.out.assign(c.q.size(), 0);
  c.args.q = TensorView::contiguous(c.q.data(), pool.dt, {B, kHq, lq, kD});
  c.args.k = pool.host[layer].keys();
  c.args.v = pool.host[layer].values();
  c.args.out = TensorView::contiguous(c.out.data(), pool.dt, {B, kHq, lq, kD});
  return c;
}

/// The loop: prefill {40, 7, 20} tokens, then 4 decode steps; sequence 1
/// finishes after the second and a new sequence joins (prefilled with 33)
/// at the third. `runStep(pool, calls)` plans once and runs every layer's
/// call, writing each call's `out`.
template <typename RunStep>
void servingLoop(PagedPool &pool, double tol, RunStep runStep,
                 const VariantInfo &info) {
  std::vector<int32_t> first = {pool.add(), pool.add(), pool.add()};
  pool.append({first[0]}, 40);
  pool.append({first[1]}, 7);
  pool.append({first[2]}, 20);
  auto step = [&](int64_t lq, std::vector<int32_t> qOffsets, uint64_t seed) {
    PageTable t = pool.table();
    std::vector<LayerCall> calls;
    for (int l = 0; l < kLayers; ++l)
      calls.push_back(layerCall(pool, l, lq, seed + l));
    for (LayerCall &c : calls) {
      c.args.pages = &t;
      c.args.qOffsets = qOffsets;
    }
    runStep(calls);
    for (LayerCall &c : calls) {
      INFO("B=" << pool.batch() << " lq=" << lq);
      CHECK(test::maxErrorVsReference(info, c.args) < tol);
    }
  };
  // Prefill: queries from position 0 (sequences shorter than the chunk
  // see all their keys from their extra rows on).
  step(40, {0, 0, 0}, 100);
  for (int s = 0; s < 4; ++s) {
    if (s == 2) {
      pool.finish(first[1]);
      int32_t joined = pool.add();
      pool.append({joined}, 33);
    }
    pool.append(pool.ids(), 1); // one new token each, in one append
    std::vector<int32_t> offsets;
    for (const auto &[id, len] : pool.length)
      offsets.push_back(len - 1); // the new token's position
    step(1, offsets, 200 + 10 * s);
  }
}

std::unique_ptr<Session> servingSession() {
  std::string diags;
  std::unique_ptr<Session> s;
  REQUIRE(Session::loadSource("serve.attn", kServingSource, diags, s).isOk());
  return s;
}

} // namespace

TEST_CASE("a serving loop with plan/run on the CPU", "[serving][cpu]") {
  auto session = servingSession();
  std::unique_ptr<CpuKernel> k;
  REQUIRE(session->compileCpu("causal", KernelSpec{}, k).isOk());
  PagedPool pool(DType::F32);
  servingLoop(pool, 1e-5,
              [&](std::vector<LayerCall> &calls) {
                CpuPlan plan;
                Status s = k->plan(calls[0].args, plan);
                INFO(s.toString());
                REQUIRE(s.isOk());
                for (LayerCall &c : calls)
                  REQUIRE(k->run(plan, c.args).isOk());
              },
              k->variant());
}

TEST_CASE("a serving loop with plan/run on the emulated GPU, graph-captured",
          "[serving][gpu-emulated]") {
  auto session = servingSession();
  std::unique_ptr<cuda::Context> ctx;
  REQUIRE(cuda::Context::open(ctx, 0, ATTNC_EMUCUDA_PATH).isOk());
  KernelSpec spec;
  spec.dtype = DType::BF16;
  GpuKernelImage image;
  REQUIRE(session->compileGpu("causal", spec, "sm_80", image).isOk());
  VariantInfo info;
  REQUIRE(session->info("causal", info).isOk());
  std::unique_ptr<cuda::GpuKernel> k;
  REQUIRE(cuda::GpuKernel::load(*ctx, info, image, k).isOk());
  const cuda::DriverApi &api = ctx->driver().api();
  cuda::CUstream stream = nullptr;
  REQUIRE(api.cuStreamCreate(&stream, 0) == 0);
  int steps = 0;
  PagedPool pool(DType::BF16, ctx.get());
  // Each layer's call on the device: q and out in device buffers, K and V
  // the layer's device cache; `out` comes back to the host call.
  struct DeviceCall {
    cuda::DeviceBuffer q, out;
    AttentionArgs args;
  };
  auto toDevice = [&](LayerCall &c, int layer, DeviceCall &d) {
    REQUIRE(cuda::DeviceBuffer::allocate(*ctx, c.q.size(), d.q).isOk());
    REQUIRE(cuda::DeviceBuffer::allocate(*ctx, c.out.size(), d.out).isOk());
    REQUIRE(d.q.upload(c.q.data(), c.q.size()).isOk());
    REQUIRE(d.out.fill(0).isOk());
    d.args = c.args;
    d.args.q.data = d.q.data();
    d.args.out.data = d.out.data();
    d.args.k = pool.device[layer].keys();
    d.args.v = pool.device[layer].values();
  };
  servingLoop(
      pool, 2e-2,
      [&](std::vector<LayerCall> &calls) {
        std::vector<DeviceCall> dev(calls.size());
        for (size_t l = 0; l < calls.size(); ++l)
          toDevice(calls[l], static_cast<int>(l), dev[l]);
        cuda::GpuPlan plan;
        Status s = k->plan(dev[0].args, plan, stream);
        INFO(s.toString());
        REQUIRE(s.isOk());
        for (size_t l = 0; l < calls.size(); ++l)
          REQUIRE(k->run(plan, dev[l].args, stream).isOk());
        REQUIRE(api.cuStreamSynchronize(stream) == 0);
        for (size_t l = 0; l < calls.size(); ++l)
          REQUIRE(dev[l].out.download(calls[l].out.data(), calls[l].out.size()).isOk());
        if (++steps < 5)
          return;
        // The last step again, as a CUDA graph of both layers' runs,
        // replayed into cleared outputs: the same bits.
        std::vector<std::vector<uint8_t>> direct;
        for (LayerCall &c : calls)
          direct.push_back(c.out);
        for (DeviceCall &d : dev)
          REQUIRE(d.out.fill(0).isOk());
        REQUIRE(api.cuStreamBeginCapture(stream, 0) == 0);
        for (size_t l = 0; l < calls.size(); ++l)
          CHECK(k->run(plan, dev[l].args, stream).isOk());
        cuda::CUgraph graph = nullptr;
        REQUIRE(api.cuStreamEndCapture(stream, &graph) == 0);
        cuda::CUgraphExec exec = nullptr;
        REQUIRE(api.cuGraphInstantiateWithFlags(&exec, graph, 0) == 0);
        REQUIRE(api.cuGraphLaunch(exec, stream) == 0);
        REQUIRE(api.cuStreamSynchronize(stream) == 0);
        for (size_t l = 0; l < calls.size(); ++l) {
          std::vector<uint8_t> replayed(calls[l].out.size());
          REQUIRE(dev[l].out.download(replayed.data(), replayed.size()).isOk());
          CHECK(replayed == direct[l]);
        }
        REQUIRE(api.cuGraphExecDestroy(exec) == 0);
        REQUIRE(api.cuGraphDestroy(graph) == 0);
      },
      info);
  CHECK(steps == 5);
  // run(args) without a plan copies its parameters on the stream: not
  // graph-safe, and the emulator says so (as a device would).
  PageTable t = pool.table();
  LayerCall c = layerCall(pool, 0, 1, 9);
  c.args.pages = &t;
  DeviceCall d;
  toDevice(c, 0, d);
  REQUIRE(api.cuStreamBeginCapture(stream, 0) == 0);
  CHECK_THAT(k->run(d.args, stream).message(),
             Catch::Contains("CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"));
  cuda::CUgraph graph = nullptr;
  CHECK(api.cuStreamEndCapture(stream, &graph) == 901); // invalidated
  REQUIRE(api.cuStreamDestroy(stream) == 0);
}

TEST_CASE("a plan refuses calls with other views",
          "[serving][cpu]") {
  auto session = servingSession();
  std::unique_ptr<CpuKernel> k;
  REQUIRE(session->compileCpu("causal", KernelSpec{}, k).isOk());
  PagedPool pool(DType::F32);
  pool.append({pool.add()}, 30);
  PageTable t = pool.table();
  LayerCall c = layerCall(pool, 0, 1, 5);
  c.args.pages = &t;
  CpuPlan plan;
  CHECK(k->run(plan, c.args).message() ==
        "the plan is empty: make it with CpuKernel::plan");
  REQUIRE(k->plan(c.args, plan).isOk());
  LayerCall other = layerCall(pool, 1, 2, 6); // two query rows
  other.args.pages = &t;
  CHECK(k->run(plan, other.args).message() ==
        "'q' is f32 [1, 8, 2, 64] with strides [1024, 128, 64, 1], but the "
        "plan was made for f32 [1, 8, 1, 64] with strides [512, 64, 64, 1]; "
        "make a plan for these views");
  std::vector<float> lse(8);
  c.args.lse = TensorView::contiguous(lse.data(), DType::F32, {1, 8, 1});
  CHECK(k->run(plan, c.args).message() ==
        "'lse' is given, but the plan was made without one");
}
