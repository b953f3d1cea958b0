//===- Passes.cpp - The compiler's stages as mlir passes -----------------===//
#include "attnc/Codegen/Passes.h"
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

namespace {

/// The kernel configuration options shared by the build passes.
template <typename Derived>
struct ConfiguredPass : PassWrapper<Derived, OperationPass<ModuleOp>> {
  ConfiguredPass() = default;
  ConfiguredPass(const ConfiguredPass &other)
      : PassWrapper<Derived, OperationPass<ModuleOp>>(other) {}
  Pass::Option<std::string> dtype{*this, "dtype",
                                  llvm::cl::desc("f32, f16 or bf16"),
                                  llvm::cl::init("f32")};
  Pass::Option<int64_t> headDim{*this, "head-dim", llvm::cl::init(64)};
  Pass::Option<int64_t> vHeadDim{*this, "v-head-dim", llvm::cl::init(64)};
  Pass::Option<int64_t> blockM{*this, "block-m", llvm::cl::init(64)};
  Pass::Option<int64_t> blockN{*this, "block-n", llvm::cl::init(64)};

  /// The configuration, or failure (with an error on the module).
  FailureOr<rt::KernelSpec> spec() {
    rt::KernelSpec s;
    auto t = rt::parseDType(dtype.getValue());
    ModuleOp m = this->getOperation();
    if (!t || (*t != rt::DType::F32 && *t != rt::DType::F16 &&
               *t != rt::DType::BF16))
      return m.emitError("dtype must be f32, f16 or bf16, got '")
             << dtype.getValue() << "'";
    if (headDim <= 0 || headDim % 8 || vHeadDim <= 0 || vHeadDim % 8 ||
        blockM <= 0 || blockN <= 0)
      return m.emitError("head dims must be positive multiples of 8 and "
                         "tile sizes positive");
    s.dtype = *t;
    s.headDim = headDim;
    s.vHeadDim = vHeadDim;
    s.blockM = blockM;
    s.blockN = blockN;
    return s;
  }
};

struct MaskAnalysisPass
    : PassWrapper<MaskAnalysisPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(MaskAnalysisPass)
  StringRef getArgument() const final { return "attn-mask-analysis"; }
  StringRef getDescription() const final {
    return "Annotate each attn.variant with its mask's kind and closed form";
  }
  void runOnOperation() override {
    Builder b(&getContext());
    for (auto v : getOperation().getOps<attn::VariantOp>()) {
      MaskAnalysis m = analyzeMask(v);
      const char *kind = m.kind == rt::MaskKind::None     ? "none"
                         : m.kind == rt::MaskKind::Closed ? "closed"
                                                          : "data";
      v->setAttr("attn.mask_kind", b.getStringAttr(kind));
      v->setAttr("attn.mask", b.getStringAttr(m.describe()));
    }
  }
};

struct DifferentiatePass
    : PassWrapper<DifferentiatePass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(DifferentiatePass)
  StringRef getArgument() const final { return "attn-differentiate"; }
  StringRef getDescription() const final {
    return "Build the score_grad region (score_mod's reverse-mode "
           "derivative) of each attn.variant";
  }
  void getDependentDialects(DialectRegistry &r) const override {
    r.insert<arith::ArithDialect, math::MathDialect>();
  }
  void runOnOperation() override {
    for (auto v : getOperation().getOps<attn::VariantOp>())
      if (failed(buildScoreGrad(v)))
        return signalPassFailure();
  }
};

/// A pass building a CPU program of every variant into the module:
/// `Derived::build(module, variant, mask, config)`.
template <typename Derived>
struct CpuBuildPass : ConfiguredPass<Derived> {
  CpuBuildPass() = default;
  CpuBuildPass(const CpuBuildPass &other) : ConfiguredPass<Derived>(other) {}
  Pass::Option<int64_t> vectorWidth{*this, "vector-width",
                                    llvm::cl::desc("f32 lanes (8 or 16)"),
                                    llvm::cl::init(8)};
  void getDependentDialects(DialectRegistry &r) const override {
    r.insert<func::FuncDialect, memref::MemRefDialect, scf::SCFDialect,
             vector::VectorDialect, arith::ArithDialect, math::MathDialect>();
  }
  void runOnOperation() override {
    FailureOr<rt::KernelSpec> s = this->spec();
    if (failed(s))
      return this->signalPassFailure();
    FlashConfig config;
    config.spec = *s;
    config.vectorWidth = vectorWidth;
    ModuleOp m = this->getOperation();
    for (auto v : llvm::to_vector(m.getOps<attn::VariantOp>()))
      if (failed(Derived::build(m, v, analyzeMask(v), config)))
        return this->signalPassFailure();
  }
};

struct BuildTiledPass : CpuBuildPass<BuildTiledPass> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BuildTiledPass)
  BuildTiledPass() = default;
  BuildTiledPass(const BuildTiledPass &other) : CpuBuildPass(other) {}
  StringRef getArgument() const final { return "attn-build-tiled"; }
  StringRef getDescription() const final {
    return "Build the tiled flash program (CPU form) of every attn.variant";
  }
  static LogicalResult build(ModuleOp m, attn::VariantOp v,
                             const MaskAnalysis &mask,
                             const FlashConfig &config) {
    return buildFlashProgram(m, v, mask, config,
                             (v.getSymName() + "_kernel").str());
  }
};

struct BuildBackwardPass : CpuBuildPass<BuildBackwardPass> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BuildBackwardPass)
  BuildBackwardPass() = default;
  BuildBackwardPass(const BuildBackwardPass &other) : CpuBuildPass(other) {}
  StringRef getArgument() const final { return "attn-build-backward"; }
  StringRef getDescription() const final {
    return "Build the CPU backward program (<variant>_bwd_kv, "
           "<variant>_bwd_q) of every differentiated attn.variant";
  }
  static LogicalResult build(ModuleOp m, attn::VariantOp v,
                             const MaskAnalysis &mask,
                             const FlashConfig &config) {
    return buildBackwardProgram(m, v, mask, config, v.getSymName());
  }
};

/// A pass building a GPU program of every variant into a new
/// `gpu.module @attnc_kernels` (the module becomes a GPU container):
/// `Derived::build(gpuModule, variant, mask, config, kernelName)` with the
/// tiles of `Derived::tiles(spec)`.
template <typename Derived>
struct GpuBuildPass : ConfiguredPass<Derived> {
  GpuBuildPass() = default;
  GpuBuildPass(const GpuBuildPass &other) : ConfiguredPass<Derived>(other) {}
  void getDependentDialects(DialectRegistry &r) const override {
    r.insert<gpu::GPUDialect, memref::MemRefDialect, scf::SCFDialect,
             vector::VectorDialect, arith::ArithDialect, math::MathDialect,
             NVVM::NVVMDialect, nvgpu::NVGPUDialect, LLVM::LLVMDialect>();
  }
  void runOnOperation() override {
    FailureOr<rt::KernelSpec> s = this->spec();
    if (failed(s))
      return this->signalPassFailure();
    ModuleOp m = this->getOperation();
    OpBuilder b(m.getContext());
    m->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
    b.setInsertionPointToEnd(m.getBody());
    auto gm = gpu::GPUModuleOp::create(b, m.getLoc(), "attnc_kernels");
    FlashConfig config;
    config.spec = Derived::tiles(*s);
    for (auto v : llvm::to_vector(m.getOps<attn::VariantOp>()))
      if (failed(Derived::build(gm, v, analyzeMask(v), config,
                                gpuKernelName(v.getSymName(), config.spec))))
        return this->signalPassFailure();
  }
};

struct BuildGpuPass : GpuBuildPass<BuildGpuPass> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BuildGpuPass)
  BuildGpuPass() = default;
  BuildGpuPass(const BuildGpuPass &other) : GpuBuildPass(other) {}
  StringRef getArgument() const final { return "attn-build-gpu"; }
  StringRef getDescription() const final {
    return "Build the GPU program (tensor-core or SIMT form) of every "
           "attn.variant in gpu.module @attnc_kernels";
  }
  static rt::KernelSpec tiles(const rt::KernelSpec &s) {
    return gpuSpec(s, "sm_80");
  }
  static LogicalResult build(gpu::GPUModuleOp gm, attn::VariantOp v,
                             const MaskAnalysis &mask,
                             const FlashConfig &config, StringRef name) {
    return buildGpuFlashProgram(gm, v, mask, config, name);
  }
};

struct BuildGpuBackwardPass : GpuBuildPass<BuildGpuBackwardPass> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(BuildGpuBackwardPass)
  BuildGpuBackwardPass() = default;
  BuildGpuBackwardPass(const BuildGpuBackwardPass &other)
      : GpuBuildPass(other) {}
  StringRef getArgument() const final { return "attn-build-gpu-backward"; }
  StringRef getDescription() const final {
    return "Build the GPU backward program (<name>_bwd_q, <name>_bwd_kv) of "
           "every differentiated attn.variant in gpu.module @attnc_kernels";
  }
  static rt::KernelSpec tiles(const rt::KernelSpec &s) {
    return gpuBackwardSpec(s);
  }
  static LogicalResult build(gpu::GPUModuleOp gm, attn::VariantOp v,
                             const MaskAnalysis &mask,
                             const FlashConfig &config, StringRef name) {
    return buildGpuBackwardProgram(gm, v, mask, config, name);
  }
};

struct LowerToLLVMPass
    : PassWrapper<LowerToLLVMPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LowerToLLVMPass)
  StringRef getArgument() const final { return "attn-lower-to-llvm"; }
  StringRef getDescription() const final {
    return "Lower the tiled CPU program to the LLVM dialect";
  }
  void getDependentDialects(DialectRegistry &r) const override {
    r.insert<LLVM::LLVMDialect>();
  }
  void runOnOperation() override {
    if (failed(lowerToLLVMDialect(getOperation())))
      signalPassFailure();
  }
};

struct LowerToNVVMPass
    : PassWrapper<LowerToNVVMPass, OperationPass<ModuleOp>> {
  MLIR_DEFINE_EXPLICIT_INTERNAL_INLINE_TYPE_ID(LowerToNVVMPass)
  LowerToNVVMPass() = default;
  LowerToNVVMPass(const LowerToNVVMPass &other) : PassWrapper(other) {}
  Pass::Option<std::string> chip{*this, "chip",
                                 llvm::cl::desc("sm_80, sm_86, sm_89, sm_90"),
                                 llvm::cl::init("sm_80")};
  StringRef getArgument() const final { return "attn-lower-to-nvvm"; }
  StringRef getDescription() const final {
    return "Lower the GPU program to the NVVM dialect (drops the variants)";
  }
  void getDependentDialects(DialectRegistry &r) const override {
    r.insert<LLVM::LLVMDialect, NVVM::NVVMDialect>();
  }
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

void registerAttncPasses() {
  PassRegistration<MaskAnalysisPass>();
  PassRegistration<DifferentiatePass>();
  PassRegistration<BuildTiledPass>();
  PassRegistration<BuildBackwardPass>();
  PassRegistration<BuildGpuPass>();
  PassRegistration<BuildGpuBackwardPass>();
  PassRegistration<LowerToLLVMPass>();
  PassRegistration<LowerToNVVMPass>();
}

} // namespace attnc
