//===- PtxModule.cpp - Loading PTX and launching its entries --------------===//
#include "PtxModule.h"
#include "attnc/runtime/Parse.h"
#include "attnc/runtime/Package.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace attnc::rt::cuda::ptx {

namespace {
// cuda.h's CUjit_option values.
constexpr int kJitInfoLogBuffer = 3, kJitInfoLogSize = 4,
              kJitErrorLogBuffer = 5, kJitErrorLogSize = 6;
constexpr int64_t kMaxGridX = 2147483647;
} // namespace

Status checkTarget(const Context &ctx, const std::string &target,
                   const std::string &what) {
  bool arch = false;
  int cc = targetNumber(target, &arch);
  if (cc <= 0)
    return Status::invalidArgument("kernel '" + what +
                                   "' has an unknown target '" + target + "'");
  if (cc > ctx.device().computeCapability() ||
      (arch && cc != ctx.device().computeCapability()))
    return Status::invalidArgument(fmt::format(
        "kernel '{}' is compiled for {}{}, but {} is sm_{}", what, target,
        arch ? " (that compute capability only)" : "", ctx.device().name(),
        ctx.device().computeCapability()));
  return Status::ok();
}

Status loadPtx(const Context &ctx, const std::string &ptx,
               const std::string &what, const std::string &target,
               CUmodule &out) {
  const Driver &drv = ctx.driver();
  if (Status s = ctx.makeCurrent(); !s)
    return s;
  std::vector<char> errLog(16384, 0), infoLog(4096, 0);
  int opts[] = {kJitErrorLogBuffer, kJitErrorLogSize, kJitInfoLogBuffer,
                kJitInfoLogSize};
  void *vals[] = {errLog.data(),
                  reinterpret_cast<void *>(uintptr_t(errLog.size() - 1)),
                  infoLog.data(),
                  reinterpret_cast<void *>(uintptr_t(infoLog.size() - 1))};
  CUresult r = drv.api().cuModuleLoadDataEx(&out, ptx.c_str(), 4, opts, vals);
  if (Status s = drv.check(r, "cuModuleLoadDataEx"); !s) {
    out = nullptr;
    std::string log(errLog.data());
    while (!log.empty() && (log.back() == '\n' || log.back() == '\0'))
      log.pop_back();
    return Status::unavailable(fmt::format(
        "cannot load kernel '{}' ({}): {}{}", what, target, s.message(),
        log.empty() ? "" : "\nJIT log:\n" + log));
  }
  return Status::ok();
}

Status getEntry(const Context &ctx, CUmodule module, const std::string &name,
                const char *role, CUfunction &out) {
  out = nullptr;
  if (name.empty())
    return Status::ok(); // an optional entry the image does not have
  const Driver &drv = ctx.driver();
  if (Status s = drv.check(drv.api().cuModuleGetFunction(&out, module,
                                                         name.c_str()),
                           "cuModuleGetFunction");
      !s)
    return Status::notFound(fmt::format("{} '{}' is not in its module: {}",
                                        role, name, s.message()));
  return Status::ok();
}

Status checkEntryParams(const std::vector<int> &sizes, size_t memrefs,
                        const std::string &name, bool kvMaps) {
  std::vector<int> want(5 * memrefs + 1, 8);
  if (kvMaps)
    want.insert(want.end(), {128, 128, 8});
  if (sizes != want)
    return Status::invalidArgument(fmt::format(
        "kernel '{}' has {} parameters, but this runtime passes {} (8 "
        "bytes each{}): the package and the runtime disagree on the ABI",
        name, sizes.size(), want.size(),
        kvMaps ? ", then K's and V's 128-byte tensor maps and a flag" : ""));
  return Status::ok();
}

Status launchItems(const Context &ctx, CUfunction fn,
                   std::vector<rt::detail::MemrefDesc> descs, int64_t items,
                   unsigned threads, unsigned dynamicShared, CUstream stream,
                   const KvTensorMaps *kvMaps, int64_t blocks, bool dependent) {
  int64_t first = 0;
  std::vector<void *> params = rt::detail::memrefWords(descs);
  params.push_back(&first);
  if (kvMaps) {
    // cuLaunchKernel copies parameters at the call: these live until then.
    params.push_back(const_cast<unsigned char *>(kvMaps->k));
    params.push_back(const_cast<unsigned char *>(kvMaps->v));
    params.push_back(const_cast<int64_t *>(&kvMaps->usable));
  }
  const Driver &drv = ctx.driver();
  // A persistent kernel: one launch from item 0 (its blocks loop to items).
  const int64_t step = blocks > 0 ? items : kMaxGridX;
  const int64_t most = blocks > 0 ? std::min(blocks, kMaxGridX) : kMaxGridX;
  for (; first < items; first += step) {
    unsigned grid = static_cast<unsigned>(std::min(items - first, most));
    if (dependent) {
      CUlaunchAttribute attr{};
      attr.id = kLaunchAttrProgrammaticStreamSerialization;
      attr.value.programmaticStreamSerializationAllowed = 1;
      CUlaunchConfig config{grid,          1,      1,     threads, 1, 1,
                            dynamicShared, stream, &attr, 1};
      if (Status s = drv.check(
              drv.api().cuLaunchKernelEx(&config, fn, params.data(), nullptr),
              "cuLaunchKernelEx");
          !s)
        return s;
      continue;
    }
    if (Status s = drv.check(drv.api().cuLaunchKernel(fn, grid, 1, 1, threads,
                                                      1, 1, dynamicShared,
                                                      stream, params.data(),
                                                      nullptr),
                             "cuLaunchKernel");
        !s)
      return s;
  }
  return Status::ok();
}

bool dependentLaunches(const Context &ctx) {
  const char *v = std::getenv("ATTNC_PDL");
  if (v && std::string(v) == "0")
    return false;
  return ctx.device().computeCapability() >= 90 &&
         ctx.driver().api().cuLaunchKernelEx != nullptr;
}

int64_t persistentBlocks(const Context &ctx) {
  const char *v = std::getenv("ATTNC_GRID");
  if (v && std::string(v) == "items")
    return 0;
  return std::max(1, ctx.device().multiprocessors());
}

} // namespace attnc::rt::cuda::ptx
