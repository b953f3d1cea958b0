// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="backward=1 head-dim=16 v-head-dim=16 block-m=16 block-n=16" -convert-flash-to-cpu -canonicalize | FileCheck %s
// The CPU backward program (CpuBackwardKernel.cpp): per KV tile, score_grad's
// accumulate becomes a load-add-store into the thread's gradient buffer
// (the last memref operand), only for kept keys (an scf.if per key, as
// accumulates are side effects); mask_mod runs only in the copy of the key
// loop for tiles that need it. Per Q tile (dQ), nothing accumulates and the
// per-key work is branch-free: masked keys are selected away.

attn.variant @bias(t: f32[H], n: i32[KV]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @t[%h] : f32
  %1 = arith.addf %s, %0 : f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// CHECK-LABEL: func.func @bias_bwd_q(
// CHECK-SAME:    %[[QGRADS:[^:]*]]: memref<?xf32>, %{{[^:]*}}: i64, %{{[^:]*}}: i64)
// CHECK-NOT:     scf.if %{{.*}} -> (f32, f32)
// CHECK:         math.exp
// CHECK:         arith.select
// CHECK-NOT:     memref.store %{{.*}}, %[[QGRADS]]
// CHECK:         return

// The forward's operands (q, k, v, dO, lse, ip, fp, block mask, the captures
// t and n), then delta, dq, dk, dv, the gradient buffer and the item range.
// CHECK-LABEL: func.func @bias_bwd_kv(
// CHECK-SAME:    %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xi32>, %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %{{[^:]*}}: memref<?xf32>, %[[GRADS:[^:]*]]: memref<?xf32>, %{{[^:]*}}: i64, %{{[^:]*}}: i64)
// Full tiles: no mask_mod; the kept keys' work in a branch.
// CHECK:         scf.if %{{.*}} -> (f32, f32) {
// CHECK:           math.exp
// CHECK:           %[[OLD:.*]] = memref.load %[[GRADS]][%[[AT:.*]]] : memref<?xf32>
// CHECK-NEXT:      %[[NEW:.*]] = arith.addf %[[OLD]], %{{.*}} : f32
// CHECK-NEXT:      memref.store %[[NEW]], %[[GRADS]][%[[AT]]] : memref<?xf32>
// CHECK:         } else {
// Partial tiles: mask_mod per key.
// CHECK:         arith.cmpi sge, %{{.*}}, %{{.*}} : i32
// CHECK:         scf.if %{{.*}} -> (f32, f32) {
// CHECK:           memref.store %{{.*}}, %[[GRADS]]
