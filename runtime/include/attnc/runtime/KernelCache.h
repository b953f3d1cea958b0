//===- KernelCache.h - Compiled kernels, in memory and on disk -*- C++ -*-===//
//
// Content-addressed: the key is the full description of what was compiled
// (canonical IR, configuration, target, compiler version), hashed for the
// file name and stored whole in the entry, so a hash collision or a stale
// entry is detected rather than loaded. Entries are written to a temporary
// file in the cache folder and renamed into place (atomic on POSIX), so
// readers never see a partial entry and concurrent writers of the same key
// are harmless. A truncated or corrupt entry (bad magic, lengths or
// SHA-256) is removed and reported as a miss, never returned; so is
// anything in the folder that is not a regular file (a link, a FIFO, a
// device) or is larger than any entry can be. The folder is created 0700
// and used only while it belongs to this user and no one else can write
// to it: another local user cannot plant kernels.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_KERNELCACHE_H
#define ATTNC_RUNTIME_KERNELCACHE_H

#include "attnc/runtime/Status.h"

#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace attnc::rt {

class KernelCache {
public:
  /// `dir` empty: $ATTNC_CACHE_DIR, else $XDG_CACHE_HOME/attnc, else
  /// ~/.cache/attnc, else /tmp/attnc-cache-<uid>. The folder is created on
  /// first store.
  explicit KernelCache(std::string dir = "");
  const std::string &directory() const { return dir_; }

  /// The payload stored under `key`, from memory or disk; nullopt on a
  /// miss (including a corrupt entry, which is deleted).
  std::optional<std::string> lookup(const std::string &key);
  /// Stores `payload` under `key` in memory and atomically on disk.
  Status store(const std::string &key, const std::string &payload);
  /// The file an entry for `key` lives in.
  std::string pathFor(const std::string &key) const;

  /// Hex of the key's SHA-256: the entry's file name.
  static std::string hashKey(const std::string &key);

  /// Counters since construction (for tests and `attnc bench`).
  int memoryHits = 0, diskHits = 0, misses = 0, corrupt = 0;

private:
  std::string dir_;
  std::mutex mu_;
  std::map<std::string, std::string> memory_;
};

} // namespace attnc::rt

#endif
