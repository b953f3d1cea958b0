// RUN: attn-opt %s | attn-opt | FileCheck %s
// Printing and re-parsing preserve every part of a variant.

// CHECK-LABEL: attn.variant @all_param_kinds(a: f32[B, H, Q], b16: bf16[H], h16: f16[KV], i: i32[B, KV], l: i64[H, 256], m: i1[KV], s: f32, n: i32)
attn.variant @all_param_kinds(a: f32[B, H, Q], b16: bf16[H], h16: f16[KV], i: i32[B, KV], l: i64[H, 256], m: i1[KV], s: f32, n: i32)
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // CHECK: attn.gather @a[%b, %h, %q] : f32
  %0 = attn.gather @a[%b, %h, %q] : f32
  // CHECK: attn.gather @b16[%h] : f32
  %1 = attn.gather @b16[%h] : f32
  // CHECK: attn.gather @l[%h, %kv] : i32
  %2 = attn.gather @l[%h, %kv] : i32
  // CHECK: %s = attn.scalar @s : f32
  %s = attn.scalar @s : f32
  %3 = arith.addf %0, %1 : f32
  %4 = arith.sitofp %2 : i32 to f32
  %5 = arith.addf %3, %4 : f32
  %6 = arith.mulf %5, %s : f32
  %7 = arith.addf %score, %6 : f32
  // CHECK: attn.yield %{{.*}} : f32
  attn.yield %7 : f32
// CHECK: } mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  // CHECK: attn.gather @m[%kv] : i1
  %0 = attn.gather @m[%kv] : i1
  // CHECK: %n = attn.scalar @n : i32
  %n = attn.scalar @n : i32
  %1 = arith.cmpi slt, %q, %n : i32
  %2 = arith.andi %0, %1 : i1
  attn.yield %2 : i1
}

// A variant with no parameters and identity modifiers.
// CHECK-LABEL: attn.variant @identity()
// CHECK-NEXT: score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
// CHECK-NEXT:   attn.yield %score : f32
// CHECK-NEXT: } mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
// CHECK-NEXT:   %true = arith.constant true
// CHECK-NEXT:   attn.yield %true : i1
// CHECK-NEXT: }
attn.variant @identity() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// Problem sizes and free dimensions.
// CHECK-LABEL: attn.variant @sizes(t: f32[N])
attn.variant @sizes(t: f32[N])
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // CHECK: %N = attn.size "N" : i32
  %n = attn.size "N" : i32
  // CHECK: %HKV = attn.size "HKV" : i32
  %hkv = attn.size "HKV" : i32
  %0 = arith.addi %n, %hkv : i32
  %1 = arith.sitofp %0 : i32 to f32
  %2 = arith.addf %score, %1 : f32
  attn.yield %2 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  // CHECK: %KV = attn.size "KV" : i32
  %kvn = attn.size "KV" : i32
  %0 = arith.cmpi slt, %kv, %kvn : i32
  attn.yield %0 : i1
}

// Sums: a body over an i32 index, reading enclosing values; nested.
// CHECK-LABEL: attn.variant @sums(t: f32[B, KV, R])
attn.variant @sums(t: f32[B, KV, R])
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %r = attn.size "R" : i32
  // CHECK: %[[S:.*]] = attn.sum %R : f32 {
  // CHECK-NEXT: ^bb0(%[[I:.*]]: i32):
  // CHECK-NEXT: attn.gather @t[%b, %kv, %[[I]]] : f32
  // CHECK: attn.yield %{{.*}} : f32
  %s = attn.sum %r : f32 {
  ^bb0(%i: i32):
    %x = attn.gather @t[%b, %kv, %i] : f32
    attn.yield %x : f32
  }
  %0 = arith.addf %score, %s : f32
  attn.yield %0 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  // CHECK: attn.sum %{{.*}} : i32 {
  // CHECK: attn.sum %{{.*}} : i32 {
  %c4 = arith.constant 4 : i32
  %n = attn.sum %c4 : i32 {
  ^bb0(%i: i32):
    %m = attn.sum %i : i32 {
    ^bb0(%j: i32):
      attn.yield %j : i32
    }
    attn.yield %m : i32
  }
  %0 = arith.cmpi slt, %n, %q : i32
  attn.yield %0 : i1
}

// A variant with its score_grad region (as -attn-differentiate builds it).
// CHECK-LABEL: attn.variant @with_grad(t: f32[H], c: f32)
// CHECK:       } score_grad(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
// CHECK-NEXT:    attn.accumulate @t[%h], %dy : f32
// CHECK-NEXT:    %[[G:.*]] = arith.mulf %dy, %score : f32
// CHECK-NEXT:    attn.accumulate @c[], %[[G]] : f32
// CHECK-NEXT:    attn.yield %dy : f32
attn.variant @with_grad(t: f32[H], c: f32) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @t[%h] : f32
  %1 = arith.addf %s, %0 : f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
} score_grad(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
  attn.accumulate @t[%h], %dy : f32
  %g = arith.mulf %dy, %s : f32
  attn.accumulate @c[], %g : f32
  attn.yield %dy : f32
}
