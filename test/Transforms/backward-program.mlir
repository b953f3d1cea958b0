// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="backward=1 head-dim=16 v-head-dim=16 block-m=16 block-n=16" -convert-flash-to-cpu -canonicalize | FileCheck %s
// The CPU backward program (CpuBackwardKernel.cpp). score_grad's
// accumulates go to the thread's gradient buffer (the last memref operand):
// - one whose element does not depend on the key (@bias: t[h]) is summed
//   per row in a stack slot (a reassociable add, for every key with the
//   masked ones adding 0: the key loop stays branch-free) and added to the
//   buffer once per row;
// - one that does not depend on the query (@col: t[kv]) is summed per
//   column of the tile and added once per tile;
// - the others (@rel: t[q - kv]) load-add-store the buffer per pair, only
//   for kept keys (an scf.if per key: a side effect).
// mask_mod runs only in the copy of the key loop for tiles that need it.
// Per Q tile (dQ), nothing accumulates and the per-key work is
// branch-free: masked keys are selected away.

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
// CHECK:         %[[ROW:.*]] = memref.alloca() : memref<1xf32>
// CHECK-NOT:     scf.if %{{.*}} -> (f32, f32)
// CHECK:         memref.store %{{.*}}, %[[ROW]][%{{.*}}] : memref<1xf32>
// CHECK:         scf.for
// CHECK:           math.exp
// CHECK:           %[[KEEP:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : f32
// CHECK:           %[[SUM:.*]] = memref.load %[[ROW]]
// CHECK-NEXT:      %[[NEXT:.*]] = arith.addf %[[SUM]], %[[KEEP]] fastmath<reassoc> : f32
// CHECK-NEXT:      memref.store %[[NEXT]], %[[ROW]]
// CHECK:         }
// CHECK-NEXT:    %[[TOTAL:.*]] = memref.load %[[ROW]]
// CHECK:         %[[OLD:.*]] = memref.load %[[GRADS]][%[[AT:.*]]] : memref<?xf32>
// CHECK-NEXT:    %[[NEW:.*]] = arith.addf %[[OLD]], %[[TOTAL]] : f32
// CHECK-NEXT:    memref.store %[[NEW]], %[[GRADS]][%[[AT]]] : memref<?xf32>
// Partial tiles: mask_mod per key, still no branch.
// CHECK:         } else {
// CHECK-NOT:     scf.if %{{.*}} -> (f32, f32)
// CHECK:         arith.cmpi sge, %{{.*}}, %{{.*}} : i32
// CHECK:         return

attn.variant @col(t: f32[KV]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @t[%kv] : f32
  %1 = arith.addf %s, %0 : f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// CHECK-LABEL: func.func @col_bwd_kv(
// CHECK-SAME:    %[[CGRADS:[^:]*]]: memref<?xf32>, %{{[^:]*}}: i64, %{{[^:]*}}: i64)
// CHECK-NOT:     scf.if %{{.*}} -> (f32, f32)
// CHECK:         %[[A:.*]] = arith.addf %{{.*}}, %{{.*}} fastmath<reassoc> : f32
// CHECK-NEXT:    memref.store %[[A]], %[[COLS:[a-z0-9_]*]][%{{.*}}] : memref<16xf32>
// The tile's columns, once each, into the buffer.
// CHECK:         scf.for %[[C:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           %[[CSUM:.*]] = memref.load %[[COLS]][%[[C]]]
// CHECK:           %[[COLD:.*]] = memref.load %[[CGRADS]][%[[CAT:.*]]] : memref<?xf32>
// CHECK-NEXT:      %[[CNEW:.*]] = arith.addf %[[COLD]], %[[CSUM]] : f32
// CHECK-NEXT:      memref.store %[[CNEW]], %[[CGRADS]][%[[CAT]]] : memref<?xf32>
// CHECK:         return

attn.variant @rel(t: f32[KV]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %d = arith.subi %q, %kv : i32
  %0 = attn.gather @t[%d] : f32
  %1 = arith.addf %s, %0 : f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// CHECK-LABEL: func.func @rel_bwd_kv(
// CHECK-SAME:    %[[RGRADS:[^:]*]]: memref<?xf32>, %{{[^:]*}}: i64, %{{[^:]*}}: i64)
// Full tiles: no mask_mod; the kept keys' work in a branch.
// CHECK:         scf.if %{{.*}} -> (f32, f32) {
// CHECK:           math.exp
// CHECK:           %[[ROLD:.*]] = memref.load %[[RGRADS]][%[[RAT:.*]]] : memref<?xf32>
// CHECK-NEXT:      %[[RNEW:.*]] = arith.addf %[[ROLD]], %{{.*}} : f32
// CHECK-NEXT:      memref.store %[[RNEW]], %[[RGRADS]][%[[RAT]]] : memref<?xf32>
// CHECK:         } else {
// Partial tiles: mask_mod per key.
// CHECK:         arith.cmpi sge, %{{.*}}, %{{.*}} : i32
// CHECK:         scf.if %{{.*}} -> (f32, f32) {
// CHECK:           memref.store %{{.*}}, %[[RGRADS]]
// CHECK:         return
