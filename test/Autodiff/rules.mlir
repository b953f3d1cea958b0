// RUN: attn-opt %s -attn-differentiate | FileCheck %s
// The reverse-mode rules of -attn-differentiate, one variant per family.
// (Finite-difference checks of every example: test/unit/BackwardTests.cpp.)

// Identity: the gradient into score is dy, nothing accumulates.
// CHECK-LABEL: attn.variant @identity()
// CHECK:       score_grad(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
// CHECK-NEXT:    attn.yield %dy : f32
attn.variant @identity() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// A constant score: no gradient into score.
// CHECK-LABEL: attn.variant @constant()
// CHECK:       score_grad(
// CHECK-NEXT:    %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    attn.yield %[[Z]] : f32
attn.variant @constant() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %c = arith.constant 2.0 : f32
  attn.yield %c : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// Products and quotients: d(s * t / c) = dy * t / c into s; the scalar c
// gets -dy * r / c; the gathered t gets dy * s / c.
// CHECK-LABEL: attn.variant @product(t: f32[H], c: f32)
// CHECK:       score_grad(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
// CHECK-DAG:     %[[T:.*]] = attn.gather @t[%h] : f32
// CHECK-DAG:     %[[C:.*]] = attn.scalar @c : f32
// CHECK:         %[[P:.*]] = arith.mulf %score, %[[T]] : f32
// CHECK:         %[[R:.*]] = arith.divf %[[P]], %[[C]] : f32
// CHECK:         %[[DP:.*]] = arith.divf %dy, %[[C]] : f32
// CHECK:         %[[DYR:.*]] = arith.mulf %dy, %[[R]] : f32
// CHECK:         %[[Q:.*]] = arith.divf %[[DYR]], %[[C]] : f32
// CHECK:         %[[DC:.*]] = arith.negf %[[Q]] : f32
// CHECK:         %[[DS:.*]] = arith.mulf %[[DP]], %[[T]] : f32
// CHECK:         %[[DT:.*]] = arith.mulf %[[DP]], %score : f32
// CHECK:         attn.accumulate @c[], %[[DC]] : f32
// CHECK:         attn.accumulate @t[%h], %[[DT]] : f32
// CHECK:         attn.yield %[[DS]] : f32
attn.variant @product(t: f32[H], c: f32) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = attn.gather @t[%h] : f32
  %c = attn.scalar @c : f32
  %p = arith.mulf %s, %t : f32
  %r = arith.divf %p, %c : f32
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// A factor the sweep multiplies in and then divides out cancels
// (withoutFactor): d(c * exp(s / c)) into s is dy * e (not (dy * c) * e /
// c), into c dy * e - (dy * e) * x; no division in the derivative.
// CHECK-LABEL: attn.variant @scaled_exp(c: f32)
// CHECK:       score_grad(
// CHECK-DAG:     %[[C:.*]] = attn.scalar @c : f32
// CHECK:         %[[X:.*]] = arith.divf %score, %[[C]] : f32
// CHECK-NEXT:    %[[E:.*]] = math.exp %[[X]] : f32
// CHECK-NEXT:    %[[DYE:.*]] = arith.mulf %dy, %[[E]] : f32
// CHECK-NEXT:    %[[DS:.*]] = arith.mulf %dy, %[[E]] : f32
// CHECK-NEXT:    %[[A:.*]] = arith.mulf %[[DS]], %[[X]] : f32
// CHECK-NEXT:    %[[NA:.*]] = arith.negf %[[A]] : f32
// CHECK-NEXT:    %[[DC:.*]] = arith.addf %[[DYE]], %[[NA]] : f32
// CHECK-NEXT:    attn.accumulate @c[], %[[DC]] : f32
// CHECK-NEXT:    attn.yield %[[DS]] : f32
// CHECK-NEXT:  }
attn.variant @scaled_exp(c: f32) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %c = attn.scalar @c : f32
  %x = arith.divf %s, %c : f32
  %e = math.exp %x : f32
  %r = arith.mulf %c, %e : f32
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// A value used twice: its adjoints add. d(s*s + exp(s)) = dy*s + dy*s + dy*e^s.
// CHECK-LABEL: attn.variant @fanout()
// CHECK:       score_grad(
// CHECK:         %[[E:.*]] = math.exp %score : f32
// CHECK:         %[[A:.*]] = arith.mulf %dy, %[[E]] : f32
// CHECK:         %[[B:.*]] = arith.mulf %dy, %score : f32
// CHECK:         %[[AB:.*]] = arith.addf %[[A]], %[[B]] : f32
// CHECK:         %[[B2:.*]] = arith.mulf %dy, %score : f32
// CHECK:         %[[ABB:.*]] = arith.addf %[[AB]], %[[B2]] : f32
// CHECK:         attn.yield %[[ABB]] : f32
attn.variant @fanout() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %sq = arith.mulf %s, %s : f32
  %e = math.exp %s : f32
  %r = arith.addf %sq, %e : f32
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// Choices route the gradient: select, maximumf (the first operand on a tie)
// and absf (the sign; 0 at 0).
// CHECK-LABEL: attn.variant @choices()
// CHECK:       score_grad(
// CHECK:         arith.cmpf olt, %score
// CHECK:         arith.cmpf ogt, %score
// CHECK:         arith.cmpf oge, %score
// CHECK:         arith.select
// CHECK:         attn.yield
attn.variant @choices() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %z = arith.constant 0.5 : f32
  %m = arith.maximumf %s, %z : f32
  %a = math.absf %s : f32
  %r = arith.addf %m, %a : f32
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// Integer paths carry no gradient: floor and an integer round trip stop it.
// CHECK-LABEL: attn.variant @stops()
// CHECK:       score_grad(
// CHECK-NEXT:    %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    attn.yield %[[Z]] : f32
attn.variant @stops() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %f = math.floor %s : f32
  %i = arith.fptosi %s : f32 to i32
  %g = arith.sitofp %i : i32 to f32
  %r = arith.addf %f, %g : f32
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// A sum over gathered rows (a low-rank bias, q_r[q] . k_r[kv], times s):
// the adjoint of s is a sum of the terms times dy; the first adjoint sum
// also accumulates into both tables.
// CHECK-LABEL: attn.variant @lowrank(qr: f32[Q, R], kr: f32[KV, R])
// CHECK:       score_grad(
// CHECK:         %[[N:.*]] = attn.size "R" : i32
// CHECK:         %[[F:.*]] = attn.sum %[[N]] : f32 {
// CHECK:         %[[D:.*]] = arith.mulf %dy, %[[F]] : f32
// CHECK:         %[[G:.*]] = arith.mulf %dy, %score : f32
// CHECK:         %[[ADJ:.*]] = attn.sum %[[N]] : f32 {
// CHECK-NEXT:    ^bb0(%[[I:.*]]: i32):
// CHECK-DAG:       %[[A:.*]] = attn.gather @qr[%q, %[[I]]] : f32
// CHECK-DAG:       %[[B:.*]] = attn.gather @kr[%kv, %[[I]]] : f32
// CHECK-DAG:       attn.accumulate @qr[%q, %[[I]]],
// CHECK-DAG:       attn.accumulate @kr[%kv, %[[I]]],
// CHECK:           attn.yield
// CHECK:         attn.yield %[[D]] : f32
attn.variant @lowrank(qr: f32[Q, R], kr: f32[KV, R]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %n = attn.size "R" : i32
  %f = attn.sum %n : f32 {
  ^bb0(%i: i32):
    %a = attn.gather @qr[%q, %i] : f32
    %c = attn.gather @kr[%kv, %i] : f32
    %t = arith.mulf %a, %c : f32
    attn.yield %t : f32
  }
  %r = arith.mulf %s, %f : f32
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// The log of a product or quotient read by the log alone differentiates as
// log a +- log b: each operand's adjoint is dy times its own reciprocal
// (negated for the divisor), no product or quotient by a b.
// CHECK-LABEL: attn.variant @log_separates(x: f32[Q], y: f32[KV])
// CHECK:       score_grad(
// CHECK-DAG:     %[[X:.*]] = attn.gather @x[%q] : f32
// CHECK-DAG:     %[[Y:.*]] = attn.gather @y[%kv] : f32
// CHECK-NOT:     arith.mulf %[[X]], %[[Y]]
// CHECK-NOT:     arith.divf %[[X]], %[[Y]]
// CHECK:         %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK:         %[[RX:.*]] = arith.divf %[[ONE]], %[[X]] : f32
// CHECK:         %[[DX:.*]] = arith.mulf %dy, %[[RX]] : f32
// CHECK:         %[[ONE2:.*]] = arith.constant 1.000000e+00 : f32
// CHECK:         %[[RY:.*]] = arith.divf %[[ONE2]], %[[Y]] : f32
// CHECK:         %[[DYY:.*]] = arith.mulf %dy, %[[RY]] : f32
// CHECK:         %[[NDY:.*]] = arith.negf %[[DYY]] : f32
// CHECK-DAG:     attn.accumulate @x[%q], %[[DX]] : f32
// CHECK-DAG:     attn.accumulate @y[%kv], %[[NDY]] : f32
// CHECK:         attn.yield %dy : f32
attn.variant @log_separates(x: f32[Q], y: f32[KV]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %x = attn.gather @x[%q] : f32
  %y = attn.gather @y[%kv] : f32
  %p = arith.divf %x, %y : f32
  %l = math.log %p : f32
  %r = arith.addf %s, %l : f32
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// A product with a second use keeps the chain rule through it: its adjoint
// (dy / p from the log, plus dy from the sum) times the other factor.
// CHECK-LABEL: attn.variant @log_shared(x: f32[Q], y: f32[KV])
// CHECK:       score_grad(
// CHECK:         %[[P:.*]] = arith.mulf %[[X:.*]], %[[Y:.*]] : f32
// CHECK:         arith.divf %dy, %[[P]] : f32
// CHECK:         attn.yield %dy : f32
attn.variant @log_shared(x: f32[Q], y: f32[KV]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %x = attn.gather @x[%q] : f32
  %y = attn.gather @y[%kv] : f32
  %p = arith.mulf %x, %y : f32
  %l = math.log %p : f32
  %r = arith.addf %s, %l : f32
  %r2 = arith.addf %r, %p : f32
  attn.yield %r2 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}
