// Thread safety of the compiler's front door (docs/reliability.md): one
// Session compiled into from many threads at once, CPU and GPU kernels,
// then every kernel run concurrently and checked against the reference.
#include "attnc/Driver/Session.h"
#include "ReferenceCheck.h"

#include <catch2/catch.hpp>

#include <thread>

using namespace attnc;
using namespace attnc::rt;

namespace {

const char *kThreeVariants = R"(
variant causal() { mask_mod(b, h, q, kv) = q >= kv }
variant window(w: i32) { mask_mod(b, h, q, kv) = q - kv < w && kv <= q }
variant softcap(cap: f32) { score_mod(s, b, h, q, kv) = cap * tanh(s / cap) }
)";

} // namespace

TEST_CASE("one Session compiles from many threads at once", "[cpu][concurrency]") {
  std::string diags;
  std::unique_ptr<Session> s;
  REQUIRE(Session::loadSource("t.attn", kThreeVariants, diags, s).isOk());
  s->setKernelCache(nullptr); // every GPU compile goes through MLIR/LLVM
  const std::vector<std::string> names = {"causal", "window", "softcap"};
  constexpr int kThreads = 12;
  std::vector<std::unique_ptr<CpuKernel>> cpu(kThreads);
  std::vector<GpuKernelImage> gpu(kThreads);
  std::vector<Status> status(kThreads), gpuStatus(kThreads);
  std::vector<VariantInfo> info(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] {
      const std::string &v = names[i % names.size()];
      status[i] = s->compileCpu(v, KernelSpec{}, cpu[i]);
      if (status[i])
        status[i] = s->info(v, info[i]);
      if (i % 4 == 0) {
        KernelSpec spec;
        spec.dtype = DType::BF16;
        gpuStatus[i] = s->compileGpu(v, spec, "sm_80", gpu[i]);
      }
    });
  for (std::thread &t : threads)
    t.join();
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i << ": " << status[i].toString() << " / "
                   << gpuStatus[i].toString());
    REQUIRE(status[i].isOk());
    REQUIRE(gpuStatus[i].isOk());
    if (i % 4 == 0)
      CHECK(gpu[i].ptx.find(".entry") != std::string::npos);
  }

  // The kernels, run from as many threads, each against the reference.
  const int64_t B = 1, H = 2, L = 48, D = 64; // KernelSpec{}.headDim
  auto q = test::randomValues(DType::F32, B * H * L * D, 1);
  auto k = test::randomValues(DType::F32, B * H * L * D, 2);
  auto v = test::randomValues(DType::F32, B * H * L * D, 3);
  std::vector<std::vector<float>> out(kThreads,
                                      std::vector<float>(B * H * L * D));
  std::vector<AttentionArgs> args(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    AttentionArgs &a = args[i];
    a.q = TensorView::contiguous(q.data(), DType::F32, {B, H, L, D});
    a.k = TensorView::contiguous(k.data(), DType::F32, {B, H, L, D});
    a.v = TensorView::contiguous(v.data(), DType::F32, {B, H, L, D});
    a.out = TensorView::contiguous(out[i].data(), DType::F32, {B, H, L, D});
    if (i % 3 == 1)
      a.scalars.emplace_back("w", 7.0);
    if (i % 3 == 2)
      a.scalars.emplace_back("cap", 0.5);
  }
  threads.clear();
  for (int i = 0; i < kThreads; ++i)
    threads.emplace_back([&, i] { status[i] = cpu[i]->run(args[i]); });
  for (std::thread &t : threads)
    t.join();
  for (int i = 0; i < kThreads; ++i) {
    INFO("thread " << i << ": " << status[i].toString());
    REQUIRE(status[i].isOk());
    CHECK(test::maxErrorVsReference(info[i], args[i]) < 1e-5);
  }
}
