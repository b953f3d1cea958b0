//===- Parse.h - Strict parsing of numbers from text ------------*- C++ -*-===//
//
// Every number attnc reads from a user, a file or a package goes through
// these: the whole text must be the number, and a value outside the range
// is refused, never clamped, wrapped or truncated.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PARSE_H
#define ATTNC_RUNTIME_PARSE_H

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

namespace attnc::rt {

/// A decimal integer (optional '-') in [lo, hi], nothing else.
inline bool parseInt(std::string_view s, int64_t lo, int64_t hi, int64_t &out) {
  if (s.empty() || s.front() == '+')
    return false;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 10);
  if (ec != std::errc() || p != s.data() + s.size() || v < lo || v > hi)
    return false;
  out = v;
  return true;
}

/// A finite decimal or exponent float, nothing else.
inline bool parseFinite(const std::string &s, double &out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s.front())))
    return false;
  char *end = nullptr;
  errno = 0;
  double v = std::strtod(s.c_str(), &end);
  if (*end != '\0' || errno == ERANGE || !std::isfinite(v))
    return false;
  out = v;
  return true;
}

} // namespace attnc::rt

#endif
