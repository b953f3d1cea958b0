// An app embedding the attnc runtime alone (no LLVM): load a kernel package
// and run its first variant on the GPU. V is constant, so every output is
// 0.5 whatever the attention weights are.
//   attnc compile examples/causal.attn --emit=package -o causal.json
//   attnc-embed-example causal.json
#include "attnc/runtime/cuda/GpuKernel.h"
#include <cmath>
#include <cstdio>
using namespace attnc::rt;

int main(int argc, char **argv) {
  std::unique_ptr<cuda::Context> gpu;
  if (Status s = cuda::Context::open(gpu); !s) // no driver or device: skip
    return std::printf("embed: %s\n", s.message().c_str()), 77;
  Package pkg;
  const GpuKernelImage *image = nullptr;
  std::unique_ptr<cuda::GpuKernel> kernel;
  Status s = Package::read(argc > 1 ? argv[1] : "causal.json", pkg);
  if (s) s = selectKernel(pkg.variants.at(0), gpu->device().computeCapability(),
                          DType::F32, 64, 64, image);
  if (s) s = cuda::GpuKernel::load(*gpu, pkg.variants[0].info, *image, kernel);
  std::vector<int64_t> shape = {2, 4, 300, 64}; // [B, H, S, D]
  std::vector<float> q(2 * 4 * 300 * 64), k(q.size()), v(q.size(), 0.5f),
      out(q.size(), NAN);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = std::sin(i * 0.1f), k[i] = std::cos(i * 0.3f);
  AttentionArgs a; // views: pointer, dtype, logical shape (+ strides)
  a.q = TensorView::contiguous(q.data(), DType::F32, shape);
  a.k = TensorView::contiguous(k.data(), DType::F32, shape);
  a.v = TensorView::contiguous(v.data(), DType::F32, shape);
  a.out = TensorView::contiguous(out.data(), DType::F32, shape);
  if (s) s = cuda::runFromHost(*gpu, *kernel, a); // copy in, run, copy out
  if (!s)
    return std::printf("embed: %s\n", s.message().c_str()), 1;
  for (float o : out)
    if (!(std::fabs(o - 0.5f) < 1e-6f))
      return std::printf("embed: got %g, expected 0.5\n", o), 1;
  std::printf("embed: %s on %s: ok\n", image->kernel.c_str(),
              gpu->device().name().c_str());
}
