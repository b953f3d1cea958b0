//===- Attention.cpp - Validation, binding, reference, KV cache -----------===//
#include "attnc/runtime/Attention.h"
#include "attnc/runtime/KernelABI.h"
#include "KernelOperands.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

namespace attnc::rt {

namespace {

bool hasView(const TensorView &t) { return t.data || !t.shape.empty(); }

std::string describeParam(const ParamSpec &p) {
  if (!p.isTensor)
    return std::string(dtypeName(p.dtype));
  std::string s = std::string(dtypeName(p.dtype)) + "[";
  for (size_t i = 0; i < p.dims.size(); ++i) {
    if (i)
      s += ", ";
    s += p.dims[i].symbol.empty() ? std::to_string(p.dims[i].size)
                                  : p.dims[i].symbol;
  }
  return s + "]";
}

Status bindParams(const VariantInfo &v, const AttentionArgs &a, Problem &p) {
  // With a head offset, H and HKV are the model's head counts.
  std::map<std::string, int64_t> bound = {
      {"B", p.B},
      {"H", p.headCount},
      {"HKV", p.headCount / (p.Hq / p.Hkv)},
      {"Q", p.Lq},
      {"KV", p.Lkv}};
  std::map<std::string, std::string> boundBy;
  // With key offsets, KV is the extent of the key positions: a capture
  // indexed by kv spans the whole sequence the keys are a block of, so it
  // binds KV (checked below to reach the last key's position).
  int64_t keyEnd = 0;
  if (!a.kvOffsets.empty()) {
    for (int64_t b = 0; b < p.B; ++b)
      keyEnd = std::max<int64_t>(keyEnd, int64_t(p.kvPos0[b]) + p.kvLen[b]);
    bound.erase("KV");
  }
  p.params.assign(v.params.size(), BoundParam());
  // Unknown names first: a typo should not read as a missing argument.
  for (const auto &[name, t] : a.tensors) {
    const ParamSpec *ps = v.findParam(name);
    if (!ps || !ps->isTensor)
      return Status::invalidArgument(fmt::format(
          "variant '{}' has no tensor parameter '{}'{}", v.name, name,
          ps ? " (it is a scalar)" : ""));
  }
  for (const auto &[name, val] : a.scalars) {
    const ParamSpec *ps = v.findParam(name);
    if (!ps || ps->isTensor)
      return Status::invalidArgument(fmt::format(
          "variant '{}' has no scalar parameter '{}'{}", v.name, name,
          ps ? " (it is a tensor)" : ""));
  }
  for (size_t i = 0; i < v.params.size(); ++i) {
    const ParamSpec &ps = v.params[i];
    BoundParam &bp = p.params[i];
    if (!ps.isTensor) {
      auto it = std::find_if(a.scalars.begin(), a.scalars.end(),
                             [&](auto &s) { return s.first == ps.name; });
      if (it == a.scalars.end())
        return Status::invalidArgument(fmt::format(
            "missing scalar '{}' ({}) of variant '{}'", ps.name,
            describeParam(ps), v.name));
      if (std::count_if(a.scalars.begin(), a.scalars.end(),
                        [&](auto &s) { return s.first == ps.name; }) > 1)
        return Status::invalidArgument(
            fmt::format("scalar '{}' is given more than once", ps.name));
      double x = it->second;
      if (ps.dtype == DType::I32 &&
          (x != std::trunc(x) || x < -2147483648.0 || x > 2147483647.0))
        return Status::invalidArgument(fmt::format(
            "scalar '{}' is i32 but was given {}", ps.name, x));
      // A finite value beyond f32's range would become inf (and every
      // output NaN); an explicit inf or NaN is taken as given.
      if (ps.dtype == DType::F32 && std::isfinite(x) &&
          std::fabs(x) > double(std::numeric_limits<float>::max()))
        return Status::invalidArgument(fmt::format(
            "scalar '{}' is f32 but was given {}, beyond f32's range "
            "(|x| <= 3.4028235e38)",
            ps.name, x));
      if (ps.dtype == DType::Bool && x != 0.0 && x != 1.0)
        return Status::invalidArgument(fmt::format(
            "scalar '{}' is bool but was given {} (expected 0 or 1)", ps.name, x));
      bp.scalar = x;
      continue;
    }
    auto it = std::find_if(a.tensors.begin(), a.tensors.end(),
                           [&](auto &t) { return t.first == ps.name; });
    if (it == a.tensors.end())
      return Status::invalidArgument(
          fmt::format("missing capture '{}' ({}) of variant '{}'", ps.name,
                      describeParam(ps), v.name));
    TensorView t = it->second;
    // A 0-d tensor (torch's, NumPy's) is accepted for a one-element
    // capture: `x: f32[]` is held as [1].
    if (t.shape.empty() && ps.dims.size() == 1 && ps.dims[0].symbol.empty() &&
        ps.dims[0].size == 1) {
      t.shape = {1};
      t.strides = {1};
    }
    if (t.dtype != ps.dtype)
      return Status::invalidArgument(
          fmt::format("capture '{}' has dtype {}, expected {}", ps.name,
                      dtypeName(t.dtype), dtypeName(ps.dtype)));
    if (t.shape.size() != ps.dims.size())
      return Status::invalidArgument(fmt::format(
          "capture '{}' has shape {}, expected rank {} ({})", ps.name,
          TensorView::formatDims(t.shape), ps.dims.size(),
          describeParam(ps)));
    std::vector<int64_t> want;
    for (size_t d = 0; d < ps.dims.size(); ++d) {
      const DimSpec &ds = ps.dims[d];
      int64_t n;
      if (ds.symbol.empty())
        n = ds.size;
      else if (auto b = bound.find(ds.symbol); b != bound.end())
        n = b->second;
      else {
        n = t.shape[d]; // a free dimension binds here
        bound[ds.symbol] = n;
        boundBy[ds.symbol] = ps.name;
      }
      want.push_back(n);
    }
    if (t.shape != want)
      return Status::invalidArgument(fmt::format(
          "capture '{}' has shape {}, expected {} ({})", ps.name,
          TensorView::formatDims(t.shape), TensorView::formatDims(want),
          describeParam(ps)));
    Status s = checkShape(t, "capture '" + ps.name + "'", want);
    if (!s)
      return s;
    for (int64_t n : t.shape)
      if (n == 0)
        return Status::invalidArgument(fmt::format(
            "capture '{}' is empty (shape {}); a gather needs an element",
            ps.name, TensorView::formatDims(t.shape)));
    // The GPU kernels step along a capture's last dimension (the one a
    // position indexes in every example) by a 32-bit byte stride: one wide
    // multiply-add per gather. Only a view whose neighbours along it lie
    // 4 GiB apart exceeds it.
    // (Compared in elements: a stride near 2^63 times the size would wrap.)
    const int64_t last = t.shape.back() > 1 ? t.strides.back() : 0;
    const int64_t size = int64_t(dtypeSize(t.dtype));
    if (last >= (int64_t(1) << 32) / size)
      return Status::invalidArgument(fmt::format(
          "capture '{}' has stride {} along its last dimension ({} bytes), "
          "expected below 2^32 bytes (pass it with that dimension "
          "contiguous)",
          ps.name, last, static_cast<unsigned __int128>(last) * size));
    bp.data = t.data;
    bp.dtype = t.dtype;
    bp.shape = t.shape;
    bp.strides = t.strides;
  }
  if (!a.kvOffsets.empty()) {
    auto kv = bound.find("KV");
    if (kv == bound.end())
      bound["KV"] = keyEnd;
    else if (kv->second < keyEnd)
      return Status::invalidArgument(fmt::format(
          "capture '{}' spans {} key positions (its KV axis), but with "
          "'kvOffsets' the keys reach position {}; a capture indexed by kv "
          "must cover every key's absolute position",
          boundBy["KV"], kv->second, keyEnd - 1));
  }
  // The problem sizes a modifier may read (`size B` ...), after the
  // declared parameters, in kProblemSizeNames' order.
  for (const char *name : kProblemSizeNames) {
    BoundParam size;
    size.dtype = DType::I32;
    size.scalar = static_cast<double>(bound.at(name));
    p.params.push_back(size);
  }
  return Status::ok();
}

} // namespace

Status checkCaptureValues(const VariantInfo &v, const Problem &p) {
  for (size_t i = 0; i < v.params.size(); ++i) {
    const BoundParam &bp = p.params[i];
    if (!v.params[i].isTensor || bp.dtype != DType::I64 || !bp.data)
      continue;
    // Every element, in row-major order, through the strides.
    std::vector<int64_t> idx(bp.shape.size(), 0);
    const auto *data = static_cast<const int64_t *>(bp.data);
    for (;;) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d)
        off += idx[d] * bp.strides[d];
      int64_t x = data[off];
      if (x < std::numeric_limits<int32_t>::min() ||
          x > std::numeric_limits<int32_t>::max())
        return Status::invalidArgument(fmt::format(
            "capture '{}' is i64 and is read as i32, but element {} is {} "
            "(outside [-2147483648, 2147483647])",
            v.params[i].name, TensorView::formatDims(idx), x));
      size_t d = idx.size();
      while (d > 0 && ++idx[d - 1] == bp.shape[d - 1])
        idx[--d] = 0;
      if (d == 0)
        break;
    }
  }
  return Status::ok();
}

Status resolveProblem(const VariantInfo &v, const KernelSpec *spec,
                      const AttentionArgs &a, Problem &p) {
  p = Problem();
  auto rank4 = [](const TensorView &t, const char *name) -> Status {
    if (t.shape.size() != 4)
      return Status::invalidArgument(fmt::format(
          "'{}' must be a 4-d view [B, H, S, D], got shape {}", name,
          TensorView::formatDims(t.shape)));
    return Status::ok();
  };
  for (auto [t, n] : {std::pair{&a.q, "q"}, std::pair{&a.k, "k"},
                      std::pair{&a.v, "v"}, std::pair{&a.out, "out"}})
    if (Status s = rank4(*t, n); !s)
      return s;
  p.B = a.q.shape[0];
  p.Hq = a.q.shape[1];
  p.Lq = a.q.shape[2];
  p.Dqk = a.q.shape[3];
  p.Hkv = a.k.shape[1];
  p.Lkv = a.k.shape[2];
  p.Dv = a.v.shape[3];
  // The K/V views' first two axes: [B, Lkv], or with pages [pages, size].
  int64_t kvOuter = p.B, kvRows = p.Lkv;
  if (a.pages) {
    p.pages = a.pages;
    p.numPages = a.k.shape[0];
    kvOuter = p.numPages;
    kvRows = a.pages->pageSize;
    if (a.k.shape[2] != a.pages->pageSize)
      return Status::invalidArgument(fmt::format(
          "'k' is a page pool of {} rows per page (shape {}), but the page "
          "table's page size is {}",
          a.k.shape[2], TensorView::formatDims(a.k.shape), a.pages->pageSize));
    if (Status s = a.pages->check(p.B, p.numPages); !s)
      return s;
    // KV (captures' dims, the block mask's extent) is the longest sequence.
    p.Lkv = 0;
    for (int64_t b = 0; b < p.B; ++b)
      p.Lkv = std::max<int64_t>(p.Lkv, a.pages->length(b));
  }
  DType dt = spec ? spec->dtype : a.q.dtype;
  if (dt != DType::F32 && dt != DType::F16 && dt != DType::BF16)
    return Status::invalidArgument(fmt::format(
        "'q' has dtype {}, expected f32, f16 or bf16", dtypeName(a.q.dtype)));
  if (Status s = checkTensor(a.q, "q", dt, {p.B, p.Hq, p.Lq, p.Dqk}); !s)
    return s;
  if (Status s = checkTensor(a.k, "k", dt, {kvOuter, p.Hkv, kvRows, p.Dqk}); !s)
    return s;
  if (Status s = checkTensor(a.v, "v", dt, {kvOuter, p.Hkv, kvRows, p.Dv}); !s)
    return s;
  if (Status s = checkTensor(a.out, "out", dt, {p.B, p.Hq, p.Lq, p.Dv}); !s)
    return s;
  p.hasLse = hasView(a.lse);
  if (p.hasLse)
    if (Status s = checkTensor(a.lse, "lse", DType::F32, {p.B, p.Hq, p.Lq});
        !s)
      return s;
  if (p.Hkv <= 0 || p.Hq % p.Hkv != 0)
    return Status::invalidArgument(fmt::format(
        "the number of query heads ({}) must be a multiple of the number of "
        "KV heads ({})",
        p.Hq, p.Hkv));
  if (p.B <= 0 || p.Lq <= 0)
    return Status::invalidArgument(fmt::format(
        "'q' must have at least one sequence and one query, got shape {}",
        TensorView::formatDims(a.q.shape)));
  for (auto [d, n] : {std::pair{p.Dqk, "head dim (Dqk)"},
                      std::pair{p.Dv, "value head dim (Dv)"}})
    if (d <= 0 || d % 8 != 0 || d > 256)
      return Status::invalidArgument(fmt::format(
          "{} must be a multiple of 8 in [8, 256], got {}", n, d));
  if (spec && (p.Dqk != spec->headDim || p.Dv != spec->vHeadDim))
    return Status::invalidArgument(fmt::format(
        "the kernel was compiled for Dqk={} Dv={}, but the inputs have Dqk={} "
        "Dv={}",
        spec->headDim, spec->vHeadDim, p.Dqk, p.Dv));
  if (p.Lkv > std::numeric_limits<int32_t>::max() / 2 ||
      p.Lq > std::numeric_limits<int32_t>::max() / 2)
    return Status::invalidArgument("sequence lengths must fit in i32");

  p.kvLen = a.kvLens;
  if (a.pages) {
    for (int64_t b = 0; b < static_cast<int64_t>(p.kvLen.size()) && b < p.B; ++b)
      if (p.kvLen[b] != a.pages->length(b))
        return Status::invalidArgument(fmt::format(
            "'kvLens[{}]' is {}, but the page table gives sequence {} {} keys",
            b, p.kvLen[b], b, a.pages->length(b)));
    if (p.kvLen.empty())
      for (int64_t b = 0; b < p.B; ++b)
        p.kvLen.push_back(a.pages->length(b));
  }
  if (p.kvLen.empty())
    p.kvLen.assign(p.B, static_cast<int32_t>(p.Lkv));
  if (static_cast<int64_t>(p.kvLen.size()) != p.B)
    return Status::invalidArgument(fmt::format(
        "'kvLens' has {} entries, expected one per sequence ({})",
        p.kvLen.size(), p.B));
  for (int64_t b = 0; b < p.B; ++b)
    if (p.kvLen[b] < 0 || p.kvLen[b] > p.Lkv)
      return Status::invalidArgument(fmt::format(
          "'kvLens[{}]' is {}, expected 0..{} (the KV capacity)", b,
          p.kvLen[b], p.Lkv));
  p.headPos0 = a.headOffset;
  p.headCount = a.headCount ? a.headCount : int64_t(a.headOffset) + p.Hq;
  // The shard's query heads map onto its KV heads as the model's do: the
  // offset and the count are whole GQA groups.
  if (a.headOffset < 0 || a.headCount < 0 ||
      p.headCount < int64_t(a.headOffset) + p.Hq || p.headCount > (1 << 24) ||
      p.headCount % (p.Hq / p.Hkv) != 0 || a.headOffset % (p.Hq / p.Hkv) != 0)
    return Status::invalidArgument(fmt::format(
        "'headOffset' {} and 'headCount' {} must place the {} query heads "
        "within the model's heads (0 <= headOffset, headOffset + {} <= "
        "headCount, both multiples of the GQA group {})",
        a.headOffset, a.headCount, p.Hq, p.Hq, p.Hq / p.Hkv));
  p.kvPos0 = a.kvOffsets;
  if (p.kvPos0.empty())
    p.kvPos0.assign(p.B, 0);
  if (static_cast<int64_t>(p.kvPos0.size()) != p.B)
    return Status::invalidArgument(fmt::format(
        "'kvOffsets' has {} entries, expected one per sequence ({})",
        p.kvPos0.size(), p.B));
  for (int64_t b = 0; b < p.B; ++b)
    if (p.kvPos0[b] < 0 ||
        static_cast<int64_t>(p.kvPos0[b]) + p.Lkv > (int64_t(1) << 30))
      return Status::invalidArgument(fmt::format(
          "'kvOffsets[{}]' is {}, expected a non-negative position (below "
          "2^30 - {})",
          b, p.kvPos0[b], p.Lkv));
  p.qPos0 = a.qOffsets;
  if (p.qPos0.empty()) {
    for (int64_t b = 0; b < p.B; ++b) {
      if (p.kvLen[b] < p.Lq)
        return Status::invalidArgument(fmt::format(
            "sequence {} has {} keys but {} queries; pass 'qOffsets' to place "
            "the queries explicitly",
            b, p.kvLen[b], p.Lq));
      // The queries are the sequence's last positions.
      p.qPos0.push_back(
          static_cast<int32_t>(p.kvPos0[b] + p.kvLen[b] - p.Lq));
    }
  }
  if (static_cast<int64_t>(p.qPos0.size()) != p.B)
    return Status::invalidArgument(fmt::format(
        "'qOffsets' has {} entries, expected one per sequence ({})",
        p.qPos0.size(), p.B));
  for (int64_t b = 0; b < p.B; ++b)
    if (p.qPos0[b] < 0 ||
        static_cast<int64_t>(p.qPos0[b]) + p.Lq > (int64_t(1) << 30))
      return Status::invalidArgument(fmt::format(
          "'qOffsets[{}]' is {}, expected a non-negative position (below "
          "2^30 - {})",
          b, p.qPos0[b], p.Lq));
  if (a.numThreads < 0)
    return Status::invalidArgument(fmt::format(
        "'numThreads' must be 0 (every core) or a positive count, got {}",
        a.numThreads));
  if (Status s = resolveDropout(a.dropout, p.dropout); !s)
    return s;
  if (spec && !spec->dropout && p.dropout.active())
    return Status::invalidArgument(fmt::format(
        "'dropout_p' is {}, but the kernel was compiled without dropout "
        "(compile it with dropout enabled)",
        a.dropout.p));
  if (spec && !spec->keyOffsets)
    for (int64_t b = 0; b < p.B; ++b)
      if (p.kvPos0[b] != 0)
        return Status::invalidArgument(fmt::format(
            "'kvOffsets[{}]' is {}, but the kernel was compiled without key "
            "offsets (compile it with key offsets enabled)",
            b, p.kvPos0[b]));
  // The kernels draw dropout's Philox words for 4 neighbouring keys at
  // once, the blocks starting at positions that are multiples of 4.
  if (p.dropout.active())
    for (int64_t b = 0; b < p.B; ++b)
      if (p.kvPos0[b] % 4 != 0)
        return Status::invalidArgument(fmt::format(
            "'kvOffsets[{}]' is {}; with dropout the first key's position "
            "must be a multiple of 4",
            b, p.kvPos0[b]));
  p.scale = a.scale != 0.0 ? a.scale : 1.0 / std::sqrt(double(p.Dqk));
  if (!std::isfinite(p.scale))
    return Status::invalidArgument("'scale' must be finite");
  std::vector<std::pair<const TensorView *, std::string>> written = {
      {&a.out, "out"}};
  if (p.hasLse)
    written.emplace_back(&a.lse, "lse");
  std::vector<std::pair<const TensorView *, std::string>> read = {
      {&a.q, "q"}, {&a.k, "k"}, {&a.v, "v"}};
  for (const auto &[name, t] : a.tensors)
    read.emplace_back(&t, name);
  if (Status s = checkWritesDisjoint(written, read); !s)
    return s;
  return bindParams(v, a, p);
}

std::array<int64_t, 3> BlockMask::histogram() const {
  std::array<int64_t, 3> h{0, 0, 0};
  for (int8_t c : classes)
    ++h[std::clamp<int>(c, 0, 2)];
  return h;
}

Status referenceAttention(const VariantInfo &v, const AttentionArgs &a,
                          std::vector<double> &out, std::vector<double> &lse,
                          GatherViolation *violation,
                          std::vector<double> *rowScale,
                          ReferenceRounding rounding) {
  const bool exact = rounding == ReferenceRounding::None;
  const bool f32Dots = rounding == ReferenceRounding::DotsAndMods;
  Problem p;
  if (Status s = resolveProblem(v, nullptr, a, p); !s)
    return s;
  if (Status s = checkCaptureValues(v, p); !s)
    return s;
  if (!v.program)
    return Status::invalidArgument("the variant has no modifier program");
  int64_t G = p.Hq / p.Hkv;
  out.assign(p.B * p.Hq * p.Lq * p.Dv, 0.0);
  lse.assign(p.B * p.Hq * p.Lq, 0.0);
  if (rowScale)
    rowScale->assign(p.B * p.Hq * p.Lq, 0.0);
  std::vector<double> s(p.Lkv), w(p.Lkv);
  // Inputs widened to double once, contiguous: [B, H, L, D]. K and V in
  // pages: gathered per sequence into [B, Hkv, Lkv, D] rows.
  auto widenKV = [&](const TensorView &t) {
    if (!p.pages)
      return t.toDoubles();
    int64_t D = t.shape[3];
    std::vector<double> d(static_cast<size_t>(p.B * p.Hkv * p.Lkv * D), 0.0);
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t h = 0; h < p.Hkv; ++h)
        for (int64_t j = 0; j < p.kvLen[b]; ++j) {
          auto [page, row] = p.pages->locate(b, j);
          for (int64_t i = 0; i < D; ++i)
            d[static_cast<size_t>(((b * p.Hkv + h) * p.Lkv + j) * D + i)] =
                loadAsDouble(t.data, t.dtype,
                             page * t.strides[0] + h * t.strides[1] +
                                 row * t.strides[2] + i * t.strides[3]);
        }
    return d;
  };
  const std::vector<double> q = a.q.toDoubles(), k = widenKV(a.k),
                            vv = widenKV(a.v);
  const int64_t Lkv = p.Lkv;
  const double ninf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < p.B; ++b)
    for (int64_t h = 0; h < p.Hq; ++h)
      for (int64_t i = 0; i < p.Lq; ++i) {
        int32_t qpos = p.qPos0[b] + static_cast<int32_t>(i);
        const double *qr = &q[static_cast<size_t>(((b * p.Hq + h) * p.Lq + i) * p.Dqk)];
        const double *kb = &k[static_cast<size_t>((b * p.Hkv + h / G) * Lkv * p.Dqk)];
        const double *vb = &vv[static_cast<size_t>((b * p.Hkv + h / G) * Lkv * p.Dv)];
        // Masked keys count as -inf scores. A row whose every score is -inf
        // has no key: output 0, LSE -inf. Otherwise non-finite scores
        // propagate as in a softmax: a NaN, or +inf (inf - inf), makes the
        // row's output and LSE NaN.
        double mx = ninf;
        bool nan = false;
        for (int64_t j = 0; j < p.kvLen[b]; ++j) {
          double dot = 0;
          const double *kr = kb + j * p.Dqk;
          if (f32Dots) {
            float acc = 0; // inputs of every dtype are exact in f32
            for (int64_t d = 0; d < p.Dqk; ++d)
              acc = std::fma(float(qr[d]), float(kr[d]), acc);
            dot = acc; // times the scale, rounded to f32 as score_mod's input
          } else {
            for (int64_t d = 0; d < p.Dqk; ++d)
              dot += qr[d] * kr[d];
          }
          const int32_t kpos = p.kvPos0[b] + int32_t(j);
          double sc = evalScoreMod(v, p.params, dot * p.scale, int32_t(b),
                                   p.headPos0 + int32_t(h), qpos, kpos, violation, exact);
          bool keep = evalMaskMod(v, p.params, int32_t(b), p.headPos0 + int32_t(h), qpos,
                                  kpos, violation);
          s[j] = keep ? sc : ninf;
          nan |= std::isnan(s[j]);
          mx = std::max(mx, s[j]);
        }
        if (nan)
          mx = std::numeric_limits<double>::quiet_NaN();
        double sum = 0;
        double *o = &out[((b * p.Hq + h) * p.Lq + i) * p.Dv];
        double &rowLse = lse[(b * p.Hq + h) * p.Lq + i];
        if (mx == ninf) {
          rowLse = ninf; // no key: o stays 0
          continue;
        }
        for (int64_t j = 0; j < p.kvLen[b]; ++j) {
          w[j] = s[j] == ninf ? 0.0 : std::exp(s[j] - mx);
          sum += w[j];
        }
        rowLse = mx + std::log(sum);
        // Rounding score j to f32 moves its weight by about u (|s_j| +
        // |max|) relatively: the row's share of that, weighted by the
        // softmax, times the largest |v|.
        double meanS = 0, maxV = 0;
        for (int64_t j = 0; j < p.kvLen[b]; ++j) {
          if (w[j] == 0)
            continue;
          const double *vr = vb + j * p.Dv;
          meanS += w[j] / sum * std::fabs(s[j]);
          // Dropout after the softmax: a kept pair's weight times the
          // kernels' f32 factor, a dropped one's 0.
          double kept = !p.dropout.active() ? 1.0
                        : dropoutKeeps(p.dropout, int32_t(b), p.headPos0 + int32_t(h), qpos,
                                       p.kvPos0[b] + int32_t(j))
                            ? double(p.dropout.scale)
                            : 0.0;
          for (int64_t d = 0; d < p.Dv; ++d) {
            o[d] += w[j] / sum * kept * vr[d];
            maxV = std::max(maxV, std::fabs(vr[d]));
          }
        }
        if (rowScale)
          (*rowScale)[(b * p.Hq + h) * p.Lq + i] =
              (std::fabs(mx) + meanS) * maxV;
        if (std::isnan(sum))
          for (int64_t d = 0; d < p.Dv; ++d)
            o[d] = sum;
      }
  return Status::ok();
}

// ---- KV cache ----------------------------------------------------------

Status KVCache::create(DType dtype, int64_t batch, int64_t kvHeads,
                       int64_t capacity, int64_t headDim, int64_t vHeadDim,
                       KVCache &out) {
  if (batch <= 0 || kvHeads <= 0 || capacity <= 0 || headDim <= 0 ||
      vHeadDim <= 0)
    return Status::invalidArgument(fmt::format(
        "KV cache sizes must be positive, got batch={} kv_heads={} "
        "capacity={} head_dim={} v_head_dim={}",
        batch, kvHeads, capacity, headDim, vHeadDim));
  out = KVCache();
  out.dtype_ = dtype;
  out.batch_ = batch;
  out.heads_ = kvHeads;
  out.capacity_ = capacity;
  out.dqk_ = headDim;
  out.dv_ = vHeadDim;
  size_t es = dtypeSize(dtype);
  out.k_.assign(batch * kvHeads * capacity * headDim * es, 0);
  out.v_.assign(batch * kvHeads * capacity * vHeadDim * es, 0);
  out.lengths_.assign(batch, 0);
  return Status::ok();
}

Status KVCache::append(int64_t seq, const TensorView &nk, const TensorView &nv) {
  if (seq < 0 || seq >= batch_)
    return Status::invalidArgument(fmt::format(
        "sequence {} is out of range for a cache of {} sequences", seq,
        batch_));
  if (nk.shape.size() != 3)
    return Status::invalidArgument(fmt::format(
        "'newK' must be [Hkv, T, Dqk], got shape {}",
        TensorView::formatDims(nk.shape)));
  int64_t T = nk.shape[1];
  if (Status s = checkTensor(nk, "newK", dtype_, {heads_, T, dqk_}); !s)
    return s;
  if (Status s = checkTensor(nv, "newV", dtype_, {heads_, T, dv_}); !s)
    return s;
  if (lengths_[seq] + T > capacity_)
    return Status::invalidArgument(fmt::format(
        "appending {} rows to sequence {} (length {}) exceeds the cache "
        "capacity {}",
        T, seq, lengths_[seq], capacity_));
  size_t es = dtypeSize(dtype_);
  auto copy = [&](std::vector<unsigned char> &dst, const TensorView &src,
                  int64_t D) {
    for (int64_t h = 0; h < heads_; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < D; ++d) {
          int64_t to = ((seq * heads_ + h) * capacity_ + lengths_[seq] + t) * D + d;
          int64_t from = h * src.strides[0] + t * src.strides[1] + d * src.strides[2];
          std::memcpy(&dst[to * es],
                      static_cast<const unsigned char *>(src.data) + from * es,
                      es);
        }
  };
  copy(k_, nk, dqk_);
  copy(v_, nv, dv_);
  lengths_[seq] += static_cast<int32_t>(T);
  return Status::ok();
}

TensorView KVCache::keys() const {
  return TensorView::contiguous(const_cast<unsigned char *>(k_.data()), dtype_,
                                {batch_, heads_, capacity_, dqk_});
}
TensorView KVCache::values() const {
  return TensorView::contiguous(const_cast<unsigned char *>(v_.data()), dtype_,
                                {batch_, heads_, capacity_, dv_});
}

} // namespace attnc::rt
