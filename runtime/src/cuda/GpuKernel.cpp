//===- GpuKernel.cpp - Loading and launching packaged kernels ------------===//
#include "attnc/runtime/cuda/GpuKernel.h"
#include "attnc/runtime/KernelABI.h"
#include "attnc/runtime/Parse.h"
#include "../KernelOperands.h"
#include "CallBuffer.h"
#include "KvTensorMaps.h"
#include "PtxModule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace attnc::rt::cuda {

namespace {
constexpr int64_t kMaxStaticShared = 48 * 1024;
constexpr int kMaxDynamicSharedAttr = 8; // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

int64_t bytesOf(const TensorView &t) {
  return detail::extent(t) * static_cast<int64_t>(dtypeSize(t.dtype));
}


} // namespace

// ---- DeviceBuffer -------------------------------------------------------

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ && ctx_)
    ctx_->driver().api().cuMemFree(ptr_);
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&o) noexcept {
  if (this != &o) {
    if (ptr_ && ctx_)
      ctx_->driver().api().cuMemFree(ptr_);
    ctx_ = o.ctx_;
    ptr_ = o.ptr_;
    size_ = o.size_;
    o.ptr_ = 0;
    o.size_ = 0;
  }
  return *this;
}

Status DeviceBuffer::allocate(const Context &ctx, size_t bytes,
                              DeviceBuffer &out) {
  out = DeviceBuffer();
  out.ctx_ = &ctx;
  if (Status s = ctx.makeCurrent(); !s)
    return s;
  // Zero-byte requests still get a valid, distinct address.
  if (Status s = ctx.driver().check(
          ctx.driver().api().cuMemAlloc(&out.ptr_, std::max<size_t>(bytes, 8)),
          "cuMemAlloc");
      !s)
    return Status::unavailable(fmt::format(
        "cannot allocate {} bytes on the device: {}", bytes, s.message()));
  out.size_ = bytes;
  return Status::ok();
}

Status DeviceBuffer::upload(const void *src, size_t bytes, size_t offset) {
  if (offset + bytes > size_)
    return Status::invalidArgument(fmt::format(
        "upload of {} bytes at offset {} exceeds the buffer ({} bytes)", bytes,
        offset, size_));
  if (!bytes)
    return Status::ok();
  if (Status s = ctx_->makeCurrent(); !s)
    return s;
  return ctx_->driver().check(
      ctx_->driver().api().cuMemcpyHtoD(ptr_ + offset, src, bytes),
      "cuMemcpyHtoD");
}

Status DeviceBuffer::download(void *dst, size_t bytes, size_t offset) const {
  if (offset + bytes > size_)
    return Status::invalidArgument(fmt::format(
        "download of {} bytes at offset {} exceeds the buffer ({} bytes)",
        bytes, offset, size_));
  if (!bytes)
    return Status::ok();
  if (Status s = ctx_->makeCurrent(); !s)
    return s;
  return ctx_->driver().check(
      ctx_->driver().api().cuMemcpyDtoH(dst, ptr_ + offset, bytes),
      "cuMemcpyDtoH");
}

Status DeviceBuffer::fill(unsigned char byte) {
  if (Status s = ctx_->makeCurrent(); !s)
    return s;
  return ctx_->driver().check(
      ctx_->driver().api().cuMemsetD8(ptr_, byte, std::max<size_t>(size_, 8)),
      "cuMemsetD8");
}

// ---- GpuKernel ----------------------------------------------------------

GpuKernel::~GpuKernel() {
  if (!ctx_)
    return;
  const DriverApi &api = ctx_->driver().api();
  for (ParamSlot &s : ring_) {
    if (s.inFlight)
      api.cuEventSynchronize(s.done);
    if (s.done)
      api.cuEventDestroy(s.done);
  }
  if (module_)
    api.cuModuleUnload(module_);
}

Status GpuKernel::acquire(size_t bytes, ParamSlot *&slot) const {
  const Driver &drv = ctx_->driver();
  ParamSlot &s = ring_[next_];
  next_ = (next_ + 1) % kRing;
  if (s.inFlight) {
    // The launches that read this buffer must be done before it is
    // rewritten (after kRing calls still in flight: rare).
    if (Status st = drv.check(drv.api().cuEventSynchronize(s.done),
                              "cuEventSynchronize");
        !st)
      return st;
    s.inFlight = false;
  }
  if (!s.done)
    if (Status st = drv.check(drv.api().cuEventCreate(&s.done, 0), "cuEventCreate");
        !st)
      return st;
  if (s.buf.size() < bytes)
    if (Status st = DeviceBuffer::allocate(*ctx_, 2 * bytes, s.buf); !st)
      return st;
  slot = &s;
  return Status::ok();
}

Status GpuKernel::release(ParamSlot &slot, CUstream stream) const {
  const Driver &drv = ctx_->driver();
  if (Status st = drv.check(drv.api().cuEventRecord(slot.done, stream),
                            "cuEventRecord");
      !st)
    return st;
  slot.inFlight = true;
  return Status::ok();
}

Status GpuKernel::load(const Context &ctx, const VariantInfo &variant,
                       const GpuKernelImage &image,
                       std::unique_ptr<GpuKernel> &out) {
  const Driver &drv = ctx.driver();
  if (Status s = ctx.makeCurrent(); !s)
    return s;
  if (Status s = ptx::checkTarget(ctx, image.target, image.kernel); !s)
    return s;
  if (image.sharedBytes > kMaxStaticShared || image.threads <= 0 ||
      image.threads > 1024)
    return Status::invalidArgument(fmt::format(
        "kernel '{}' asks for {} threads and {} bytes of static shared "
        "memory (at most 1024 and {})",
        image.kernel, image.threads, image.sharedBytes, kMaxStaticShared));
  if (image.sharedBytes + image.dynamicSharedBytes > ctx.device().sharedOptIn())
    return Status::invalidArgument(fmt::format(
        "kernel '{}' needs {} bytes of shared memory per block, but {} "
        "allows at most {}: use a package built for {} (or smaller tiles)",
        image.kernel, image.sharedBytes + image.dynamicSharedBytes,
        ctx.device().name(), ctx.device().sharedOptIn(),
        fmt::format("sm_{}", ctx.device().computeCapability())));
  // The launcher passes 5 eight-byte words per memref operand and one i64:
  // the package must have been compiled for this ABI.
  size_t captures = 0;
  for (const ParamSpec &p : variant.params)
    captures += p.isTensor;
  auto expect = [](const std::vector<int> &sizes, size_t memrefs,
                   const std::string &name, bool kvMaps = false) {
    return ptx::checkEntryParams(sizes, memrefs, name, kvMaps);
  };
  const bool kvMaps = takesKvTensorMaps(image.kernelParams);
  if (Status s = expect(image.kernelParams, 8 + captures, image.kernel, kvMaps); !s)
    return s;
  if ((variant.maskKind == MaskKind::Data) == image.maskBuilder.empty())
    return Status::invalidArgument(
        "kernel '" + image.kernel + "' and variant '" + variant.name +
        "' disagree on whether the mask needs a block-mask builder");
  if (!image.maskBuilder.empty())
    if (Status s =
            expect(image.maskBuilderParams, 3 + captures, image.maskBuilder);
        !s)
      return s;
  if (Status s = expect(image.mergeParams, 5, image.merge); !s)
    return s;

  auto k = std::unique_ptr<GpuKernel>(new GpuKernel());
  k->ctx_ = &ctx;
  k->variant_ = variant;
  k->image_ = image;
  k->kvMaps_ = kvMaps;
  k->persistentBlocks_ = image.persistent ? ptx::persistentBlocks(ctx) : 0;
  k->mergeDependent_ = image.mergeGridDependency && ptx::dependentLaunches(ctx);
  if (kvMaps)
    k->kvCache_ = std::make_unique<KvTensorMapCache>();
  if (Status s = ptx::loadPtx(ctx, image.ptx, image.kernel, image.target,
                                k->module_);
      !s)
    return s;
  if (Status s = ptx::getEntry(ctx, k->module_, image.kernel, "kernel",
                                  k->kernel_);
      !s)
    return s;
  if (image.dynamicSharedBytes > 0)
    if (Status s = drv.check(
            drv.api().cuFuncSetAttribute(k->kernel_, kMaxDynamicSharedAttr,
                                         int(image.dynamicSharedBytes)),
            "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
        !s)
      return Status::unavailable("kernel '" + image.kernel +
                                 "' cannot have its shared memory: " +
                                 s.message());
  if (Status s = ptx::getEntry(ctx, k->module_, image.merge, "merge entry",
                                  k->merge_);
      !s)
    return s;
  if (Status s = ptx::getEntry(ctx, k->module_, image.maskBuilder,
                               "block-mask builder", k->maskBuilder_);
      !s)
    return s;
  out = std::move(k);
  return Status::ok();
}

struct GpuKernel::Operands {
  std::vector<detail::MemrefDesc> descs;
  int64_t items = 0;
  void *classes = nullptr; // where the block mask lives in the scratch
  std::vector<detail::MemrefDesc> merge; // a split launch's merge operands
  int64_t rows = 0;                      // the merge's blocks
};

Status GpuKernel::launch(CUfunction fn, std::vector<detail::MemrefDesc> descs,
                         int64_t items, CUstream stream,
                         const KvTensorMaps *kvMaps) const {
  unsigned threads = static_cast<unsigned>(
      fn == kernel_  ? image_.threads
      : fn == merge_ ? abi::kMergeThreads
                     : ptx::kMaskBuilderThreads);
  unsigned shared =
      static_cast<unsigned>(fn == kernel_ ? image_.dynamicSharedBytes : 0);
  return ptx::launchItems(*ctx_, fn, std::move(descs), items, threads, shared,
                          stream, fn == kernel_ ? kvMaps : nullptr,
                          fn == kernel_ ? persistentBlocks_ : 0,
                          fn == merge_ && mergeDependent_);
}

Status GpuKernel::prepare(const AttentionArgs &a, bool forMaskBuilder,
                          Call &c) const {
  if (Status s = resolveProblem(variant_, &image_.spec, a, c.p); !s)
    return s;
  if (Status s = ctx_->makeCurrent(); !s)
    return s;
  if (variant_.maskKind == MaskKind::Data) {
    if (a.blockMask && !forMaskBuilder) {
      if (Status s = detail::checkBlockMask(image_.spec, c.p, *a.blockMask); !s)
        return s;
      c.bm = a.blockMask;
    } else {
      detail::initBlockMask(variant_, image_.spec, c.p, c.built);
      c.bm = &c.built;
    }
  }
  int64_t pack = detail::packedHeads(variant_, image_.spec, c.p, c.bm);
  c.ops = detail::buildOperands(variant_, image_.spec, a, c.p, c.bm, pack);
  if (!forMaskBuilder)
    if (Status s = detail::planLaunchSplits(c.p, c.ops,
                                            ctx_->device().multiprocessors(),
                                            a.numSplits, c.split);
        !s)
      return s;
  detail::applySplit(c.p, c.split, c.ops);
  return Status::ok();
}

Status GpuKernel::upload(const AttentionArgs &a, const Call &c,
                         bool forMaskBuilder, ParamSlot &slot, CUstream stream,
                         Operands &out) const {
  const Problem &p = c.p;
  const detail::Operands &ops = c.ops;
  const BlockMask *bm = c.bm;
  out.items = forMaskBuilder ? bm->batch * bm->heads * bm->numQTiles
                             : detail::numItems(p, ops);
  SlotLayout at = c.layout(image_.spec);
  size_t ipBytes = at.fp, fpBytes = at.bm - at.fp, bmBytes = at.partials - at.bm;
  if (slot.buf.size() < at.total)
    return Status::internal("the parameter buffer is too small");
  // Copied on the launch's stream, so ordered before the launch whatever
  // the stream (the host bytes are staged before the call returns).
  std::vector<unsigned char> host(ipBytes + fpBytes + bmBytes, 0);
  std::memcpy(host.data(), ops.ip.data(), ipBytes);
  std::memcpy(host.data() + ipBytes, ops.fp.data(), ops.fp.size() * 4);
  // The block mask: the caller's, uploaded; or written by the builder.
  bool callerMask = bm && !c.buildsMask();
  if (callerMask)
    std::memcpy(host.data() + ipBytes + fpBytes, bm->classes.data(), bmBytes);
  size_t upBytes = callerMask ? host.size() : ipBytes + fpBytes;
  const Driver &drv = ctx_->driver();
  if (Status s = drv.check(drv.api().cuMemcpyHtoDAsync(
                               reinterpret_cast<CUdeviceptr>(slot.buf.data()),
                               host.data(), upBytes, stream),
                           "cuMemcpyHtoDAsync");
      !s)
    return s;
  auto base = static_cast<unsigned char *>(slot.buf.data());
  out.classes = base + ipBytes + fpBytes;
  std::vector<detail::MemrefDesc> &d = out.descs;
  d.clear();
  detail::MemrefDesc o = detail::memrefOf(a.out.data, detail::extent(a.out));
  detail::MemrefDesc lse =
      p.hasLse ? detail::memrefOf(a.lse.data, detail::extent(a.lse))
               : detail::memrefOf(base, 0);
  if (c.split.splits > 1 && !forMaskBuilder) {
    // The kernel writes partial rows into the slot; the merge reads them.
    int64_t rows = detail::partialRows(p, c.split.splits);
    detail::MemrefDesc opart = detail::memrefOf(base + at.partials, rows * p.Dv);
    detail::MemrefDesc lpart = detail::memrefOf(base + at.lse, rows);
    out.merge = {opart, lpart, o, lse,
                 detail::memrefOf(base, static_cast<int64_t>(ops.ip.size()))};
    out.rows = p.B * p.Hq * p.Lq;
    o = opart;
    lse = lpart;
  }
  if (!forMaskBuilder) {
    d.push_back(detail::memrefOf(a.q.data, detail::extent(a.q)));
    d.push_back(detail::memrefOf(a.k.data, detail::extent(a.k)));
    d.push_back(detail::memrefOf(a.v.data, detail::extent(a.v)));
    d.push_back(o);
    d.push_back(lse);
  }
  d.push_back(detail::memrefOf(base, static_cast<int64_t>(ops.ip.size())));
  d.push_back(detail::memrefOf(base + ipBytes,
                               static_cast<int64_t>(ops.fp.size())));
  d.push_back(detail::memrefOf(out.classes, static_cast<int64_t>(bmBytes)));
  detail::appendCaptures(variant_, p, d);
  return Status::ok();
}

Status GpuKernel::run(const AttentionArgs &a, CUstream stream) const {
  Call c;
  if (Status s = prepare(a, false, c); !s)
    return s;
  std::lock_guard<std::mutex> lock(mu_);
  ParamSlot *slot = nullptr;
  if (Status s = acquire(c.layout(image_.spec).total, slot); !s)
    return s;
  auto enqueue = [&]() -> Status {
    if (c.buildsMask()) {
      // Build the block mask on the device, into the slot the kernel reads
      // (the kernel's upload rewrites ip and fp there, keeps the classes).
      Operands builder;
      if (Status s = upload(a, c, true, *slot, stream, builder); !s)
        return s;
      if (Status s = launch(maskBuilder_, builder.descs, builder.items, stream);
          !s)
        return s;
    }
    Operands ops;
    if (Status s = upload(a, c, false, *slot, stream, ops); !s)
      return s;
    KvTensorMaps maps;
    if (kvMaps_)
      maps = kvCache_->get(ctx_->driver().api(), a.k, a.v, c.ops.ip.data(),
                           image_.spec.dtype, image_.spec.headDim,
                           image_.spec.vHeadDim, image_.spec.blockN);
    if (Status s = launch(kernel_, ops.descs, ops.items, stream,
                          kvMaps_ ? &maps : nullptr);
        !s)
      return s;
    if (c.split.splits > 1)
      if (Status s = launch(merge_, ops.merge, ops.rows, stream); !s)
        return s;
    return Status::ok();
  };
  // The slot stays busy until what was enqueued is done, also when a later
  // step failed: the next call must not rewrite what a queued copy or
  // launch still reads.
  Status enqueued = enqueue();
  Status released = release(*slot, stream);
  return enqueued ? released : enqueued;
}

Status GpuKernel::buildBlockMask(const AttentionArgs &a, BlockMask &out) const {
  if (variant_.maskKind != MaskKind::Data)
    return Status::invalidArgument(fmt::format(
        "variant '{}' has no data-dependent mask; it needs no block mask",
        variant_.name));
  Call c;
  if (Status s = prepare(a, true, c); !s)
    return s;
  std::lock_guard<std::mutex> lock(mu_);
  ParamSlot *slot = nullptr;
  if (Status s = acquire(c.layout(image_.spec).total, slot); !s)
    return s;
  Operands builder;
  if (Status s = upload(a, c, true, *slot, nullptr, builder); !s)
    return s;
  if (Status s = launch(maskBuilder_, builder.descs, builder.items, nullptr); !s)
    return s;
  if (Status s = ctx_->synchronize(); !s)
    return s;
  size_t offset = static_cast<size_t>(
      static_cast<unsigned char *>(builder.classes) -
      static_cast<unsigned char *>(slot->buf.data()));
  if (Status s = slot->buf.download(c.built.classes.data(),
                                    c.built.classes.size(), offset);
      !s)
    return s;
  out = std::move(c.built);
  return Status::ok();
}

// ---- Host convenience ---------------------------------------------------

Status DeviceMirror::create(const Context &ctx, const AttentionArgs &host,
                            DeviceMirror &out) {
  out = DeviceMirror();
  out.dev_ = host;
  auto mirror = [&](const TensorView &h, TensorView &d, int *index) -> Status {
    if (!h.data)
      return Status::ok();
    DeviceBuffer buf;
    size_t bytes = static_cast<size_t>(bytesOf(h));
    if (Status s = DeviceBuffer::allocate(ctx, bytes, buf); !s)
      return s;
    if (Status s = buf.upload(h.data, bytes); !s)
      return s;
    d.data = buf.data();
    if (index)
      *index = static_cast<int>(out.bufs_.size());
    out.bufs_.push_back(std::move(buf));
    return Status::ok();
  };
  for (auto [h, d, index] :
       {std::tuple{&host.q, &out.dev_.q, (int *)nullptr},
        std::tuple{&host.k, &out.dev_.k, (int *)nullptr},
        std::tuple{&host.v, &out.dev_.v, (int *)nullptr},
        std::tuple{&host.out, &out.dev_.out, &out.outIndex_},
        std::tuple{&host.lse, &out.dev_.lse, &out.lseIndex_}})
    if (Status s = mirror(*h, *d, index); !s)
      return s;
  for (size_t i = 0; i < host.tensors.size(); ++i)
    if (Status s = mirror(host.tensors[i].second, out.dev_.tensors[i].second,
                          nullptr);
        !s)
      return s;
  return Status::ok();
}

Status DeviceMirror::downloadOutputs(const AttentionArgs &host) const {
  if (outIndex_ >= 0)
    if (Status s = bufs_[outIndex_].download(host.out.data, bytesOf(host.out));
        !s)
      return s;
  if (lseIndex_ >= 0)
    if (Status s = bufs_[lseIndex_].download(host.lse.data, bytesOf(host.lse));
        !s)
      return s;
  return Status::ok();
}

Status runFromHost(const Context &ctx, const GpuKernel &kernel,
                   const AttentionArgs &host, float *ms) {
  // Validate on the host views first: nothing is allocated for bad input.
  Problem p;
  if (Status s = resolveProblem(kernel.variant(), &kernel.image().spec, host, p);
      !s)
    return s;
  if (Status s = checkCaptureValues(kernel.variant(), p); !s)
    return s;
  DeviceMirror dev;
  if (Status s = DeviceMirror::create(ctx, host, dev); !s)
    return s;
  const DriverApi &api = ctx.driver().api();
  CUevent start = nullptr, stop = nullptr;
  if (ms) {
    if (Status s = ctx.driver().check(api.cuEventCreate(&start, 0), "cuEventCreate"); !s)
      return s;
    if (Status s = ctx.driver().check(api.cuEventCreate(&stop, 0), "cuEventCreate"); !s)
      return s;
    api.cuEventRecord(start, nullptr);
  }
  Status runStatus = kernel.run(dev.args());
  if (ms) {
    api.cuEventRecord(stop, nullptr);
    api.cuEventSynchronize(stop);
    api.cuEventElapsedTime(ms, start, stop);
    api.cuEventDestroy(start);
    api.cuEventDestroy(stop);
  }
  if (!runStatus)
    return runStatus;
  if (Status s = ctx.synchronize(); !s)
    return s;
  return dev.downloadOutputs(host);
}

} // namespace attnc::rt::cuda
