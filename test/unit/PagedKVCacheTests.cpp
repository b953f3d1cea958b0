// Paged K/V caches: the page allocator; the host cache and its device twin
// growing the same sequences to the same bytes (the device's append kernel
// on the emulator); and attention over them, prefill then decode with a
// plan per step, against the fp64 reference on the CPU and the emulated GPU.
#include "attnc/Driver/Session.h"
#include "attnc/runtime/PagedKVCache.h"
#include "attnc/runtime/cuda/DevicePagedKVCache.h"
#include "ReferenceCheck.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>

using namespace attnc;
using namespace attnc::rt;

namespace {

const char *kCacheSource = R"(
variant causal() { mask_mod(b, h, q, kv) = q >= kv }
)";

} // namespace

TEST_CASE("the page allocator hands out and takes back pages",
          "[pages][cache]") {
  PageAllocator a(4, 5);
  int32_t s0 = a.addSequence(), s1 = a.addSequence();
  std::vector<int64_t> slots;
  REQUIRE(a.reserve({s0, s1}, 6, slots).isOk()); // 2 pages each
  CHECK(slots.size() == 12);
  CHECK(slots[0] == 0);
  CHECK(slots[4] == 1 * 4 + 0); // s0's second page is page 1
  CHECK(a.freePages() == 1);
  CHECK(a.length(s0) == 6);
  // Too few pages: nothing changes.
  slots.clear();
  CHECK(a.reserve({s0, s1}, 3, slots).message() ==
        "the cache has 1 free pages of 4 rows, the append needs 2");
  CHECK(slots.empty());
  CHECK(a.length(s0) == 6);
  CHECK(a.reserve({s0, s0}, 1, slots).message() ==
        "sequence 0 appears twice in one append");
  CHECK(a.reserve({7}, 1, slots).message() ==
        "sequence 7 is not in the cache (added, and not released)");
  PageTable t;
  REQUIRE(a.table({s1, s0}, t).isOk());
  CHECK(t.indptr == std::vector<int32_t>{0, 2, 4});
  CHECK(t.indices == std::vector<int32_t>{2, 3, 0, 1});
  CHECK(t.lastPageLen == std::vector<int32_t>{2, 2});
  REQUIRE(t.check(2, 5).isOk());
  REQUIRE(a.release(s0).isOk());
  CHECK(a.freePages() == 3);
  CHECK(a.length(s0) == -1);
  CHECK(!a.release(s0).isOk());
  int32_t s2 = a.addSequence();
  CHECK(s2 == 2); // ids are never reused
  slots.clear();
  REQUIRE(a.reserve({s2}, 9, slots).isOk()); // three pages: 0, 1 and 4
  CHECK(a.freePages() == 0);
}

TEST_CASE("the host paged cache: prefill, decode and finish with plan/run",
          "[cache][cpu]") {
  std::string diags;
  std::unique_ptr<Session> session;
  REQUIRE(Session::loadSource("c.attn", kCacheSource, diags, session).isOk());
  std::unique_ptr<CpuKernel> k;
  REQUIRE(session->compileCpu("causal", KernelSpec{}, k).isOk());
  PagedKVCacheSpec spec;
  spec.kvHeads = 2;
  spec.pageSize = 16;
  spec.numPages = 20;
  spec.nhd = true;
  PagedKVCache cache;
  REQUIRE(PagedKVCache::create(spec, cache).isOk());
  std::vector<int32_t> seqs = {cache.addSequence(), cache.addSequence(),
                               cache.addSequence()};
  // Prefill 37 rows for each, then decode 3 steps; the middle sequence
  // finishes after the first.
  auto appendRows = [&](const std::vector<int32_t> &ids, int64_t T,
                        uint64_t seed) {
    int64_t n = static_cast<int64_t>(ids.size());
    auto nk = test::randomValues(DType::F32, n * 2 * T * 64, seed);
    auto nv = test::randomValues(DType::F32, n * 2 * T * 64, seed + 1);
    Status s = cache.append(
        ids, TensorView::contiguous(nk.data(), DType::F32, {n, 2, T, 64}),
        TensorView::contiguous(nv.data(), DType::F32, {n, 2, T, 64}));
    INFO(s.toString());
    REQUIRE(s.isOk());
  };
  appendRows(seqs, 37, 1);
  for (int step = 0; step < 3; ++step) {
    if (step == 1) {
      REQUIRE(cache.release(seqs[1]).isOk());
      seqs.erase(seqs.begin() + 1);
    }
    appendRows(seqs, 1, 10 + step);
    PageTable t;
    REQUIRE(cache.table(seqs, t).isOk());
    int64_t B = static_cast<int64_t>(seqs.size());
    auto q = test::randomValues(DType::F32, B * 8 * 64, 20 + step);
    std::vector<float> out(B * 8 * 64);
    AttentionArgs a;
    a.q = TensorView::contiguous(q.data(), DType::F32, {B, 8, 1, 64});
    a.k = cache.keys();
    a.v = cache.values();
    a.out = TensorView::contiguous(out.data(), DType::F32, {B, 8, 1, 64});
    a.pages = &t;
    CpuPlan plan;
    REQUIRE(k->plan(a, plan).isOk());
    REQUIRE(k->run(plan, a).isOk());
    CHECK(test::maxErrorVsReference(k->variant(), a) < 1e-5);
  }
  // A bad append: wrong head count, and a full cache, change nothing.
  auto nk = test::randomValues(DType::F32, 3 * 64, 5);
  TensorView bad = TensorView::contiguous(nk.data(), DType::F32, {1, 3, 1, 64});
  CHECK(cache.append({seqs[0]}, bad, bad).message() ==
        "'newK' has shape [1, 3, 1, 64], expected [1, 2, 1, 64]");
  int64_t before = cache.pages().length(seqs[0]);
  auto big = test::randomValues(DType::F32, 2 * 400 * 64, 6);
  TensorView huge = TensorView::contiguous(big.data(), DType::F32, {1, 2, 400, 64});
  CHECK_THAT(cache.append({seqs[0]}, huge, huge).message(),
             Catch::Contains("free pages of 16 rows, the append needs"));
  CHECK(cache.pages().length(seqs[0]) == before);
}

TEST_CASE("the device paged cache matches the host one and serves decode",
          "[cache][gpu-emulated]") {
  std::unique_ptr<cuda::Context> ctx;
  REQUIRE(cuda::Context::open(ctx, 0, ATTNC_EMUCUDA_PATH).isOk());
  std::string diags;
  std::unique_ptr<Session> session;
  REQUIRE(Session::loadSource("c.attn", kCacheSource, diags, session).isOk());
  KernelSpec kspec;
  kspec.dtype = DType::BF16;
  GpuKernelImage image;
  REQUIRE(session->compileGpu("causal", kspec, "sm_80", image).isOk());
  VariantInfo info;
  REQUIRE(session->info("causal", info).isOk());
  std::unique_ptr<cuda::GpuKernel> kernel;
  REQUIRE(cuda::GpuKernel::load(*ctx, info, image, kernel).isOk());
  PagedKVCacheSpec spec;
  spec.dtype = DType::BF16;
  spec.kvHeads = 2;
  spec.pageSize = 16;
  spec.numPages = 12;
  for (bool nhd : {false, true}) {
    INFO("nhd " << nhd);
    spec.nhd = nhd;
    PagedKVCache host;
    cuda::DevicePagedKVCache dev;
    REQUIRE(PagedKVCache::create(spec, host).isOk());
    Status st = cuda::DevicePagedKVCache::create(*ctx, spec, dev);
    INFO(st.toString());
    REQUIRE(st.isOk());
    std::vector<int32_t> seqs;
    for (int i = 0; i < 3; ++i) {
      seqs.push_back(host.addSequence());
      CHECK(dev.addSequence() == seqs.back());
    }
    size_t es = 2;
    auto bothAppend = [&](int64_t T, uint64_t seed) {
      int64_t n = static_cast<int64_t>(seqs.size());
      // newK with a padded row stride (strided, unit along D).
      int64_t rowStride = 64 + 8;
      auto nk = test::randomValues(DType::BF16, n * 2 * T * rowStride, seed);
      auto nv = test::randomValues(DType::BF16, n * 2 * T * 64, seed + 1);
      TensorView hk{nk.data(), DType::BF16, {n, 2, T, 64},
                    {2 * T * rowStride, T * rowStride, rowStride, 1}};
      TensorView hv = TensorView::contiguous(nv.data(), DType::BF16, {n, 2, T, 64});
      REQUIRE(host.append(seqs, hk, hv).isOk());
      cuda::DeviceBuffer dk, dv;
      REQUIRE(cuda::DeviceBuffer::allocate(*ctx, nk.size(), dk).isOk());
      REQUIRE(cuda::DeviceBuffer::allocate(*ctx, nv.size(), dv).isOk());
      REQUIRE(dk.upload(nk.data(), nk.size()).isOk());
      REQUIRE(dv.upload(nv.data(), nv.size()).isOk());
      TensorView gk = hk, gv = hv;
      gk.data = dk.data();
      gv.data = dv.data();
      Status s = dev.append(seqs, gk, gv);
      INFO(s.toString());
      REQUIRE(s.isOk());
      REQUIRE(ctx->synchronize().isOk());
      // The same bytes in both pools.
      for (auto [h, d] : {std::pair{host.keys(), dev.keys()},
                          std::pair{host.values(), dev.values()}}) {
        size_t bytes = static_cast<size_t>(h.numel()) * es;
        std::vector<uint8_t> got(bytes);
        REQUIRE(ctx->driver().api().cuMemcpyDtoH(
                    got.data(), reinterpret_cast<cuda::CUdeviceptr>(d.data),
                    bytes) == 0);
        CHECK(std::memcmp(got.data(), h.data, bytes) == 0);
      }
    };
    bothAppend(21, 1);
    bothAppend(1, 3);
    REQUIRE(host.release(seqs[0]).isOk());
    REQUIRE(dev.release(seqs[0]).isOk());
    seqs.erase(seqs.begin());
    bothAppend(17, 5);
    // Decode over the device pools with a plan; the reference reads the
    // host twin (the same bytes, the same table).
    PageTable t;
    REQUIRE(dev.table(seqs, t).isOk());
    int64_t B = static_cast<int64_t>(seqs.size());
    auto q = test::randomValues(DType::BF16, B * 8 * 64, 9);
    std::vector<uint8_t> out(B * 8 * 64 * es);
    cuda::DeviceBuffer dq, dout;
    REQUIRE(cuda::DeviceBuffer::allocate(*ctx, q.size(), dq).isOk());
    REQUIRE(cuda::DeviceBuffer::allocate(*ctx, out.size(), dout).isOk());
    REQUIRE(dq.upload(q.data(), q.size()).isOk());
    AttentionArgs a;
    a.q = TensorView::contiguous(dq.data(), DType::BF16, {B, 8, 1, 64});
    a.k = dev.keys();
    a.v = dev.values();
    a.out = TensorView::contiguous(dout.data(), DType::BF16, {B, 8, 1, 64});
    a.pages = &t;
    cuda::GpuPlan plan;
    REQUIRE(kernel->plan(a, plan).isOk());
    REQUIRE(kernel->run(plan, a).isOk());
    REQUIRE(ctx->synchronize().isOk());
    REQUIRE(dout.download(out.data(), out.size()).isOk());
    AttentionArgs h = a;
    h.q.data = q.data();
    h.k = host.keys();
    h.v = host.values();
    h.out.data = out.data();
    CHECK(test::maxErrorVsReference(info, h) < 2e-2);
  }
}
