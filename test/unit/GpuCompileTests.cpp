// GPU compilation through the public API (no device needed): kernels come
// out with the tile configuration in their names and the runtime's ABI, and
// go through the kernel cache, whose entries are recompiled, never loaded,
// when they are corrupt.
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
  // The tensor-core kernel: 4 warps, two stages of padded K and V rows.
  CHECK(cold.kernel == "attnc_docs_bf16_d128v128_m64n32w4s2");
  CHECK(cold.maskBuilder == "attnc_docs_bf16_d128v128_m64n32w4s2_block_mask");
  CHECK(cold.spec.blockN == 32); // shrunk to fit 48 KB of shared memory
  CHECK(cold.sharedBytes == 2 * (136 + 136) * 32 * 2);
  CHECK(cold.threads == 128);
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
        "unknown GPU target 'sm_70' (expected sm_80, sm_86, sm_89 or sm_90)");
  fs::remove_all(dir);
}
