//===- KernelCache.cpp - Atomic, self-checking kernel cache --------------===//
#include "attnc/runtime/KernelCache.h"

#include <fmt/format.h>

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

constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'K', 'C', '0', '1'};

uint64_t fnv1a(const std::string &s, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string defaultDir() {
  if (const char *d = std::getenv("ATTNC_CACHE_DIR"); d && *d)
    return d;
  if (const char *x = std::getenv("XDG_CACHE_HOME"); x && *x)
    return std::string(x) + "/attnc";
  if (const char *h = std::getenv("HOME"); h && *h)
    return std::string(h) + "/.cache/attnc";
  return "/tmp/attnc-cache";
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
    if (mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST)
      return Status::unavailable(fmt::format(
          "cannot create the kernel cache folder '{}': {}", cur,
          std::strerror(errno)));
  }
  return Status::ok();
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

} // namespace

KernelCache::KernelCache(std::string dir)
    : dir_(dir.empty() ? defaultDir() : std::move(dir)) {}

std::string KernelCache::hashKey(const std::string &key) {
  return fmt::format("{:016x}{:016x}", fnv1a(key, 14695981039346656037ull),
                     fnv1a(key, 0x9e3779b97f4a7c15ull));
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
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::lock_guard<std::mutex> lock(mu_);
    ++misses;
    return std::nullopt;
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string data = ss.str();
  // Layout: magic, key length, key, payload length, payload, checksum.
  size_t pos = sizeof kMagic;
  uint64_t klen = 0, plen = 0, sum = 0;
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
    ok = get64(data, pos, sum) && pos == data.size() &&
         sum == fnv1a(storedKey + payload, 14695981039346656037ull);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (!ok) {
    // Never load it: remove it so the next store replaces it.
    ++corrupt;
    ++misses;
    unlink(path.c_str());
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
  put64(data, fnv1a(key + payload, 14695981039346656037ull));
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
    if (n <= 0) {
      close(fd);
      unlink(name.data());
      return Status::unavailable(fmt::format(
          "writing the kernel cache entry failed: {}", std::strerror(errno)));
    }
    done += static_cast<size_t>(n);
  }
  fsync(fd);
  close(fd);
  if (rename(name.data(), pathFor(key).c_str()) != 0) {
    unlink(name.data());
    return Status::unavailable(fmt::format(
        "cannot rename the kernel cache entry into place: {}",
        std::strerror(errno)));
  }
  return Status::ok();
}

} // namespace attnc::rt
