// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 backward=1 head-dim=16 v-head-dim=16" -convert-flash-to-simt -canonicalize | FileCheck %s
// The GPU backward program (GpuBackwardKernel.cpp), SIMT form with 32 x 32
// tiles: _bwd_q stages K and V rows in shared memory between barriers and
// accumulates nothing into the parameters' gradients; _bwd_kv stages Q, dO,
// LSE and delta rows, and score_grad's accumulate is an atomic add into the
// gradient buffer (shared by every block), only for kept keys.

attn.variant @bias(t: f32[H], n: i32[KV]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @t[%h] : f32
  %1 = arith.addf %s, %0 : f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// The forward's operands (q, k, v, dO, lse, ip, fp, block mask, the captures
// t and n), then fwdO, dLse, delta, dq, dk, dv, the gradient buffer and the
// first item.
// CHECK-LABEL: gpu.func @attnc_bias_f32_d16v16_m32n32w1s1_bwd_q(
// CHECK-SAME:    %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %[[DELTA:[^:]*]]: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %[[QGRADS:[^:]*]]: memref<?xf32>, %{{[^:]*}}: i64)
// CHECK-SAME:    workgroup(%[[KS:[^ ]*]] : memref<512xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %[[VS:[^ ]*]] : memref<512xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// The row's delta is stored for _bwd_kv.
// CHECK:         memref.store %{{.*}}, %[[DELTA]]
// CHECK:         memref.store %{{.*}}, %[[KS]]
// CHECK:         memref.store %{{.*}}, %[[VS]]
// CHECK:         gpu.barrier
// CHECK:         llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK:         gpu.barrier
// CHECK-NOT:     memref.atomic_rmw
// CHECK:         gpu.return

// CHECK-LABEL: gpu.func @attnc_bias_f32_d16v16_m32n32w1s1_bwd_kv(
// CHECK-SAME:    %[[GRADS:[^:]*]]: memref<?xf32>, %{{[^:]*}}: i64)
// CHECK-SAME:    workgroup(%{{[^ ]*}} : memref<512xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{[^ ]*}} : memref<512xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{[^ ]*}} : memref<32xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}, %{{[^ ]*}} : memref<32xf32, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// CHECK:         gpu.barrier
// CHECK:         scf.if
// CHECK:           llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK:           memref.atomic_rmw addf %{{.*}}, %[[GRADS]][%{{.*}}] : (f32, memref<?xf32>) -> f32
// CHECK:         gpu.barrier
// CHECK:         gpu.return
