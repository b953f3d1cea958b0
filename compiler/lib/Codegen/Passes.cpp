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
#include "attnc/Codegen/KernelForm.h"

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
#define GEN_PASS_DEF_CONVERTFLASHTOCPU
#define GEN_PASS_DEF_CONVERTFLASHTOSIMT
#define GEN_PASS_DEF_CONVERTFLASHTOMMASYNC
#define GEN_PASS_DEF_CONVERTFLASHTOWGMMA
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

/// The tiled program of every variant: flash.kernel ops for the form the
/// request gets on `target`.
LogicalResult buildTiledPrograms(ModuleOp m, const ConfigOptions &o,
                                 int64_t warps, StringRef form,
                                 int64_t vectorWidth, StringRef target,
                                 bool backward, bool dropout,
                                 bool keyOffsets) {
  FailureOr<rt::KernelSpec> s = configuredSpec(o, m);
  if (failed(s))
    return failure();
  if (target != "cpu" && !isGpuTarget(target.str()))
    return m.emitError("unknown target '") << target << "'";
  s->warps = warps;
  s->form = form.str();
  s->dropout = dropout;
  s->keyOffsets = keyOffsets;
  Direction direction = backward ? Direction::Backward : Direction::Forward;
  FormChoice choice = formFor(*s, target, direction);
  if (!choice)
    return m.emitError("no kernel form takes the configuration on ") << target;
  FlashConfig base;
  base.vectorWidth = vectorWidth;
  FlashConfig config = choice.flashConfig(base);
  for (auto v : llvm::to_vector(m.getOps<attn::VariantOp>())) {
    if (backward && (!v.getGradBlock() || v.getGradBlock()->empty()))
      return v.emitError("the variant has no score_grad region; run "
                         "-attn-differentiate first");
    // CPU programs are named after the variant; GPU kernels carry their
    // configuration.
    std::string name =
        target == "cpu"
            ? (backward ? v.getSymName().str() : (v.getSymName() + "_kernel").str())
            : kernelName(v.getSymName(), *choice.form, config.spec);
    if (backward)
      buildBackwardKernels(m, v, choice.form->name(), config, name);
    else
      buildForwardKernel(m, v, choice.form->name(), choice.flashConfig(base, v),
                         name);
  }
  return success();
}

struct BuildTiledPass : impl::AttnBuildTiledBase<BuildTiledPass> {
  using AttnBuildTiledBase::AttnBuildTiledBase;
  void runOnOperation() override {
    if (failed(buildTiledPrograms(getOperation(), ATTNC_CONFIG_OPTIONS, warps,
                                  form, vectorWidth, target, backward,
                                  dropout, keyOffsets)))
      signalPassFailure();
  }
};

struct ConvertFlashToCpuPass
    : impl::ConvertFlashToCpuBase<ConvertFlashToCpuPass> {
  void runOnOperation() override {
    if (failed(lowerFlashKernels(getOperation(), "cpu")))
      signalPassFailure();
  }
};

struct ConvertFlashToSimtPass
    : impl::ConvertFlashToSimtBase<ConvertFlashToSimtPass> {
  void runOnOperation() override {
    if (failed(lowerFlashKernels(getOperation(), "simt")))
      signalPassFailure();
  }
};

struct ConvertFlashToMmaSyncPass
    : impl::ConvertFlashToMmaSyncBase<ConvertFlashToMmaSyncPass> {
  void runOnOperation() override {
    if (failed(lowerFlashKernels(getOperation(), "mma-sync")))
      signalPassFailure();
  }
};

struct ConvertFlashToWgmmaPass
    : impl::ConvertFlashToWgmmaBase<ConvertFlashToWgmmaPass> {
  void runOnOperation() override {
    if (failed(lowerFlashKernels(getOperation(), "wgmma")))
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
