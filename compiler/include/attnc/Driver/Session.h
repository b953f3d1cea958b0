//===- Session.h - Compile a .attn file for the runtime --------*- C++ -*-===//
//
// The front door for tools and apps that link the compiler: parse, check and
// lower a file once, then compile any of its variants for the CPU. No MLIR
// in this header.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_SESSION_H
#define ATTNC_DRIVER_SESSION_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Backward.h"
#include "attnc/runtime/KernelABI.h"
#include "attnc/runtime/KernelCache.h"
#include "attnc/runtime/Package.h"

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace attnc {

/// The newest GPU target attnc compiles for that a device of compute
/// capability `cc` (90 for sm_90) runs: sm_90a on 9.0 exactly, else sm_90,
/// sm_89, sm_86 or sm_80.
std::string gpuTargetFor(int cc);

/// Thread-safe: any number of threads may call one Session; its compiles
/// run one at a time (they share one MLIR context), distinct Sessions
/// compile in parallel.
class Session {
public:
  ~Session();
  /// Loads `path` ('-' is stdin). On a language error, `diagnostics` holds
  /// the rendered `file:line:col: error:` messages.
  static rt::Status load(const std::string &path, std::string &diagnostics,
                         std::unique_ptr<Session> &out);
  /// Loads source text held in memory; `name` is used in diagnostics.
  static rt::Status loadSource(const std::string &name, std::string text,
                               std::string &diagnostics,
                               std::unique_ptr<Session> &out);
  const std::vector<std::string> &variants() const;
  /// "attnc 0.1.0 (LLVM/MLIR 22.1.0)": what packages record as their compiler.
  static const char *compilerId();
  /// The variant's signature and modifier program (for the reference).
  rt::Status info(const std::string &variant, rt::VariantInfo &out) const;
  /// JIT-compiles `variant` for the host CPU.
  rt::Status compileCpu(const std::string &variant, const rt::KernelSpec &spec,
                        std::unique_ptr<rt::CpuKernel> &out) const;
  /// JIT-compiles the backward pass of `variant` for the host CPU
  /// (rt::CpuBackwardKernel: dQ, dK, dV and the float parameters'
  /// gradients).
  rt::Status compileCpuBackward(const std::string &variant,
                                const rt::KernelSpec &spec,
                                std::unique_ptr<rt::CpuBackwardKernel> &out) const;
  /// Compiles the backward pass of `variant` to PTX for `target`
  /// (rt::cuda::GpuBackwardKernel), through the kernel cache as compileGpu.
  rt::Status compileGpuBackward(const std::string &variant,
                                const rt::KernelSpec &spec,
                                const std::string &target,
                                rt::GpuBackwardImage &out) const;
  /// Compiles `variant` to PTX for `target` (sm_80, sm_86, sm_89, sm_90),
  /// ready for rt::cuda::GpuKernel::load or a Package. Results go through
  /// the kernel cache (see setKernelCache), keyed by the variant's
  /// canonical IR, the configuration, the target and the compiler version.
  rt::Status compileGpu(const std::string &variant, const rt::KernelSpec &spec,
                        const std::string &target,
                        rt::GpuKernelImage &out) const;

  /// The cache compileGpu and compileGpuBackward use. By default a KernelCache
  /// in its default folder, created on first use, unless $ATTNC_KERNEL_CACHE is
  /// 0; null turns caching off.
  void setKernelCache(std::shared_ptr<rt::KernelCache> cache);

  /// Counts the (empty, partial, full) tiles a kernel with `spec` visits
  /// for a closed-form or absent mask, over every (b, h, Q tile, KV tile
  /// up to the sequence's length). Data-dependent masks: use a BlockMask.
  rt::Status countTiles(const std::string &variant, const rt::KernelSpec &spec,
                        int64_t heads, int64_t qLen,
                        const std::vector<int32_t> &kvLen,
                        const std::vector<int32_t> &qPos0,
                        const std::map<std::string, int64_t> &scalars,
                        std::array<int64_t, 3> &counts) const;

  /// The class of one block of a call, over every sequence b < `batch`
  /// and query head h < `heads`: queries at positions [qlo, qhi], keys at
  /// [klo, khi] (inclusive). Empty only if the mask holds for no pair of
  /// any (b, h); full if it holds for every pair of every (b, h); partial
  /// otherwise, and for data-dependent masks (a caller may skip an empty
  /// block without launching). `sizes` binds the scalars and problem sizes
  /// the mask reads (`window`, `Q`, ...); an unbound one makes its atoms
  /// partial.
  rt::Status classifyBlock(const std::string &variant,
                           const std::map<std::string, int64_t> &sizes,
                           int64_t batch, int64_t heads, int64_t qlo,
                           int64_t qhi, int64_t klo, int64_t khi,
                           rt::abi::TileClass &out) const;

private:
  rt::Status infoLocked(const std::string &variant,
                        rt::VariantInfo &out) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace attnc

#endif
