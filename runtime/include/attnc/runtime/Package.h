//===- Package.h - Ahead-of-time kernel packages ----------------*- C++ -*-===//
//
// `attnc compile FILE.attn --emit=package --target=sm_80,sm_90` writes one
// self-contained JSON file: for each variant, its signature and modifier
// program (what validation, binding by name and the fp64 reference need) and
// one PTX module per (target, dtype, head dims), with what the launcher
// needs to run it: entry names, threads per block, shared memory, the tile
// configuration and the kernel's parameter sizes; with --backward, also the
// backward's kernels (_bwd_q, _bwd_kv). The runtime reads it with
// no LLVM; the parameter layout is checked against the PTX on load.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PACKAGE_H
#define ATTNC_RUNTIME_PACKAGE_H

#include "attnc/runtime/Attention.h"
#include "attnc/runtime/Backward.h"
#include "attnc/runtime/Tuning.h"

#include <string>
#include <vector>

namespace attnc::rt {

/// One compiled GPU kernel (and its block-mask builder, for data masks).
struct GpuKernelImage {
  std::string target;       // "sm_80", "sm_86", "sm_89", "sm_90" or "sm_90a"
  KernelSpec spec;          // as compiled: blockN may be below the request
  int64_t threads = 0;      // per block; the grid is one block per work item
  /// ... or, for a persistent kernel, at most one per SM, each taking items
  /// a grid apart (the kernel is correct at any grid: the runtime picks).
  bool persistent = false;
  int64_t sharedBytes = 0;  // static shared memory per block
  int64_t dynamicSharedBytes = 0; // dynamic shared memory per block (opt-in)
  std::string kernel;       // entry names in `ptx`
  std::string maskBuilder;  // empty unless the mask is data-dependent
  std::string merge;        // `kernel`_merge: combines split-KV partials
  /// The kernel triggers its dependents and the merge waits for it before
  /// reading the partials (griddepcontrol, sm_90+): the merge may be
  /// launched as the kernel's programmatic dependent (checked on load).
  bool mergeGridDependency = false;
  std::vector<int> kernelParams, maskBuilderParams, mergeParams; // bytes each
  TileWork tileWork; // the kernel's tile loop (optional in a package)
  std::string ptx;
};

struct PackageVariant {
  VariantInfo info;
  std::vector<GpuKernelImage> kernels;
  /// The backward's kernels (`attnc compile --emit=package --backward`),
  /// at most one per (target, dtype, head dims); PackageBackward.cpp.
  std::vector<GpuBackwardImage> backward;
};

struct Package {
  // 2: dynamic shared memory; 3: ip[kPageSize]; 4: split-KV (ip slots,
  // the merge entry); 5: backward kernels; 6: the backward's dynamic
  // shared memory; 7: each sequence's first key position and `size KV`
  // in ip (key offsets); 8: the sm_90a wgmma form's K/V tensor maps
  // (parameters after the first item, KernelABI.h)
  static constexpr int kVersion = 8;
  std::string compiler; // "attnc 0.1.0 (LLVM/MLIR 22.1.0)"
  std::string source;   // the .attn file it was compiled from
  /// Several kernels per (target, dtype, head dims), one per tile
  /// configuration, for attnc-run --tune (--tile-candidates); the first of
  /// each is the one selectKernel picks. Otherwise one each.
  bool tileCandidates = false;
  std::vector<PackageVariant> variants;

  const PackageVariant *find(const std::string &variant) const;
  std::string serialize() const;
  /// Parses and checks a package (every kernel's parameter list against
  /// its PTX); `origin` names it in errors.
  static Status parse(const std::string &text, const std::string &origin,
                      Package &out);
  static Status read(const std::string &path, Package &out);
  /// Writes atomically (temporary file + rename).
  Status write(const std::string &path) const;
};

/// "sm_90" -> 90, for targets sm_50 ... sm_999; 0 otherwise. An
/// architecture-specific target ("sm_90a": its kernels load on compute
/// capability 9.0 only) gives its number and sets *archSpecific.
int targetNumber(const std::string &target, bool *archSpecific = nullptr);

/// A kernel's tile configuration: block_m, block_n and warps from the
/// manifest, pipeline stages from its (checked) name.
TileConfig tileConfigOf(const GpuKernelImage &k);

/// The kernel options (KernelSpec's flags) a call needs: key offsets when
/// a sequence's first key is not at position 0, dropout when p > 0.
struct KernelNeeds {
  bool keyOffsets = false;
  bool dropout = false;
};

/// The kernel of `v` for a device of compute capability `cc` (90 for
/// sm_90) and these inputs: the highest target not above the device (PTX
/// is JIT-compiled forward), of its kernels with the options `needs` asks
/// for the one with the fewest others (a package may hold a kernel with
/// and one without key offsets; a call without offsets gets the cheaper
/// one), of several such the first. The message lists what the package
/// has.
Status selectKernel(const PackageVariant &v, int cc, DType dtype,
                    int64_t headDim, int64_t vHeadDim,
                    const GpuKernelImage *&out, KernelNeeds needs = {});

/// The backward kernel of `v` for a device of compute capability `cc` and
/// these inputs, chosen as selectKernel chooses; the message lists what
/// the package has.
Status selectBackward(const PackageVariant &v, int cc, DType dtype,
                      int64_t headDim, int64_t vHeadDim,
                      const GpuBackwardImage *&out, KernelNeeds needs = {});

/// Sizes in bytes of the parameters of `.entry <entry>(...)` in PTX text.
Status ptxEntryParams(const std::string &ptx, const std::string &entry,
                      std::vector<int> &sizes);
/// Whether the body of `.entry <entry>` holds `instruction` (as in
/// "griddepcontrol.wait").
bool ptxEntryHas(const std::string &ptx, const std::string &entry,
                 const std::string &instruction);
/// The block size `.entry <entry>` declares (.reqntid or .maxntid: the
/// product of its dimensions); 0 when it declares none, -1 when unreadable.
int64_t ptxEntryMaxThreads(const std::string &ptx, const std::string &entry);

} // namespace attnc::rt

#endif
