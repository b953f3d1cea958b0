//===- Passes.td - The compiler's stages as passes ---------*- tablegen -*-===//
//
// Every stage `attnc compile --emit=...` runs is also a pass that attn-opt
// runs alone on a file, so that each step is inspected and tested in
// isolation (one lit file per pass under test/).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_PASSES_TD
#define ATTNC_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// attn level
//===----------------------------------------------------------------------===//

def AttnMaskAnalysis : Pass<"attn-mask-analysis", "mlir::ModuleOp"> {
  let summary = "Annotate each attn.variant with its mask's kind and closed form";
  let description = [{
    Runs the mask analysis (compiler/lib/Analysis) on every `attn.variant`
    and records its result as `attn.mask_kind` ("none", "closed" or
    "data") and `attn.mask` (the closed form, printed).
  }];
}

def AttnBalanceLogic : Pass<"attn-balance-logic", "mlir::ModuleOp"> {
  let summary = "Rebuild chains of integer and/or as balanced trees";
  let description = [{
    `a && b && c && ...` parses into a left-deep chain whose depth is its
    length; LLVM's InstCombine spends time quadratic in that depth on it
    (per score element). Every unbalanced tree of `arith.andi` (or of
    `arith.ori`) whose inner ops have one use becomes a balanced tree over
    the same leaves, in order: the same value, depth log2 n.
  }];
}

def AttnMaskFacts : Pass<"attn-mask-facts", "mlir::ModuleOp"> {
  let summary = "Simplify score_mod and score_grad by what every kept score's positions satisfy";
  let description = [{
    Where mask_mod is a conjunction with `q >= kv` (or `q > kv`), every
    score the softmax keeps has q >= kv: `abs(q - kv)` and `abs(kv - q)`
    in score_mod and score_grad become `q - kv` (and symmetrically for
    `kv >= q`). A dropped score's value is never used. The backends run it
    on their copy of a variant; the runtime's modifier program keeps the
    variant as written.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect"];
}

def AttnDifferentiate : Pass<"attn-differentiate", "mlir::ModuleOp"> {
  let summary = "Build each attn.variant's score_grad region";
  let description = [{
    score_mod's reverse-mode derivative with respect to the score and the
    float parameters (`attn.accumulate` into their gradients), the region
    the backward kernels evaluate per (query, key) pair.
  }];
  let dependentDialects = ["mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

//===----------------------------------------------------------------------===//
// Kernel building (the configuration of the kernel as options)
//===----------------------------------------------------------------------===//

defvar KernelConfigOptions = [
  Option<"dtype", "dtype", "std::string", /*default=*/"\"f32\"",
         "Q, K, V and O: f32, f16 or bf16">,
  Option<"headDim", "head-dim", "int64_t", /*default=*/"64", "Dqk">,
  Option<"vHeadDim", "v-head-dim", "int64_t", /*default=*/"64", "Dv">,
  Option<"blockM", "block-m", "int64_t", /*default=*/"64",
         "query rows per tile">,
  Option<"blockN", "block-n", "int64_t", /*default=*/"64", "keys per tile">,
];

class KernelConfigPass<string arg, string summaryText> : Pass<arg, "mlir::ModuleOp"> {
  let summary = summaryText;
  let options = KernelConfigOptions;
}

def AttnBuildTiled : KernelConfigPass<"attn-build-tiled",
    "Build the tiled flash program (flash dialect) of every attn.variant"> {
  let description = [{
    Adds, for every variant, the flash.kernel ops of its forward program
    (`<name>`) or, with `backward`, of its backward program (`<name>_bwd_q`,
    `<name>_bwd_kv`; the variant needs its score_grad region): the
    algorithm over tiles (compiler/lib/Tiled), for the kernel form the
    request gets on `target` (KernelForm.h: formFor). CPU kernels are named
    `<variant>_kernel` (backward: `<variant>_bwd_q`, ...), GPU kernels after
    their configuration. A `-convert-flash-to-<form>` pass lowers them.
  }];
  let options = !listconcat(KernelConfigOptions, [
    Option<"target", "target", "std::string", /*default=*/"\"cpu\"",
           "cpu, sm_80, sm_86, sm_89 or sm_90">,
    Option<"backward", "backward", "bool", /*default=*/"false",
           "the backward's kernels">,
    Option<"warps", "warps", "int64_t", /*default=*/"0",
           "warps per block (0: the form's table)">,
    Option<"form", "form", "std::string", /*default=*/"\"\"",
           "the kernel form asked for (default: the registry's choice)">,
    Option<"vectorWidth", "vector-width", "int64_t", /*default=*/"8",
           "f32 lanes (8 or 16; the CPU)">,
    Option<"dropout", "dropout", "bool", /*default=*/"false",
           "kernels that apply attention dropout (flash.dropout)">,
    Option<"keyOffsets", "key-offsets", "bool", /*default=*/"false",
           "kernels that read each sequence's first key position "
           "(flash.kernel's key_offsets)">,
  ]);
  let dependentDialects = ["mlir::flash::FlashDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

class ConvertFlashPass<string formName, string summaryText, list<string> dialects>
    : Pass<"convert-flash-to-" # formName, "mlir::ModuleOp"> {
  let summary = summaryText;
  let description = [{
    Lowers every flash.kernel of the form to target code, with what goes
    beside it: a forward kernel's split-KV merge (`<name>_merge`) and, for
    a data-dependent mask, the block-mask builder (`<name>_block_mask`,
    with the forward kernel or the backward's `_bwd_q`). GPU forms put
    them in `gpu.module @attnc_kernels` (the module becomes a GPU
    container).
  }];
  let dependentDialects = dialects;
}

defvar CpuDialects = ["mlir::func::FuncDialect", "mlir::memref::MemRefDialect",
                      "mlir::scf::SCFDialect", "mlir::vector::VectorDialect",
                      "mlir::arith::ArithDialect", "mlir::math::MathDialect"];
defvar GpuDialects = ["mlir::gpu::GPUDialect", "mlir::memref::MemRefDialect",
                      "mlir::scf::SCFDialect", "mlir::vector::VectorDialect",
                      "mlir::arith::ArithDialect", "mlir::math::MathDialect",
                      "mlir::NVVM::NVVMDialect", "mlir::nvgpu::NVGPUDialect",
                      "mlir::LLVM::LLVMDialect"];

def ConvertFlashToCpu : ConvertFlashPass<"cpu",
    "Lower flash kernels of the CPU forms to funcs over work items", CpuDialects>;
def ConvertFlashToSimt : ConvertFlashPass<"simt",
    "Lower flash kernels of the SIMT forms to gpu.funcs (a thread per row)",
    GpuDialects>;
def ConvertFlashToMmaSync : ConvertFlashPass<"mma-sync",
    "Lower flash kernels of the mma.sync forms to gpu.funcs on tensor cores",
    GpuDialects>;
def ConvertFlashToWgmma : ConvertFlashPass<"wgmma",
    "Lower flash kernels of the sm_90a wgmma form to gpu.funcs (warpgroup MMA)",
    GpuDialects>;

//===----------------------------------------------------------------------===//
// Lowering
//===----------------------------------------------------------------------===//

def AttnLowerToLLVM : Pass<"attn-lower-to-llvm", "mlir::ModuleOp"> {
  let summary = "Lower the CPU program to the LLVM dialect";
  let description = [{
    Drops the variants, approximates exp/log/tanh by polynomials, expands
    bf16 conversions and converts scf/vector/memref/math/arith/func to the
    LLVM dialect.
  }];
  let dependentDialects = ["mlir::LLVM::LLVMDialect"];
}

def AttnLowerToNVVM : Pass<"attn-lower-to-nvvm", "mlir::ModuleOp"> {
  let summary = "Lower the GPU program to the NVVM dialect (drops the variants)";
  let options = [
    Option<"chip", "chip", "std::string", /*default=*/"\"sm_80\"",
           "sm_80, sm_86, sm_89, sm_90 or sm_90a">,
  ];
  let dependentDialects = ["mlir::LLVM::LLVMDialect", "mlir::NVVM::NVVMDialect"];
}

#endif // ATTNC_PASSES_TD
