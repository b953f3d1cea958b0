//===- CpuBackend.cpp - Lowering and JIT for the host CPU ----------------===//
#include "attnc/Codegen/CpuBackend.h"
#include "attnc/Codegen/Canonicalize.h"
#include "attnc/Codegen/KernelForm.h"
#include "attnc/Codegen/MaskFacts.h"
#include "attnc/Codegen/VariantInfo.h"
#include "attnc/runtime/Backward.h"

#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/IndexToLLVM/IndexToLLVM.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/MemRefToLLVM/MemRefToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/Transforms/Approximation.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/ExecutionEngine/ExecutionEngine.h"
#include "mlir/ExecutionEngine/OptUtils.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Passes.h"

#include "llvm/ExecutionEngine/Orc/JITTargetMachineBuilder.h"
#include "llvm/IR/Module.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/TargetParser/Host.h"

using namespace mlir;

namespace attnc {

int64_t hostVectorWidth() {
  llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
  return features.lookup("avx512f") ? 16 : 8;
}

OwningOpRef<ModuleOp> buildTiledModule(attn::VariantOp variant,
                                       const FlashConfig &config,
                                       std::string &error) {
  OpBuilder b(variant.getContext());
  OwningOpRef<ModuleOp> m = ModuleOp::create(variant.getLoc());
  // Keep the variant next to its program so both read together in lit tests
  // and the tiled program can be re-verified. The analysis is of the copy:
  // its values are the ones the program is built from.
  b.setInsertionPointToEnd(m->getBody());
  auto copy = cast<attn::VariantOp>(b.clone(*variant));
  simplifyUnderMask(copy); // the kernels' copy only (MaskFacts.h)
  MaskAnalysis mask = analyzeMask(copy);
  FormChoice choice = formFor(config.spec, "cpu", Direction::Forward);
  if (!choice || failed(buildForwardProgram(*choice.form, *m, *m, copy, mask,
                                            choice.flashConfig(config),
                                            "kernel"))) {
    error = "cannot build the tiled program for variant '" +
            variant.getSymName().str() + "'";
    return nullptr;
  }
  PassManager pm(variant.getContext());
  pm.addPass(createCanonicalizer());
  pm.addPass(createCSEPass());
  if (failed(pm.run(*m))) {
    error = "internal error: the tiled program does not verify";
    return nullptr;
  }
  return m;
}

OwningOpRef<ModuleOp> buildBackwardTiledModule(attn::VariantOp variant,
                                               const FlashConfig &config,
                                               std::string &error) {
  if (!variant.getGradBlock() || variant.getGradBlock()->empty()) {
    error = "variant '" + variant.getSymName().str() +
            "' has no derivative of its score_mod: the backward cannot be built";
    return nullptr;
  }
  OpBuilder b(variant.getContext());
  OwningOpRef<ModuleOp> m = ModuleOp::create(variant.getLoc());
  b.setInsertionPointToEnd(m->getBody());
  auto copy = cast<attn::VariantOp>(b.clone(*variant));
  simplifyUnderMask(copy); // the kernels' copy only (MaskFacts.h)
  FormChoice choice = formFor(config.spec, "cpu", Direction::Backward);
  if (!choice || failed(buildBackwardProgram(*choice.form, *m, *m, copy,
                                             analyzeMask(copy),
                                             choice.flashConfig(config),
                                             "kernel"))) {
    error = "cannot build the backward program of '" +
            variant.getSymName().str() + "'";
    return nullptr;
  }
  if (failed(verify(*m))) {
    error = "the backward program of '" + variant.getSymName().str() +
            "' does not verify";
    return nullptr;
  }
  return m;
}

LogicalResult approximateMath(ModuleOp module, bool hardwareExp2Log2) {
  // exp/log/tanh (and, unless the target has them, exp2 via exp and log2)
  // as polynomials: no libm or libdevice calls, and the results vectorize.
  RewritePatternSet patterns(module.getContext());
  if (!hardwareExp2Log2)
    math::populateExpansionPatterns(patterns, {"exp2"});
  populateMathPolynomialApproximationPatterns(
      patterns, [hardwareExp2Log2](StringRef name) {
        name.consume_front("math.");
        return name == "exp" || name == "log" || name == "tanh" ||
               name == "expm1" || name == "log1p" || name == "sin" ||
               name == "cos" || name == "erf" ||
               (name == "log2" && !hardwareExp2Log2);
      });
  return applyPatternsGreedily(module, std::move(patterns));
}

LogicalResult lowerToLLVMDialect(ModuleOp module) {
  // The variant op has done its job once the program is built.
  for (auto v : llvm::make_early_inc_range(module.getOps<attn::VariantOp>()))
    v.erase();
  MLIRContext *ctx = module.getContext();
  if (failed(approximateMath(module)))
    return failure();
  // f32 <-> bf16 as integer arithmetic (round to nearest even): without
  // AVX512-BF16, LLVM would call __truncsfbf2, which the JIT cannot find in
  // a process built by GCC 12.
  RewritePatternSet bf16(ctx);
  arith::populateExpandBFloat16Patterns(bf16);
  if (failed(applyPatternsGreedily(module, std::move(bf16))))
    return failure();
  PassManager pm(ctx);
  pm.addPass(createCanonicalizer());
  pm.addPass(createCSEPass());
  pm.addPass(createSCFToControlFlowPass());
  pm.addPass(createConvertVectorToLLVMPass());
  pm.addPass(createFinalizeMemRefToLLVMConversionPass());
  pm.addPass(createConvertMathToLLVMPass());
  pm.addPass(createArithToLLVMConversionPass());
  pm.addPass(createConvertIndexToLLVMPass());
  pm.addPass(createConvertFuncToLLVMPass());
  pm.addPass(createConvertControlFlowToLLVMPass());
  pm.addPass(createReconcileUnrealizedCastsPass());
  return pm.run(module);
}

namespace {

void initNativeTarget() {
  static bool done = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    return true;
  }();
  (void)done;
}

std::unique_ptr<llvm::TargetMachine> hostTargetMachine(std::string &error) {
  initNativeTarget();
  auto jtmb = llvm::orc::JITTargetMachineBuilder::detectHost();
  if (!jtmb) {
    error = llvm::toString(jtmb.takeError());
    return nullptr;
  }
  jtmb->setCodeGenOptLevel(llvm::CodeGenOptLevel::Aggressive);
  auto tm = jtmb->createTargetMachine();
  if (!tm) {
    error = llvm::toString(tm.takeError());
    return nullptr;
  }
  return std::move(*tm);
}

void registerTranslations(MLIRContext *ctx) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  ctx->appendDialectRegistry(registry);
}

/// JIT-links an LLVM-dialect module for the host at -O3.
rt::Status jitModule(ModuleOp module, std::shared_ptr<ExecutionEngine> &out) {
  std::string error;
  registerTranslations(module.getContext());
  auto tm = hostTargetMachine(error);
  if (!tm)
    return rt::Status::internal("no host target machine: " + error);
  ExecutionEngineOptions opts;
  // opts.transformer is a function_ref: the function it refers to must
  // outlive ExecutionEngine::create.
  std::function<llvm::Error(llvm::Module *)> optimize =
      makeOptimizingTransformer(3, 0, tm.get());
  opts.transformer = optimize;
  opts.jitCodeGenOptLevel = llvm::CodeGenOptLevel::Aggressive;
  // ATTNC_PERF_JIT=1: tell `perf` about JIT'd code (perf record -k 1, then
  // perf inject --jit), as docs/performance.md describes.
  opts.enablePerfNotificationListener = std::getenv("ATTNC_PERF_JIT") != nullptr;
  auto engine = ExecutionEngine::create(module, opts, std::move(tm));
  if (!engine)
    return rt::Status::internal("JIT compilation failed: " +
                                llvm::toString(engine.takeError()));
  out = std::move(*engine);
  return rt::Status::ok();
}

/// Lowers a built program to LLVM and JIT-links it; `what` names it in
/// errors.
rt::Status lowerAndJit(ModuleOp module, const std::string &what,
                       std::shared_ptr<ExecutionEngine> &out) {
  if (failed(lowerToLLVMDialect(module)))
    return rt::Status::internal("lowering " + what + " to LLVM failed");
  return jitModule(module, out);
}

/// The packed entries of a JIT-linked module, by name; the block-mask
/// builder (`kernel_block_mask`) too for a data-dependent mask.
using EntrySlot = std::pair<StringRef, void (**)(void **)>;
rt::Status lookupEntries(ExecutionEngine &engine, SmallVector<EntrySlot> slots,
                         const MaskAnalysis &mask, void (**maskBuilder)(void **)) {
  if (mask.kind == rt::MaskKind::Data)
    slots.push_back({"kernel_block_mask", maskBuilder});
  for (auto [name, slot] : slots) {
    auto fn = engine.lookupPacked(name);
    if (!fn)
      return rt::Status::internal("JIT: " + llvm::toString(fn.takeError()));
    *slot = *fn;
  }
  return rt::Status::ok();
}

/// The kernel configuration checks every CPU compile makes, and the
/// variant's runtime program.
rt::Status checkCpuSpec(attn::VariantOp variant, const rt::KernelSpec &spec,
                        const MaskAnalysis &mask, rt::VariantInfo &info) {
  for (auto [d, what] : {std::pair{spec.headDim, "head dim (Dqk)"},
                         std::pair{spec.vHeadDim, "value head dim (Dv)"}})
    if (d <= 0 || d % 8 != 0 || d > 256)
      return rt::Status::invalidArgument(
          std::string(what) + " must be a multiple of 8 in [8, 256], got " +
          std::to_string(d));
  if (spec.blockM <= 0 || spec.blockN <= 0 || spec.blockN % 8 != 0)
    return rt::Status::invalidArgument(
        "tile sizes must be positive and blockN a multiple of 8, got " +
        std::to_string(spec.blockM) + "x" + std::to_string(spec.blockN));
  if (rt::Status s = rt::VariantInfo::parse(printVariantInfo(variant, mask), info);
      !s)
    return rt::Status::invalidArgument("variant '" +
                                       variant.getSymName().str() +
                                       "' cannot be run: " + s.message());
  return rt::Status::ok();
}

} // namespace

std::string emitHostLLVMIR(ModuleOp module, std::string &error) {
  registerTranslations(module.getContext());
  auto tm = hostTargetMachine(error);
  if (!tm)
    return "";
  llvm::LLVMContext llctx;
  auto llmod = translateModuleToLLVMIR(module, llctx);
  if (!llmod) {
    error = "cannot translate to LLVM IR";
    return "";
  }
  llmod->setDataLayout(tm->createDataLayout());
  llmod->setTargetTriple(tm->getTargetTriple());
  if (auto err = makeOptimizingTransformer(3, 0, tm.get())(llmod.get())) {
    error = llvm::toString(std::move(err));
    return "";
  }
  std::string s;
  llvm::raw_string_ostream os(s);
  llmod->print(os, nullptr);
  return s;
}

rt::Status compileForCpu(attn::VariantOp variant, const rt::KernelSpec &spec,
                         std::unique_ptr<rt::CpuKernel> &out) {
  MaskAnalysis mask = analyzeMask(variant);
  rt::VariantInfo info;
  if (rt::Status s = checkCpuSpec(variant, spec, mask, info); !s)
    return s;
  FlashConfig config;
  config.spec = spec;
  config.vectorWidth = spec.blockN % hostVectorWidth() == 0 ? hostVectorWidth() : 8;
  std::string error;
  auto module = buildTiledModule(variant, config, error);
  if (!module)
    return rt::Status::internal(error);
  std::shared_ptr<ExecutionEngine> owner;
  if (rt::Status s = lowerAndJit(*module, "the tiled program", owner); !s)
    return s;
  rt::CpuEntryPoints entry;
  if (rt::Status s = lookupEntries(
          *owner, {{"kernel", &entry.kernel}, {"kernel_merge", &entry.merge}},
          mask, &entry.maskBuilder);
      !s)
    return s;
  entry.owner = owner;
  out = std::make_unique<rt::CpuKernel>(std::move(info), spec, std::move(entry));
  return rt::Status::ok();
}

rt::Status compileBackwardForCpu(attn::VariantOp variant,
                                 const rt::KernelSpec &spec,
                                 std::unique_ptr<rt::CpuBackwardKernel> &out) {
  MaskAnalysis mask = analyzeMask(variant);
  rt::VariantInfo info;
  if (rt::Status s = checkCpuSpec(variant, spec, mask, info); !s)
    return s;
  if (!variant.getGradBlock())
    return rt::Status::internal("variant '" + variant.getSymName().str() +
                                "' has no score_grad region");
  FlashConfig config;
  config.spec = spec;
  config.vectorWidth = hostVectorWidth();
  std::string error;
  OwningOpRef<ModuleOp> module = buildBackwardTiledModule(variant, config, error);
  if (!module)
    return rt::Status::internal(error);
  std::shared_ptr<ExecutionEngine> owner;
  if (rt::Status s = lowerAndJit(*module, "the backward program", owner); !s)
    return s;
  rt::CpuBackwardEntryPoints entry;
  if (rt::Status s = lookupEntries(*owner,
                                   {{"kernel_bwd_kv", &entry.keyValue},
                                    {"kernel_bwd_q", &entry.query}},
                                   mask, &entry.maskBuilder);
      !s)
    return s;
  entry.owner = owner;
  out = std::make_unique<rt::CpuBackwardKernel>(std::move(info), spec,
                                                std::move(entry));
  return rt::Status::ok();
}

} // namespace attnc
