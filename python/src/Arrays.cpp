//===- Arrays.cpp - Arrays in, errors out, and the fp64 reference ---------===//
//
// How the extension turns DLPack arrays (NumPy, torch, device arrays) into
// the runtime's TensorViews without copying, a Status into attnc.Error, and
// a call's arguments into the fp64 reference's.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <climits>
#include <cstdint>

namespace attnc::python {

using rt::DType;

namespace {
/// The runtime's messages name its C++ fields; Python callers passed the
/// keyword arguments of the same meaning.
std::string inPythonTerms(std::string m) {
  static const std::pair<const char *, const char *> kNames[] = {
      {"'kvLens", "'kv_lens"},         {"'qOffsets", "'q_offsets"},
      {"'kvOffsets", "'kv_offsets"},    {"'headOffset'", "'head_offset'"},
      {"'headCount'", "'head_count'"},
      {"'numSplits'", "'num_splits'"}, {"'numThreads'", "'num_threads'"},
      {"'dOut'", "'grad_out'"},        {"'dLse'", "'grad_lse'"}};
  for (auto [from, to] : kNames)
    for (size_t at = m.find(from); at != std::string::npos;
         at = m.find(from, at + std::strlen(to)))
      m.replace(at, std::strlen(from), to);
  return m;
}
} // namespace

void check(const rt::Status &s) {
  if (!s)
    throw Error(inPythonTerms(s.message()));
}

std::string Where::str() const {
  if (type == nb::device::cpu::value)
    return "cpu";
  if (isCuda())
    return "cuda:" + std::to_string(id);
  return "DLPack device type " + std::to_string(type);
}

DType dtypeOf(nb::dlpack::dtype t, const std::string &name) {
  using C = nb::dlpack::dtype_code;
  if (t.lanes == 1) {
    if (t.code == uint8_t(C::Float) && t.bits == 32) return DType::F32;
    if (t.code == uint8_t(C::Float) && t.bits == 16) return DType::F16;
    if (t.code == uint8_t(C::Bfloat) && t.bits == 16) return DType::BF16;
    if (t.code == uint8_t(C::Int) && t.bits == 32) return DType::I32;
    if (t.code == uint8_t(C::Int) && t.bits == 64) return DType::I64;
    if (t.code == uint8_t(C::Bool) && t.bits == 8) return DType::Bool;
  }
  // The dtype by its usual name (not DLPack's type code).
  std::string kind = t.code == uint8_t(C::Float)     ? "float"
                     : t.code == uint8_t(C::Int)     ? "int"
                     : t.code == uint8_t(C::UInt)    ? "uint"
                     : t.code == uint8_t(C::Bfloat)  ? "bfloat"
                     : t.code == uint8_t(C::Complex) ? "complex"
                     : t.code == uint8_t(C::Bool)    ? "bool"
                                                     : "type code " +
                                                       std::to_string(t.code) + " of ";
  std::string dtype = kind + std::to_string(t.bits) +
                      (t.lanes == 1 ? "" : " x" + std::to_string(t.lanes));
  bool qkv = name == "q" || name == "k" || name == "v" || name == "out";
  throw Error("'" + name + "' is " + dtype + "; expected " +
              (qkv ? "float32, float16 or bfloat16 (cast it, e.g. "
                     "tensor.float())"
                   : "float32, float16, bfloat16, int32, int64 or bool"));
}

nb::dlpack::dtype dlpackOf(DType t) {
  using C = nb::dlpack::dtype_code;
  switch (t) {
  case DType::F32: return {uint8_t(C::Float), 32, 1};
  case DType::F16: return {uint8_t(C::Float), 16, 1};
  case DType::BF16: return {uint8_t(C::Bfloat), 16, 1};
  case DType::I32: return {uint8_t(C::Int), 32, 1};
  case DType::I64: return {uint8_t(C::Int), 64, 1};
  case DType::Bool: return {uint8_t(C::Bool), 8, 1};
  }
  throw Error("unknown dtype");
}

rt::AttentionArgs makeArgs(const Array &q, const Array &k, const Array &v,
                           const CallArgs &c) {
  Where at = whereOf(q);
  rt::AttentionArgs a;
  a.q = viewOf(q, "q", at);
  a.k = viewOf(k, "k", at);
  a.v = viewOf(v, "v", at);
  a.scale = c.scale.value_or(0.0);
  if (c.kvLens)
    a.kvLens = *c.kvLens;
  a.numSplits = c.numSplits;
  a.dropout = {c.dropoutP, c.dropoutSeed, c.dropoutOffset};
  if (c.qOffsets)
    a.qOffsets = *c.qOffsets;
  if (c.kvOffsets)
    a.kvOffsets = *c.kvOffsets;
  a.headOffset = c.headOffset;
  a.headCount = c.headCount;
  for (const auto &[name, t] : c.tensors)
    a.tensors.emplace_back(name, viewOf(t, name, at));
  for (const auto &[name, x] : c.scalars)
    a.scalars.emplace_back(name, x);
  if (c.kvIndptr || c.kvIndices || c.kvLastPageLen) {
    if (!c.kvIndptr || !c.kvIndices || !c.kvLastPageLen)
      throw Error("paged K/V takes kv_indptr, kv_indices and kv_last_page_len "
                  "together");
    if (k.ndim() != 4)
      throw Error("'k' must be a 4-d page pool [pages, Hkv, page_size, D]");
    c.table.pageSize = static_cast<int64_t>(k.shape(2));
    c.table.indptr = *c.kvIndptr;
    c.table.indices = *c.kvIndices;
    c.table.lastPageLen = *c.kvLastPageLen;
    a.pages = &c.table;
  }
  return a;
}

Signature signatureOf(const rt::VariantInfo &info) {
  Signature out;
  for (const auto &p : info.params) {
    std::vector<std::string> dims;
    for (const auto &d : p.dims)
      dims.push_back(d.symbol.empty() ? std::to_string(d.size) : d.symbol);
    out.emplace_back(p.name, p.isTensor ? "tensor" : "scalar",
                     rt::dtypeName(p.dtype), dims);
  }
  return out;
}

std::pair<Float64Array, Float64Array>
referenceOf(const rt::VariantInfo &info, const Array &q, const Array &k,
            const Array &v, const CallArgs &c, rt::GatherViolation *violation) {
  if (whereOf(q).isCuda())
    throw Error("the fp64 reference reads host arrays; 'q' is on " +
                whereOf(q).str());
  rt::AttentionArgs a = makeArgs(q, k, v, c);
  // The reference validates an output view (it writes its own arrays).
  if (q.ndim() != 4 || v.ndim() != 4)
    throw Error("q and v must be 4-d [B, H, S, D]");
  size_t B = q.shape(0), H = q.shape(1), L = q.shape(2), DV = v.shape(3);
  // Sizes first: a stride-0 view can describe far more than memory holds.
  constexpr size_t kMaxSeq = size_t(INT32_MAX) / 2;
  if (L > kMaxSeq || (k.ndim() == 4 && k.shape(2) > kMaxSeq))
    throw Error("sequence lengths must fit in i32 (at most " +
                std::to_string(kMaxSeq) + "): 'q' has " + std::to_string(L) +
                " queries");
  // The fp64 oracle holds its result and one row of scores per query in
  // memory: it is for problems that fit.
  constexpr uint64_t kMaxResult = uint64_t(1) << 28; // elements, 2 GiB fp64
  uint64_t elems = 0;
  if (__builtin_mul_overflow(uint64_t(B) * H, uint64_t(L) * DV, &elems) ||
      elems > kMaxResult)
    throw Error("the fp64 reference's result [B, H, Lq, Dv] = [" +
                std::to_string(B) + ", " + std::to_string(H) + ", " +
                std::to_string(L) + ", " + std::to_string(DV) +
                "] is beyond its limit of 2^28 elements; the reference is "
                "for problems that fit in memory");
  std::vector<unsigned char> scratch(
      std::max<size_t>(1, B * H * L * DV * rt::dtypeSize(a.q.dtype)));
  a.out = rt::TensorView::contiguous(
      scratch.data(), a.q.dtype,
      {int64_t(B), int64_t(H), int64_t(L), int64_t(DV)});
  auto out = std::make_unique<std::vector<double>>();
  auto lse = std::make_unique<std::vector<double>>();
  rt::Status st;
  {
    nb::gil_scoped_release release;
    st = rt::referenceAttention(info, a, *out, *lse, violation);
  }
  check(st);
  double *outData = out->data(), *lseData = lse->data();
  nb::capsule ownOut(out.release(), [](void *p) noexcept {
    delete static_cast<std::vector<double> *>(p);
  });
  nb::capsule ownLse(lse.release(), [](void *p) noexcept {
    delete static_cast<std::vector<double> *>(p);
  });
  return {Float64Array(outData, {B, H, L, DV}, ownOut),
          Float64Array(lseData, {B, H, L}, ownLse)};
}

nb::object outOfRangeGather(const rt::VariantInfo &info, const Array &q,
                            const Array &k, const Array &v, const CallArgs &c) {
  rt::GatherViolation violation;
  referenceOf(info, q, k, v, c, &violation);
  if (violation.capture.empty())
    return nb::none();
  return nb::make_tuple(violation.capture, violation.index, violation.shape);
}

} // namespace attnc::python
