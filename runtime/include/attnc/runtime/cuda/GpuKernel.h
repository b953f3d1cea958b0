//===- GpuKernel.h - Running packaged kernels on a CUDA device --*- C++ -*-===//
//
// A GpuKernel is one GpuKernelImage (PTX + launch facts) loaded into a
// Context. It takes the same AttentionArgs as the CPU kernel, validated the
// same way before anything is enqueued; the views point to device memory,
// while lengths, offsets and scalars stay host values.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDA_GPUKERNEL_H
#define ATTNC_RUNTIME_CUDA_GPUKERNEL_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Package.h"
#include "attnc/runtime/cuda/CudaDriver.h"

#include <memory>
#include <mutex>
#include <vector>

namespace attnc::rt::detail {
struct MemrefDesc;
}

namespace attnc::rt::cuda {

/// Device memory owned by this object (freed on destruction).
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer &&o) noexcept { *this = std::move(o); }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;

  static Status allocate(const Context &ctx, size_t bytes, DeviceBuffer &out);
  void *data() const { return reinterpret_cast<void *>(ptr_); }
  size_t size() const { return size_; }
  Status upload(const void *src, size_t bytes, size_t offset = 0);
  Status download(void *dst, size_t bytes, size_t offset = 0) const;
  Status fill(unsigned char byte);

private:
  const Context *ctx_ = nullptr;
  CUdeviceptr ptr_ = 0;
  size_t size_ = 0;
};

class GpuKernel;

/// One batch's call made resident on the device once (plan/run): the
/// parameters (sizes, strides, lengths, offsets, the page list, scalars,
/// capture shapes), a data-dependent mask's block mask (from the captures
/// at plan time), the split plan and its partial buffers, in one device
/// buffer. Every layer of the batch then calls GpuKernel::run(plan, args)
/// with its own q, k, v, out, lse and captures, which must have the views'
/// dtypes, shapes and strides of the planned call: launches only, with no
/// allocation, no copy, no host synchronization and no work per sequence,
/// so the runs can be captured in a CUDA graph and replayed. A plan's runs
/// share its partial buffers: keep them in order on one stream.
struct KvTensorMaps;
class KvTensorMapCache;

class GpuPlan {
public:
  int64_t splits() const { return splits_; }
  size_t deviceBytes() const { return buf_.size(); }

private:
  friend class GpuKernel;
  const GpuKernel *kernel_ = nullptr;
  AttentionArgs planned_; // the views and scalars the plan was made for
  int64_t splits_ = 1, items_ = 0, rows_ = 0, ipCount_ = 0, fpCount_ = 0;
  int64_t bmBytes_ = 0, partialElems_ = 0, lseElems_ = 0;
  size_t fpAt_ = 0, bmAt_ = 0, partialsAt_ = 0, lseAt_ = 0;
  /// For a kernel that reads K/V through tensor maps: the ip words the
  /// maps are made from (each run makes them for its own K and V).
  std::vector<int64_t> kvIp_;
  DeviceBuffer buf_;
};

class GpuKernel {
public:
  ~GpuKernel();
  /// Loads the image's PTX (the driver JIT-compiles it for the device); a
  /// JIT failure carries the driver's log. Checks the device is new enough
  /// for the image's target.
  static Status load(const Context &ctx, const VariantInfo &variant,
                     const GpuKernelImage &image,
                     std::unique_ptr<GpuKernel> &out);

  const VariantInfo &variant() const { return variant_; }
  const GpuKernelImage &image() const { return image_; }

  /// Validates everything, then enqueues on `stream` (null: the null
  /// stream; any stream, non-blocking ones included) and returns without
  /// waiting. A data-dependent mask without args.blockMask builds its block
  /// mask on the device first. Each call's small parameter arrays go to
  /// their own buffer of a ring, copied on `stream` ahead of the launch; a
  /// buffer is reused only once the launches that read it have finished,
  /// so calls may follow each other without waiting. When the batch has
  /// fewer work items than the device has SMs (decode), or args.numSplits
  /// asks, each sequence's keys are split (SplitPlan.h): the kernel writes
  /// partial rows into the call's buffer and a merge launch follows it.
  Status run(const AttentionArgs &args, CUstream stream = nullptr) const;

  /// Plan/run (GpuPlan): validates `args` like run() and makes their call
  /// resident on the device; the views' data pointers are not read. A
  /// data-dependent mask's block mask is args.blockMask, or built on
  /// `stream` from the captures' current values (run the plan on `stream`,
  /// or synchronize with it first). Waits for its copies.
  Status plan(const AttentionArgs &args, GpuPlan &out,
              CUstream stream = nullptr) const;
  /// One run of a plan: checks the views against the plan's (no work per
  /// sequence) and enqueues the kernel (and the split merge) on `stream`.
  /// Graph-safe: nothing but cuLaunchKernel reaches the driver.
  Status run(const GpuPlan &plan, const AttentionArgs &args,
             CUstream stream = nullptr) const;

  /// Builds the block mask of a data-dependent variant on the device and
  /// copies it to `out` (reusable as args.blockMask, on the CPU too).
  Status buildBlockMask(const AttentionArgs &args, BlockMask &out) const;

private:
  GpuKernel() = default;
  /// A launch's memref operands (see KernelABI.h) and work items.
  struct Operands;
  /// One buffer of the parameter ring, and the event recorded after the
  /// last launch that reads it.
  struct ParamSlot {
    DeviceBuffer buf;
    CUevent done = nullptr;
    bool inFlight = false;
  };
  Status launch(CUfunction fn, std::vector<detail::MemrefDesc> descs,
                int64_t items, CUstream stream,
                const KvTensorMaps *kvMaps = nullptr) const;
  /// The next ring buffer, once its previous launches have finished, with
  /// room for `bytes`.
  Status acquire(size_t bytes, ParamSlot *&slot) const;
  /// Marks the slot busy until the work queued on `stream` so far is done.
  Status release(ParamSlot &slot, CUstream stream) const;
  /// A validated call (CallBuffer.h): its problem, block mask, parameters
  /// and split plan, made once by prepare() for run(), plan() and
  /// buildBlockMask().
  struct Call;
  /// Validates `a` and makes the context current, then fills `c`. For the
  /// block-mask builder: a mask to build whatever the caller gave, no split.
  Status prepare(const AttentionArgs &a, bool forMaskBuilder, Call &c) const;
  /// Copies c's ip, fp (and a caller's block mask) to the slot on `stream`
  /// and lays out the kernel's (or the block-mask builder's) operands; a
  /// split launch's partial rows live in the slot too, with the merge's
  /// operands.
  Status upload(const AttentionArgs &a, const Call &c, bool forMaskBuilder,
                ParamSlot &slot, CUstream stream, Operands &out) const;

  const Context *ctx_ = nullptr;
  VariantInfo variant_;
  GpuKernelImage image_;
  CUmodule module_ = nullptr;
  CUfunction kernel_ = nullptr, maskBuilder_ = nullptr, merge_ = nullptr;
  /// The kernel reads K and V through tensor maps (KvTensorMaps.h): the
  /// last call's, made again when K or V change.
  bool kvMaps_ = false;
  std::unique_ptr<KvTensorMapCache> kvCache_;
  /// A persistent kernel's grid (ptx::persistentBlocks, fixed at load);
  /// 0: one block per work item.
  int64_t persistentBlocks_ = 0;
  bool mergeDependent_ = false; // the merge as the kernel's dependent (PDL)
  // Parameter arrays (ip, fp, block mask): a ring of buffers.
  static constexpr int kRing = 4;
  mutable std::mutex mu_;
  mutable ParamSlot ring_[kRing];
  mutable int next_ = 0;
};

/// Device copies of every view of host-resident arguments (q, k, v, out,
/// lse, captures: what each view spans), made once; args() is `host` with
/// the data pointers replaced.
class DeviceMirror {
public:
  static Status create(const Context &ctx, const AttentionArgs &host,
                       DeviceMirror &out);
  const AttentionArgs &args() const { return dev_; }
  /// Copies `out` (and `lse`) back into the host views.
  Status downloadOutputs(const AttentionArgs &host) const;

private:
  AttentionArgs dev_;
  std::vector<DeviceBuffer> bufs_;
  int outIndex_ = -1, lseIndex_ = -1;
};

/// Runs `kernel` over host-resident inputs: copies what each view spans to
/// the device, runs, waits, and copies `out` (and `lse`) back into the
/// host views. For tests, tools and the parity suite. `ms`, if given,
/// receives the time of run() (parameter upload and launches) measured
/// with events on the null stream.
Status runFromHost(const Context &ctx, const GpuKernel &kernel,
                   const AttentionArgs &hostArgs, float *ms = nullptr);

} // namespace attnc::rt::cuda

#endif
