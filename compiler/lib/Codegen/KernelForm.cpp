//===- KernelForm.cpp - The registry of kernel forms ----------------------===//
//
// The one place that knows which forms exist and which is preferred: a
// request gets the first form of its direction that runs on the target and
// takes it. A new form adds one line to kForms.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"

#include <fmt/format.h>

namespace attnc {

KernelForm::~KernelForm() = default;

std::vector<rt::KernelSpec>
KernelForm::tileCandidates(const rt::KernelSpec &, llvm::StringRef) const {
  return {};
}

mlir::LogicalResult KernelForm::build(mlir::Operation *container,
                                      mlir::ModuleOp parent,
                                      mlir::attn::VariantOp variant,
                                      const MaskAnalysis &mask,
                                      const FlashConfig &config,
                                      llvm::StringRef name) const {
  FlashConfig cfg = flashConfig(config, config.spec, variant);
  if (direction() == Direction::Forward)
    return lowerWithForm(
        *this, buildForwardKernel(parent, variant, this->name(), cfg, name),
        mask, container);
  auto [q, kv] = buildBackwardKernels(parent, variant, this->name(), cfg, name);
  if (mlir::failed(lowerWithForm(*this, q, mask, container)))
    return mlir::failure();
  return lowerWithForm(*this, kv, mask, container);
}

mlir::LogicalResult lowerWithForm(const KernelForm &form,
                                  mlir::flash::KernelOp kernel,
                                  const MaskAnalysis &mask,
                                  mlir::Operation *container) {
  if (!form.takesScaleInExponent(configOf(kernel).spec)) {
    mlir::Operation *asks = nullptr;
    kernel.walk([&](mlir::Operation *op) {
      auto q = llvm::dyn_cast<mlir::flash::LoadQueryOp>(op);
      auto a = llvm::dyn_cast<mlir::flash::ApplyModsOp>(op);
      if ((q && q.getSignedByScale()) || (a && a.getUnscaled()) ||
          llvm::isa<mlir::flash::ScoreScaleOp>(op)) {
        asks = op;
        return mlir::WalkResult::interrupt();
      }
      return mlir::WalkResult::advance();
    });
    if (asks)
      return asks->emitOpError("takes the scale in the exponents, which the "
                               "form '")
             << form.name() << "' does not for this configuration";
  }
  if (!form.takesSumsInAccumulator(configOf(kernel).spec, variantOf(kernel))) {
    mlir::Operation *asks = nullptr;
    kernel.walk([&](mlir::flash::ZeroAccOp z) {
      if (z.getRowSums())
        asks = z;
    });
    if (asks)
      return asks->emitOpError("keeps the sums in the accumulator, which the "
                               "form '")
             << form.name() << "' does not for this configuration";
  }
  return form.lower(kernel, mask, container);
}

mlir::LogicalResult KernelForm::lower(mlir::flash::KernelOp kernel,
                                      const MaskAnalysis &,
                                      mlir::Operation *) const {
  return kernel.emitOpError("the form '")
         << name() << "' does not lower flash IR";
}

const KernelForm *formOf(mlir::flash::KernelOp kernel) {
  Direction d = kernel.getKind() == "forward" ? Direction::Forward
                                              : Direction::Backward;
  for (const KernelForm *f : kernelForms())
    if (f->direction() == d && f->name() == kernel.getForm())
      return f;
  return nullptr;
}

llvm::ArrayRef<const KernelForm *> kernelForms() {
  static const KernelForm *const kForms[] = {
      &wgmmaForm(),           // sm_90a, f16/bf16 with D multiples of 64
      &mmaSyncForm(),         // NVIDIA, f16/bf16 on tensor cores
      &simtForm(),            // NVIDIA, everything else
      &wgmmaPersistentForm(), // sm_90a as wgmma, by name only (after simt)
      &cpuForm(),             // the host CPU
      &mmaSyncBackwardForm(), // NVIDIA backward, f16/bf16 on tensor cores
      &simtBackwardForm(),    // NVIDIA backward, everything else
      &cpuBackwardForm(),     // the host CPU's backward
  };
  return kForms;
}

FormChoice formFor(const rt::KernelSpec &request, llvm::StringRef target,
                   Direction direction) {
  for (const KernelForm *f : kernelForms()) {
    if (f->direction() != direction || !f->runsOn(target) ||
        (!request.form.empty() && f->name() != request.form))
      continue;
    std::optional<rt::KernelSpec> s = f->configure(request, target);
    // Stages asked for: only a form whose configuration has them.
    if (s && request.stages && f->tileConfig(*s).stages != request.stages)
      continue;
    if (s)
      return FormChoice{f, *s};
  }
  return FormChoice{};
}

std::string kernelName(llvm::StringRef variant, const KernelForm &form,
                       const rt::KernelSpec &spec) {
  // The tile's name stays last (the runtime reads the stages from it).
  return fmt::format("attnc_{}_{}_d{}v{}_{}{}", variant.str(),
                     rt::dtypeName(spec.dtype), spec.headDim, spec.vHeadDim,
                     rt::kernelOptionTags(spec), form.tileConfig(spec).name());
}

} // namespace attnc
