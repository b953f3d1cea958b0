// The kernel cache: round trips in memory and on disk, corruption and
// truncation detected (never loaded), key mismatches, and atomicity under
// concurrent threads and processes.
#include "attnc/runtime/KernelCache.h"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

using namespace attnc::rt;

namespace {

/// A folder of the test's own, removed with what the test left in it (the
/// forked writers leave by _exit, so only the parent removes it).
struct ScratchDir {
  std::string path;
  ScratchDir() {
    char tmpl[] = "/tmp/attnc-cache-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~ScratchDir() {
    chmod(path.c_str(), 0700); // (a case makes it world-writable)
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir &) = delete;
  ScratchDir &operator=(const ScratchDir &) = delete;
};

std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void writeAll(const std::string &path, const std::string &data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
}

int countFiles(const std::string &dir, const std::string &prefix) {
  int n = 0;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      n += std::string(e->d_name).rfind(prefix, 0) == 0;
    closedir(d);
  }
  return n;
}

const std::string kKey = "ir=attn.variant @causal...;config=f16,D128;target=sm_90;attnc 0.1.0";
const std::string kPayload = std::string("//\n// PTX\n.version 8.0\n") +
                             std::string(1000, 'x') + std::string(1, '\0') + "tail";

} // namespace

TEST_CASE("cache: store then lookup, from memory and from disk", "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  {
    KernelCache c(dir);
    CHECK_FALSE(c.lookup(kKey).has_value());
    REQUIRE(c.store(kKey, kPayload).isOk());
    CHECK(c.lookup(kKey) == kPayload);
    CHECK(c.memoryHits == 1);
  }
  KernelCache again(dir); // a new process would start like this
  CHECK(again.lookup(kKey) == kPayload);
  CHECK(again.diskHits == 1);
  CHECK(again.lookup(kKey) == kPayload);
  CHECK(again.memoryHits == 1);
  CHECK(countFiles(dir, ".tmp-") == 0);
}

TEST_CASE("cache: a truncated entry is a miss and is removed", "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  REQUIRE(KernelCache(dir).store(kKey, kPayload).isOk());
  KernelCache c(dir);
  std::string path = c.pathFor(kKey);
  std::string data = readAll(path);
  writeAll(path, data.substr(0, data.size() / 2));
  CHECK_FALSE(c.lookup(kKey).has_value());
  CHECK(c.corrupt == 1);
  CHECK(readAll(path).empty()); // deleted
  REQUIRE(c.store(kKey, kPayload).isOk()); // recompiled and stored again
  CHECK(KernelCache(dir).lookup(kKey) == kPayload);
}

TEST_CASE("cache: a flipped byte fails the checksum", "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  REQUIRE(KernelCache(dir).store(kKey, kPayload).isOk());
  KernelCache c(dir);
  std::string data = readAll(c.pathFor(kKey));
  data[data.size() / 2] ^= 0x20;
  writeAll(c.pathFor(kKey), data);
  CHECK_FALSE(c.lookup(kKey).has_value());
  CHECK(c.corrupt == 1);
}

TEST_CASE("cache: garbage and empty files are misses", "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  KernelCache c(dir);
  REQUIRE(c.store("other", "x").isOk());
  writeAll(c.pathFor(kKey), "");
  CHECK_FALSE(c.lookup(kKey).has_value());
  writeAll(c.pathFor(kKey), "ATTNKC01\xff\xff\xff\xff\xff\xff\xff\x7f");
  CHECK_FALSE(c.lookup(kKey).has_value());
  CHECK(c.corrupt == 2);
}

TEST_CASE("cache: an entry for another key is never returned", "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  KernelCache c(dir);
  REQUIRE(c.store("key A", "payload A").isOk());
  // Put A's entry where B's would be, as a hash collision would.
  writeAll(c.pathFor("key B"), readAll(c.pathFor("key A")));
  KernelCache fresh(dir);
  CHECK_FALSE(fresh.lookup("key B").has_value());
  CHECK(fresh.corrupt == 0);
}

TEST_CASE("cache: concurrent threads store and read consistently", "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  KernelCache c(dir);
  std::vector<std::thread> pool;
  for (int t = 0; t < 8; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        std::string key = "k" + std::to_string(i % 4);
        (void)c.store(key, "payload of " + key);
        auto got = c.lookup(key);
        REQUIRE(got.has_value());
        REQUIRE(*got == "payload of " + key);
      }
      (void)t;
    });
  for (auto &th : pool)
    th.join();
  KernelCache fresh(dir);
  for (int i = 0; i < 4; ++i)
    CHECK(fresh.lookup("k" + std::to_string(i)) == "payload of k" + std::to_string(i));
  CHECK(countFiles(dir, ".tmp-") == 0);
}

TEST_CASE("cache: concurrent processes writing one key leave a valid entry",
          "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  std::vector<pid_t> kids;
  for (int p = 0; p < 6; ++p) {
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      KernelCache c(dir);
      for (int i = 0; i < 30; ++i)
        if (!c.store(kKey, kPayload).isOk())
          _exit(1);
      _exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
  }
  KernelCache c(dir);
  CHECK(c.lookup(kKey) == kPayload);
  CHECK(c.corrupt == 0);
  CHECK(countFiles(dir, ".tmp-") == 0);
}

TEST_CASE("cache: the folder comes from ATTNC_CACHE_DIR, then XDG", "[cache]") {
  setenv("ATTNC_CACHE_DIR", "/tmp/attnc-explicit", 1);
  CHECK(KernelCache().directory() == "/tmp/attnc-explicit");
  unsetenv("ATTNC_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  CHECK(KernelCache().directory() == "/tmp/xdg/attnc");
  unsetenv("XDG_CACHE_HOME");
  CHECK(KernelCache::hashKey("a") != KernelCache::hashKey("b"));
  // SHA-256, in hex.
  CHECK(KernelCache::hashKey("abc") ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  // Without a home: a folder of this user's own.
  const char *home = std::getenv("HOME");
  std::string saved = home ? home : "";
  unsetenv("HOME");
  CHECK(KernelCache().directory() == "/tmp/attnc-cache-" + std::to_string(geteuid()));
  if (home)
    setenv("HOME", saved.c_str(), 1);
}

TEST_CASE("cache: links, FIFOs and oversized files are never read", "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  KernelCache c(dir);
  // A symbolic link to /dev/zero where the entry would be: no hang, no
  // memory exhaustion, a miss, and the link is removed.
  REQUIRE(symlink("/dev/zero", c.pathFor(kKey).c_str()) == 0);
  CHECK(!c.lookup(kKey));
  CHECK(c.corrupt == 1);
  CHECK(access(c.pathFor(kKey).c_str(), F_OK) != 0);
  // A FIFO: opening it must not block.
  REQUIRE(mkfifo(c.pathFor(kKey).c_str(), 0600) == 0);
  CHECK(!c.lookup(kKey));
  CHECK(c.corrupt == 2);
  // A sparse file far larger than any entry.
  { std::ofstream big(c.pathFor(kKey)); }
  REQUIRE(truncate(c.pathFor(kKey).c_str(), off_t(1) << 31) == 0);
  CHECK(!c.lookup(kKey));
  CHECK(c.corrupt == 3);
  // And a real entry still round-trips.
  REQUIRE(c.store(kKey, kPayload).isOk());
  KernelCache fresh(dir);
  CHECK(fresh.lookup(kKey) == kPayload);
}

TEST_CASE("cache: a folder other users can write or own is refused", "[cache]") {
  ScratchDir scratch;
  const std::string &dir = scratch.path;
  struct stat st;
  REQUIRE(stat(dir.c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0); // created for us alone
  KernelCache ok(dir + "/sub");
  REQUIRE(ok.store(kKey, kPayload).isOk());
  REQUIRE(stat((dir + "/sub").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
  // World-writable: another user could plant entries.
  REQUIRE(chmod(dir.c_str(), 0777) == 0);
  KernelCache open(dir);
  Status s = open.store(kKey, kPayload);
  CHECK_THAT(s.message(), Catch::Contains("is writable by other users"));
  KernelCache reader(dir);
  CHECK(!reader.lookup(kKey)); // never read from it either
  REQUIRE(chmod(dir.c_str(), 0700) == 0);
  if (geteuid() == 0) { // root can give the folder to another user
    REQUIRE(chown(dir.c_str(), 1, 1) == 0);
    KernelCache theirs(dir);
    CHECK_THAT(theirs.store(kKey, kPayload).message(),
               Catch::Contains("belongs to another user (uid 1)"));
    REQUIRE(chown(dir.c_str(), 0, 0) == 0);
  }
}
