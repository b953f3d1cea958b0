//===- KvTensorMaps.cpp - K and V as TMA tensor maps ----------------------===//
#include "KvTensorMaps.h"

#include "attnc/runtime/KernelABI.h"

#include <fmt/format.h>

namespace attnc::rt::cuda {

namespace {
// CUtensorMapDataType, CUtensorMapSwizzle and CUtensorMapL2promotion values.
constexpr int kFloat16 = 6, kBFloat16 = 9, kSwizzle128B = 3, kL2Promote256B = 3;
constexpr int64_t kBoxCols = 64; // 128 bytes of 16-bit elements: one swizzle span
} // namespace

bool takesKvTensorMaps(const std::vector<int> &sizes) {
  size_t n = sizes.size();
  return n >= 4 && sizes[n - 3] == 128 && sizes[n - 2] == 128 && sizes[n - 1] == 8;
}

KvTensorMaps kvTensorMaps(const DriverApi &api, const TensorView &k,
                          const TensorView &v, const int64_t *ip, DType dtype,
                          int64_t headDim, int64_t vHeadDim, int64_t boxRows) {
  KvTensorMaps out;
  auto no = [&](std::string why) {
    out.usable = 0;
    out.why = std::move(why);
    return std::move(out);
  };
  if (!api.cuTensorMapEncodeTiled)
    return no("the driver has no cuTensorMapEncodeTiled");
  // Paged K/V: a tile of boxRows keys is one box within one page when the
  // page size is a multiple of it.
  const int64_t pageSize = ip[abi::kPageSize];
  if (pageSize != 0 && pageSize % boxRows != 0)
    return no(fmt::format("the page size {} is not a multiple of the KV tile's "
                          "{} rows", pageSize, boxRows));
  if (dtype != DType::F16 && dtype != DType::BF16)
    return no("not a 16-bit element type");
  if (headDim % kBoxCols || vHeadDim % kBoxCols || boxRows < 1 || boxRows > 256)
    return no("head dims or the KV tile do not fit 64 x block_n boxes");
  const int64_t B = ip[abi::kB], H = ip[abi::kHkv];
  for (auto [name, t, slot, d, map] :
       {std::tuple{"K", &k, abi::kKStride, headDim, out.k},
        std::tuple{"V", &v, abi::kVStride, vHeadDim, out.v}}) {
    const int64_t s0 = ip[slot], s1 = ip[slot + 1], P = ip[slot + 2],
                  s3 = ip[slot + 3];
    const int64_t eb = 2;
    if (s3 != 1 || P <= 0 || s0 < 0 || s1 < 0 || P < d)
      return no(fmt::format("{}'s rows are not contiguous along D", name));
    if ((P * eb) % 16 || reinterpret_cast<uintptr_t>(t->data) % 16)
      return no(fmt::format("{}'s rows are not 16-byte aligned", name));
    // Every (batch, head)'s rows must start at a 64-element chunk of a row
    // of the view and keep their D elements in its whole chunks: column
    // (b s0 + h s1) % P a multiple of 64, plus D, at most 64 floor(P / 64).
    // Paged, b is the pool's page, whose rows the kernel finds at page s0 / P
    // rows into the view: s0 a multiple of P (then b adds no column).
    const int64_t chunks = P / kBoxCols;
    int64_t m0 = s0 % P, m1 = s1 % P;
    if (pageSize != 0 && m0 != 0)
      return no(fmt::format("{}'s page stride is not a multiple of its row stride",
                            name));
    if (m0 % kBoxCols || m1 % kBoxCols)
      return no(fmt::format("{}'s heads do not start at 64-element columns", name));
    if ((B - 1) * m0 + (H - 1) * m1 + d > chunks * kBoxCols)
      return no(fmt::format("{}'s heads would wrap across rows of the view", name));
    const int64_t rows = (detail::extent(*t) + P - 1) / P;
    if (rows >= (int64_t(1) << 31) || P > (int64_t(1) << 32))
      return no(fmt::format("{} is too large for 32-bit coordinates", name));
    // [chunks][rows][64]: a box of (D / 64) chunks x boxRows rows x 64
    // lands as the tile's atom columns, one load per tile.
    const uint64_t dims[3] = {uint64_t(kBoxCols), uint64_t(rows), uint64_t(chunks)};
    const uint64_t strides[2] = {uint64_t(P * eb), uint64_t(kBoxCols * eb)};
    const unsigned box[3] = {unsigned(kBoxCols), unsigned(boxRows),
                             unsigned(d / kBoxCols)};
    const unsigned es[3] = {1, 1, 1};
    CUresult r = api.cuTensorMapEncodeTiled(
        map, dtype == DType::BF16 ? kBFloat16 : kFloat16, 3, t->data, dims, strides,
        box, es, /*interleave=*/0, kSwizzle128B, kL2Promote256B, /*oobFill=*/0);
    if (r != 0) {
      out.driverRefused = true;
      return no(fmt::format("cuTensorMapEncodeTiled refused {} (CUDA error {})",
                            name, int(r)));
    }
  }
  out.usable = 1;
  return out;
}

KvTensorMaps KvTensorMapCache::get(const DriverApi &api, const TensorView &k,
                                   const TensorView &v, const int64_t *ip,
                                   DType dtype, int64_t headDim, int64_t vHeadDim,
                                   int64_t boxRows) {
  Key key = {int64_t(reinterpret_cast<uintptr_t>(k.data)),
             int64_t(reinterpret_cast<uintptr_t>(v.data)),
             detail::extent(k), detail::extent(v), ip[abi::kPageSize], ip[abi::kB],
             ip[abi::kHkv]};
  for (int64_t i = 0; i < 4; ++i) {
    key[size_t(7 + 2 * i)] = ip[abi::kKStride + i];
    key[size_t(8 + 2 * i)] = ip[abi::kVStride + i];
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!valid_ || key != key_) {
    maps_ = kvTensorMaps(api, k, v, ip, dtype, headDim, vHeadDim, boxRows);
    key_ = key;
    valid_ = !maps_.driverRefused; // a refusal is asked about again
  }
  return maps_;
}

} // namespace attnc::rt::cuda
