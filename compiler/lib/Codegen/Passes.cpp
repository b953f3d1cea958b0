//===- Passes.cpp - The kernel-building and lowering passes -------------===//
//
// Passes.td declares them; the mask analysis and the derivative are in
// their own libraries (Analysis/, Autodiff/).
//
//===----------------------------------------------------------------------===//
#include "attnc/Passes.h"
#include "attnc/Autodiff/ScoreModDerivative.h"
#include "attnc/Codegen/CpuBackend.h"
#include "attnc/Codegen/GpuBackend.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace attnc {

#define GEN_PASS_DEF_ATTNBUILDTILED
#define GEN_PASS_DEF_ATTNBUILDBACKWARD
#define GEN_PASS_DEF_ATTNBUILDGPU
#define GEN_PASS_DEF_ATTNBUILDGPUBACKWARD
#define GEN_PASS_DEF_ATTNLOWERTOLLVM
#define GEN_PASS_DEF_ATTNLOWERTONVVM
#include "attnc/Passes.h.inc"

namespace {

/// The kernel configuration a build pass's options give, or failure with
/// an error on the module.
struct ConfigOptions {
  std::string dtype;
  int64_t headDim, vHeadDim, blockM, blockN;
};
FailureOr<rt::KernelSpec> configuredSpec(const ConfigOptions &o, ModuleOp m) {
  rt::KernelSpec s;
  auto t = rt::parseDType(o.dtype);
  if (!t || (*t != rt::DType::F32 && *t != rt::DType::F16 &&
             *t != rt::DType::BF16))
    return m.emitError("dtype must be f32, f16 or bf16, got '") << o.dtype << "'";
  if (o.headDim <= 0 || o.headDim % 8 || o.vHeadDim <= 0 || o.vHeadDim % 8 ||
      o.blockM <= 0 || o.blockN <= 0)
    return m.emitError("head dims must be positive multiples of 8 and "
                       "tile sizes positive");
  s.dtype = *t;
  s.headDim = o.headDim;
  s.vHeadDim = o.vHeadDim;
  s.blockM = o.blockM;
  s.blockN = o.blockN;
  return s;
}

#define ATTNC_CONFIG_OPTIONS                                                  \
  ConfigOptions { dtype, headDim, vHeadDim, blockM, blockN }

/// Builds a CPU program of every variant into the module with
/// `build(module, variant, mask, config)`.
LogicalResult buildCpuPrograms(
    ModuleOp m, const ConfigOptions &o, int64_t vectorWidth,
    function_ref<LogicalResult(ModuleOp, attn::VariantOp, const MaskAnalysis &,
                               const FlashConfig &)>
        build) {
  FailureOr<rt::KernelSpec> s = configuredSpec(o, m);
  if (failed(s))
    return failure();
  FlashConfig config;
  config.spec = *s;
  config.vectorWidth = vectorWidth;
  for (auto v : llvm::to_vector(m.getOps<attn::VariantOp>()))
    if (failed(build(m, v, analyzeMask(v), config)))
      return failure();
  return success();
}

/// Builds a GPU program of every variant into a new `gpu.module
/// @attnc_kernels` (the module becomes a GPU container) with
/// `build(gpuModule, variant, mask, config, kernelName)`, the tiles of
/// `tiles(spec)`.
LogicalResult buildGpuPrograms(
    ModuleOp m, const ConfigOptions &o,
    function_ref<rt::KernelSpec(const rt::KernelSpec &)> tiles,
    function_ref<LogicalResult(gpu::GPUModuleOp, attn::VariantOp,
                               const MaskAnalysis &, const FlashConfig &,
                               StringRef)>
        build) {
  FailureOr<rt::KernelSpec> s = configuredSpec(o, m);
  if (failed(s))
    return failure();
  OpBuilder b(m.getContext());
  m->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(m.getBody());
  auto gm = gpu::GPUModuleOp::create(b, m.getLoc(), "attnc_kernels");
  FlashConfig config;
  config.spec = tiles(*s);
  for (auto v : llvm::to_vector(m.getOps<attn::VariantOp>()))
    if (failed(build(gm, v, analyzeMask(v), config,
                     gpuKernelName(v.getSymName(), config.spec))))
      return failure();
  return success();
}

struct BuildTiledPass : impl::AttnBuildTiledBase<BuildTiledPass> {
  using AttnBuildTiledBase::AttnBuildTiledBase;
  void runOnOperation() override {
    if (failed(buildCpuPrograms(
            getOperation(), ATTNC_CONFIG_OPTIONS, vectorWidth,
            [](ModuleOp m, attn::VariantOp v, const MaskAnalysis &mask,
               const FlashConfig &config) {
              return buildFlashProgram(m, v, mask, config,
                                       (v.getSymName() + "_kernel").str());
            })))
      signalPassFailure();
  }
};

struct BuildBackwardPass : impl::AttnBuildBackwardBase<BuildBackwardPass> {
  using AttnBuildBackwardBase::AttnBuildBackwardBase;
  void runOnOperation() override {
    if (failed(buildCpuPrograms(
            getOperation(), ATTNC_CONFIG_OPTIONS, vectorWidth,
            [](ModuleOp m, attn::VariantOp v, const MaskAnalysis &mask,
               const FlashConfig &config) {
              return buildBackwardProgram(m, v, mask, config, v.getSymName());
            })))
      signalPassFailure();
  }
};

struct BuildGpuPass : impl::AttnBuildGpuBase<BuildGpuPass> {
  using AttnBuildGpuBase::AttnBuildGpuBase;
  void runOnOperation() override {
    if (failed(buildGpuPrograms(
            getOperation(), ATTNC_CONFIG_OPTIONS,
            [](const rt::KernelSpec &s) { return gpuSpec(s, "sm_80"); },
            [](gpu::GPUModuleOp gm, attn::VariantOp v, const MaskAnalysis &mask,
               const FlashConfig &config, StringRef name) {
              return buildGpuFlashProgram(gm, v, mask, config, name);
            })))
      signalPassFailure();
  }
};

struct BuildGpuBackwardPass
    : impl::AttnBuildGpuBackwardBase<BuildGpuBackwardPass> {
  using AttnBuildGpuBackwardBase::AttnBuildGpuBackwardBase;
  void runOnOperation() override {
    if (failed(buildGpuPrograms(
            getOperation(), ATTNC_CONFIG_OPTIONS,
            [](const rt::KernelSpec &s) { return gpuBackwardSpec(s); },
            [](gpu::GPUModuleOp gm, attn::VariantOp v, const MaskAnalysis &mask,
               const FlashConfig &config, StringRef name) {
              return buildGpuBackwardProgram(gm, v, mask, config, name);
            })))
      signalPassFailure();
  }
};

struct LowerToLLVMPass : impl::AttnLowerToLLVMBase<LowerToLLVMPass> {
  void runOnOperation() override {
    if (failed(lowerToLLVMDialect(getOperation())))
      signalPassFailure();
  }
};

struct LowerToNVVMPass : impl::AttnLowerToNVVMBase<LowerToNVVMPass> {
  using AttnLowerToNVVMBase::AttnLowerToNVVMBase;
  void runOnOperation() override {
    if (!isGpuTarget(chip)) {
      getOperation().emitError("unknown chip '") << chip.getValue() << "'";
      return signalPassFailure();
    }
    if (failed(lowerToNVVM(getOperation(), chip)))
      signalPassFailure();
  }
};

} // namespace
} // namespace attnc
