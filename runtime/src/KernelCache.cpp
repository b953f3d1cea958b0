//===- KernelCache.cpp - Atomic, self-checking kernel cache --------------===//
#include "attnc/runtime/KernelCache.h"
#include "attnc/runtime/FileIO.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

namespace attnc::rt {

namespace {

constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'K', 'C', '0', '2'};
/// No entry is larger (a kernel package's PTX is at most 64 MB).
constexpr size_t kMaxEntryBytes = size_t(80) << 20;

/// SHA-256 (OpenSSL), as 32 raw bytes.
std::string sha256(const std::string &a, const std::string &b = "") {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  bool ok = ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1 &&
            EVP_DigestUpdate(ctx, a.data(), a.size()) == 1 &&
            EVP_DigestUpdate(ctx, b.data(), b.size()) == 1 &&
            EVP_DigestFinal_ex(ctx, md, &n) == 1;
  EVP_MD_CTX_free(ctx);
  if (!ok)
    return std::string(32, '\0'); // never matches a stored digest by chance
  return std::string(reinterpret_cast<char *>(md), n);
}

std::string defaultDir() {
  if (const char *d = std::getenv("ATTNC_CACHE_DIR"); d && *d)
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/attnc";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/attnc";
  // No home: a folder of this user's own in the temporary directory
  // (checked for ownership before every use).
  return fmt::format("/tmp/attnc-cache-{}", ::geteuid());
}

/// The cache folder is ours alone: a directory owned by this user that no
/// one else can write. Anything else is refused (another local user could
/// plant kernels in it).
Status checkOwnFolder(const std::string &dir) {
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0)
    return Status::unavailable(fmt::format(
        "the kernel cache folder '{}' cannot be read: {}", dir,
        std::strerror(errno)));
  if (S_ISLNK(st.st_mode) && ::stat(dir.c_str(), &st) != 0)
    return Status::unavailable(
        fmt::format("the kernel cache folder '{}' is a broken link", dir));
  if (!S_ISDIR(st.st_mode))
    return Status::unavailable(
        fmt::format("the kernel cache folder '{}' is not a directory", dir));
  if (st.st_uid != ::geteuid())
    return Status::unavailable(fmt::format(
        "the kernel cache folder '{}' belongs to another user (uid {}); not "
        "using it", dir, st.st_uid));
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    return Status::unavailable(fmt::format(
        "the kernel cache folder '{}' is writable by other users (mode {:o}); "
        "not using it", dir, st.st_mode & 07777));
  return Status::ok();
}

Status makeDirs(const std::string &dir) {
  std::string cur;
  std::stringstream ss(dir);
  std::string part;
  if (!dir.empty() && dir[0] == '/')
    cur = "/";
  while (std::getline(ss, part, '/')) {
    if (part.empty())
      continue;
    cur += part + "/";
    if (mkdir(cur.c_str(), 0700) != 0 && errno != EEXIST)
      return Status::unavailable(fmt::format(
          "cannot create the kernel cache folder '{}': {}", cur,
          std::strerror(errno)));
  }
  return checkOwnFolder(dir);
}

void put64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out += static_cast<char>((v >> (8 * i)) & 0xff);
}
bool get64(const std::string &in, size_t &pos, uint64_t &v) {
  if (pos + 8 > in.size())
    return false;
  v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t(static_cast<unsigned char>(in[pos + i])) << (8 * i);
  pos += 8;
  return true;
}

/// Reads an entry: a regular file (links are not followed; FIFOs and
/// devices are refused without blocking) of at most kMaxEntryBytes.
/// nullopt when there is none; `bad` when there is one that is not a file.
std::optional<std::string> readEntry(const std::string &path, bool &bad) {
  bad = false;
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    bad = errno == ELOOP; // a symbolic link
    return std::nullopt;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) {
    ::close(fd);
    bad = true;
    return std::nullopt;
  }
  std::string data(static_cast<size_t>(st.st_size), '\0');
  size_t got = readFully(fd, data.data(), data.size());
  ::close(fd);
  data.resize(got);
  return data;
}

std::string hex(const std::string &bytes) {
  std::string s;
  for (unsigned char c : bytes)
    s += fmt::format("{:02x}", c);
  return s;
}

} // namespace

KernelCache::KernelCache(std::string dir)
    : dir_(dir.empty() ? defaultDir() : std::move(dir)) {}

std::string KernelCache::hashKey(const std::string &key) {
  return hex(sha256(key));
}

std::string KernelCache::pathFor(const std::string &key) const {
  return dir_ + "/" + hashKey(key) + ".kc";
}

std::optional<std::string> KernelCache::lookup(const std::string &key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = memory_.find(key);
    if (it != memory_.end()) {
      ++memoryHits;
      return it->second;
    }
  }
  std::string path = pathFor(key);
  bool bad = false;
  std::optional<std::string> file;
  if (checkOwnFolder(dir_))
    file = readEntry(path, bad);
  if (!file) {
    std::lock_guard<std::mutex> lock(mu_);
    ++misses;
    if (bad) {
      ++corrupt; // a link, a FIFO, a device, or too large: never read
      ::unlink(path.c_str());
    }
    return std::nullopt;
  }
  const std::string &data = *file;
  // Layout: magic, key length, key, payload length, payload, SHA-256 of
  // key and payload.
  size_t pos = sizeof kMagic;
  uint64_t klen = 0, plen = 0;
  bool ok = data.size() >= sizeof kMagic &&
            std::memcmp(data.data(), kMagic, sizeof kMagic) == 0 &&
            get64(data, pos, klen) && klen <= data.size() - pos;
  std::string storedKey, payload;
  if (ok) {
    storedKey = data.substr(pos, klen);
    pos += klen;
    ok = get64(data, pos, plen) && plen <= data.size() - pos;
  }
  if (ok) {
    payload = data.substr(pos, plen);
    pos += plen;
    ok = data.size() - pos == 32 &&
         data.compare(pos, 32, sha256(storedKey, payload)) == 0;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    // Never load it: remove it so the next store replaces it.
    ++corrupt;
    ++misses;
    ::unlink(path.c_str());
    return std::nullopt;
  }
  if (storedKey != key) { // a hash collision: not ours
    ++misses;
    return std::nullopt;
  }
  ++diskHits;
  memory_[key] = payload;
  return payload;
}

Status KernelCache::store(const std::string &key, const std::string &payload) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    memory_[key] = payload;
  }
  if (Status s = makeDirs(dir_); !s)
    return s;
  std::string data(kMagic, sizeof kMagic);
  put64(data, key.size());
  data += key;
  put64(data, payload.size());
  data += payload;
  data += sha256(key, payload);
  std::string tmpl = dir_ + "/.tmp-XXXXXX";
  std::vector<char> name(tmpl.begin(), tmpl.end());
  name.push_back('\0');
  int fd = mkstemp(name.data());
  if (fd < 0)
    return Status::unavailable(fmt::format(
        "cannot write to the kernel cache '{}': {}", dir_, std::strerror(errno)));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      int err = errno;
      close(fd);
      unlink(name.data());
      return Status::unavailable(fmt::format(
          "writing the kernel cache entry failed: {}", std::strerror(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    int err = errno;
    unlink(name.data());
    return Status::unavailable(fmt::format(
        "writing the kernel cache entry failed: {}", std::strerror(err)));
  }
  if (rename(name.data(), pathFor(key).c_str()) != 0) {
    unlink(name.data());
    return Status::unavailable(fmt::format(
        "cannot rename the kernel cache entry into place: {}",
        std::strerror(errno)));
  }
  return Status::ok();
}

} // namespace attnc::rt
