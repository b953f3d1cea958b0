//===- Passes.h - The compiler's stages as mlir passes ----------*- C++ -*-===//
//
// Every stage `attnc compile --emit=...` runs is also a pass that attn-opt
// can run alone on a file, so each lowering step can be inspected and
// tested in isolation:
//
//   -attn-mask-analysis   annotate each attn.variant with its mask's kind
//                         and closed form (attn.mask_kind, attn.mask)
//   -attn-differentiate   build each attn.variant's score_grad region:
//                         score_mod's reverse-mode derivative
//   -attn-build-tiled     the tiled flash program (CPU form) of every
//                         variant, as func.func @<variant>_kernel
//   -attn-build-backward  the CPU backward program of every differentiated
//                         variant: func.func @<variant>_bwd_kv, _bwd_q
//   -attn-build-gpu       the GPU program (tensor-core or SIMT form) of
//                         every variant in gpu.module @attnc_kernels
//   -attn-build-gpu-backward
//                         the GPU backward program (SIMT) of every
//                         differentiated variant: gpu.func <name>_bwd_q,
//                         <name>_bwd_kv
//   -attn-lower-to-llvm   the CPU program to the LLVM dialect
//   -attn-lower-to-nvvm   the GPU program to the NVVM dialect (chip=sm_XX)
//
// The build passes take the kernel configuration as options: dtype,
// head-dim, v-head-dim, block-m, block-n (and vector-width for the CPU).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_PASSES_H
#define ATTNC_CODEGEN_PASSES_H

namespace attnc {

/// Registers the passes above (for attn-opt).
void registerAttncPasses();

} // namespace attnc

#endif
