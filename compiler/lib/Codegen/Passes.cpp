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

/// Builds the program of `direction` of every variant into the module on
/// `target` ("cpu": funcs in the module; a GPU: a new `gpu.module
/// @attnc_kernels`, the module becoming a GPU container), with the form the
/// request gets there.
LogicalResult buildPrograms(ModuleOp m, const ConfigOptions &o,
                            int64_t vectorWidth, StringRef target,
                            Direction direction) {
  FailureOr<rt::KernelSpec> s = configuredSpec(o, m);
  if (failed(s))
    return failure();
  FormChoice choice = formFor(*s, target, direction);
  if (!choice)
    return m.emitError("no kernel form takes the configuration on ") << target;
  FlashConfig config;
  config.spec = choice.spec;
  config.vectorWidth = vectorWidth;
  Operation *container = m;
  bool gpu = target != "cpu";
  if (gpu) {
    OpBuilder b(m.getContext());
    m->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
    b.setInsertionPointToEnd(m.getBody());
    container = gpu::GPUModuleOp::create(b, m.getLoc(), "attnc_kernels");
  }
  for (auto v : llvm::to_vector(m.getOps<attn::VariantOp>())) {
    // CPU programs are named after the variant; GPU kernels carry their
    // configuration.
    std::string name = !gpu ? (direction == Direction::Forward
                                   ? (v.getSymName() + "_kernel").str()
                                   : v.getSymName().str())
                            : kernelName(v.getSymName(), *choice.form,
                                         config.spec);
    MaskAnalysis mask = analyzeMask(v);
    if (failed(direction == Direction::Forward
                   ? buildForwardProgram(*choice.form, container, m, v, mask,
                                         config, name)
                   : buildBackwardProgram(*choice.form, container, m, v, mask,
                                          config, name)))
      return failure();
  }
  return success();
}

struct BuildTiledPass : impl::AttnBuildTiledBase<BuildTiledPass> {
  using AttnBuildTiledBase::AttnBuildTiledBase;
  void runOnOperation() override {
    if (failed(buildPrograms(getOperation(), ATTNC_CONFIG_OPTIONS, vectorWidth,
                             "cpu", Direction::Forward)))
      signalPassFailure();
  }
};

struct BuildBackwardPass : impl::AttnBuildBackwardBase<BuildBackwardPass> {
  using AttnBuildBackwardBase::AttnBuildBackwardBase;
  void runOnOperation() override {
    if (failed(buildPrograms(getOperation(), ATTNC_CONFIG_OPTIONS, vectorWidth,
                             "cpu", Direction::Backward)))
      signalPassFailure();
  }
};

struct BuildGpuPass : impl::AttnBuildGpuBase<BuildGpuPass> {
  using AttnBuildGpuBase::AttnBuildGpuBase;
  void runOnOperation() override {
    if (failed(buildPrograms(getOperation(), ATTNC_CONFIG_OPTIONS, 8, "sm_80",
                             Direction::Forward)))
      signalPassFailure();
  }
};

struct BuildGpuBackwardPass
    : impl::AttnBuildGpuBackwardBase<BuildGpuBackwardPass> {
  using AttnBuildGpuBackwardBase::AttnBuildGpuBackwardBase;
  void runOnOperation() override {
    if (failed(buildPrograms(getOperation(), ATTNC_CONFIG_OPTIONS, 8, "sm_80",
                             Direction::Backward)))
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
