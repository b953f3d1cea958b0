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

llvm::ArrayRef<const KernelForm *> kernelForms() {
  static const KernelForm *const kForms[] = {
      &mmaSyncForm(),          // NVIDIA, f16/bf16 on tensor cores
      &simtForm(),             // NVIDIA, everything else
      &cpuForm(),              // the host CPU
      &mmaSyncBackwardForm(),  // NVIDIA backward, f16/bf16 on tensor cores
      &simtBackwardForm(),     // NVIDIA backward, everything else
      &cpuBackwardForm(),      // the host CPU's backward
  };
  return kForms;
}

FormChoice formFor(const rt::KernelSpec &request, llvm::StringRef target,
                   Direction direction) {
  for (const KernelForm *f : kernelForms()) {
    if (f->direction() != direction || !f->runsOn(target) ||
        (!request.form.empty() && f->name() != request.form))
      continue;
    if (std::optional<rt::KernelSpec> s = f->configure(request, target))
      return FormChoice{f, *s};
  }
  return FormChoice{};
}

std::string kernelName(llvm::StringRef variant, const KernelForm &form,
                       const rt::KernelSpec &spec) {
  return fmt::format("attnc_{}_{}_d{}v{}_{}", variant.str(),
                     rt::dtypeName(spec.dtype), spec.headDim, spec.vHeadDim,
                     form.tileConfig(spec).name());
}

} // namespace attnc
