//===- GpuBackend.cpp - gpu -> NVVM -> PTX through LLVM's NVPTX backend --===//
//
// No CUDA toolkit is needed: the NVVM target's serialization runs LLVM's
// NVPTX backend in-process (format=isa yields PTX text). Math goes to the
// hardware's approximations (exp, log, tanh: SpecialFunctions.cpp) or to
// polynomials before the GPU lowering, so no libdevice call is emitted.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/GpuBackend.h"
#include "GridDependency.h"
#include "SpecialFunctions.h"
#include "attnc/Codegen/Canonicalize.h"
#include "attnc/Codegen/CpuBackend.h"
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/MaskFacts.h"

#include "TensorCoreForward.h"
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVM.h"
#include "mlir/Conversion/GPUToNVVM/GPUToNVVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/NVVMToLLVM/NVVMToLLVM.h"
#include "mlir/Conversion/Passes.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/UBToLLVM/UBToLLVM.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVM.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/Passes.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/GPU/GPUToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/NVVM/NVVMToLLVMIRTranslation.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/CommandLine.h"
#include <fmt/format.h>

#include <algorithm>

extern "C" {
void LLVMInitializeNVPTXTargetInfo();
void LLVMInitializeNVPTXTarget();
void LLVMInitializeNVPTXTargetMC();
void LLVMInitializeNVPTXAsmPrinter();
}

using namespace mlir;

namespace attnc {

namespace {
/// A module holding a copy of the variant and `gpu.module @attnc_kernels`,
/// filled by `build` (given the copy and its mask analysis), canonicalized.
OwningOpRef<ModuleOp> buildGpuModuleWith(
    attn::VariantOp variant, std::string &error,
    function_ref<LogicalResult(gpu::GPUModuleOp, attn::VariantOp,
                               const MaskAnalysis &)>
        build) {
  MLIRContext *ctx = variant.getContext();
  ctx->loadDialect<gpu::GPUDialect, NVVM::NVVMDialect>();
  OpBuilder b(ctx);
  OwningOpRef<ModuleOp> m = ModuleOp::create(variant.getLoc());
  (*m)->setAttr(gpu::GPUDialect::getContainerModuleAttrName(), b.getUnitAttr());
  b.setInsertionPointToEnd(m->getBody());
  // The analysis is of the copy: its values are the ones the program is
  // built from.
  auto copy = cast<attn::VariantOp>(b.clone(*variant));
  simplifyUnderMask(copy); // the kernels' copy only (MaskFacts.h)
  MaskAnalysis mask = analyzeMask(copy);
  auto gm = gpu::GPUModuleOp::create(b, variant.getLoc(), "attnc_kernels");
  if (failed(build(gm, copy, mask))) {
    error = "cannot build the GPU program for variant '" +
            variant.getSymName().str() + "'";
    return nullptr;
  }
  PassManager pm(ctx);
  pm.addPass(createCanonicalizer());
  pm.addPass(createCSEPass());
  if (failed(pm.run(*m))) {
    error = "internal error: the GPU program does not verify";
    return nullptr;
  }
  return m;
}

/// The module of the form a request gets on `target` (in `direction`).
OwningOpRef<ModuleOp> buildGpuModuleOf(attn::VariantOp variant,
                                       const FlashConfig &config,
                                       const std::string &target,
                                       Direction direction,
                                       std::string &error) {
  FormChoice choice = formFor(config.spec, target, direction);
  if (!choice) {
    error = "no GPU kernel form takes the configuration" +
            (config.spec.form.empty() ? std::string()
                                      : " (form '" + config.spec.form + "')") +
            (config.spec.stages ? " with " + std::to_string(config.spec.stages) +
                                      " stages"
                                : std::string());
    return nullptr;
  }
  FlashConfig cfg = choice.flashConfig(config);
  std::string name = kernelName(variant.getSymName(), *choice.form, cfg.spec);
  return buildGpuModuleWith(
      variant, error,
      [&](gpu::GPUModuleOp gm, attn::VariantOp v, const MaskAnalysis &mask) {
        ModuleOp parent = gm->getParentOfType<ModuleOp>();
        return direction == Direction::Forward
                   ? buildForwardProgram(*choice.form, gm, parent, v, mask,
                                         cfg, name)
                   : buildBackwardProgram(*choice.form, gm, parent, v, mask,
                                          cfg, name);
      });
}

} // namespace

OwningOpRef<ModuleOp> buildGpuModule(attn::VariantOp variant,
                                     const FlashConfig &config,
                                     const std::string &target,
                                     std::string &error) {
  return buildGpuModuleOf(variant, config, target, Direction::Forward, error);
}

OwningOpRef<ModuleOp> buildGpuBackwardModule(attn::VariantOp variant,
                                             const FlashConfig &config,
                                             const std::string &target,
                                             std::string &error) {
  return buildGpuModuleOf(variant, config, target, Direction::Backward, error);
}

namespace {
/// math ops -> calls of LLVM/NVPTX intrinsics, which the NVPTX backend
/// lowers to single instructions (ex2.approx, lg2.approx, abs, cvt.rmi,
/// fma.rn, sqrt.rn): convert-gpu-to-nvvm would otherwise call libdevice.
struct MathToIntrinsic : RewritePattern {
  MathToIntrinsic(MLIRContext *ctx)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, ctx) {}
  LogicalResult matchAndRewrite(Operation *op,
                                PatternRewriter &rewriter) const override {
    Location loc = op->getLoc();
    // |x| for i32 (wrapping at INT_MIN, as arith does): two patterns of
    // convert-gpu-to-nvvm compete for math.absi, one a libdevice call.
    if (auto absi = dyn_cast<math::AbsIOp>(op)) {
      Value x = absi.getOperand();
      Value zero = arith::ConstantOp::create(rewriter, loc,
                                             rewriter.getZeroAttr(x.getType()));
      Value neg = arith::SubIOp::create(rewriter, loc, zero, x);
      Value isNeg = arith::CmpIOp::create(rewriter, loc,
                                          arith::CmpIPredicate::slt, x, zero);
      rewriter.replaceOpWithNewOp<arith::SelectOp>(op, isNeg, neg, x);
      return success();
    }
    // x % y = x - trunc(x / y) * y (frem would become a libdevice call).
    if (auto rem = dyn_cast<arith::RemFOp>(op)) {
      if (!rem.getType().isF32())
        return failure();
      Value q = arith::DivFOp::create(rewriter, loc, rem.getLhs(), rem.getRhs());
      Value t = LLVM::CallIntrinsicOp::create(
                    rewriter, loc, rewriter.getF32Type(),
                    rewriter.getStringAttr("llvm.trunc.f32"), ValueRange{q})
                    .getResult(0);
      Value prod = arith::MulFOp::create(rewriter, loc, t, rem.getRhs());
      rewriter.replaceOpWithNewOp<arith::SubFOp>(op, rem.getLhs(), prod);
      return success();
    }
    if (op->getNumResults() != 1 || !op->getResult(0).getType().isF32())
      return failure();
    const char *name = llvm::StringSwitch<const char *>(
                           op->getName().getStringRef())
                           .Case("math.exp2", "llvm.nvvm.ex2.approx.f32")
                           .Case("math.log2", "llvm.nvvm.lg2.approx.f")
                           .Case("math.absf", "llvm.fabs.f32")
                           .Case("math.floor", "llvm.floor.f32")
                           .Case("math.ceil", "llvm.ceil.f32")
                           .Case("math.fma", "llvm.fma.f32")
                           .Case("math.sqrt", "llvm.sqrt.f32")
                           .Default(nullptr);
    if (op->getName().getStringRef() == "math.rsqrt") {
      Value sq = LLVM::CallIntrinsicOp::create(
                     rewriter, op->getLoc(), rewriter.getF32Type(),
                     rewriter.getStringAttr("llvm.sqrt.f32"), op->getOperands())
                     .getResult(0);
      Value one = arith::ConstantOp::create(rewriter, op->getLoc(),
                                            rewriter.getF32FloatAttr(1.0f));
      rewriter.replaceOpWithNewOp<arith::DivFOp>(op, one, sq);
      return success();
    }
    if (!name)
      return failure();
    auto call = LLVM::CallIntrinsicOp::create(
        rewriter, op->getLoc(), rewriter.getF32Type(),
        rewriter.getStringAttr(name), op->getOperands());
    rewriter.replaceOp(op, call.getResults());
    return success();
  }
};
} // namespace

LogicalResult lowerToNVVM(ModuleOp module, const std::string &chip) {
  MLIRContext *ctx = module.getContext();
  DialectRegistry registry;
  NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  // convert-gpu-to-nvvm converts the other dialects through their
  // ConvertToLLVMPatternInterface: register those it meets.
  arith::registerConvertArithToLLVMInterface(registry);
  cf::registerConvertControlFlowToLLVMInterface(registry);
  registerConvertMemRefToLLVMInterface(registry);
  registerConvertMathToLLVMInterface(registry);
  index::registerConvertIndexToLLVMInterface(registry);
  ub::registerConvertUBToLLVMInterface(registry);
  registerConvertFuncToLLVMInterface(registry);
  registerConvertNVVMToLLVMInterface(registry);
  vector::registerConvertVectorToLLVMInterface(registry);
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  registerGPUDialectTranslation(registry);
  registerNVVMDialectTranslation(registry);
  ctx->appendDialectRegistry(registry);
  // exp2 and log2 go to the hardware (ex2/lg2.approx), and exp, log and
  // tanh through it (SpecialFunctions.cpp); the rest (erf, sin, ...) become
  // polynomials; what those leave (fabs, floor, fma) and sqrt become
  // intrinsics.
  for (auto v : llvm::make_early_inc_range(module.getOps<attn::VariantOp>()))
    v.erase();
  {
    if (failed(lowerSpecialFunctions(module)) ||
        failed(approximateMath(module, /*hardwareExp2Log2=*/true)))
      return failure();
    RewritePatternSet intrinsics(ctx);
    intrinsics.add<MathToIntrinsic>(ctx);
    if (failed(applyPatternsGreedily(module, std::move(intrinsics))))
      return failure();
  }
  // The split-KV merge as a programmatic dependent of its kernel (sm_90+).
  addGridDependencyControl(module, chip);
  // Kernels whose last parameters are tensor maps: the GPU-to-NVVM lowering
  // keeps their alignment but drops the rest, re-added below.
  llvm::StringSet<> mapKernels;
  module.walk([&](gpu::GPUFuncOp f) {
    if (f->hasAttr(kKvTensorMapsAttr))
      mapKernels.insert(f.getName());
  });
  PassManager pm(ctx);
  GpuNVVMAttachTargetOptions target;
  target.chip = chip;
  target.features = "+ptx80";
  target.optLevel = 3;
  pm.addPass(createGpuNVVMAttachTarget(target));
  OpPassManager &gpuPm = pm.nest<gpu::GPUModuleOp>();
  gpuPm.addPass(createConvertNVGPUToNVVMPass());
  gpuPm.addPass(createSCFToControlFlowPass());
  gpuPm.addPass(createConvertGpuOpsToNVVMOps());
  gpuPm.addPass(createCanonicalizer());
  gpuPm.addPass(createReconcileUnrealizedCastsPass());
  if (failed(pm.run(module)))
    return failure();
  // gpu.dynamic_shared_memory becomes a zero-sized shared global with
  // internal linkage, which the NVPTX backend demotes to a 1-byte static
  // variable; dynamic shared memory is an `.extern .shared` array.
  // A tensor map is a 128-byte parameter passed by value that the TMA unit
  // reads in place: byval, and a grid constant (its address is the
  // parameter's, not a local copy's).
  module.walk([&](LLVM::LLVMFuncOp f) {
    if (!mapKernels.contains(f.getName()))
      return;
    unsigned n = f.getNumArguments();
    auto bytes = LLVM::LLVMArrayType::get(IntegerType::get(ctx, 8), 128);
    for (unsigned a : {n - 3, n - 2}) {
      f.setArgAttr(a, LLVM::LLVMDialect::getByValAttrName(), TypeAttr::get(bytes));
      f.setArgAttr(a, NVVM::NVVMDialect::getGridConstantAttrName(),
                   UnitAttr::get(ctx));
    }
  });
  module.walk([](LLVM::GlobalOp g) {
    auto arr = dyn_cast<LLVM::LLVMArrayType>(g.getGlobalType());
    if (g.getAddrSpace() == 3 && arr && arr.getNumElements() == 0)
      g.setLinkage(LLVM::Linkage::External);
  });
  return success();
}

std::string emitPTX(ModuleOp module, std::string &error) {
  static bool init = [] {
    LLVMInitializeNVPTXTargetInfo();
    LLVMInitializeNVPTXTarget();
    LLVMInitializeNVPTXTargetMC();
    LLVMInitializeNVPTXAsmPrinter();
    // 32-bit shared-memory pointers (the data layout's p3:32): shared
    // addresses and the index arithmetic feeding them in one register
    // instead of two. The option is the NVPTX backend's, process-wide.
    auto &opts = llvm::cl::getRegisteredOptions();
    if (auto it = opts.find("nvptx-short-ptr"); it != opts.end())
      it->second->addOccurrence(0, "nvptx-short-ptr", "true");
    return true;
  }();
  (void)init;
  PassManager pm(module.getContext());
  GpuModuleToBinaryPassOptions opts;
  opts.compilationTarget = "isa";
  pm.addPass(createGpuModuleToBinaryPass(opts));
  if (failed(pm.run(module))) {
    error = "PTX generation failed";
    return "";
  }
  std::string ptx;
  module.walk([&](gpu::BinaryOp bin) {
    for (Attribute a : bin.getObjects())
      if (auto obj = dyn_cast<gpu::ObjectAttr>(a))
        ptx += obj.getObject().getValue().str();
  });
  if (ptx.empty())
    error = "no PTX was produced";
  return ptx;
}

rt::Status compileForGpu(attn::VariantOp variant, const rt::KernelSpec &spec,
                         const std::string &target, rt::GpuKernelImage &out) {
  if (!isGpuTarget(target))
    return rt::Status::invalidArgument("unknown GPU target '" + target +
                                       "' (expected sm_80, sm_86, sm_89, sm_90 "
                                       "or sm_90a)");
  FormChoice choice = formFor(spec, target, Direction::Forward);
  if (!choice)
    return rt::Status::invalidArgument(fmt::format(
        "no GPU kernel form takes the configuration ({} D={}:{} on {}{})",
        rt::dtypeName(spec.dtype), spec.headDim, spec.vHeadDim, target,
        spec.form.empty() ? "" : ", form '" + spec.form + "'"));
  FlashConfig config;
  config.spec = spec;
  std::string error;
  OwningOpRef<ModuleOp> m = buildGpuModule(variant, config, target, error);
  if (!m)
    return rt::Status::internal(error);
  if (failed(lowerToNVVM(*m, target)))
    return rt::Status::internal("lowering variant '" +
                                variant.getSymName().str() +
                                "' to NVVM failed");
  out = rt::GpuKernelImage();
  out.ptx = emitPTX(*m, error);
  if (out.ptx.empty())
    return rt::Status::internal(error);
  out.target = target;
  out.spec = choice.spec;
  KernelEntry entry = choice.form->entries(out.spec, variant).at(0);
  out.threads = entry.launch.threads;
  out.sharedBytes = entry.launch.staticSharedBytes;
  out.dynamicSharedBytes = entry.launch.dynamicSharedBytes;
  out.persistent = entry.launch.persistent;
  out.kernel = kernelName(variant.getSymName(), *choice.form, out.spec);
  out.tileWork = entry.work;
  if (rt::Status s = rt::ptxEntryParams(out.ptx, out.kernel, out.kernelParams);
      !s)
    return rt::Status::internal(s.message());
  out.merge = out.kernel + "_merge";
  if (rt::Status s = rt::ptxEntryParams(out.ptx, out.merge, out.mergeParams);
      !s)
    return rt::Status::internal(s.message());
  // (GridDependency.h: sm_90 and later)
  out.mergeGridDependency =
      rt::ptxEntryHas(out.ptx, out.merge, "griddepcontrol.wait");
  if (analyzeMask(variant).kind == rt::MaskKind::Data) {
    out.maskBuilder = out.kernel + "_block_mask";
    if (rt::Status s = rt::ptxEntryParams(out.ptx, out.maskBuilder,
                                          out.maskBuilderParams);
        !s)
      return rt::Status::internal(s.message());
  }
  return rt::Status::ok();
}

rt::Status compileBackwardForGpu(attn::VariantOp variant,
                                 const rt::KernelSpec &spec,
                                 const std::string &target,
                                 rt::GpuBackwardImage &out) {
  if (!isGpuTarget(target))
    return rt::Status::invalidArgument("unknown GPU target '" + target +
                                       "' (expected sm_80, sm_86, sm_89, sm_90 "
                                       "or sm_90a)");
  if (!variant.getGradBlock() || variant.getGradBlock()->empty())
    return rt::Status::invalidArgument(
        "variant '" + variant.getSymName().str() +
        "' has no derivative of its score_mod: the backward cannot be built");
  FormChoice choice = formFor(spec, target, Direction::Backward);
  if (!choice)
    return rt::Status::invalidArgument("no GPU backward form takes the "
                                       "configuration");
  FlashConfig config;
  config.spec = spec;
  std::string error;
  OwningOpRef<ModuleOp> m =
      buildGpuBackwardModule(variant, config, target, error);
  if (!m)
    return rt::Status::internal(error);
  if (failed(lowerToNVVM(*m, target)))
    return rt::Status::internal("lowering the backward of variant '" +
                                variant.getSymName().str() +
                                "' to NVVM failed");
  out = rt::GpuBackwardImage();
  out.ptx = emitPTX(*m, error);
  if (out.ptx.empty())
    return rt::Status::internal(error);
  out.target = target;
  out.spec = choice.spec;
  std::string name = kernelName(variant.getSymName(), *choice.form, out.spec);
  std::vector<KernelEntry> entries = choice.form->entries(out.spec, variant);
  const KernelEntry &q = entries.at(0), &kv = entries.at(1);
  out.query = name + q.suffix;
  out.keyValue = name + kv.suffix;
  out.queryThreads = q.launch.threads;
  out.keyValueThreads = kv.launch.threads;
  out.querySharedBytes = q.launch.staticSharedBytes;
  out.keyValueSharedBytes = kv.launch.staticSharedBytes;
  out.queryDynamicSharedBytes = q.launch.dynamicSharedBytes;
  out.keyValueDynamicSharedBytes = kv.launch.dynamicSharedBytes;
  out.queryTileWork = q.work;
  out.keyValueTileWork = kv.work;
  auto params = [&](const std::string &entry, std::vector<int> &sizes) {
    return rt::ptxEntryParams(out.ptx, entry, sizes);
  };
  if (rt::Status s = params(out.query, out.queryParams); !s)
    return rt::Status::internal(s.message());
  if (rt::Status s = params(out.keyValue, out.keyValueParams); !s)
    return rt::Status::internal(s.message());
  if (analyzeMask(variant).kind == rt::MaskKind::Data) {
    out.maskBuilder = name + "_block_mask";
    if (rt::Status s = params(out.maskBuilder, out.maskBuilderParams); !s)
      return rt::Status::internal(s.message());
  }
  return rt::Status::ok();
}

} // namespace attnc
