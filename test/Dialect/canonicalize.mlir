// RUN: attn-opt %s -canonicalize | FileCheck %s
// Canonicalization folds constant arithmetic through arith/math and drops
// `score + 0.0` inside modifiers (the sign of a zero score is unobservable
// after exp2), but not outside them.

// CHECK-LABEL: attn.variant @fold
// CHECK-NEXT: score_mod
// CHECK-NEXT:   attn.yield %score : f32
// CHECK-NEXT: } mask_mod
// CHECK-NEXT:   %[[C:.*]] = arith.constant 6 : i32
// CHECK-NEXT:   %[[R:.*]] = arith.cmpi slt, %q, %[[C]] : i32
// CHECK-NEXT:   attn.yield %[[R]] : i1
attn.variant @fold() score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %0 = arith.addf %score, %zero : f32
  %1 = arith.mulf %0, %one : f32
  %2 = arith.addf %zero, %1 : f32
  attn.yield %2 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %c2 = arith.constant 2 : i32
  %c3 = arith.constant 3 : i32
  %c6 = arith.muli %c2, %c3 : i32
  %lt = arith.cmpi slt, %q, %c6 : i32
  attn.yield %lt : i1
}

// Unused gathers and scalars are pure and disappear; a constant-true mask
// stays a constant.
// CHECK-LABEL: attn.variant @dead(t: f32[H], s: f32)
// CHECK-NEXT: score_mod
// CHECK-NOT:    attn.gather
// CHECK-NOT:    attn.scalar
// CHECK:        attn.yield %score : f32
attn.variant @dead(t: f32[H], s: f32) score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @t[%h] : f32
  %s = attn.scalar @s : f32
  attn.yield %score : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// Outside a variant, arith's IEEE rule stands: x + 0.0 is kept.
// CHECK-LABEL: func.func @outside
// CHECK: arith.addf
func.func @outside(%x: f32) -> f32 {
  %zero = arith.constant 0.0 : f32
  %0 = arith.addf %x, %zero : f32
  return %0 : f32
}
