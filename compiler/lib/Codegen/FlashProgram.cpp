//===- FlashProgram.cpp - Build the tiled flash-attention program --------===//
//
// The entry points: which kernel form a configuration gets, and the
// functions a backend calls to add a variant's kernel (and its block-mask
// builder) to a module. The forms are in CpuKernel.cpp, SimtKernel.cpp and
// TensorCoreKernel.cpp; what they share in ProgramBuilder.h.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

using namespace mlir;

namespace attnc {
using codegen::ProgramBuilder;

/// Up to 256: the O accumulator is Dv / 2 registers per thread and m-tile
/// (128 at 256); above 128, Q is re-read from shared memory per KV tile.
constexpr int64_t kMaxTensorCoreDim = 256;

bool useTensorCores(const rt::KernelSpec &s) {
  if ((s.dtype != rt::DType::F16 && s.dtype != rt::DType::BF16) ||
      s.headDim % 16 || s.vHeadDim % 16 || s.headDim > kMaxTensorCoreDim ||
      s.vHeadDim > kMaxTensorCoreDim || s.blockN % 16 || s.blockN < 16 || s.blockM < 16 ||
      s.warps < 0 || s.warps > 16)
    return false;
  TensorCoreLayout L = tensorCoreLayout(s);
  return (L.mTiles == 1 || L.mTiles == 2) && L.warps * 16 * L.mTiles == s.blockM;
}

LogicalResult buildGpuFlashProgram(gpu::GPUModuleOp module,
                                   attn::VariantOp variant,
                                   const MaskAnalysis &mask,
                                   const FlashConfig &config, StringRef name) {
  const rt::KernelSpec &s = config.spec;
  if (s.headDim % 8 || s.vHeadDim % 8 || s.blockM <= 0 || s.blockM > 1024)
    return variant.emitError("invalid GPU kernel configuration");
  module->getContext()
      ->loadDialect<gpu::GPUDialect, memref::MemRefDialect, scf::SCFDialect,
                    arith::ArithDialect, math::MathDialect>();
  module->getContext()
      ->loadDialect<vector::VectorDialect, NVVM::NVVMDialect,
                    nvgpu::NVGPUDialect, LLVM::LLVMDialect>();
  ProgramBuilder kernel(module->getParentOfType<ModuleOp>(), variant, mask, config);
  if (failed(useTensorCores(s)
                 ? codegen::buildTensorCoreKernel(
                       module, module->getParentOfType<ModuleOp>(), variant,
                       mask, config, name)
                 : kernel.buildGpuKernel(module, name)))
    return failure();
  ProgramBuilder merge(module->getParentOfType<ModuleOp>(), variant, mask,
                       config);
  if (failed(merge.buildMerge((name + "_merge").str(), module)))
    return failure();
  if (mask.kind == rt::MaskKind::Data) {
    ProgramBuilder builder(module->getParentOfType<ModuleOp>(), variant, mask,
                           config);
    if (failed(builder.buildMaskBuilder((name + "_block_mask").str(), module)))
      return failure();
  }
  return success();
}

LogicalResult buildFlashProgram(ModuleOp module, attn::VariantOp variant,
                                const MaskAnalysis &mask,
                                const FlashConfig &config, StringRef name) {
  const rt::KernelSpec &s = config.spec;
  if (s.headDim % 8 || s.vHeadDim % 8 || s.blockN % config.vectorWidth ||
      s.blockM <= 0 || s.headDim <= 0 || s.vHeadDim <= 0)
    return variant.emitError("invalid kernel configuration: head dims must be "
                             "multiples of 8 and blockN a multiple of the "
                             "vector width");
  module->getContext()
      ->loadDialect<func::FuncDialect, memref::MemRefDialect, scf::SCFDialect,
                    vector::VectorDialect, arith::ArithDialect,
                    math::MathDialect>();
  ProgramBuilder kernel(module, variant, mask, config);
  if (failed(kernel.buildKernel(name)))
    return failure();
  ProgramBuilder merge(module, variant, mask, config);
  if (failed(merge.buildMerge((name + "_merge").str())))
    return failure();
  if (mask.kind == rt::MaskKind::Data) {
    ProgramBuilder builder(module, variant, mask, config);
    if (failed(builder.buildMaskBuilder((name + "_block_mask").str())))
      return failure();
  }
  return success();
}

} // namespace attnc
