// Each stage of `attnc compile` run alone by attn-opt, with the kernel
// configuration as pass options: the tiled CPU program, its LLVM lowering,
// the GPU program (tensor-core form for bf16, SIMT for f32) and its NVVM
// lowering. Bad options are errors.
// RUN: attn-opt %s -attn-build-tiled="head-dim=32 v-head-dim=32 block-m=16 block-n=32" -convert-flash-to-cpu | FileCheck %s --check-prefix=TILED
// RUN: attn-opt %s -attn-build-tiled -convert-flash-to-cpu -attn-lower-to-llvm | FileCheck %s --check-prefix=LLVM
// RUN: attn-opt %s -attn-build-tiled="target=sm_80 dtype=bf16 head-dim=128 v-head-dim=128" -convert-flash-to-mma-sync | FileCheck %s --check-prefix=GPU
// RUN: attn-opt %s -attn-build-tiled="target=sm_80" -convert-flash-to-simt | FileCheck %s --check-prefix=SIMT
// RUN: attn-opt %s -attn-build-tiled="target=sm_80 dtype=f16" -convert-flash-to-mma-sync -attn-lower-to-nvvm="chip=sm_90" | FileCheck %s --check-prefix=NVVM
// RUN: not attn-opt %s -attn-build-tiled="target=sm_80 dtype=f64" 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not attn-opt %s -attn-build-tiled="target=sm_80" -convert-flash-to-simt -attn-lower-to-nvvm="chip=sm_70" 2>&1 | FileCheck %s --check-prefix=CHIP

attn.variant @sliding_window(window: i32)
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %score : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  %1 = arith.subi %q, %kv : i32
  %window = attn.scalar @window : i32
  %2 = arith.cmpi slt, %1, %window : i32
  %3 = arith.andi %0, %2 : i1
  attn.yield %3 : i1
}

// TILED: attn.variant @sliding_window
// TILED: func.func @sliding_window_kernel(%{{.*}}: memref<?xf32>,
// TILED: memref.alloca() : memref<512xf32>
// TILED: arith.ceildivui %{{.*}}, %c32{{(_[0-9]+)?}} : index

// LLVM: llvm.func @sliding_window_kernel(
// LLVM-NOT: scf.for

// GPU: module attributes {gpu.container_module}
// GPU: gpu.module @attnc_kernels
// GPU: gpu.func @attnc_sliding_window_bf16_d128v128_m64n64w4s2(
// GPU: nvvm.mma.sync

// SIMT: gpu.func @attnc_sliding_window_f32_d64v64_m64n64w2s1(
// SIMT-NOT: nvvm.mma.sync
// SIMT: gpu.barrier

// NVVM: gpu.module @attnc_kernels [#nvvm.target<O = 3, chip = "sm_90", features = "+ptx80">]
// NVVM: llvm.func @attnc_sliding_window_f16_d64v64_m64n128w4s2(
// NVVM-SAME: nvvm.kernel
// NVVM-NOT: attn.variant

// BAD: error: dtype must be f32, f16 or bf16, got 'f64'
// CHIP: error: unknown chip 'sm_70'
