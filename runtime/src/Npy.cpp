//===- Npy.cpp - Reading and writing .npy files --------------------------===//
#include "attnc/runtime/Npy.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>

namespace attnc::rt {

namespace {
const char *descrOf(DType t) {
  switch (t) {
  case DType::F32: return "<f4";
  case DType::F16: return "<f2";
  case DType::I32: return "<i4";
  case DType::I64: return "<i8";
  case DType::Bool: return "|b1";
  case DType::BF16: return nullptr;
  }
  return nullptr;
}
} // namespace

Status readNpy(const std::string &path, NpyArray &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status::notFound(fmt::format("cannot read '{}'", path));
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    return Status::invalidArgument(fmt::format("'{}' is not a .npy file", path));
  uint32_t hlen = 0;
  if (magic[6] == 1) {
    unsigned char b[2];
    in.read(reinterpret_cast<char *>(b), 2);
    hlen = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    in.read(reinterpret_cast<char *>(b), 4);
    hlen = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t(b[3]) << 24);
  }
  if (!in || hlen > (1u << 20))
    return Status::invalidArgument(fmt::format("'{}': bad .npy header", path));
  std::string header(hlen, '\0');
  in.read(header.data(), hlen);
  auto field = [&](const std::string &key) -> std::string {
    size_t k = header.find("'" + key + "'");
    if (k == std::string::npos)
      return "";
    size_t colon = header.find(':', k);
    return colon == std::string::npos ? "" : header.substr(colon + 1);
  };
  std::string descr = field("descr"), order = field("fortran_order"),
              shape = field("shape");
  if (order.find("True") < order.find(','))
    return Status::invalidArgument(fmt::format(
        "'{}' is Fortran-ordered; save it C-ordered (np.ascontiguousarray)",
        path));
  bool found = false;
  for (DType t : {DType::F32, DType::F16, DType::I32, DType::I64, DType::Bool})
    if (descr.find(std::string("'") + descrOf(t) + "'") < descr.find(',')) {
      out.dtype = t;
      found = true;
    }
  if (!found)
    return Status::invalidArgument(fmt::format(
        "'{}' has an unsupported dtype {}; expected <f4, <f2, <i4, <i8 or |b1",
        path, descr.substr(0, descr.find(','))));
  out.shape.clear();
  size_t open = shape.find('('), close = shape.find(')');
  if (open == std::string::npos || close == std::string::npos)
    return Status::invalidArgument(fmt::format("'{}': bad shape", path));
  std::string dims = shape.substr(open + 1, close - open - 1);
  int64_t n = 1;
  for (size_t p = 0; p < dims.size();) {
    while (p < dims.size() && (dims[p] == ' ' || dims[p] == ','))
      ++p;
    if (p >= dims.size())
      break;
    int64_t d = std::atoll(dims.c_str() + p);
    if (d < 0 || d > (int64_t(1) << 40))
      return Status::invalidArgument(fmt::format("'{}': bad shape", path));
    out.shape.push_back(d);
    n *= d;
    while (p < dims.size() && dims[p] != ',')
      ++p;
  }
  size_t bytes = static_cast<size_t>(n) * dtypeSize(out.dtype);
  out.bytes.resize(bytes);
  if (!in.read(reinterpret_cast<char *>(out.bytes.data()), bytes))
    return Status::invalidArgument(fmt::format(
        "'{}' is truncated: expected {} bytes of data", path, bytes));
  return Status::ok();
}

Status writeNpy(const std::string &path, const NpyArray &a) {
  const char *descr = descrOf(a.dtype);
  if (!descr)
    return Status::invalidArgument("bf16 has no .npy dtype; convert to f32");
  // NumPy's own spelling: "(3,)" for one dimension, "(1, 2, 3)" otherwise.
  std::string shape = "(";
  for (size_t i = 0; i < a.shape.size(); ++i)
    shape += (i ? ", " : "") + std::to_string(a.shape[i]);
  shape += a.shape.size() == 1 ? ",)" : ")";
  std::string header = fmt::format(
      "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr, shape);
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out)
    return Status::notFound(fmt::format("cannot write '{}'", path));
  out.write("\x93NUMPY\x01\x00", 8);
  unsigned char len[2] = {static_cast<unsigned char>(header.size() & 0xff),
                          static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char *>(len), 2);
  out.write(header.data(), header.size());
  out.write(reinterpret_cast<const char *>(a.bytes.data()), a.bytes.size());
  return out ? Status::ok()
             : Status::internal(fmt::format("writing '{}' failed", path));
}

} // namespace attnc::rt
