//===- GpuBackward.cpp - Launching the GPU backward kernels ---------------===//
//
// One call: validate (BackwardCall.h), lay out ip (the forward's, then the
// backward's stride slots), fp, the block mask, the parameters' gradient
// buffer and delta in one device buffer, then launch the block-mask builder
// (data-dependent masks), `_bwd_q` and `_bwd_kv` in that order and wait.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/cuda/GpuBackward.h"
#include "attnc/runtime/KernelABI.h"
#include "../BackwardCall.h"
#include "CallBuffer.h"
#include "PtxModule.h"

#include <fmt/format.h>

#include <cstring>

namespace attnc::rt::cuda {

namespace {
constexpr int64_t kMaxStaticShared = 48 * 1024;
constexpr int kMaxDynamicSharedAttr = 8; // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

int64_t bytesOf(const TensorView &t) {
  return rt::detail::extent(t) * static_cast<int64_t>(dtypeSize(t.dtype));
}
} // namespace

GpuBackwardKernel::~GpuBackwardKernel() {
  if (ctx_ && module_)
    ctx_->driver().api().cuModuleUnload(module_);
}

Status GpuBackwardKernel::load(const Context &ctx, const VariantInfo &variant,
                               const GpuBackwardImage &image,
                               std::unique_ptr<GpuBackwardKernel> &out) {
  if (Status s = ctx.makeCurrent(); !s)
    return s;
  if (Status s = ptx::checkTarget(ctx, image.target, image.query); !s)
    return s;
  struct EntryFacts {
    const std::string &name;
    int64_t threads, shared, dynamic;
  };
  const EntryFacts facts[] = {
      {image.query, image.queryThreads, image.querySharedBytes,
       image.queryDynamicSharedBytes},
      {image.keyValue, image.keyValueThreads, image.keyValueSharedBytes,
       image.keyValueDynamicSharedBytes}};
  for (const EntryFacts &f : facts) {
    if (f.threads <= 0 || f.threads > 1024 || f.shared > kMaxStaticShared ||
        f.dynamic < 0)
      return Status::invalidArgument(fmt::format(
          "backward kernel '{}' asks for {} threads and {} bytes of static "
          "shared memory (at most 1024 and {})",
          f.name, f.threads, f.shared, kMaxStaticShared));
    if (f.shared + f.dynamic > ctx.device().sharedOptIn())
      return Status::invalidArgument(fmt::format(
          "backward kernel '{}' needs {} bytes of shared memory per block; "
          "this device allows {}",
          f.name, f.shared + f.dynamic, ctx.device().sharedOptIn()));
  }
  // SIMT: a thread per row and key; tensor cores: a warp per 16 of them.
  int64_t perRow = image.spec.warps > 0 ? 2 : 1;
  if (image.spec.blockM * perRow != image.queryThreads ||
      image.spec.blockN * perRow != image.keyValueThreads)
    return Status::invalidArgument(
        "backward kernel '" + image.query +
        "': its threads per block do not match its tile's rows and keys");
  size_t captures = 0;
  for (const ParamSpec &p : variant.params)
    captures += p.isTensor;
  // The forward's 8 + captures operands, then fwdO, dLse, delta, dq, dk,
  // dv and the gradient buffer (KernelABI.h).
  if (Status s = ptx::checkEntryParams(image.queryParams, 15 + captures,
                                       image.query);
      !s)
    return s;
  if (Status s = ptx::checkEntryParams(image.keyValueParams, 15 + captures,
                                       image.keyValue);
      !s)
    return s;
  if ((variant.maskKind == MaskKind::Data) == image.maskBuilder.empty())
    return Status::invalidArgument(
        "backward kernel '" + image.query + "' and variant '" + variant.name +
        "' disagree on whether the mask needs a block-mask builder");
  if (!image.maskBuilder.empty())
    if (Status s = ptx::checkEntryParams(image.maskBuilderParams, 3 + captures,
                                         image.maskBuilder);
        !s)
      return s;
  auto k = std::unique_ptr<GpuBackwardKernel>(new GpuBackwardKernel());
  k->ctx_ = &ctx;
  k->variant_ = variant;
  k->image_ = image;
  if (Status s = ptx::loadPtx(ctx, image.ptx, image.query, image.target,
                              k->module_);
      !s)
    return s;
  if (Status s = ptx::getEntry(ctx, k->module_, image.query, "kernel", k->query_);
      !s)
    return s;
  if (Status s = ptx::getEntry(ctx, k->module_, image.keyValue, "kernel",
                               k->keyValue_);
      !s)
    return s;
  if (Status s = ptx::getEntry(ctx, k->module_, image.maskBuilder,
                               "block-mask builder", k->maskBuilder_);
      !s)
    return s;
  const Driver &drv = ctx.driver();
  for (auto [fn, f] : {std::pair{k->query_, &facts[0]},
                       std::pair{k->keyValue_, &facts[1]}})
    if (f->dynamic > 0)
      if (Status s = drv.check(drv.api().cuFuncSetAttribute(
                                   fn, kMaxDynamicSharedAttr, int(f->dynamic)),
                               "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
          !s)
        return Status::unavailable("backward kernel '" + f->name +
                                   "' cannot have its shared memory: " +
                                   s.message());
  out = std::move(k);
  return Status::ok();
}

Status GpuBackwardKernel::run(const BackwardArgs &a, ParamGradients *paramGrads,
                              CUstream stream) const {
  const KernelSpec &spec = image_.spec;
  Problem p;
  DType gradType = spec.dtype;
  if (Status s = rt::detail::checkBackwardCall(variant_, spec, a, p, &gradType);
      !s)
    return s;
  if (Status s = ctx_->makeCurrent(); !s)
    return s;
  const AttentionArgs &f = a.forward;
  BlockMask bm;
  bool dataMask = variant_.maskKind == MaskKind::Data;
  if (dataMask)
    rt::detail::initBlockMask(variant_, spec, p, bm);
  // dO in O's place: the kernels read it through kOStride.
  AttentionArgs withDOut = f;
  withDOut.out = a.dOut;
  rt::detail::Operands ops = rt::detail::buildOperands(
      variant_, spec, withDOut, p, dataMask ? &bm : nullptr, 1);
  abi::Layout layout = abi::computeLayout(variant_);
  if (static_cast<int64_t>(ops.ip.size()) != layout.pageBase(p.B))
    return Status::internal("backward: unexpected ip layout");
  std::vector<int64_t> slots(abi::kBwdSlots, 0);
  for (int d = 0; d < 4; ++d) {
    slots[abi::kBwdOStride + d] = f.out.strides[d];
    slots[abi::kBwdDqStride + d] = a.dq.strides[d];
    slots[abi::kBwdDkStride + d] = a.dk.strides[d];
    slots[abi::kBwdDvStride + d] = a.dv.strides[d];
  }
  if (a.dLse.data) {
    for (int d = 0; d < 3; ++d)
      slots[abi::kBwdDLseStride + d] = a.dLse.strides[d];
    slots[abi::kBwdHasDLse] = 1;
  }
  ops.ip.insert(ops.ip.end(), slots.begin(), slots.end());

  ParamGradients layoutGrads = zeroParamGradients(variant_, p.params);
  std::vector<int64_t> gradBase;
  int64_t gradElems = rt::detail::paramGradientLayout(layoutGrads, gradBase);
  int64_t rows = p.B * p.Hq * p.Lq;
  // One buffer: ip, fp, the block mask, delta, the gradients.
  // One buffer: ip, fp, the block mask (built on the device), the
  // gradients (zeroed by the upload) and delta (written by _bwd_q, not
  // uploaded). The upload is on the launches' stream, so it is ordered
  // before them whatever the stream; `host` lives until the wait below.
  size_t fpAt = ops.ip.size() * 8;
  size_t bmAt = fpAt + align8(ops.fp.size() * 4);
  size_t gradAt = align16(bmAt + bm.classes.size());
  size_t deltaAt = align16(gradAt + static_cast<size_t>(gradElems) * 4);
  size_t total = deltaAt + static_cast<size_t>(rows) * 4;
  std::vector<unsigned char> host(deltaAt, 0);
  std::memcpy(host.data(), ops.ip.data(), fpAt);
  std::memcpy(host.data() + fpAt, ops.fp.data(), ops.fp.size() * 4);
  DeviceBuffer buf;
  if (Status s = DeviceBuffer::allocate(*ctx_, total, buf); !s)
    return s;
  auto base = static_cast<unsigned char *>(buf.data());
  using rt::detail::memrefOf;
  using rt::detail::extent;
  std::vector<rt::detail::MemrefDesc> common = {
      memrefOf(base, static_cast<int64_t>(ops.ip.size())),
      memrefOf(base + fpAt, static_cast<int64_t>(ops.fp.size())),
      memrefOf(base + bmAt, static_cast<int64_t>(bm.classes.size()))};
  rt::detail::appendCaptures(variant_, p, common);
  std::vector<rt::detail::MemrefDesc> d = {
      memrefOf(f.q.data, extent(f.q)), memrefOf(f.k.data, extent(f.k)),
      memrefOf(f.v.data, extent(f.v)), memrefOf(a.dOut.data, extent(a.dOut)),
      memrefOf(f.lse.data, extent(f.lse))};
  d.insert(d.end(), common.begin(), common.end());
  d.push_back(memrefOf(f.out.data, extent(f.out)));
  d.push_back(a.dLse.data ? memrefOf(a.dLse.data, extent(a.dLse))
                          : memrefOf(base, 0));
  d.push_back(memrefOf(base + deltaAt, rows));
  d.push_back(memrefOf(a.dq.data, extent(a.dq)));
  d.push_back(memrefOf(a.dk.data, extent(a.dk)));
  d.push_back(memrefOf(a.dv.data, extent(a.dv)));
  d.push_back(memrefOf(base + gradAt, gradElems));
  const Driver &drv = ctx_->driver();
  auto enqueue = [&]() -> Status {
    if (Status s = drv.check(drv.api().cuMemcpyHtoDAsync(
                                 reinterpret_cast<CUdeviceptr>(base),
                                 host.data(), host.size(), stream),
                             "cuMemcpyHtoDAsync");
        !s)
      return s;
    if (dataMask)
      if (Status s = ptx::launchItems(*ctx_, maskBuilder_, common,
                                      bm.batch * bm.heads * bm.numQTiles,
                                      ptx::kMaskBuilderThreads, 0, stream);
          !s)
        return s;
    // _bwd_q writes delta, which _bwd_kv reads: same stream, in order.
    if (Status s = ptx::launchItems(
            *ctx_, query_, d, p.B * p.Hq * ops.ip[abi::kNumQTiles],
            static_cast<unsigned>(image_.queryThreads),
            static_cast<unsigned>(image_.queryDynamicSharedBytes), stream);
        !s)
      return s;
    return ptx::launchItems(
        *ctx_, keyValue_, d, p.B * p.Hkv * ops.ip[abi::kNumKTiles],
        static_cast<unsigned>(image_.keyValueThreads),
        static_cast<unsigned>(image_.keyValueDynamicSharedBytes), stream);
  };
  // Whatever was enqueued finishes before `host` and `buf` go away.
  Status queued = enqueue();
  Status done = drv.check(drv.api().cuStreamSynchronize(stream),
                          "cuStreamSynchronize");
  if (!queued)
    return queued;
  if (!done)
    return done;
  if (paramGrads) {
    std::vector<float> g(static_cast<size_t>(gradElems));
    if (Status s = buf.download(g.data(), g.size() * 4, gradAt); !s)
      return s;
    for (size_t i = 0; i < layoutGrads.size(); ++i)
      for (size_t k = 0; k < layoutGrads[i].size(); ++k)
        layoutGrads[i][k] = g[static_cast<size_t>(gradBase[i]) + k];
    *paramGrads = std::move(layoutGrads);
  }
  return Status::ok();
}

Status BackwardMirror::create(const Context &ctx, const BackwardArgs &host,
                              BackwardMirror &out) {
  out = BackwardMirror();
  if (Status s = DeviceMirror::create(ctx, host.forward, out.forward_); !s)
    return s;
  out.dev_ = host;
  out.dev_.forward = out.forward_.args();
  auto mirror = [&](const TensorView &h, TensorView &dv) -> Status {
    if (!h.data)
      return Status::ok();
    DeviceBuffer b;
    size_t bytes = static_cast<size_t>(bytesOf(h));
    if (Status s = DeviceBuffer::allocate(ctx, bytes, b); !s)
      return s;
    if (Status s = b.upload(h.data, bytes); !s)
      return s;
    dv.data = b.data();
    out.bufs_.push_back(std::move(b));
    return Status::ok();
  };
  if (Status s = mirror(host.dOut, out.dev_.dOut); !s)
    return s;
  if (Status s = mirror(host.dLse, out.dev_.dLse); !s)
    return s;
  out.firstGrad_ = out.bufs_.size();
  for (auto [h, dv] :
       {std::pair{&host.dq, &out.dev_.dq}, std::pair{&host.dk, &out.dev_.dk},
        std::pair{&host.dv, &out.dev_.dv}})
    if (Status s = mirror(*h, *dv); !s)
      return s;
  return Status::ok();
}

Status BackwardMirror::downloadGradients(const BackwardArgs &host) const {
  const TensorView *outs[] = {&host.dq, &host.dk, &host.dv};
  for (size_t i = 0; i < 3; ++i)
    if (Status s = bufs_[firstGrad_ + i].download(
            outs[i]->data, static_cast<size_t>(bytesOf(*outs[i])));
        !s)
      return s;
  return Status::ok();
}

Status runBackwardFromHost(const Context &ctx, const GpuBackwardKernel &kernel,
                           const BackwardArgs &host, ParamGradients *paramGrads) {
  // Validate on the host views first: nothing is allocated for bad input.
  Problem p;
  DType gradType = kernel.image().spec.dtype;
  if (Status s = rt::detail::checkBackwardCall(
          kernel.variant(), kernel.image().spec, host, p, &gradType);
      !s)
    return s;
  BackwardMirror mirror;
  if (Status s = BackwardMirror::create(ctx, host, mirror); !s)
    return s;
  if (Status s = kernel.run(mirror.args(), paramGrads); !s)
    return s;
  return mirror.downloadGradients(host);
}

} // namespace attnc::rt::cuda
