//===- Launch.cpp - Running a grid of CTAs on the host's cores ------------===//
#include "Launch.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace attnc::emu {

namespace {
constexpr int kErrInvalidValue = 1;
constexpr int kErrLaunchOutOfResources = 701;

uint64_t envU64(const char *name, uint64_t dflt) {
  const char *v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : dflt;
}
} // namespace

LaunchOptions launchOptionsFromEnv() {
  LaunchOptions o;
  o.threads = static_cast<int>(envU64("ATTNC_EMU_THREADS", 0));
  o.racecheck = envU64("ATTNC_EMU_RACECHECK", 1) != 0;
  o.maxSteps = envU64("ATTNC_EMU_MAX_STEPS", o.maxSteps);
  return o;
}

int checkLaunch(const Kernel &k, const LaunchShape &s, std::string &report) {
  uint64_t threads = uint64_t(s.block[0]) * s.block[1] * s.block[2];
  uint64_t ctas = uint64_t(s.grid[0]) * s.grid[1] * s.grid[2];
  if (threads == 0 || ctas == 0) {
    report = "launch of " + k.name + " with an empty grid or block";
    return kErrInvalidValue;
  }
  if (threads > 1024 || threads > uint64_t(k.maxThreads)) {
    report = "launch of " + k.name + " with " + std::to_string(threads) +
             " threads per block; the kernel allows " +
             std::to_string(std::min(1024, k.maxThreads));
    return kErrInvalidValue;
  }
  if (k.reqntid[0] && (s.block[0] != uint32_t(k.reqntid[0]) ||
                       s.block[1] != uint32_t(k.reqntid[1]) ||
                       s.block[2] != uint32_t(k.reqntid[2]))) {
    report = "launch of " + k.name + " with a block other than its .reqntid";
    return kErrInvalidValue;
  }
  // A kernel whose register count the emulator knows (setmaxnreg's
  // .maxnreg): a block needs that many per thread of every warp.
  uint64_t warps = (threads + 31) / 32;
  const uint64_t regs = uint64_t(k.launchRegisters());
  if (regs && warps * 32 * regs > 65536) {
    report = "launch of " + k.name + " with " + std::to_string(threads) +
             " threads per block at " + std::to_string(regs) +
             " registers each (.maxnreg): " + std::to_string(warps * 32 * regs) +
             " registers, the register file holds 65536";
    return kErrLaunchOutOfResources;
  }
  uint32_t dynLimit = k.maxDynamicShared ? k.maxDynamicShared
                                         : 48 * 1024 - std::min<uint32_t>(k.staticShared, 48 * 1024);
  if (s.dynamicShared > dynLimit) {
    report = "launch of " + k.name + " with " + std::to_string(s.dynamicShared) +
             " bytes of dynamic shared memory; the limit is " + std::to_string(dynLimit) +
             (k.maxDynamicShared ? "" : " (set CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to go beyond 48 KB)");
    return kErrInvalidValue;
  }
  return 0;
}

int launch(const Kernel &k, const LaunchShape &s, void **params,
           const MemoryMap &mem, const LaunchOptions &opts, std::string &report,
           GridDependencyChecks grid) {
  if (int r = checkLaunch(k, s, report))
    return r;
  uint64_t ctas = uint64_t(s.grid[0]) * s.grid[1] * s.grid[2];
  std::vector<uint8_t> paramBuf(k.paramBytes + 16, 0);
  if (!k.params.empty() && !params) {
    report = "launch of " + k.name + " without its parameters";
    return kErrInvalidValue;
  }
  for (size_t i = 0; i < k.params.size(); ++i)
    std::memcpy(paramBuf.data() + k.params[i].offset, params[i], k.params[i].size);

  int workers = opts.threads > 0 ? opts.threads
                                 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers = static_cast<int>(std::min<uint64_t>(static_cast<uint64_t>(workers), ctas));
  std::atomic<uint64_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mu;
  uint64_t faultCta = UINT64_MAX;
  Fault first{0, ""};
  // Each worker's log of global writes (when a dependent follows).
  std::vector<std::vector<GridWrites::Range>> logs(
      size_t(std::max(workers, 1)));
  std::atomic<int> worker{0};
  auto work = [&]() {
    Cta cta;
    cta.init(k, s, mem, paramBuf.data(), opts.racecheck, opts.maxSteps);
    cta.prerequisite = grid.prerequisite;
    if (grid.record)
      cta.writeLog = &logs[size_t(worker.fetch_add(1))];
    for (;;) {
      uint64_t i = next.fetch_add(1);
      if (i >= ctas || stop.load())
        return;
      uint32_t x = uint32_t(i % s.grid[0]), y = uint32_t((i / s.grid[0]) % s.grid[1]),
               z = uint32_t(i / (uint64_t(s.grid[0]) * s.grid[1]));
      try {
        cta.steps = 0;
        cta.run(x, y, z);
      } catch (const Fault &f) {
        std::lock_guard<std::mutex> lock(mu);
        if (i < faultCta) {
          faultCta = i;
          first = f;
        }
        stop = true;
        return;
      }
    }
  };
  if (workers <= 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (int i = 0; i < workers; ++i)
      pool.emplace_back(work);
    for (std::thread &t : pool)
      t.join();
  }
  if (grid.record) {
    grid.record->kernel = k.name;
    for (std::vector<GridWrites::Range> &log : logs)
      grid.record->gather(log);
    grid.record->finish();
  }
  if (faultCta != UINT64_MAX) {
    report = first.what;
    return first.code;
  }
  return 0;
}

} // namespace attnc::emu
