//===- GpuBackward.h - The backward pass on a CUDA device -------*- C++ -*-===//
//
// A GpuBackwardKernel is one GpuBackwardImage (compiled by
// attnc::compileBackwardForGpu) loaded into a Context. It takes the same
// BackwardArgs as the CPU backward, validated the same way before anything
// is enqueued; the views point to device memory.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDA_GPUBACKWARD_H
#define ATTNC_RUNTIME_CUDA_GPUBACKWARD_H

#include "attnc/runtime/Backward.h"
#include "attnc/runtime/cuda/GpuKernel.h"

#include <memory>

namespace attnc::rt::cuda {

class GpuBackwardKernel {
public:
  ~GpuBackwardKernel();
  /// Loads the image's PTX (the driver JIT-compiles it) and checks its
  /// entries against the variant and this runtime's ABI.
  static Status load(const Context &ctx, const VariantInfo &variant,
                     const GpuBackwardImage &image,
                     std::unique_ptr<GpuBackwardKernel> &out);

  const VariantInfo &variant() const { return variant_; }
  const GpuBackwardImage &image() const { return image_; }

  /// Validates everything (as CpuBackwardKernel::run; dq, dk and dv must
  /// have the kernel's dtype), then on `stream`: a data-dependent mask's
  /// block mask, `_bwd_q` (delta and dq), `_bwd_kv` (dk, dv and the
  /// parameters' gradients, by atomic adds), and waits for them. With
  /// `paramGrads`, the float parameters' gradients are copied back
  /// (ParamGradients). dq, dk and dv are deterministic; the parameters'
  /// gradients' last bits depend on the order of the atomic adds.
  Status run(const BackwardArgs &args, ParamGradients *paramGrads = nullptr,
             CUstream stream = nullptr) const;

private:
  GpuBackwardKernel() = default;
  const Context *ctx_ = nullptr;
  VariantInfo variant_;
  GpuBackwardImage image_;
  CUmodule module_ = nullptr;
  CUfunction query_ = nullptr, keyValue_ = nullptr, maskBuilder_ = nullptr;
};

/// Device copies of a host backward call: the forward's operands (a
/// DeviceMirror), dO, dLSE, and dq, dk and dv as given (the kernels must
/// write every element of theirs). For tests and tools (attnc-run
/// --backward times run() on one).
class BackwardMirror {
public:
  static Status create(const Context &ctx, const BackwardArgs &host,
                       BackwardMirror &out);
  const BackwardArgs &args() const { return dev_; }
  /// Copies dq, dk and dv back into the host views.
  Status downloadGradients(const BackwardArgs &host) const;

private:
  DeviceMirror forward_;
  BackwardArgs dev_;
  std::vector<DeviceBuffer> bufs_;
  size_t firstGrad_ = 0;
};

/// Runs `kernel` over host-resident arguments: copies what each view spans
/// to the device, runs, and copies dq, dk and dv back into the host views.
/// For tests and tools.
Status runBackwardFromHost(const Context &ctx, const GpuBackwardKernel &kernel,
                           const BackwardArgs &host,
                           ParamGradients *paramGrads = nullptr);

} // namespace attnc::rt::cuda

#endif
