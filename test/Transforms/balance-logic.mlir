// -attn-balance-logic: a left-deep chain of and/or (a && b && c && ...,
// or one `let` per term) becomes a balanced tree over the same leaves in
// order (depth log2 n: LLVM's implication queries cost the square of the
// depth, per score element). An inner value used elsewhere stays a leaf;
// a tree already balanced is left alone.
// RUN: attn-opt %s -attn-balance-logic | FileCheck %s
// RUN: attn-opt %s -attn-balance-logic -attn-balance-logic | FileCheck %s

// CHECK-LABEL: attn.variant @chain
// CHECK: %[[A:.*]] = arith.cmpi sle, %kv, %q : i32
// CHECK: %[[B:.*]] = arith.cmpi ne, %kv, %c3_i32 : i32
// CHECK: %[[C:.*]] = arith.cmpi ne, %kv, %c5_i32 : i32
// CHECK: %[[D:.*]] = arith.cmpi ne, %q, %c7_i32 : i32
// CHECK: %[[E:.*]] = arith.cmpi ne, %q, %c9_i32 : i32
// CHECK-NEXT: %[[AB:.*]] = arith.andi %[[A]], %[[B]] : i1
// CHECK-NEXT: %[[DE:.*]] = arith.andi %[[D]], %[[E]] : i1
// CHECK-NEXT: %[[CDE:.*]] = arith.andi %[[C]], %[[DE]] : i1
// CHECK-NEXT: %[[ALL:.*]] = arith.andi %[[AB]], %[[CDE]] : i1
// CHECK-NEXT: attn.yield %[[ALL]] : i1
attn.variant @chain()
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %score : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sle, %kv, %q : i32
  %c3_i32 = arith.constant 3 : i32
  %1 = arith.cmpi ne, %kv, %c3_i32 : i32
  %c5_i32 = arith.constant 5 : i32
  %2 = arith.cmpi ne, %kv, %c5_i32 : i32
  %c7_i32 = arith.constant 7 : i32
  %3 = arith.cmpi ne, %q, %c7_i32 : i32
  %c9_i32 = arith.constant 9 : i32
  %4 = arith.cmpi ne, %q, %c9_i32 : i32
  %5 = arith.andi %0, %1 : i1
  %6 = arith.andi %5, %2 : i1
  %7 = arith.andi %6, %3 : i1
  %8 = arith.andi %7, %4 : i1
  attn.yield %8 : i1
}

// An `or` chain in score_mod's select; `%shared` is also used by the
// select, so it stays a leaf and the chain above it is a tree of its own.
// CHECK-LABEL: attn.variant @or_chain
// CHECK: %[[SHARED:.*]] = arith.ori %{{.*}}, %{{.*}} : i1
// CHECK: %[[L:.*]] = arith.ori %[[SHARED]], %[[X2:.*]] : i1
// CHECK: %[[R:.*]] = arith.ori %[[X3:.*]], %[[X4:.*]] : i1
// CHECK: %[[TOP:.*]] = arith.ori %[[L]], %[[R]] : i1
// CHECK: arith.andi %[[TOP]], %[[SHARED]] : i1
attn.variant @or_chain()
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %c1 = arith.constant 1 : i32
  %c2 = arith.constant 2 : i32
  %c3 = arith.constant 3 : i32
  %c4 = arith.constant 4 : i32
  %x0 = arith.cmpi eq, %kv, %c1 : i32
  %x1 = arith.cmpi eq, %kv, %c2 : i32
  %x2 = arith.cmpi eq, %kv, %c3 : i32
  %x3 = arith.cmpi eq, %kv, %c4 : i32
  %x4 = arith.cmpi eq, %q, %c4 : i32
  %shared = arith.ori %x0, %x1 : i1
  %o1 = arith.ori %shared, %x2 : i1
  %o2 = arith.ori %o1, %x3 : i1
  %o3 = arith.ori %o2, %x4 : i1
  %both = arith.andi %o3, %shared : i1
  %zero = arith.constant 0.0 : f32
  %r = arith.select %both, %score, %zero : f32
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// Three terms are as balanced as they get: unchanged.
// CHECK-LABEL: attn.variant @three
// CHECK: %[[P:.*]] = arith.andi %{{.*}}, %{{.*}} : i1
// CHECK-NEXT: arith.andi %[[P]], %{{.*}} : i1
attn.variant @three()
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %score : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %c1 = arith.constant 1 : i32
  %0 = arith.cmpi sle, %kv, %q : i32
  %1 = arith.cmpi ne, %kv, %c1 : i32
  %2 = arith.cmpi ne, %q, %c1 : i32
  %3 = arith.andi %0, %1 : i1
  %4 = arith.andi %3, %2 : i1
  attn.yield %4 : i1
}
