// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 backward=1 dtype=bf16 head-dim=16 v-head-dim=32" -convert-flash-to-mma-sync -canonicalize -cse | FileCheck %s
// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 backward=1 dtype=bf16 head-dim=16 v-head-dim=32" -convert-flash-to-mma-sync -canonicalize -cse | FileCheck %s --check-prefix=GRAD
// The tensor-core _bwd_kv computes score_mod's and score_grad's diagonal
// values (of (b, h) and kv - q alone: here f32(kv - q)) once per distinct
// kv - q of the thread's elements, from key g's kv - q at the tile's
// column 2 tig plus a constant: 18 distinct of the 32 elements (16 keys x
// 64 queries over 32 lanes) of a 64-row Q tile, before each 16-column
// chunk's two versions, which both use them (and CSE shares score_mod's
// with score_grad's). _bwd_q computes them so in its exact version (18
// distinct of its 32 elements, one FMA for each but the base's), and per
// element in its flagged one (32).

attn.variant @alibi(slope: f32[H]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @slope[%h] : f32
  %1 = arith.subi %kv, %q : i32
  %2 = arith.sitofp %1 : i32 to f32
  %3 = arith.mulf %0, %2 : f32
  %4 = arith.addf %s, %3 : f32
  attn.yield %4 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// CHECK-LABEL: gpu.func @attnc_alibi_bf16_d16v32_m64n64w4s2_bwd_q(
// CHECK:          %[[QD0:.*]] = arith.sitofp %{{.*}} : i32 to f32
// CHECK:          %[[QSLOPE:.*]] = llvm.load {{.*}} : !llvm.ptr<1> -> f32
// CHECK-NEXT:     %[[QB0:.*]] = arith.mulf %[[QSLOPE]], %[[QD0]] fastmath<reassoc,nsz,contract> : f32
// CHECK-NOT:      arith.sitofp
// CHECK-COUNT-17: math.fma %[[QSLOPE]], %{{.*}}, %[[QB0]] : f32
// CHECK-NOT:      math.fma %[[QSLOPE]], %{{.*}}, %[[QB0]] : f32
// CHECK-COUNT-32: arith.sitofp
// CHECK-NOT:      arith.sitofp
// CHECK-LABEL: gpu.func @attnc_alibi_bf16_d16v32_m64n64w4s2_bwd_kv(
// The base: key g's kv - q at the Q tile's column 2 tig, converted once
// per tile (bf16: gpu-diagonal-floats.test); score_mod's slope[h] f32(kv - q)
// is slope[h] times it, then one fma per other diagonal, score_grad's
// f32(kv - q) one add (17 other diagonals).
// CHECK:          %[[BASE:.*]] = arith.subi %{{.*}}, %{{.*}} : i32
// CHECK:          %[[D0:.*]] = arith.sitofp %[[BASE]] : i32 to f32
// CHECK:          %[[SLOPE:.*]] = llvm.load {{.*}} : !llvm.ptr<1> -> f32
// CHECK-NEXT:     %[[B0:.*]] = arith.mulf %[[SLOPE]], %[[D0]] fastmath<reassoc,nsz,contract> : f32
// CHECK-NOT:      arith.sitofp
// CHECK-COUNT-17: math.fma %[[SLOPE]], %{{.*}}, %[[B0]] : f32
// CHECK-NOT:      arith.sitofp
// CHECK:          gpu.return

// GRAD-LABEL: gpu.func @attnc_alibi_bf16_d16v32_m64n64w4s2_bwd_kv(
// GRAD:          %[[D0:.*]] = arith.sitofp %{{.*}} : i32 to f32
// GRAD-COUNT-17: arith.addf %[[D0]], %{{.*}} : f32
// GRAD-NOT:      arith.sitofp
// GRAD:          gpu.return
