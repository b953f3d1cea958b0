//===- DevicePagedKVCache.cpp - Page pools on the device, append by kernel ===//
#include "attnc/runtime/cuda/DevicePagedKVCache.h"

#include <fmt/format.h>

#include <cstdint>
#include <cstring>
#include <utility>

namespace attnc::rt::cuda {

namespace {

/// Row r of a launch copies `words` 4-byte words from word src[r] of the
/// source to word dst[r] of the pool; a block per row, its threads over the
/// words. Written for this runtime; PTX ISA 8.0, sm_80 and newer.
constexpr const char *kCopyRowsPtx = R"(.version 8.0
.target sm_80
.address_size 64

.visible .entry attnc_copy_rows(
	.param .u64 attnc_copy_rows_src,
	.param .u64 attnc_copy_rows_dst,
	.param .u64 attnc_copy_rows_offsets,
	.param .u64 attnc_copy_rows_rows,
	.param .u32 attnc_copy_rows_words
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<20>;

	ld.param.u64 	%rd1, [attnc_copy_rows_src];
	ld.param.u64 	%rd2, [attnc_copy_rows_dst];
	ld.param.u64 	%rd3, [attnc_copy_rows_offsets];
	ld.param.u64 	%rd4, [attnc_copy_rows_rows];
	ld.param.u32 	%r1, [attnc_copy_rows_words];
	cvta.to.global.u64 	%rd1, %rd1;
	cvta.to.global.u64 	%rd2, %rd2;
	cvta.to.global.u64 	%rd3, %rd3;
	mov.u32 	%r2, %ctaid.x;
	cvt.u64.u32 	%rd5, %r2;
	shl.b64 	%rd6, %rd5, 3;
	add.s64 	%rd7, %rd3, %rd6;
	ld.global.u64 	%rd8, [%rd7];
	shl.b64 	%rd9, %rd4, 3;
	add.s64 	%rd10, %rd7, %rd9;
	ld.global.u64 	%rd11, [%rd10];
	mov.u32 	%r3, %tid.x;
	mov.u32 	%r4, %ntid.x;
$L_loop:
	setp.ge.u32 	%p1, %r3, %r1;
	@%p1 bra 	$L_done;
	cvt.u64.u32 	%rd12, %r3;
	add.s64 	%rd13, %rd8, %rd12;
	shl.b64 	%rd13, %rd13, 2;
	add.s64 	%rd14, %rd1, %rd13;
	ld.global.u32 	%r5, [%rd14];
	add.s64 	%rd15, %rd11, %rd12;
	shl.b64 	%rd15, %rd15, 2;
	add.s64 	%rd16, %rd2, %rd15;
	st.global.u32 	[%rd16], %r5;
	add.s32 	%r3, %r3, %r4;
	bra.uni 	$L_loop;
$L_done:
	ret;
}
)";

constexpr unsigned kCopyThreads = 64;

} // namespace

struct DevicePagedKVCache::Module {
  const Driver *driver = nullptr;
  CUmodule module = nullptr;
  CUfunction copyRows = nullptr;
  ~Module() {
    if (module)
      driver->api().cuModuleUnload(module);
  }
};

Status DevicePagedKVCache::create(const Context &ctx,
                                  const PagedKVCacheSpec &spec,
                                  DevicePagedKVCache &out) {
  if (Status s = spec.check(); !s)
    return s;
  size_t es = dtypeSize(spec.dtype);
  if ((spec.headDim * es) % 4 || (spec.vHeadDim * es) % 4)
    return Status::invalidArgument(fmt::format(
        "a device paged cache needs rows of whole 4-byte words: head dims {} "
        "and {} of {} are not",
        spec.headDim, spec.vHeadDim, dtypeName(spec.dtype)));
  if (Status s = ctx.makeCurrent(); !s)
    return s;
  DevicePagedKVCache c;
  c.ctx_ = &ctx;
  c.spec_ = spec;
  c.pages_ = PageAllocator(spec.pageSize, spec.numPages);
  size_t rows = static_cast<size_t>(spec.numPages * spec.pageSize * spec.kvHeads);
  if (Status s = DeviceBuffer::allocate(ctx, rows * spec.headDim * es, c.k_); !s)
    return s;
  if (Status s = DeviceBuffer::allocate(ctx, rows * spec.vHeadDim * es, c.v_); !s)
    return s;
  if (Status s = c.k_.fill(0); !s)
    return s;
  if (Status s = c.v_.fill(0); !s)
    return s;
  auto m = std::make_shared<Module>();
  m->driver = &ctx.driver();
  const DriverApi &api = ctx.driver().api();
  if (Status s = ctx.driver().check(
          api.cuModuleLoadDataEx(&m->module, kCopyRowsPtx, 0, nullptr, nullptr),
          "cuModuleLoadDataEx");
      !s)
    return Status::unavailable("cannot load the paged cache's copy kernel: " +
                               s.message());
  if (Status s = ctx.driver().check(
          api.cuModuleGetFunction(&m->copyRows, m->module, "attnc_copy_rows"),
          "cuModuleGetFunction");
      !s)
    return s;
  c.module_ = std::move(m);
  out = std::move(c);
  return Status::ok();
}

Status DevicePagedKVCache::append(const std::vector<int32_t> &seqs,
                                  const TensorView &newK,
                                  const TensorView &newV, CUstream stream) {
  // The copy moves 4-byte words: every source row must start on one.
  size_t es = dtypeSize(spec_.dtype);
  for (auto [name, t] : {std::pair{"newK", &newK}, std::pair{"newV", &newV}}) {
    bool aligned = reinterpret_cast<uintptr_t>(t->data) % 4 == 0;
    for (size_t d = 0; d < 3 && d < t->strides.size() && d < t->shape.size();
         ++d)
      aligned = aligned && (t->shape[d] <= 1 || (t->strides[d] * es) % 4 == 0);
    if (!aligned)
      return Status::invalidArgument(fmt::format(
          "'{}' rows must start on 4-byte boundaries to be appended on the "
          "device (strides {})",
          name, TensorView::formatDims(t->strides)));
  }
  AppendRows plan;
  if (Status s = planAppend(spec_, pages_, seqs, newK, newV, plan); !s)
    return s;
  size_t rows = plan.kFrom.size();
  if (!rows)
    return Status::ok();
  // [K from | K to | V from | V to], in 4-byte words.
  std::vector<uint64_t> words;
  words.reserve(4 * rows);
  for (const std::vector<int64_t> *v :
       {&plan.kFrom, &plan.kTo, &plan.vFrom, &plan.vTo})
    for (int64_t o : *v)
      words.push_back(static_cast<uint64_t>(o) * es / 4);
  size_t bytes = words.size() * 8;
  if (offsets_.size() < bytes)
    if (Status s = DeviceBuffer::allocate(*ctx_, 2 * bytes, offsets_); !s)
      return s;
  if (Status s = ctx_->makeCurrent(); !s)
    return s;
  const Driver &drv = ctx_->driver();
  auto base = reinterpret_cast<CUdeviceptr>(offsets_.data());
  if (Status s = drv.check(drv.api().cuMemcpyHtoDAsync(base, words.data(),
                                                       bytes, stream),
                           "cuMemcpyHtoDAsync");
      !s)
    return s;
  auto launch = [&](const TensorView &src, const DeviceBuffer &pool,
                    CUdeviceptr offsets, int64_t d) {
    CUdeviceptr from = reinterpret_cast<CUdeviceptr>(src.data);
    CUdeviceptr to = reinterpret_cast<CUdeviceptr>(pool.data());
    uint64_t count = rows;
    unsigned wordsPerRow = static_cast<unsigned>(d * es / 4);
    void *params[] = {&from, &to, &offsets, &count, &wordsPerRow};
    return drv.check(drv.api().cuLaunchKernel(
                         module_->copyRows, static_cast<unsigned>(rows), 1, 1,
                         kCopyThreads, 1, 1, 0, stream, params, nullptr),
                     "cuLaunchKernel");
  };
  if (Status s = launch(newK, k_, base, spec_.headDim); !s)
    return s;
  return launch(newV, v_, base + 2 * rows * 8, spec_.vHeadDim);
}

TensorView DevicePagedKVCache::keys() const {
  return spec_.poolView(k_.data(), spec_.headDim);
}
TensorView DevicePagedKVCache::values() const {
  return spec_.poolView(v_.data(), spec_.vHeadDim);
}

} // namespace attnc::rt::cuda
