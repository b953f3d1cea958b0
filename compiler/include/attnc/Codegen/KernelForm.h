//===- KernelForm.h - The kernel forms and their registry -------*- C++ -*-===//
//
// A kernel form is one way to build the flash program for a target: the
// CPU form, the SIMT and mma.sync forms on NVIDIA GPUs, and their backward
// counterparts. Each says which requests it takes (and with which tiles),
// what its entries need at launch and issue per tile, and builds them.
// Which form a request gets is one lookup, formFor: the registry lists the
// forms in order of preference (KernelForm.cpp), so a new form is a new
// file beside its siblings plus one line there.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_KERNELFORM_H
#define ATTNC_CODEGEN_KERNELFORM_H

#include "attnc/Codegen/FlashProgram.h"
#include "attnc/runtime/Tuning.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <vector>

namespace attnc {

/// What one entry needs at launch.
struct LaunchFacts {
  int64_t threads = 0;            // per block (GPU forms); 0 on the CPU
  int64_t staticSharedBytes = 0;  // per block
  int64_t dynamicSharedBytes = 0; // per block (opted into at load)
  /// The grid: at most one block per SM, each taking work items a grid
  /// apart (else one block per item). The kernel is correct at any grid.
  bool persistent = false;
};

/// One entry a form builds: the forward forms one (suffix ""), the backward
/// forms `_bwd_q` and `_bwd_kv`.
struct KernelEntry {
  std::string suffix;
  LaunchFacts launch;
  rt::TileWork work; // one full tile of its loop (the static SASS model)
};

class KernelForm {
public:
  virtual ~KernelForm();
  /// "cpu", "simt", "mma-sync" (a forward and a backward form may share a
  /// name: the family a request names).
  virtual llvm::StringRef name() const = 0;
  virtual Direction direction() const = 0;
  /// Whether the form builds for `target` ("cpu" or "sm_XX").
  virtual bool runsOn(llvm::StringRef target) const = 0;
  /// The configuration this form builds for `request` on `target` (its
  /// tiles from its table when the request leaves them open, shrunk to fit
  /// the target), or nothing when the form does not take the request.
  virtual std::optional<rt::KernelSpec>
  configure(const rt::KernelSpec &request, llvm::StringRef target) const = 0;
  /// Whether a configuration is one this form builds as given (a tuning
  /// file's choice, a tile candidate).
  virtual bool accepts(const rt::KernelSpec &spec,
                       llvm::StringRef target) const = 0;
  /// The tile configuration kernel names and tuning records carry.
  virtual rt::TileConfig tileConfig(const rt::KernelSpec &spec) const = 0;
  /// The entries it builds for a configuration, with their launch facts
  /// and tile work (`variant` may be null: the work is then what holds for
  /// any variant).
  virtual std::vector<KernelEntry>
  entries(const rt::KernelSpec &spec, mlir::attn::VariantOp variant) const = 0;
  /// Whether the forward takes the softmax scale in its exponents where the
  /// score_mod is the identity (flash.score_scale, apply_mods unscaled, Q
  /// signed_by_scale): one multiply fewer per score.
  virtual bool takesScaleInExponent(const rt::KernelSpec &) const {
    return false;
  }
  /// Whether the forward of `variant` (null: any variant) keeps the
  /// softmax's sums as a column of its accumulator (flash.zero_acc and
  /// flash.accumulate {row_sums}, flash.acc_sums): P [V | 1] on the
  /// tensor cores.
  virtual bool takesSumsInAccumulator(const rt::KernelSpec &,
                                      mlir::attn::VariantOp) const {
    return false;
  }
  /// Whether the backward sums score_grad's accumulates of a query
  /// (qamp[b, h, q]) in `_bwd_q`, which holds the query's row over all its
  /// keys, once per row, and `_bwd_kv` the others (flash.score_grad's
  /// accumulate "query" and "others"); else `_bwd_kv` adds them all.
  virtual bool sumsQueryGradsInQueryKernel() const { return false; }
  /// `base` (the vector width, ...) with what this form fixes for `spec`:
  /// the spec itself, whether the scale goes into the exponents, the sums
  /// into the accumulator, and where a query's gradients are summed. Every
  /// tiled program of the form is built from a configuration made here.
  FlashConfig flashConfig(FlashConfig base, const rt::KernelSpec &spec,
                          mlir::attn::VariantOp variant = {}) const {
    base.spec = spec;
    base.scaleInExponent = takesScaleInExponent(spec);
    base.sumsInAccumulator = takesSumsInAccumulator(spec, variant);
    base.queryGradsInQueryKernel = sumsQueryGradsInQueryKernel();
    return base;
  }
  /// The configurations the tuner times for a request's shape class.
  virtual std::vector<rt::KernelSpec>
  tileCandidates(const rt::KernelSpec &request, llvm::StringRef target) const;
  /// Adds the entries `name` + suffix for `config.spec` (configured) to
  /// `container` (the module on the CPU, a gpu.module inside `parent` on a
  /// GPU): the tiled program's kernels of its direction (TiledProgram.h),
  /// each lowered by the form.
  virtual mlir::LogicalResult build(mlir::Operation *container,
                                    mlir::ModuleOp parent,
                                    mlir::attn::VariantOp variant,
                                    const MaskAnalysis &mask,
                                    const FlashConfig &config,
                                    llvm::StringRef name) const;
  /// Lowers one flash.kernel of this form (its config and variant are on
  /// it) into an entry of the same name in `container`, and erases it.
  virtual mlir::LogicalResult lower(mlir::flash::KernelOp kernel,
                                    const MaskAnalysis &mask,
                                    mlir::Operation *container) const;
};

/// Lowers `kernel` with `form` (form.lower) once the kernel asks nothing
/// of the form it does not take (the scale in the exponents).
mlir::LogicalResult lowerWithForm(const KernelForm &form,
                                  mlir::flash::KernelOp kernel,
                                  const MaskAnalysis &mask,
                                  mlir::Operation *container);

/// The form a flash.kernel names (its `form` and kind), or null.
const KernelForm *formOf(mlir::flash::KernelOp kernel);

/// Every form, in order of preference.
llvm::ArrayRef<const KernelForm *> kernelForms();

struct FormChoice {
  const KernelForm *form = nullptr; // null: no form takes the request
  rt::KernelSpec spec;              // as the form configured it
  explicit operator bool() const { return form != nullptr; }
  /// The tiled program's configuration for this choice (KernelForm::flashConfig).
  FlashConfig flashConfig(const FlashConfig &base,
                          mlir::attn::VariantOp variant = {}) const {
    return form->flashConfig(base, spec, variant);
  }
};

/// The first form of `direction` that runs on `target` and takes the
/// request (only the forms `request.form` names, when it names one).
FormChoice formFor(const rt::KernelSpec &request, llvm::StringRef target,
                   Direction direction);

/// The kernel's name, carrying its configuration: variant, dtype, head
/// dims and the form's tile configuration, e.g.
/// `attnc_causal_bf16_d128v128_m128n32w8s2`.
std::string kernelName(llvm::StringRef variant, const KernelForm &form,
                       const rt::KernelSpec &spec);

// The forms (each in its own file; the registry lists them).
const KernelForm &cpuForm();
const KernelForm &cpuBackwardForm();
const KernelForm &simtForm();
const KernelForm &simtBackwardForm();
const KernelForm &mmaSyncForm();
const KernelForm &wgmmaForm();
const KernelForm &wgmmaPersistentForm();
const KernelForm &mmaSyncBackwardForm();

} // namespace attnc

#endif
