// Helpers of the Catch2 tests that drive paged caches as a server does: a
// host PagedKVCache per layer and, with a device, a DevicePagedKVCache per
// layer given the same rows (ServingLoopTests.cpp, SoakTests.cpp).
#ifndef ATTNC_TEST_PAGEDCACHES_H
#define ATTNC_TEST_PAGEDCACHES_H

#include "ReferenceCheck.h"
#include "attnc/runtime/PagedKVCache.h"
#include "attnc/runtime/cuda/DevicePagedKVCache.h"

#include <catch2/catch.hpp>

#include <random>
#include <vector>

namespace attnc::test {

/// `layers` host caches and, with `ctx`, as many device caches, each with
/// pools for `spec` (dtype, heads and head dim as a model's layer has them,
/// `pageSize`-row pages, `numPages` of them).
inline void createLayerCaches(
    rt::DType dt, int64_t kvHeads, int64_t headDim, int64_t pageSize,
    int64_t numPages, int layers, const rt::cuda::Context *ctx,
    std::vector<rt::PagedKVCache> &host,
    std::vector<rt::cuda::DevicePagedKVCache> &device) {
  rt::PagedKVCacheSpec spec;
  spec.dtype = dt;
  spec.kvHeads = kvHeads;
  spec.headDim = spec.vHeadDim = headDim;
  spec.pageSize = pageSize;
  spec.numPages = numPages;
  host.resize(static_cast<size_t>(layers));
  for (rt::PagedKVCache &c : host)
    REQUIRE(rt::PagedKVCache::create(spec, c).isOk());
  if (!ctx)
    return;
  device.resize(static_cast<size_t>(layers));
  for (rt::cuda::DevicePagedKVCache &c : device)
    REQUIRE(rt::cuda::DevicePagedKVCache::create(*ctx, spec, c).isOk());
}

/// Appends `T` random K/V rows [ids, Hkv, T, D] to sequences `ids` in
/// every layer's host cache and (when `ctx`) its device cache: the same
/// rows, uploaded, appended, and synchronized before the upload goes.
inline void appendRandomRows(std::vector<rt::PagedKVCache> &host,
                             std::vector<rt::cuda::DevicePagedKVCache> &device,
                             const rt::cuda::Context *ctx, rt::DType dt,
                             std::mt19937_64 &rng,
                             const std::vector<int32_t> &ids, int64_t T,
                             int64_t kvHeads, int64_t headDim) {
  int64_t n = static_cast<int64_t>(ids.size()),
          elems = n * kvHeads * T * headDim;
  for (size_t l = 0; l < host.size(); ++l) {
    std::vector<uint8_t> k = randomValues(dt, elems, rng()),
                         v = randomValues(dt, elems, rng());
    rt::TensorView kv =
        rt::TensorView::contiguous(k.data(), dt, {n, kvHeads, T, headDim});
    rt::TensorView vv =
        rt::TensorView::contiguous(v.data(), dt, {n, kvHeads, T, headDim});
    REQUIRE(host[l].append(ids, kv, vv).isOk());
    if (!ctx)
      continue;
    rt::cuda::DeviceBuffer dk, dv;
    REQUIRE(rt::cuda::DeviceBuffer::allocate(*ctx, k.size(), dk).isOk());
    REQUIRE(rt::cuda::DeviceBuffer::allocate(*ctx, v.size(), dv).isOk());
    REQUIRE(dk.upload(k.data(), k.size()).isOk());
    REQUIRE(dv.upload(v.data(), v.size()).isOk());
    kv.data = dk.data();
    vv.data = dv.data();
    REQUIRE(device[l].append(ids, kv, vv).isOk());
    REQUIRE(ctx->synchronize().isOk()); // before the rows' buffers go
  }
}

} // namespace attnc::test

#endif
