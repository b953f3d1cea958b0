//===- Problem.cpp - Seeded inputs for check and bench -------------------===//
#include "Problem.h"

#include "attnc/runtime/Npy.h"
#include "attnc/runtime/Parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <new>
#include <unistd.h>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <limits>

namespace attnc::tools {

const char *modeName(Mode m) {
  switch (m) {
  case Mode::Prefill: return "prefill";
  case Mode::Decode: return "decode";
  case Mode::Chunk: return "chunk";
  }
  return "?";
}

void Shape::resolve() {
  if (kvHeads < 0)
    kvHeads = heads;
  if (vHeadDim < 0)
    vHeadDim = headDim;
  switch (mode) {
  case Mode::Prefill:
    if (qLen < 0 && kvLen < 0)
      qLen = kvLen = 100;
    else if (qLen < 0)
      qLen = kvLen;
    else if (kvLen < 0)
      kvLen = qLen;
    break;
  case Mode::Decode:
    qLen = 1;
    if (kvLen < 0)
      kvLen = 100;
    break;
  case Mode::Chunk:
    if (kvLen < 0)
      kvLen = 100;
    if (qLen < 0)
      qLen = 23;
    break;
  }
}

std::string Shape::describe() const {
  std::string lens;
  for (size_t i = 0; i < kvLens.size(); ++i)
    lens += (i ? "," : " lens=") + std::to_string(kvLens[i]);
  for (size_t i = 0; i < qOffsets.size(); ++i)
    lens += (i ? "," : " qpos=") + std::to_string(qOffsets[i]);
  for (size_t i = 0; i < kvOffsets.size(); ++i)
    lens += (i ? "," : " kvpos=") + std::to_string(kvOffsets[i]);
  if (headOffset || headCount)
    lens += fmt::format(" heads={}+{}/{}", headOffset, heads,
                        headCount ? headCount : headOffset + heads);
  return fmt::format("{}/{} {} {} B{} Lq{} Lkv{} D{}{}{}{}{}{}{}", heads, kvHeads,
                     modeName(mode), rt::dtypeName(dtype), batch, qLen, kvLen,
                     headDim, vHeadDim != headDim ? fmt::format("/{}", vHeadDim) : "",
                     layout != "bhsd" ? " " + layout : "",
                     pad ? fmt::format(" pad{}", pad) : "",
                     pageSize ? fmt::format(" pages{}", pageSize) : "",
                     splits ? fmt::format(" splits{}", splits) : "", lens);
}

std::vector<int64_t> Shape::stridesFor(const std::vector<int64_t> &dims,
                                       int64_t &span) const {
  static const std::string letters = "bhsd";
  std::vector<int64_t> strides(4, 0);
  int64_t next = 1;
  for (int k = 3; k >= 0; --k) { // innermost first
    int axis = static_cast<int>(letters.find(layout[k]));
    strides[axis] = next;
    next *= dims[axis] + (k == 3 ? pad : 0);
  }
  span = next;
  return strides;
}

namespace {

std::vector<unsigned char> fillFloat(rt::DType t, int64_t n, std::mt19937_64 &rng,
                                     double lo, double hi) {
  std::vector<unsigned char> buf(n * rt::dtypeSize(t));
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < n; ++i)
    rt::storeFromDouble(buf.data(), t, i, dist(rng));
  return buf;
}

/// A file's array as `dtype` after checking its shape.
rt::Status convertNpy(const std::string &name, const std::string &path,
                      const rt::NpyArray &a, rt::DType dtype,
                      const std::vector<int64_t> &shape,
                      std::vector<unsigned char> &buf) {
  // A 0-d array stands for a one-element capture (`x: f32[]`).
  bool scalar = a.shape.empty() && shape == std::vector<int64_t>{1};
  if (a.shape != shape && !scalar)
    return rt::Status::invalidArgument(fmt::format(
        "--input {}={}: shape {}, expected {}", name, path,
        rt::TensorView::formatDims(a.shape), rt::TensorView::formatDims(shape)));
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  buf.assign(n * rt::dtypeSize(dtype), 0);
  for (int64_t i = 0; i < n; ++i)
    rt::storeFromDouble(buf.data(), dtype, i,
                        rt::loadAsDouble(a.bytes.data(), a.dtype, i));
  return rt::Status::ok();
}

rt::Status loadNpy(const std::string &name, const std::string &path,
                   rt::DType dtype, const std::vector<int64_t> &shape,
                   std::vector<unsigned char> &buf) {
  rt::NpyArray a;
  if (rt::Status s = rt::readNpy(path, a); !s)
    return s;
  return convertNpy(name, path, a, dtype, shape, buf);
}

/// The captures' --input files, each read once.
using CaptureFiles = std::map<std::string, rt::NpyArray>;

} // namespace

rt::Status makeInputsChecked(const rt::VariantInfo &v, const Shape &s,
                             const std::map<std::string, double> &sets,
                             const std::map<std::string, std::string> &npy,
                             const CaptureFiles &files,
                             const std::vector<std::vector<int64_t>> &capShapes,
                             std::mt19937_64 &rng, Inputs &in);

/// Moves K and V into page pools (Shape::pageSize): each sequence's pages
/// drawn from a shuffled pool with spare pages; spare pages and the unused
/// rows of last pages are NaN, so a kernel that reads outside the table
/// fails the comparison.
static rt::Status pageKV(const Shape &s, std::mt19937_64 &rng, Inputs &in) {
  rt::AttentionArgs &a = in.args;
  int64_t B = s.batch, HK = s.kvHeads, P = s.pageSize;
  std::vector<int32_t> lens;
  int64_t total = 0, maxPages = 0;
  for (int64_t b = 0; b < B; ++b) {
    lens.push_back(a.kvLens.empty() ? static_cast<int32_t>(s.kvLen) : a.kvLens[b]);
    int64_t pages = (lens.back() + P - 1) / P;
    total += pages;
    maxPages = std::max(maxPages, pages);
  }
  int64_t pool = total + 3;
  std::vector<int32_t> perm(static_cast<size_t>(pool));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(B * maxPages), 0);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < (lens[b] + P - 1) / P; ++i)
      table[b * maxPages + i] = perm[next++];
  auto pt = std::make_shared<rt::PageTable>();
  if (rt::Status st = rt::PageTable::fromBlockTable(table, maxPages, lens, P, *pt);
      !st)
    return st;
  size_t es = rt::dtypeSize(s.dtype);
  auto repack = [&](std::vector<unsigned char> &buf, rt::TensorView &view,
                    int64_t d) {
    std::vector<int64_t> dims = {pool, HK, P, d};
    int64_t span = 0;
    std::vector<int64_t> st = s.stridesFor(dims, span);
    std::vector<unsigned char> poolBuf(static_cast<size_t>(span) * es, 0xFF);
    const auto *src = static_cast<const unsigned char *>(view.data);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < HK; ++h)
        for (int64_t j = 0; j < lens[b]; ++j) {
          auto [page, row] = pt->locate(b, j);
          for (int64_t i = 0; i < d; ++i)
            std::memcpy(poolBuf.data() + (page * st[0] + h * st[1] +
                                          row * st[2] + i * st[3]) * es,
                        src + (b * view.strides[0] + h * view.strides[1] +
                               j * view.strides[2] + i * view.strides[3]) * es,
                        es);
        }
    buf = std::move(poolBuf);
    view.data = buf.data();
    view.shape = dims;
    view.strides = st;
  };
  repack(in.k, a.k, s.headDim);
  repack(in.v, a.v, s.vHeadDim);
  in.pages = pt;
  a.pages = pt.get();
  return rt::Status::ok();
}

rt::Status makeInputs(const rt::VariantInfo &v, const Shape &s,
                      const std::map<std::string, double> &sets,
                      const std::map<std::string, std::string> &npy,
                      Inputs &in) {
  std::mt19937_64 rng(s.seed);
  int64_t B = s.batch, H = s.heads, HK = s.kvHeads, Lq = s.qLen, Lk = s.kvLen,
          D = s.headDim, DV = s.vHeadDim;
  for (const auto &[name, path] : npy)
    if (name != "q" && name != "k" && name != "v" && !v.findParam(name))
      return rt::Status::invalidArgument(fmt::format(
          "--input {}: not q, k, v or a capture of '{}'", name, v.name));
  // Captures' shapes: dims named after the problem take its sizes; free
  // dims take them from the --input files that hold such a capture (every
  // file agreeing), else default to 64.
  // With pages, KV is the longest sequence (there is no capacity).
  int64_t kvDim = Lk;
  if (s.pageSize && !s.kvLens.empty())
    kvDim = *std::max_element(s.kvLens.begin(), s.kvLens.end());
  if (!s.kvOffsets.empty()) {
    if (s.kvOffsets.size() != 1 && static_cast<int64_t>(s.kvOffsets.size()) != B)
      return rt::Status::invalidArgument(fmt::format(
          "--kv-offsets gives {} positions for a batch of {} (give one, or "
          "one per sequence)", s.kvOffsets.size(), B));
    // KV spans the keys' positions: to the last key of every sequence.
    kvDim = 0;
    for (int64_t b = 0; b < B; ++b) {
      int64_t len = s.kvLens.empty() ? Lk : s.kvLens[std::min<size_t>(b, s.kvLens.size() - 1)];
      kvDim = std::max(kvDim, s.kvOffsets[s.kvOffsets.size() == 1 ? 0 : b] + len);
    }
    kvDim = std::max<int64_t>(kvDim, 1);
  }
  // With a head offset, H and HKV are the model's head counts.
  int64_t modelH = s.headCount ? s.headCount : s.headOffset + H;
  std::map<std::string, int64_t> bound = {
      {"B", B}, {"H", modelH}, {"HKV", HK ? modelH / std::max<int64_t>(H / HK, 1) : HK},
      {"Q", Lq}, {"KV", kvDim}};
  std::map<std::string, std::string> boundBy; // free dim -> "--input x=f"
  CaptureFiles files;
  for (const rt::ParamSpec &p : v.params) {
    auto it = npy.find(p.name);
    if (!p.isTensor || it == npy.end())
      continue;
    rt::NpyArray &a = files[p.name];
    if (rt::Status st = rt::readNpy(it->second, a); !st)
      return st;
    if (a.shape.size() != p.dims.size())
      continue; // loadNpy reports the shape
    for (size_t i = 0; i < p.dims.size(); ++i) {
      const std::string &sym = p.dims[i].symbol;
      if (sym.empty() || (bound.count(sym) && !boundBy.count(sym))) {
        continue; // a literal or a problem size
      }
      std::string by = "--input " + p.name + "=" + it->second;
      if (auto b = bound.find(sym); b != bound.end() && b->second != a.shape[i])
        return rt::Status::invalidArgument(fmt::format(
            "{}: dimension {} of '{}' is {}, but {} gave {} = {}", by, i,
            p.name, a.shape[i], boundBy[sym], sym, b->second));
      bound[sym] = a.shape[i];
      boundBy.emplace(sym, by);
    }
  }
  std::vector<std::vector<int64_t>> capShapes;
  for (const rt::ParamSpec &p : v.params) {
    capShapes.emplace_back();
    if (!p.isTensor)
      continue;
    for (const rt::DimSpec &d : p.dims) {
      if (d.symbol.empty())
        capShapes.back().push_back(d.size);
      else if (bound.count(d.symbol))
        capShapes.back().push_back(bound[d.symbol]);
      else
        capShapes.back().push_back(bound[d.symbol] = 64);
    }
  }
  // What this case allocates, before anything is: refused, not a crash,
  // when it cannot fit this machine's memory.
  double elems = double(B) * H * Lq * D + double(B) * HK * Lk * D +
                 double(B) * HK * Lk * DV + double(B) * H * Lq * DV;
  // The inputs, the LSE, and the fp64 reference's copies of q, k, v, out.
  double bytes = (double(rt::dtypeSize(s.dtype)) + 8.0) * elems + 12.0 * B * H * Lq;
  for (size_t i = 0; i < v.params.size(); ++i)
    if (v.params[i].isTensor) {
      double n = rt::dtypeSize(v.params[i].dtype);
      for (int64_t d : capShapes[i])
        n *= double(d);
      bytes += n;
    }
  double host = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (host > 0 && bytes > 0.8 * host)
    return rt::Status::invalidArgument(fmt::format(
        "inputs too large ({:.1f} GB for q, k, v, out, the captures and the "
        "fp64 reference; this machine has {:.1f} GB)",
        bytes / 1e9, host / 1e9));
  try {
    if (rt::Status st = makeInputsChecked(v, s, sets, npy, files, capShapes, rng, in);
        !st)
      return st;
    return s.pageSize ? pageKV(s, rng, in) : rt::Status::ok();
  } catch (const std::bad_alloc &) {
    return rt::Status::invalidArgument(fmt::format(
        "cannot allocate the inputs ({:.1f} GB)", bytes / 1e9));
  }
}

rt::Status makeInputsChecked(const rt::VariantInfo &v, const Shape &s,
                             const std::map<std::string, double> &sets,
                             const std::map<std::string, std::string> &npy,
                             const CaptureFiles &files,
                             const std::vector<std::vector<int64_t>> &capShapes,
                             std::mt19937_64 &rng, Inputs &in) {
  int64_t B = s.batch, H = s.heads, HK = s.kvHeads, Lq = s.qLen, Lk = s.kvLen,
          D = s.headDim, DV = s.vHeadDim;
  // Buffers span the layout's padded extent; the padding holds seeded
  // values too (never read through a correct view).
  auto tensor = [&](std::vector<unsigned char> &buf, const char *name,
                    int64_t h, int64_t len, int64_t d) -> rt::Status {
    std::vector<int64_t> logical = {B, h, len, d};
    int64_t span = 0;
    std::vector<int64_t> strides = s.stridesFor(logical, span);
    auto it = npy.find(name);
    if (it == npy.end()) {
      buf = fillFloat(s.dtype, span, rng, -1.0, 1.0);
      return rt::Status::ok();
    }
    // .npy inputs hold the dims in --layout's order (bshd: [B, S, H, D]).
    std::vector<int64_t> file;
    for (char c : s.layout)
      file.push_back(logical[std::string("bhsd").find(c)]);
    std::vector<unsigned char> dense;
    if (rt::Status st = loadNpy(name, it->second, s.dtype, file, dense); !st)
      return st;
    buf.assign(span * rt::dtypeSize(s.dtype), 0);
    size_t es = rt::dtypeSize(s.dtype);
    int64_t i = 0;
    std::vector<int64_t> idx(4, 0); // in file order
    for (int64_t n = 0; n < B * h * len * d; ++n) {
      int64_t off = 0;
      for (int k = 0; k < 4; ++k)
        off += idx[k] * strides[std::string("bhsd").find(s.layout[k])];
      std::memcpy(buf.data() + off * es, dense.data() + (i++) * es, es);
      for (int k = 3; k >= 0 && ++idx[k] == file[k]; --k)
        idx[k] = 0;
    }
    return rt::Status::ok();
  };
  if (rt::Status st = tensor(in.q, "q", H, Lq, D); !st) return st;
  if (rt::Status st = tensor(in.k, "k", HK, Lk, D); !st) return st;
  if (rt::Status st = tensor(in.v, "v", HK, Lk, DV); !st) return st;
  // NaN everywhere (all-ones bits in f32, f16 and bf16): whatever a backend
  // leaves unwritten fails the comparison.
  int64_t outSpan = 0;
  s.stridesFor({B, H, Lq, DV}, outSpan);
  in.out.assign(outSpan * rt::dtypeSize(s.dtype), 0xFF);
  in.lse.assign(B * H * Lq, std::numeric_limits<float>::quiet_NaN());
  auto view = [&](std::vector<unsigned char> &buf, int64_t h, int64_t len,
                  int64_t d) {
    rt::TensorView t;
    t.data = buf.data();
    t.dtype = s.dtype;
    t.shape = {B, h, len, d};
    int64_t span = 0;
    t.strides = s.stridesFor(t.shape, span);
    return t;
  };
  rt::AttentionArgs &a = in.args;
  a.numSplits = static_cast<int>(s.splits);
  a.q = view(in.q, H, Lq, D);
  a.k = view(in.k, HK, Lk, D);
  a.v = view(in.v, HK, Lk, DV);
  a.out = view(in.out, H, Lq, DV);
  a.lse = rt::TensorView::contiguous(in.lse.data(), rt::DType::F32, {B, H, Lq});
  if (!s.kvLens.empty()) {
    if (static_cast<int64_t>(s.kvLens.size()) != B)
      return rt::Status::invalidArgument(fmt::format(
          "--kv-lens gives {} lengths for a batch of {}", s.kvLens.size(), B));
    for (int64_t l : s.kvLens)
      a.kvLens.push_back(static_cast<int32_t>(l));
  }
  if (!s.qOffsets.empty()) {
    if (s.qOffsets.size() != 1 && static_cast<int64_t>(s.qOffsets.size()) != B)
      return rt::Status::invalidArgument(fmt::format(
          "--q-offsets gives {} positions for a batch of {} (give one, or one "
          "per sequence)", s.qOffsets.size(), B));
    for (int64_t b = 0; b < B; ++b)
      a.qOffsets.push_back(static_cast<int32_t>(
          s.qOffsets[s.qOffsets.size() == 1 ? 0 : b]));
  }
  a.headOffset = static_cast<int32_t>(s.headOffset);
  a.headCount = static_cast<int32_t>(s.headCount);
  for (int64_t b = 0; b < B && !s.kvOffsets.empty(); ++b)
    a.kvOffsets.push_back(static_cast<int32_t>(
        s.kvOffsets[s.kvOffsets.size() == 1 ? 0 : b]));

  in.captures.reserve(v.params.size());
  for (size_t pi = 0; pi < v.params.size(); ++pi) {
    const rt::ParamSpec &p = v.params[pi];
    if (!p.isTensor) {
      auto it = sets.find(p.name);
      double val = it != sets.end() ? it->second
                   : p.dtype == rt::DType::F32 || p.dtype == rt::DType::Bool
                       ? 1.0
                       : double(std::max<int64_t>(1, Lk / 3));
      a.scalars.push_back({p.name, val});
      continue;
    }
    const std::vector<int64_t> &shape = capShapes[pi];
    int64_t n = 1;
    for (int64_t d : shape)
      n *= d;
    in.captures.emplace_back();
    std::vector<unsigned char> &buf = in.captures.back();
    if (auto it = files.find(p.name); it != files.end()) {
      if (rt::Status st = convertNpy(p.name, npy.at(p.name), it->second,
                                     p.dtype, shape, buf);
          !st)
        return st;
    } else if (p.dtype == rt::DType::F32 || p.dtype == rt::DType::F16 ||
               p.dtype == rt::DType::BF16) {
      buf = fillFloat(p.dtype, n, rng, 0.5, 1.5);
    } else if (p.dtype == rt::DType::Bool) {
      buf.assign(n, 0);
      std::bernoulli_distribution coin(0.7);
      for (int64_t i = 0; i < n; ++i)
        buf[i] = coin(rng);
    } else {
      // Segment ids, non-decreasing along the last axis: ~4 segments.
      buf.assign(n * rt::dtypeSize(p.dtype), 0);
      int64_t last = shape.back();
      if (n == 0 || last == 0) { // an empty tensor (e.g. --kv-len 0)
        a.tensors.push_back(
            {p.name, rt::TensorView::contiguous(buf.data(), p.dtype, shape)});
        continue;
      }
      std::uniform_int_distribution<int64_t> step(0, std::max<int64_t>(1, last / 4));
      for (int64_t row = 0; row < n / last; ++row) {
        int64_t id = 0, next = step(rng) + 1;
        for (int64_t i = 0; i < last; ++i) {
          if (i == next) {
            ++id;
            next = i + step(rng) + 1;
          }
          rt::storeFromDouble(buf.data(), p.dtype, row * last + i, double(id));
        }
      }
    }
    a.tensors.push_back(
        {p.name, rt::TensorView::contiguous(buf.data(), p.dtype, shape)});
  }
  for (const auto &[name, val] : sets)
    if (!v.findParam(name) || v.findParam(name)->isTensor)
      return rt::Status::invalidArgument(fmt::format(
          "--set {}: variant '{}' has no scalar parameter of that name", name,
          v.name));
  return rt::Status::ok();
}

rt::Status writeOutputNpy(const rt::TensorView &o, const std::string &path) {
  rt::NpyArray a;
  a.dtype = rt::DType::F32;
  a.shape = o.shape;
  a.bytes.resize(o.numel() * 4);
  int64_t k = 0;
  for (int64_t b = 0; b < o.shape[0]; ++b)
    for (int64_t h = 0; h < o.shape[1]; ++h)
      for (int64_t i = 0; i < o.shape[2]; ++i)
        for (int64_t d = 0; d < o.shape[3]; ++d)
          rt::storeFromDouble(a.bytes.data(), rt::DType::F32, k++,
                              rt::loadAsDouble(o.data, o.dtype,
                                               o.offsetOf({b, h, i, d})));
  return rt::writeNpy(path, a);
}

std::vector<int64_t> parseSweep(const std::string &text, std::string &err) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int64_t v = 0;
    if (!rt::parseInt(item, 1, 1 << 22, v)) {
      err = "--sweep expects positive lengths separated by commas, got '" +
            text + "'";
      return {};
    }
    out.push_back(v);
  }
  if (out.empty())
    err = "--sweep expects positive lengths separated by commas, got '" +
          text + "'";
  return out;
}

std::vector<Shape> sweepShapes(const Shape &base,
                               const std::vector<int64_t> &sweep) {
  std::vector<Shape> shapes;
  if (sweep.empty()) {
    Shape s = base;
    s.resolve();
    shapes.push_back(s);
  }
  for (int64_t t : sweep) {
    Shape s = base;
    s.qLen = s.mode == Mode::Decode ? -1 : t;
    s.kvLen = t;
    if (s.mode == Mode::Chunk)
      s.qLen = std::min<int64_t>(t, base.qLen > 0 ? base.qLen : 128);
    s.resolve();
    shapes.push_back(s);
  }
  return shapes;
}

} // namespace attnc::tools
