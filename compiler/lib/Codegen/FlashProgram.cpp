//===- FlashProgram.cpp - A form's kernels and what goes beside them -------===//
//
// A form builds its kernel(s); every forward program also has the split-KV
// merge, and every program of a data-dependent mask its block-mask builder
// (SplitMerge.cpp, BlockMaskBuilder.cpp): on the CPU funcs over ranges, on
// a GPU gpu.funcs.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/MaskFacts.h"

using namespace mlir;

namespace attnc {
using codegen::ProgramBuilder;

namespace {
/// What every program has beside its form's kernels: a forward kernel's
/// split-KV merge, and for a data-dependent mask the block-mask builder
/// (with the forward kernel, or the backward's `_bwd_q`).
LogicalResult addCompanions(StringRef kind, Operation *container,
                            ModuleOp parent, attn::VariantOp variant,
                            const MaskAnalysis &mask, const FlashConfig &config,
                            StringRef stem) {
  auto gm = dyn_cast<gpu::GPUModuleOp>(container);
  if (kind == "forward") {
    ProgramBuilder merge(parent, variant, mask, config);
    if (failed(merge.buildMerge((stem + "_merge").str(), gm)))
      return failure();
  }
  if (kind != "bwd_kv" && mask.kind == rt::MaskKind::Data) {
    ProgramBuilder builder(parent, variant, mask, config);
    if (failed(builder.buildMaskBuilder((stem + "_block_mask").str(), gm)))
      return failure();
  }
  return success();
}
} // namespace

LogicalResult buildForwardProgram(const KernelForm &form, Operation *container,
                                  ModuleOp parent, attn::VariantOp variant,
                                  const MaskAnalysis &mask,
                                  const FlashConfig &config, StringRef name) {
  const rt::KernelSpec &s = config.spec;
  auto gm = dyn_cast<gpu::GPUModuleOp>(container);
  if (s.headDim % 8 || s.vHeadDim % 8 || s.blockM <= 0 ||
      (gm && s.blockM > 1024) || s.headDim <= 0 || s.vHeadDim <= 0)
    return variant.emitError("invalid kernel configuration: head dims must be "
                             "positive multiples of 8");
  if (failed(form.build(container, parent, variant, mask, config, name)))
    return failure();
  return addCompanions("forward", container, parent, variant, mask, config,
                       name);
}

LogicalResult buildBackwardProgram(const KernelForm &form, Operation *container,
                                   ModuleOp parent, attn::VariantOp variant,
                                   const MaskAnalysis &mask,
                                   const FlashConfig &config, StringRef name) {
  if (!variant.getGradBlock())
    return variant.emitError("the variant has no score_grad region; run "
                             "-attn-differentiate first");
  if (failed(form.build(container, parent, variant, mask, config, name)))
    return failure();
  return addCompanions("bwd_q", container, parent, variant, mask, config, name);
}

OwningOpRef<ModuleOp> buildFlashModule(attn::VariantOp variant,
                                       const FlashConfig &config,
                                       StringRef target, Direction direction,
                                       std::string &error) {
  FormChoice choice = formFor(config.spec, target, direction);
  if (!choice) {
    error = "no kernel form takes the configuration on " + target.str();
    return nullptr;
  }
  if (direction == Direction::Backward &&
      (!variant.getGradBlock() || variant.getGradBlock()->empty())) {
    error = "variant '" + variant.getSymName().str() +
            "' has no derivative of its score_mod: the backward cannot be built";
    return nullptr;
  }
  OpBuilder b(variant.getContext());
  OwningOpRef<ModuleOp> m = ModuleOp::create(variant.getLoc());
  b.setInsertionPointToEnd(m->getBody());
  auto copy = cast<attn::VariantOp>(b.clone(*variant));
  simplifyUnderMask(copy); // the kernels' copy only (MaskFacts.h)
  FlashConfig cfg = choice.flashConfig(config, copy);
  std::string name = target == "cpu"
                         ? "kernel"
                         : kernelName(variant.getSymName(), *choice.form,
                                      cfg.spec);
  if (direction == Direction::Forward)
    buildForwardKernel(*m, copy, choice.form->name(), cfg, name);
  else
    buildBackwardKernels(*m, copy, choice.form->name(), cfg, name);
  return m;
}

LogicalResult lowerFlashKernels(ModuleOp module, StringRef formName) {
  SmallVector<flash::KernelOp> kernels;
  module.walk([&](flash::KernelOp k) {
    if (k.getForm() == formName)
      kernels.push_back(k);
  });
  llvm::DenseMap<Operation *, MaskAnalysis> masks;
  Operation *gpuContainer = nullptr;
  for (flash::KernelOp k : kernels) {
    const KernelForm *form = formOf(k);
    if (!form)
      return k.emitOpError("names no kernel form of its kind: '")
             << k.getForm() << "'";
    attn::VariantOp variant = variantOf(k);
    auto [at, fresh] = masks.try_emplace(variant, MaskAnalysis());
    if (fresh)
      at->second = analyzeMask(variant);
    const MaskAnalysis &mask = at->second;
    Operation *container = module;
    if (!form->runsOn("cpu")) {
      if (!gpuContainer) {
        OpBuilder b(module.getContext());
        module->setAttr(gpu::GPUDialect::getContainerModuleAttrName(),
                        b.getUnitAttr());
        for (auto gm : module.getOps<gpu::GPUModuleOp>())
          if (gm.getName() == "attnc_kernels")
            gpuContainer = gm;
        if (!gpuContainer) {
          b.setInsertionPointToEnd(module.getBody());
          gpuContainer =
              gpu::GPUModuleOp::create(b, module.getLoc(), "attnc_kernels");
        }
      }
      container = gpuContainer;
    }
    std::string kind = k.getKind().str(), name = k.getSymName().str();
    FlashConfig config = configOf(k);
    if (failed(lowerWithForm(*form, k, mask, container)))
      return failure();
    StringRef stem = name;
    if (kind == "bwd_q")
      stem.consume_back("_bwd_q");
    if (failed(addCompanions(kind, container, module, variant, mask, config,
                             stem)))
      return failure();
  }
  return success();
}

} // namespace attnc
