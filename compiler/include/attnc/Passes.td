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
    "Build the tiled flash program (CPU form) of every attn.variant"> {
  let description = [{
    Adds `func.func @<variant>_kernel` (and `_merge`, and `_block_mask` for
    data-dependent masks) for every variant: the CPU form of the flash
    program over work items.
  }];
  let options = !listconcat(KernelConfigOptions, [
    Option<"vectorWidth", "vector-width", "int64_t", /*default=*/"8",
           "f32 lanes (8 or 16)">,
  ]);
  let dependentDialects = ["mlir::func::FuncDialect",
                           "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::vector::VectorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

def AttnBuildBackward : KernelConfigPass<"attn-build-backward",
    "Build the CPU backward program of every differentiated attn.variant"> {
  let description = [{
    Adds `func.func @<variant>_bwd_kv` and `@<variant>_bwd_q` (and
    `_block_mask` for data-dependent masks) for every variant that has a
    score_grad region.
  }];
  let options = !listconcat(KernelConfigOptions, [
    Option<"vectorWidth", "vector-width", "int64_t", /*default=*/"8",
           "f32 lanes (8 or 16)">,
  ]);
  let dependentDialects = ["mlir::func::FuncDialect",
                           "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::vector::VectorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect"];
}

def AttnBuildGpu : KernelConfigPass<"attn-build-gpu",
    "Build the GPU program of every attn.variant in gpu.module @attnc_kernels"> {
  let description = [{
    The tensor-core or SIMT form (the configuration table's tiles for
    sm_80 when the request is the defaults), with its split-KV merge and,
    for data-dependent masks, its block-mask builder.
  }];
  let dependentDialects = ["mlir::gpu::GPUDialect",
                           "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::vector::VectorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect",
                           "mlir::NVVM::NVVMDialect",
                           "mlir::nvgpu::NVGPUDialect",
                           "mlir::LLVM::LLVMDialect"];
}

def AttnBuildGpuBackward : KernelConfigPass<"attn-build-gpu-backward",
    "Build the GPU backward program of every differentiated attn.variant"> {
  let description = [{
    `gpu.func <name>_bwd_q` and `<name>_bwd_kv` in gpu.module
    @attnc_kernels: the tensor-core form for f16/bf16 head dims that are
    multiples of 16, else the SIMT form.
  }];
  let dependentDialects = ["mlir::gpu::GPUDialect",
                           "mlir::memref::MemRefDialect",
                           "mlir::scf::SCFDialect",
                           "mlir::vector::VectorDialect",
                           "mlir::arith::ArithDialect",
                           "mlir::math::MathDialect",
                           "mlir::NVVM::NVVMDialect",
                           "mlir::nvgpu::NVGPUDialect",
                           "mlir::LLVM::LLVMDialect"];
}

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
           "sm_80, sm_86, sm_89 or sm_90">,
  ];
  let dependentDialects = ["mlir::LLVM::LLVMDialect", "mlir::NVVM::NVVMDialect"];
}

#endif // ATTNC_PASSES_TD
