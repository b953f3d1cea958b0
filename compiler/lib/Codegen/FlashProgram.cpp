//===- FlashProgram.cpp - A form's kernels and what goes beside them -------===//
//
// A form builds its kernel(s); every forward program also has the split-KV
// merge, and every program of a data-dependent mask its block-mask builder
// (SplitMerge.cpp, BlockMaskBuilder.cpp): on the CPU funcs over ranges, on
// a GPU gpu.funcs.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/KernelForm.h"
#include "ProgramBuilder.h"

using namespace mlir;

namespace attnc {
using codegen::ProgramBuilder;

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
  ProgramBuilder merge(parent, variant, mask, config);
  if (failed(merge.buildMerge((name + "_merge").str(), gm)))
    return failure();
  if (mask.kind == rt::MaskKind::Data) {
    ProgramBuilder builder(parent, variant, mask, config);
    if (failed(builder.buildMaskBuilder((name + "_block_mask").str(), gm)))
      return failure();
  }
  return success();
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
  if (mask.kind == rt::MaskKind::Data) {
    ProgramBuilder builder(parent, variant, mask, config);
    if (failed(builder.buildMaskBuilder((name + "_block_mask").str(),
                                        dyn_cast<gpu::GPUModuleOp>(container))))
      return failure();
  }
  return success();
}

} // namespace attnc
