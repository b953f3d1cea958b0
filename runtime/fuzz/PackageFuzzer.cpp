//===- PackageFuzzer.cpp - libFuzzer target for the package reader -------===//
//
// Feeds arbitrary bytes to Package::parse (JSON, manifests, PTX entry
// parameters, modifier programs), and for every package it accepts, runs
// each variant's modifier program through the fp64 interpreter over a few
// positions with small bound captures. Any crash, hang, leak or sanitizer
// report is a bug: a package is input, and no input may take a reader down.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/Package.h"
#include "attnc/runtime/Variant.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

using namespace attnc::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Package p;
  if (!Package::parse(std::string(reinterpret_cast<const char *>(data), size),
                      "fuzz.json", p))
    return 0;
  // What the reader accepted, the writer must write back readably.
  Package again;
  if (!Package::parse(p.serialize(), "again.json", again))
    __builtin_trap();
  for (const PackageVariant &v : p.variants) {
    const GpuKernelImage *k = nullptr;
    (void)selectKernel(v, 90, DType::F16, 64, 64, k);
    const GpuBackwardImage *b = nullptr;
    (void)selectBackward(v, 90, DType::BF16, 64, 64, b);
    // Bind every parameter: scalars to 3, tensors to 2 elements per dim.
    std::vector<BoundParam> params(v.info.params.size());
    std::vector<std::vector<double>> storage;
    storage.reserve(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const ParamSpec &ps = v.info.params[i];
      BoundParam &bp = params[i];
      if (!ps.isTensor) {
        bp.scalar = 3;
        continue;
      }
      int64_t n = 1;
      for (size_t d = 0; d < ps.dims.size(); ++d) {
        bp.shape.push_back(2);
        n *= 2;
      }
      for (size_t d = 0; d < ps.dims.size(); ++d) {
        int64_t stride = 1;
        for (size_t e = d + 1; e < ps.dims.size(); ++e)
          stride *= 2;
        bp.strides.push_back(stride);
      }
      // Doubles hold every dtype's values at least as wide: read as f64.
      storage.emplace_back(static_cast<size_t>(n) + 8, 1.0);
      bp.data = storage.back().data();
      bp.dtype = ps.dtype == DType::F16 || ps.dtype == DType::BF16 ||
                         ps.dtype == DType::F32
                     ? DType::F32
                     : ps.dtype == DType::Bool ? DType::Bool : DType::I32;
    }
    for (int32_t q : {0, 5})
      for (int32_t kv : {0, 7, -3}) {
        (void)evalScoreMod(v.info, params, 0.5, 1, 1, q, kv, nullptr);
        (void)evalMaskMod(v.info, params, 1, 1, q, kv, nullptr);
      }
  }
  return 0;
}
