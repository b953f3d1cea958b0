//===- Npy.cpp - Reading and writing .npy files --------------------------===//
#include "attnc/runtime/Npy.h"
#include "attnc/runtime/FileIO.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdint>
#include <cstring>

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

namespace {

/// The header dictionary of a .npy file, parsed strictly: exactly the keys
/// 'descr' (a string), 'fortran_order' (True/False) and 'shape' (a tuple of
/// non-negative integers), in any order, once each.
class HeaderParser {
public:
  explicit HeaderParser(const std::string &text) : s_(text) {}

  bool parse(std::string &descr, bool &fortran, std::vector<int64_t> &shape,
             std::string &why) {
    bool haveDescr = false, haveOrder = false, haveShape = false;
    if (!eat('{'))
      return fail(why, "expected '{'");
    while (!peek('}')) {
      std::string key;
      if (!string(key) || !eat(':'))
        return fail(why, "expected 'key': value");
      if (key == "descr" && !haveDescr) {
        haveDescr = string(descr);
        if (!haveDescr)
          return fail(why, "'descr' must be a string");
      } else if (key == "fortran_order" && !haveOrder) {
        if (word("True"))
          fortran = true;
        else if (word("False"))
          fortran = false;
        else
          return fail(why, "'fortran_order' must be True or False");
        haveOrder = true;
      } else if (key == "shape" && !haveShape) {
        if (!tuple(shape))
          return fail(why, "'shape' must be a tuple of non-negative integers");
        haveShape = true;
      } else {
        return fail(why, "unexpected or repeated key '" + key + "'");
      }
      if (!eat(','))
        break;
    }
    if (!eat('}'))
      return fail(why, "expected '}'");
    skip();
    if (p_ != s_.size())
      return fail(why, "text after the dictionary");
    if (!haveDescr || !haveOrder || !haveShape)
      return fail(why, "it needs 'descr', 'fortran_order' and 'shape'");
    return true;
  }

private:
  const std::string &s_;
  size_t p_ = 0;

  static bool fail(std::string &why, const std::string &w) {
    why = w;
    return false;
  }
  void skip() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\n'))
      ++p_;
  }
  bool peek(char c) {
    skip();
    return p_ < s_.size() && s_[p_] == c;
  }
  bool eat(char c) {
    if (!peek(c))
      return false;
    ++p_;
    return true;
  }
  bool word(const char *w) {
    skip();
    size_t n = std::strlen(w);
    if (s_.compare(p_, n, w) != 0)
      return false;
    p_ += n;
    return true;
  }
  bool string(std::string &out) {
    skip();
    if (p_ >= s_.size() || (s_[p_] != '\'' && s_[p_] != '"'))
      return false;
    char q = s_[p_++];
    size_t end = s_.find(q, p_);
    if (end == std::string::npos)
      return false;
    out = s_.substr(p_, end - p_);
    if (out.find('\\') != std::string::npos)
      return false; // no escapes in the keys and dtypes NumPy writes
    p_ = end + 1;
    return true;
  }
  bool tuple(std::vector<int64_t> &out) {
    out.clear();
    if (!eat('('))
      return false;
    while (!peek(')')) {
      skip();
      size_t start = p_;
      int64_t v = 0;
      while (p_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[p_]))) {
        if (v > (INT64_MAX - 9) / 10)
          return false;
        v = v * 10 + (s_[p_++] - '0');
      }
      if (p_ == start)
        return false;
      if (p_ < s_.size() && s_[p_] == 'L') // Python 2's long suffix
        ++p_;
      out.push_back(v);
      if (!eat(','))
        break;
    }
    return eat(')');
  }
};

} // namespace

Status readNpy(const std::string &path, NpyArray &out) {
  std::string file;
  // A .npy file is read whole; its data must be exactly what the header
  // declares, so a header can never make the reader allocate more than the
  // file holds.
  if (Status s = readFileLimited(path, size_t(1) << 40, file); !s)
    return s;
  return parseNpy(file, path, out);
}

Status parseNpy(const std::string &file, const std::string &path,
                NpyArray &out) {
  auto bad = [&](const std::string &why) {
    return Status::invalidArgument(
        fmt::format("'{}' is not a valid .npy file: {}", path, why));
  };
  if (file.size() < 10 || std::memcmp(file.data(), "\x93NUMPY", 6) != 0)
    return bad("no \\x93NUMPY magic");
  unsigned major = static_cast<unsigned char>(file[6]);
  size_t hlen, hstart;
  if (major == 1) {
    hlen = static_cast<unsigned char>(file[8]) |
           (size_t(static_cast<unsigned char>(file[9])) << 8);
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (file.size() < 12)
      return bad("truncated header");
    hlen = 0;
    for (int i = 0; i < 4; ++i)
      hlen |= size_t(static_cast<unsigned char>(file[8 + i])) << (8 * i);
    hstart = 12;
  } else {
    return bad("format version " + std::to_string(major) + " (1, 2 or 3 expected)");
  }
  if (hlen > file.size() - hstart)
    return bad("the header runs past the end of the file");
  std::string header = file.substr(hstart, hlen);
  if (header.empty() || header.back() != '\n')
    return bad("the header does not end with a newline");
  std::string descr, why;
  bool fortran = false;
  HeaderParser hp(header);
  if (!hp.parse(descr, fortran, out.shape, why))
    return bad("header: " + why);
  if (fortran)
    return Status::invalidArgument(fmt::format(
        "'{}' is Fortran-ordered; save it C-ordered (np.ascontiguousarray)",
        path));
  bool found = false;
  for (DType t : {DType::F32, DType::F16, DType::I32, DType::I64, DType::Bool})
    if (descr == descrOf(t)) {
      out.dtype = t;
      found = true;
    }
  if (!found)
    return Status::invalidArgument(fmt::format(
        "'{}' has an unsupported dtype '{}'; expected <f4, <f2, <i4, <i8 or |b1",
        path, descr));
  uint64_t n = dtypeSize(out.dtype);
  for (int64_t d : out.shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n))
      return bad("the shape's size overflows");
  size_t data = file.size() - hstart - hlen;
  if (n != data)
    return bad(fmt::format("the shape needs {} bytes of data, the file has {}",
                           n, data));
  out.bytes.assign(file.begin() + static_cast<long>(hstart + hlen), file.end());
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
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(reinterpret_cast<const char *>(a.bytes.data()), a.bytes.size());
  return writeFileAtomic(path, bytes);
}

} // namespace attnc::rt
