// RUN: attn-opt %s -attn-mask-facts | FileCheck %s
// -attn-mask-facts: where mask_mod keeps only scores with q >= kv (a
// conjunct `kv <= q`, `q >= kv` or `q > kv`), |q - kv| and |kv - q| in
// score_mod and score_grad become q - kv (a dropped score's value is never
// used); with kv >= q, kv - q. Without such a fact (no mask, a
// disjunction, both orders) nothing changes.

// CHECK-LABEL: attn.variant @causal_distance
// CHECK: score_mod
// CHECK-NEXT: %[[D:.*]] = arith.subi %q, %kv : i32
// CHECK-NOT: math.absi
// CHECK: arith.sitofp %[[D]] : i32 to f32
// CHECK: mask_mod
// CHECK: score_grad
// CHECK-NEXT: %[[G:.*]] = arith.subi %q, %kv : i32
// CHECK-NOT: math.absi
// CHECK: arith.sitofp %[[G]] : i32 to f32
attn.variant @causal_distance(barrier: f32)
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.subi %q, %kv : i32
  %1 = math.absi %0 : i32
  %barrier = attn.scalar @barrier : f32
  %2 = arith.sitofp %1 : i32 to f32
  %3 = arith.mulf %barrier, %2 : f32
  %4 = arith.subf %score, %3 : f32
  attn.yield %4 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sle, %kv, %q : i32
  attn.yield %0 : i1
} score_grad(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
  %0 = arith.subi %q, %kv : i32
  %1 = math.absi %0 : i32
  %2 = arith.sitofp %1 : i32 to f32
  %3 = arith.negf %dy : f32
  %4 = arith.mulf %3, %2 : f32
  attn.accumulate @barrier[], %4 : f32
  attn.yield %dy : f32
}

// |kv - q| under a document mask's conjunction with q > kv: q - kv, the
// gather's index too (the kernels clamp it for the dropped scores).
// CHECK-LABEL: attn.variant @doc_bucket
// CHECK: %[[B:.*]] = arith.subi %q, %kv : i32
// CHECK-NEXT: %{{.*}} = arith.minsi %[[B]], %c255_i32 : i32
// CHECK-NOT: math.absi
// CHECK: mask_mod
attn.variant @doc_bucket(t: f32[256], d: i32[B, KV])
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %c255_i32 = arith.constant 255 : i32
  %0 = arith.subi %kv, %q : i32
  %1 = math.absi %0 : i32
  %2 = arith.minsi %1, %c255_i32 : i32
  %3 = attn.gather @t[%2] : f32
  %4 = arith.addf %score, %3 : f32
  attn.yield %4 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @d[%b, %q] : i32
  %1 = attn.gather @d[%b, %kv] : i32
  %2 = arith.cmpi eq, %0, %1 : i32
  %3 = arith.cmpi sgt, %q, %kv : i32
  %4 = arith.andi %2, %3 : i1
  attn.yield %4 : i1
}

// kv >= q: |q - kv| is kv - q.
// CHECK-LABEL: attn.variant @anticausal
// CHECK: %[[A:.*]] = arith.subi %kv, %q : i32
// CHECK-NOT: math.absi
// CHECK: arith.sitofp %[[A]]
attn.variant @anticausal()
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.subi %q, %kv : i32
  %1 = math.absi %0 : i32
  %2 = arith.sitofp %1 : i32 to f32
  %3 = arith.subf %score, %2 : f32
  attn.yield %3 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %kv, %q : i32
  attn.yield %0 : i1
}

// A disjunction states no fact: q >= kv need not hold.
// CHECK-LABEL: attn.variant @either
// CHECK: math.absi
attn.variant @either()
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.subi %q, %kv : i32
  %1 = math.absi %0 : i32
  %2 = arith.sitofp %1 : i32 to f32
  %3 = arith.subf %score, %2 : f32
  attn.yield %3 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %c1_i32 = arith.constant 1 : i32
  %0 = arith.cmpi sle, %kv, %q : i32
  %1 = arith.andi %h, %c1_i32 : i32
  %2 = arith.cmpi eq, %1, %c1_i32 : i32
  %3 = arith.ori %0, %2 : i1
  attn.yield %3 : i1
}

// No mask: nothing is known.
// CHECK-LABEL: attn.variant @unmasked
// CHECK: math.absi
attn.variant @unmasked()
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.subi %q, %kv : i32
  %1 = math.absi %0 : i32
  %2 = arith.sitofp %1 : i32 to f32
  %3 = arith.subf %score, %2 : f32
  attn.yield %3 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %true = arith.constant true
  attn.yield %true : i1
}
