// GPU compilation through the public API (no device needed): kernels come
// out with the tile configuration in their names and the runtime's ABI, and
// go through the kernel cache, whose entries are recompiled, never loaded,
// when they are corrupt.
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/TileConfigTable.h"
#include "attnc/Driver/Session.h"
#include "attnc/runtime/KernelCache.h"

#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

using namespace attnc;
using namespace attnc::rt;

namespace {
const char *kSrc = R"(
variant docs(doc: i32[B, KV]) {
  mask_mod(b, h, q, kv) = doc[b, q] == doc[b, kv] && q >= kv
}
)";

std::unique_ptr<Session> load() {
  std::unique_ptr<Session> s;
  std::string diags;
  REQUIRE(Session::loadSource("docs.attn", kSrc, diags, s).isOk());
  return s;
}
} // namespace

TEST_CASE("GPU kernels are named by their configuration and cached",
          "[gpu-compile]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "attnc-gpu-cache-test";
  fs::remove_all(dir);
  KernelSpec spec;
  spec.dtype = DType::BF16;
  spec.headDim = spec.vHeadDim = 128;

  auto cache = std::make_shared<KernelCache>(dir.string());
  auto s = load();
  s->setKernelCache(cache);
  GpuKernelImage cold;
  REQUIRE(s->compileGpu("docs", spec, "sm_90", cold).isOk());
  // The tensor-core kernel with the configuration table's tiles for D=128:
  // 4 warps x 16 rows, 64 keys, two stages of swizzled K and V rows in
  // dynamic shared memory (Q, loaded into registers once, borrows stage 1
  // before the first prefetch fills it).
  CHECK(cold.kernel == "attnc_docs_bf16_d128v128_m64n64w4s2");
  CHECK(cold.maskBuilder == "attnc_docs_bf16_d128v128_m64n64w4s2_block_mask");
  CHECK(cold.spec.blockM == 64);
  CHECK(cold.spec.blockN == 64);
  CHECK(cold.sharedBytes == 0);
  CHECK(cold.dynamicSharedBytes == 2 * 64 * (128 + 128) * 2);
  CHECK(cold.threads == 128);
  CHECK(cold.ptx.find(".extern .shared .align 16 .b8") != std::string::npos);
  CHECK(cold.ptx.find("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") !=
        std::string::npos);
  CHECK(cold.kernelParams == std::vector<int>(5 * 9 + 1, 8));
  CHECK(cold.maskBuilderParams == std::vector<int>(5 * 4 + 1, 8));
  CHECK(cold.ptx.find(".target sm_90") != std::string::npos);
  CHECK(cache->misses == 1);

  // Another session (same canonical IR) hits the disk entry.
  auto cache2 = std::make_shared<KernelCache>(dir.string());
  auto s2 = load();
  s2->setKernelCache(cache2);
  GpuKernelImage warm;
  REQUIRE(s2->compileGpu("docs", spec, "sm_90", warm).isOk());
  CHECK(cache2->diskHits == 1);
  CHECK(warm.ptx == cold.ptx);
  CHECK(warm.kernel == cold.kernel);
  CHECK(warm.kernelParams == cold.kernelParams);
  REQUIRE(s2->compileGpu("docs", spec, "sm_90", warm).isOk());
  CHECK(cache2->memoryHits == 1);

  // Another target or configuration is another entry.
  GpuKernelImage other;
  REQUIRE(s2->compileGpu("docs", spec, "sm_80", other).isOk());
  CHECK(other.ptx.find(".target sm_80") != std::string::npos);
  CHECK(cache2->misses == 1);

  // Tiles asked for are kept, block_n shrunk to what the target's shared
  // memory holds: on sm_86 (99 KB) 2 stages x 80 keys x 256 elements and
  // Q's 64 x 128 (2 m-tiles per warp re-read Q from shared memory).
  KernelSpec asked = spec;
  asked.blockM = 64;
  asked.blockN = 256;
  asked.warps = 2;
  REQUIRE(s2->compileGpu("docs", asked, "sm_86", other).isOk());
  CHECK(other.kernel == "attnc_docs_bf16_d128v128_m64n80w2s2");
  CHECK(other.dynamicSharedBytes == (2 * 80 * 256 + 64 * 128) * 2);
  CHECK(other.dynamicSharedBytes <= 101376);
  // sm_90 (227 KB) holds 208 of them.
  REQUIRE(s2->compileGpu("docs", asked, "sm_90", other).isOk());
  CHECK(other.kernel == "attnc_docs_bf16_d128v128_m64n208w2s2");

  // A corrupt entry is detected and recompiled, not loaded.
  for (auto &e : fs::directory_iterator(dir)) {
    std::fstream f(e.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.write("garbage", 7);
  }
  auto cache3 = std::make_shared<KernelCache>(dir.string());
  auto s3 = load();
  s3->setKernelCache(cache3);
  GpuKernelImage again;
  REQUIRE(s3->compileGpu("docs", spec, "sm_90", again).isOk());
  CHECK(cache3->corrupt == 1);
  CHECK(again.ptx == cold.ptx);

  // Caching off.
  auto s4 = load();
  s4->setKernelCache(nullptr);
  REQUIRE(s4->compileGpu("docs", spec, "sm_90", again).isOk());
  CHECK(s4->compileGpu("docs", spec, "sm_70", again).message() ==
        "unknown GPU target 'sm_70' (expected sm_80, sm_86, sm_89, sm_90 or sm_90a)");
  fs::remove_all(dir);
}

TEST_CASE("GPU backward kernels go through the kernel cache", "[gpu-compile]") {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / "attnc-gpu-bwd-cache-test";
  fs::remove_all(dir);
  KernelSpec spec;
  spec.dtype = DType::BF16;
  spec.headDim = spec.vHeadDim = 64;

  auto cache = std::make_shared<KernelCache>(dir.string());
  auto s = load();
  s->setKernelCache(cache);
  GpuBackwardImage cold;
  REQUIRE(s->compileGpuBackward("docs", spec, "sm_90", cold).isOk());
  CHECK(cache->misses == 1);
  CHECK(cold.ptx.find(".target sm_90") != std::string::npos);
  // The forward with the same spec is another entry, not this one.
  GpuKernelImage fwd;
  REQUIRE(s->compileGpu("docs", spec, "sm_90", fwd).isOk());
  CHECK(cache->misses == 2);

  // Another session hits the disk entry: the same image, field by field
  // where the runtime reads them.
  auto cache2 = std::make_shared<KernelCache>(dir.string());
  auto s2 = load();
  s2->setKernelCache(cache2);
  GpuBackwardImage warm;
  REQUIRE(s2->compileGpuBackward("docs", spec, "sm_90", warm).isOk());
  CHECK(cache2->diskHits == 1);
  CHECK(cache2->misses == 0);
  CHECK(warm.ptx == cold.ptx);
  CHECK(warm.query == cold.query);
  CHECK(warm.keyValue == cold.keyValue);
  CHECK(warm.maskBuilder == cold.maskBuilder);
  CHECK(warm.queryParams == cold.queryParams);
  CHECK(warm.keyValueParams == cold.keyValueParams);
  CHECK(warm.queryDynamicSharedBytes == cold.queryDynamicSharedBytes);
  CHECK(warm.keyValueDynamicSharedBytes == cold.keyValueDynamicSharedBytes);
  // Another dtype is another entry; with caching off nothing is read.
  KernelSpec f32 = spec;
  f32.dtype = DType::F32;
  REQUIRE(s2->compileGpuBackward("docs", f32, "sm_90", warm).isOk());
  CHECK(cache2->misses == 1);
  CHECK(warm.ptx != cold.ptx);
  auto s3 = load();
  s3->setKernelCache(nullptr);
  REQUIRE(s3->compileGpuBackward("docs", spec, "sm_90", warm).isOk());
  CHECK(warm.ptx == cold.ptx);
  fs::remove_all(dir);
}

TEST_CASE("the configuration table covers every tensor-core head dim",
          "[gpu-compile]") {
  // Every f16/bf16 head dim that is a multiple of 16 up to 256, Dv equal
  // to it or not, gets a tensor-core configuration (dynamic shared memory)
  // that fits each target, and the tuner's candidates start with it.
  for (const char *target : {"sm_80", "sm_86", "sm_89", "sm_90"})
    for (DType dt : {DType::F16, DType::BF16})
      for (int64_t d = 16; d <= 256; d += 16)
        for (int64_t dv : {d, int64_t(16), int64_t(256 - d + 16)}) {
          CAPTURE(target, dtypeName(dt), d, dv);
          KernelSpec req;
          req.dtype = dt;
          req.headDim = d;
          req.vHeadDim = dv;
          FormChoice c = formFor(req, target, Direction::Forward);
          REQUIRE(c);
          CHECK(c.form->name() == "mma-sync");
          KernelSpec s = c.spec;
          LaunchFacts launch = c.form->entries(s, nullptr).at(0).launch;
          CHECK(launch.dynamicSharedBytes > 0);
          CHECK(launch.dynamicSharedBytes <= gpuSharedOptIn(target));
          CHECK(launch.threads == s.warps * 32);
          // The table's rows: 64-row tiles of 4 warps up to D=128 (timed
          // on an H100), 128 rows of 8 warps above.
          bool small = std::max(d, dv) <= 128;
          CHECK(s.blockM == (small ? 64 : 128));
          CHECK(s.warps == (small ? 4 : 8));
          CHECK(s.blockN >= 16);
          std::vector<KernelSpec> cands = c.form->tileCandidates(req, target);
          REQUIRE(!cands.empty());
          CHECK(c.form->tileConfig(cands[0]) == c.form->tileConfig(s));
          for (const KernelSpec &k : cands)
            CHECK(c.form->entries(k, nullptr).at(0).launch.dynamicSharedBytes <=
                  gpuSharedOptIn(target));
        }
  // Not multiples of 16, above 256, or f32: the SIMT form, no candidates.
  for (auto [dt, d] : {std::pair{DType::BF16, int64_t(72)},
                       std::pair{DType::F16, int64_t(264)},
                       std::pair{DType::F32, int64_t(64)}}) {
    KernelSpec req;
    req.dtype = dt;
    req.headDim = req.vHeadDim = d;
    FormChoice c = formFor(req, "sm_90", Direction::Forward);
    REQUIRE(c);
    CHECK(c.form->name() == "simt");
    CHECK(c.form->entries(c.spec, nullptr).at(0).launch.dynamicSharedBytes == 0);
    CHECK(c.form->tileCandidates(req, "sm_90").empty());
  }
}
