// Fault injection on the GPU path (docs/reliability.md): the emulator fails
// a chosen driver call (attnc_emu_fail_call: the nth call of an entry point
// returns an error and does nothing), swept over a serving round -- module
// load, a paged cache filled, plan and run, a split-KV run with its merge,
// a graph captured and replayed, the backward. Each failure must come back
// as an error naming the call, leave no device memory behind, and leave the
// kernels usable: the next round, without a fault, gives the same bits.
#include "attnc/Driver/Session.h"
#include "attnc/runtime/PagedKVCache.h"
#include "attnc/runtime/cuda/DevicePagedKVCache.h"
#include "attnc/runtime/cuda/GpuBackward.h"
#include "ReferenceCheck.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <map>

using namespace attnc;
using namespace attnc::rt;

namespace {

constexpr int kUnknown = 999; // CUDA_ERROR_UNKNOWN: a transient failure
constexpr int64_t kHq = 4, kHkv = 2, kD = 64, kPage = 16;

/// The emulator's test hooks, from the library the runtime loaded.
struct EmuHooks {
  void (*failCall)(const char *, long, int) = nullptr;
  long (*callCount)(const char *) = nullptr;
  void (*resetCalls)() = nullptr;
  int (*liveAllocations)() = nullptr;
  EmuHooks() {
    void *lib = dlopen(ATTNC_EMUCUDA_PATH, RTLD_NOW | RTLD_LOCAL);
    REQUIRE(lib);
    failCall = reinterpret_cast<void (*)(const char *, long, int)>(
        dlsym(lib, "attnc_emu_fail_call"));
    callCount =
        reinterpret_cast<long (*)(const char *)>(dlsym(lib, "attnc_emu_call_count"));
    resetCalls = reinterpret_cast<void (*)()>(dlsym(lib, "attnc_emu_reset_calls"));
    liveAllocations =
        reinterpret_cast<int (*)()>(dlsym(lib, "attnc_emu_live_allocations"));
    REQUIRE((failCall && callCount && resetCalls && liveAllocations));
  }
};

#define TRY(expr)                                                              \
  do {                                                                         \
    if (Status s_ = (expr); !s_)                                               \
      return s_;                                                               \
  } while (0)

/// A stream that is destroyed however the round ends.
struct OwnedStream {
  const cuda::DriverApi *api = nullptr;
  cuda::CUstream s = nullptr;
  ~OwnedStream() {
    if (s)
      api->cuStreamDestroy(s);
  }
};

struct Kernels {
  VariantInfo info;
  GpuKernelImage forward;
  GpuBackwardImage backward;
  std::unique_ptr<cuda::GpuKernel> fwd;
  std::unique_ptr<cuda::GpuBackwardKernel> bwd;
};

/// What a round produces: the forward's outputs (plan/run, split, graph)
/// and the backward's gradients, as bytes.
using Outputs = std::vector<std::vector<uint8_t>>;

Status uploaded(const cuda::Context &ctx, const std::vector<uint8_t> &host,
                cuda::DeviceBuffer &out) {
  TRY(cuda::DeviceBuffer::allocate(ctx, host.size(), out));
  return out.upload(host.data(), host.size());
}

/// One serving round on the loaded kernels; every device object it makes
/// is gone when it returns.
Status serve(const cuda::Context &ctx, const Kernels &k, Outputs &outs) {
  outs.clear();
  const cuda::DriverApi &api = ctx.driver().api();
  const DType dt = DType::BF16;
  OwnedStream stream{&api, nullptr};
  TRY(ctx.driver().check(api.cuStreamCreate(&stream.s, 0), "cuStreamCreate"));

  // Two sequences in a device paged cache.
  PagedKVCacheSpec spec;
  spec.dtype = dt;
  spec.kvHeads = kHkv;
  spec.headDim = spec.vHeadDim = kD;
  spec.pageSize = kPage;
  spec.numPages = 6;
  cuda::DevicePagedKVCache cache;
  TRY(cuda::DevicePagedKVCache::create(ctx, spec, cache));
  std::vector<int32_t> seqs = {cache.addSequence(), cache.addSequence()};
  for (int32_t len : {20, 9}) {
    int64_t n = kHkv * len * kD;
    auto hk = test::randomValues(dt, n, 10 + len), hv = test::randomValues(dt, n, 20 + len);
    cuda::DeviceBuffer dk, dv;
    TRY(uploaded(ctx, hk, dk));
    TRY(uploaded(ctx, hv, dv));
    TRY(cache.append({seqs[len == 20 ? 0 : 1]},
                     TensorView::contiguous(dk.data(), dt, {1, kHkv, len, kD}),
                     TensorView::contiguous(dv.data(), dt, {1, kHkv, len, kD})));
    TRY(ctx.synchronize());
  }
  PageTable table;
  TRY(cache.table(seqs, table));

  // Decode: plan once, run twice; a split-KV run; the plan's run captured
  // in a graph and replayed.
  auto hq = test::randomValues(dt, 2 * kHq * kD, 7);
  cuda::DeviceBuffer q, out[4];
  TRY(uploaded(ctx, hq, q));
  for (cuda::DeviceBuffer &o : out) {
    TRY(cuda::DeviceBuffer::allocate(ctx, hq.size(), o));
    TRY(o.fill(0));
  }
  AttentionArgs a;
  a.q = TensorView::contiguous(q.data(), dt, {2, kHq, 1, kD});
  a.k = cache.keys();
  a.v = cache.values();
  a.pages = &table;
  a.qOffsets = {19, 8};
  auto into = [&](int i) {
    AttentionArgs c = a;
    c.out = TensorView::contiguous(out[i].data(), dt, {2, kHq, 1, kD});
    return c;
  };
  cuda::GpuPlan plan;
  TRY(k.fwd->plan(into(0), plan, stream.s));
  TRY(k.fwd->run(plan, into(0), stream.s));
  TRY(k.fwd->run(plan, into(1), stream.s));
  AttentionArgs split = into(2);
  split.numSplits = 3;
  TRY(k.fwd->run(split, stream.s));
  TRY(ctx.driver().check(api.cuStreamBeginCapture(stream.s, 0),
                         "cuStreamBeginCapture"));
  Status captured = k.fwd->run(plan, into(3), stream.s);
  cuda::CUgraph graph = nullptr;
  Status ended = ctx.driver().check(api.cuStreamEndCapture(stream.s, &graph),
                                    "cuStreamEndCapture");
  TRY(captured);
  TRY(ended);
  cuda::CUgraphExec exec = nullptr;
  Status inst = ctx.driver().check(api.cuGraphInstantiateWithFlags(&exec, graph, 0),
                                   "cuGraphInstantiateWithFlags");
  Status launched = inst ? ctx.driver().check(api.cuGraphLaunch(exec, stream.s),
                                              "cuGraphLaunch")
                         : inst;
  Status synced = launched ? ctx.driver().check(api.cuStreamSynchronize(stream.s),
                                                "cuStreamSynchronize")
                           : launched;
  if (exec)
    api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
  TRY(synced);
  for (cuda::DeviceBuffer &o : out) {
    outs.emplace_back(o.size());
    TRY(o.download(outs.back().data(), o.size()));
  }

  // The backward on host tensors (copied in, run, copied back).
  const int64_t L = 24;
  auto bq = test::randomValues(dt, kHq * L * kD, 31),
       bk = test::randomValues(dt, kHkv * L * kD, 32),
       bv = test::randomValues(dt, kHkv * L * kD, 33),
       bdo = test::randomValues(dt, kHq * L * kD, 34);
  std::vector<uint8_t> bo(bq.size()), dq(bq.size()), dk(bk.size()), dv(bv.size());
  std::vector<float> lse(kHq * L);
  BackwardArgs b;
  b.forward.q = TensorView::contiguous(bq.data(), dt, {1, kHq, L, kD});
  b.forward.k = TensorView::contiguous(bk.data(), dt, {1, kHkv, L, kD});
  b.forward.v = TensorView::contiguous(bv.data(), dt, {1, kHkv, L, kD});
  b.forward.out = TensorView::contiguous(bo.data(), dt, {1, kHq, L, kD});
  b.forward.lse = TensorView::contiguous(lse.data(), DType::F32, {1, kHq, L});
  TRY(cuda::runFromHost(ctx, *k.fwd, b.forward));
  b.dOut = TensorView::contiguous(bdo.data(), dt, {1, kHq, L, kD});
  b.dq = TensorView::contiguous(dq.data(), dt, {1, kHq, L, kD});
  b.dk = TensorView::contiguous(dk.data(), dt, {1, kHkv, L, kD});
  b.dv = TensorView::contiguous(dv.data(), dt, {1, kHkv, L, kD});
  TRY(cuda::runBackwardFromHost(ctx, *k.bwd, b));
  outs.push_back(bo);
  outs.push_back(dq);
  outs.push_back(dk);
  outs.push_back(dv);
  return Status::ok();
}

/// The entry points the sweep fails, as the emulator counts them, and the
/// name the runtime's message uses.
const std::vector<std::pair<const char *, const char *>> kFaultPoints = {
    {"cuMemAlloc_v2", "cuMemAlloc"},
    {"cuMemcpyHtoD_v2", "cuMemcpyHtoD"},
    {"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync"},
    {"cuMemcpyDtoH_v2", "cuMemcpyDtoH"},
    {"cuMemsetD8_v2", "cuMemsetD8"},
    {"cuLaunchKernel", "cuLaunchKernel"},
    {"cuStreamCreate", "cuStreamCreate"},
    {"cuStreamSynchronize", "cuStreamSynchronize"},
    {"cuCtxSynchronize", "cuCtxSynchronize"},
    {"cuStreamBeginCapture_v2", "cuStreamBeginCapture"},
    {"cuStreamEndCapture", "cuStreamEndCapture"},
    {"cuGraphInstantiateWithFlags", "cuGraphInstantiateWithFlags"},
    {"cuGraphLaunch", "cuGraphLaunch"},
    {"cuEventRecord", "cuEventRecord"},
    {"cuEventSynchronize", "cuEventSynchronize"},
};

/// Up to `most` call numbers spread over 1..n (the first and the last
/// included).
std::vector<long> sample(long n, long most) {
  std::vector<long> out;
  if (n <= most) {
    for (long i = 1; i <= n; ++i)
      out.push_back(i);
    return out;
  }
  for (long i = 0; i < most; ++i)
    out.push_back(1 + i * (n - 1) / (most - 1));
  return out;
}

} // namespace

TEST_CASE("a driver call failing anywhere in a serving round is an error, "
          "leaks nothing, and the next round succeeds",
          "[fault][gpu-emulated]") {
  EmuHooks emu;
  std::unique_ptr<cuda::Context> ctx;
  REQUIRE(cuda::Context::open(ctx, 0, ATTNC_EMUCUDA_PATH).isOk());
  std::string diags;
  std::unique_ptr<Session> session;
  REQUIRE(Session::loadSource(
              "t.attn", "variant causal() { mask_mod(b, h, q, kv) = q >= kv }",
              diags, session)
              .isOk());
  session->setKernelCache(nullptr);
  Kernels k;
  KernelSpec spec;
  spec.dtype = DType::BF16;
  REQUIRE(session->info("causal", k.info).isOk());
  REQUIRE(session->compileGpu("causal", spec, "sm_80", k.forward).isOk());
  REQUIRE(session->compileGpuBackward("causal", spec, "sm_80", k.backward).isOk());

  // Loading: a failing module load or function lookup is an error, and
  // the next load works.
  for (auto [entry, named] :
       {std::pair<const char *, const char *>{"cuModuleLoadDataEx", "cuModuleLoadData"},
        {"cuModuleGetFunction", "cuModuleGetFunction"},
        {"cuFuncSetAttribute", "cuFuncSetAttribute"}}) {
    emu.resetCalls();
    REQUIRE(cuda::GpuKernel::load(*ctx, k.info, k.forward, k.fwd).isOk());
    long calls = emu.callCount(entry);
    k.fwd.reset();
    for (long n : sample(calls, 3)) {
      emu.resetCalls();
      emu.failCall(entry, n, kUnknown);
      Status s = cuda::GpuKernel::load(*ctx, k.info, k.forward, k.fwd);
      emu.failCall("", 0, 0);
      INFO(entry << " call " << n << ": " << s.toString());
      CHECK_FALSE(s.isOk());
      CHECK_THAT(s.message(), Catch::Contains(named));
      CHECK(k.fwd == nullptr);
    }
  }
  REQUIRE(cuda::GpuKernel::load(*ctx, k.info, k.forward, k.fwd).isOk());
  REQUIRE(cuda::GpuBackwardKernel::load(*ctx, k.info, k.backward, k.bwd).isOk());

  // Rounds without faults until the kernels' parameter-slot rings stop
  // growing (GpuKernel::kRing slots, each grown to what a call needs);
  // then the reference bits, the device memory live between rounds, and
  // how often each entry point is called.
  Outputs want;
  int live = -1;
  for (int warm = 0; warm < 8 && emu.liveAllocations() != live; ++warm) {
    live = emu.liveAllocations();
    Status s = serve(*ctx, k, want);
    INFO(s.toString());
    REQUIRE(s.isOk());
  }
  REQUIRE(emu.liveAllocations() == live); // the pools stop growing
  emu.resetCalls();
  Status first = serve(*ctx, k, want);
  REQUIRE(first.isOk());
  REQUIRE(want.size() == 8);
  CHECK(want[0] == want[1]); // plan/run twice
  CHECK(want[0] == want[3]); // the graph's replay
  CHECK(emu.liveAllocations() == live);
  std::map<std::string, long> calls;
  for (auto [entry, named] : kFaultPoints)
    calls[entry] = emu.callCount(entry);
  CHECK(calls["cuLaunchKernel"] >= 6);
  CHECK(calls["cuGraphLaunch"] == 1);

  int faults = 0;
  for (auto [entry, named] : kFaultPoints) {
    for (long n : sample(calls[entry], 4)) {
      emu.resetCalls();
      emu.failCall(entry, n, kUnknown);
      Outputs got;
      Status s = serve(*ctx, k, got);
      emu.failCall("", 0, 0);
      INFO(entry << " call " << n << " of " << calls[entry] << ": "
                 << s.toString());
      CHECK_FALSE(s.isOk());
      CHECK_THAT(s.message(), Catch::Contains(named));
      CHECK(emu.liveAllocations() == live);
      // The kernels, their parameter slots and the driver state are fine:
      // the next round gives the same bits.
      Status again = serve(*ctx, k, got);
      INFO("the round after: " << again.toString());
      REQUIRE(again.isOk());
      CHECK(got == want);
      CHECK(emu.liveAllocations() == live);
      ++faults;
    }
  }
  CHECK(faults >= 30);
}
