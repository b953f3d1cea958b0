//===- FileIO.cpp - Writing output files safely --------------------------===//
#include "attnc/runtime/FileIO.h"

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc::rt {

namespace {

Status failure(const std::string &path, const std::string &why) {
  return Status::invalidArgument(fmt::format("cannot write '{}': {}", path, why));
}

/// Writes all of `bytes` to fd; errno is kept on failure.
bool writeAll(int fd, std::string_view bytes) {
  const char *p = bytes.data();
  size_t left = bytes.size();
  while (left) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

} // namespace

Status writeFileAtomic(const std::string &path, std::string_view bytes) {
  if (path.empty())
    return failure(path, "empty file name");
  struct stat st;
  bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    return failure(path, "it is a directory");
  if (exists && !S_ISREG(st.st_mode)) {
    // A device or a pipe: write in place.
    int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
      return failure(path, std::strerror(errno));
    bool ok = writeAll(fd, bytes);
    int err = errno;
    if (::close(fd) != 0 && ok) {
      ok = false;
      err = errno;
    }
    return ok ? Status::ok() : failure(path, std::strerror(err));
  }
  static std::atomic<unsigned> counter{0};
  std::string tmp = fmt::format("{}.tmp.{}.{}", path, ::getpid(), counter++);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return failure(path, std::strerror(errno));
  bool ok = writeAll(fd, bytes) && ::fsync(fd) == 0;
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return failure(path, std::strerror(err));
  }
  return Status::ok();
}

size_t readFully(int fd, char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR)
      continue;
    if (r <= 0)
      break;
    got += static_cast<size_t>(r);
  }
  return got;
}

Status readFileLimited(const std::string &path, size_t maxBytes,
                       std::string &out) {
  out.clear();
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0)
    return Status::notFound(
        fmt::format("cannot read '{}': {}", path, std::strerror(errno)));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalidArgument(
        fmt::format("cannot read '{}': not a regular file", path));
  }
  if (static_cast<uint64_t>(st.st_size) > maxBytes) {
    ::close(fd);
    return Status::invalidArgument(fmt::format(
        "cannot read '{}': {} bytes, more than the {} allowed", path,
        st.st_size, maxBytes));
  }
  out.resize(static_cast<size_t>(st.st_size));
  size_t got = readFully(fd, out.data(), out.size());
  ::close(fd);
  if (got != out.size())
    return Status::invalidArgument(
        fmt::format("cannot read '{}': it changed while being read", path));
  return Status::ok();
}

} // namespace attnc::rt
