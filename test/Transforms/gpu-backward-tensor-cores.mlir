// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 backward=1 dtype=bf16 head-dim=16 v-head-dim=32" -convert-flash-to-mma-sync -canonicalize | FileCheck %s
// The GPU backward on tensor cores (TensorCoreBackwardKernel.cpp): bf16
// with head dims multiples of 16 gets 64-row tiles and 4 warps (128
// threads). Both kernels keep four bf16 tiles in one 16-byte-aligned
// workgroup buffer (2 x 64 x ((16 + 8) + (32 + 8)) = 8192 elements) plus
// LSE and delta per row. The first products (S, dP) take B by ldmatrix
// without .trans; the second (dQ, or dV and dK) by ldmatrix.trans, after
// the barrier that publishes the staged tiles. Only _bwd_kv adds into the
// parameters' gradients, atomically.

attn.variant @bias(t: f32[H], n: i32[KV]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @t[%h] : f32
  %1 = arith.addf %s, %0 : f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// CHECK-LABEL: gpu.func @attnc_bias_bf16_d16v32_m64n64w4s2_bwd_q(
// CHECK-SAME:    %[[Q:[^:]*]]: memref<?xbf16>,
// CHECK-SAME:    workgroup(%[[SM:[^ ]*]] : memref<8192xbf16, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[FS:[^ ]*]] : memref<128xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// Q and dO rows are staged once, with LSE and delta per row.
// CHECK:         memref.store %{{.*}}, %[[SM]]
// CHECK:         memref.store %{{.*}}, %[[FS]]
// CHECK:         gpu.barrier
// Per visited KV tile: stage K and V, then S and dP on the tensor cores.
// CHECK:         scf.for
// CHECK:         memref.store %{{.*}}, %[[SM]]
// CHECK:         gpu.barrier
// CHECK:         nvgpu.ldmatrix %[[SM]][%{{.*}}] {numTiles = 4 : i32, transpose = false}
// CHECK:         nvvm.mma.sync
// CHECK-SAME:    multiplicandAPtxType = #nvvm.mma_type<bf16>
// CHECK-SAME:    shape = #nvvm.shape<m = 16, n = 8, k = 16>
// dX = scale * score_grad(...), from P = exp(score - LSE).
// CHECK:         math.exp
// dQ += dX K: dX rounded to bf16 as A, K by ldmatrix.trans.
// CHECK:         arith.truncf %{{.*}} : f32 to bf16
// CHECK:         nvgpu.ldmatrix %[[SM]][%{{.*}}] {numTiles = 4 : i32, transpose = true}
// CHECK:         nvvm.mma.sync
// CHECK:         gpu.barrier
// CHECK-NOT:     memref.atomic_rmw
// CHECK:         gpu.return

// CHECK-LABEL: gpu.func @attnc_bias_bf16_d16v32_m64n64w4s2_bwd_kv(
// CHECK-SAME:    workgroup(%[[KSM:[^ ]*]] : memref<8192xbf16, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{[^ ]*}} : memref<128xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// K and V stay; per query head of the group and visited Q tile, Q and dO
// are staged between barriers.
// CHECK:         scf.for
// CHECK:         scf.for
// CHECK:         gpu.barrier
// CHECK:         memref.store %{{.*}}, %[[KSM]]
// CHECK:         gpu.barrier
// CHECK:         nvgpu.ldmatrix %[[KSM]][%{{.*}}] {numTiles = 4 : i32, transpose = false}
// CHECK:         nvvm.mma.sync
// The bias table's gradient: an atomic add per kept pair.
// CHECK:         scf.if
// CHECK:         math.exp
// CHECK:         memref.atomic_rmw addf %{{.*}} : (f32, memref<?xf32>) -> f32
// dV += P^T dO and dK += dX^T Q by ldmatrix.trans.
// CHECK:         nvgpu.ldmatrix %[[KSM]][%{{.*}}] {numTiles = 4 : i32, transpose = true}
// CHECK:         nvvm.mma.sync
// CHECK:         nvgpu.ldmatrix %[[KSM]][%{{.*}}] {numTiles = 4 : i32, transpose = true}
// CHECK:         nvvm.mma.sync
// CHECK:         gpu.return
