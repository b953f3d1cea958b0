// A serving loop through the public API, on the CPU and on the emulated
// GPU: a batch of sequences prefilled into a paged K/V pool per layer, then
// decoded token by token while sequences finish, with one plan per step
// (the page table changes) and one run per layer; every output against the
// fp64 reference. On the GPU the last step's runs are also captured in a
// CUDA graph and replayed: the emulator fails the capture if run() copies,
// allocates or synchronizes.
#include "attnc/Driver/Session.h"
#include "attnc/runtime/cuda/GpuKernel.h"

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

/// The K/V pools of every layer (host memory, [pages, Hkv, page, D]) and
/// each live sequence's pages and length; pages come from a free list and
/// go back to it when a sequence finishes.
struct PagedPool {
  DType dt;
  std::vector<std::vector<uint8_t>> k, v; // per layer
  std::vector<int32_t> freePages;
  std::map<int, std::vector<int32_t>> pages; // per sequence id
  std::map<int, int32_t> length;
  std::mt19937_64 rng{3};

  explicit PagedPool(DType d) : dt(d) {
    size_t bytes = kPages * kHkv * kPage * kD * dtypeSize(dt);
    for (int l = 0; l < kLayers; ++l) {
      k.emplace_back(bytes, 0);
      v.emplace_back(bytes, 0);
    }
    for (int32_t p = kPages - 1; p >= 0; --p)
      freePages.push_back(p);
  }
  /// Appends `n` random K/V rows to sequence `id` in every layer.
  void append(int id, int32_t n) {
    std::uniform_real_distribution<double> u(-1, 1);
    for (int32_t i = 0; i < n; ++i) {
      int32_t row = length[id]++;
      if (row % kPage == 0) {
        REQUIRE(!freePages.empty());
        pages[id].push_back(freePages.back());
        freePages.pop_back();
      }
      int32_t page = pages[id][row / kPage];
      for (int l = 0; l < kLayers; ++l)
        for (int64_t h = 0; h < kHkv; ++h)
          for (int64_t d = 0; d < kD; ++d) {
            int64_t at = ((page * kHkv + h) * kPage + row % kPage) * kD + d;
            storeFromDouble(k[l].data(), dt, at, u(rng));
            storeFromDouble(v[l].data(), dt, at, u(rng));
          }
    }
  }
  void finish(int id) {
    for (int32_t p : pages[id])
      freePages.push_back(p);
    pages.erase(id);
    length.erase(id);
  }
  /// The live sequences' table, in id order.
  PageTable table() const {
    PageTable t;
    t.pageSize = kPage;
    t.indptr = {0};
    for (const auto &[id, ps] : pages) {
      t.indices.insert(t.indices.end(), ps.begin(), ps.end());
      t.indptr.push_back(static_cast<int32_t>(t.indices.size()));
      int32_t len = length.at(id);
      t.lastPageLen.push_back(len ? (len - 1) % kPage + 1 : 0);
    }
    return t;
  }
  int64_t batch() const { return static_cast<int64_t>(pages.size()); }
};

/// One layer's call: q and out for the live batch, views of its pools.
struct LayerCall {
  std::vector<uint8_t> q, out;
  AttentionArgs args;
};

LayerCall layerCall(PagedPool &pool, int layer, int64_t lq, uint64_t seed) {
  LayerCall c;
  int64_t B = pool.batch();
  size_t es = dtypeSize(pool.dt);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  c.q.resize(B * kHq * lq * kD * es);
  for (int64_t i = 0; i < B * kHq * lq * kD; ++i)
    storeFromDouble(c.q.data(), pool.dt, i, u(rng));
  c.out.assign(B * kHq * lq * kD * es, 0);
  c.args.q = TensorView::contiguous(c.q.data(), pool.dt, {B, kHq, lq, kD});
  c.args.k = TensorView::contiguous(pool.k[layer].data(), pool.dt,
                                    {kPages, kHkv, kPage, kD});
  c.args.v = TensorView::contiguous(pool.v[layer].data(), pool.dt,
                                    {kPages, kHkv, kPage, kD});
  c.args.out = TensorView::contiguous(c.out.data(), pool.dt, {B, kHq, lq, kD});
  return c;
}

/// max |out - reference| of a finished call (host views).
double maxError(const VariantInfo &info, const AttentionArgs &a) {
  std::vector<double> ref, lse;
  Status s = referenceAttention(info, a, ref, lse);
  INFO(s.toString());
  REQUIRE(s.isOk());
  double m = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double got = loadAsDouble(a.out.data, a.out.dtype, static_cast<int64_t>(i));
    if (std::isnan(got))
      return INFINITY;
    m = std::max(m, std::fabs(got - ref[i]));
  }
  return m;
}

/// The loop: prefill {40, 7, 20} tokens, then 4 decode steps; sequence 1
/// finishes after the second and sequence 3 joins (prefilled with 33) at
/// the third. `runStep(table, lq, qOffsets, calls)` plans once and runs
/// every layer's call.
template <typename RunStep>
void servingLoop(DType dt, double tol, RunStep runStep,
                 const VariantInfo &info) {
  PagedPool pool(dt);
  pool.append(0, 40);
  pool.append(1, 7);
  pool.append(2, 20);
  auto step = [&](int64_t lq, std::vector<int32_t> qOffsets, uint64_t seed) {
    PageTable t = pool.table();
    std::vector<LayerCall> calls;
    for (int l = 0; l < kLayers; ++l)
      calls.push_back(layerCall(pool, l, lq, seed + l));
    for (LayerCall &c : calls) {
      c.args.pages = &t;
      c.args.qOffsets = qOffsets;
    }
    runStep(t, calls);
    for (LayerCall &c : calls) {
      INFO("B=" << pool.batch() << " lq=" << lq);
      CHECK(maxError(info, c.args) < tol);
    }
  };
  // Prefill: queries from position 0 (sequences shorter than the chunk
  // see all their keys from their extra rows on).
  step(40, {0, 0, 0}, 100);
  for (int s = 0; s < 4; ++s) {
    if (s == 2) {
      pool.finish(1);
      pool.append(3, 33);
    }
    std::vector<int32_t> offsets;
    for (auto &[id, len] : pool.length) {
      pool.append(id, 1);
      offsets.push_back(len); // the new token's position (len is updated)
    }
    for (int32_t &o : offsets)
      o -= 1;
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
  servingLoop(DType::F32, 1e-5,
              [&](const PageTable &, std::vector<LayerCall> &calls) {
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
  servingLoop(
      DType::BF16, 2e-2,
      [&](const PageTable &, std::vector<LayerCall> &calls) {
        // Device copies of each layer's q, pools and out.
        std::vector<cuda::DeviceMirror> dev(calls.size());
        for (size_t l = 0; l < calls.size(); ++l)
          REQUIRE(cuda::DeviceMirror::create(*ctx, calls[l].args, dev[l]).isOk());
        cuda::GpuPlan plan;
        Status s = k->plan(dev[0].args(), plan, stream);
        INFO(s.toString());
        REQUIRE(s.isOk());
        for (size_t l = 0; l < calls.size(); ++l)
          REQUIRE(k->run(plan, dev[l].args(), stream).isOk());
        REQUIRE(api.cuStreamSynchronize(stream) == 0);
        for (size_t l = 0; l < calls.size(); ++l)
          REQUIRE(dev[l].downloadOutputs(calls[l].args).isOk());
        if (++steps < 5)
          return;
        // The last step again, as a CUDA graph of both layers' runs,
        // replayed into cleared outputs: the same bits.
        std::vector<std::vector<uint8_t>> direct;
        for (LayerCall &c : calls)
          direct.push_back(c.out);
        for (size_t l = 0; l < calls.size(); ++l) {
          std::fill(calls[l].out.begin(), calls[l].out.end(), 0);
          REQUIRE(cuda::DeviceMirror::create(*ctx, calls[l].args, dev[l]).isOk());
        }
        REQUIRE(api.cuStreamBeginCapture(stream, 0) == 0);
        for (size_t l = 0; l < calls.size(); ++l)
          CHECK(k->run(plan, dev[l].args(), stream).isOk());
        cuda::CUgraph graph = nullptr;
        REQUIRE(api.cuStreamEndCapture(stream, &graph) == 0);
        cuda::CUgraphExec exec = nullptr;
        REQUIRE(api.cuGraphInstantiateWithFlags(&exec, graph, 0) == 0);
        REQUIRE(api.cuGraphLaunch(exec, stream) == 0);
        REQUIRE(api.cuStreamSynchronize(stream) == 0);
        for (size_t l = 0; l < calls.size(); ++l) {
          REQUIRE(dev[l].downloadOutputs(calls[l].args).isOk());
          CHECK(calls[l].out == direct[l]);
        }
        REQUIRE(api.cuGraphExecDestroy(exec) == 0);
        REQUIRE(api.cuGraphDestroy(graph) == 0);
      },
      info);
  CHECK(steps == 5);
  // run(args) without a plan copies its parameters on the stream: not
  // graph-safe, and the emulator says so (as a device would).
  PagedPool pool(DType::BF16);
  pool.append(0, 30);
  PageTable t = pool.table();
  LayerCall c = layerCall(pool, 0, 1, 9);
  c.args.pages = &t;
  cuda::DeviceMirror dev;
  REQUIRE(cuda::DeviceMirror::create(*ctx, c.args, dev).isOk());
  REQUIRE(api.cuStreamBeginCapture(stream, 0) == 0);
  CHECK_THAT(k->run(dev.args(), stream).message(),
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
  pool.append(0, 30);
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
