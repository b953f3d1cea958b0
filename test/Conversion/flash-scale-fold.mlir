// The scale in the exponents, lowered: -convert-flash-to-mma-sync takes
// flash.score_scale as max(|scale|, the smallest normal float) (a zero
// scale keeps a masked -inf from becoming NaN) and signs Q's fragments
// once per item, a sign-bit xor of every bf16 pair where the scale is
// negative. A form that does not take the scale in its exponents refuses
// such a kernel by name.
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 head-dim=128 v-head-dim=128" | attn-opt -convert-flash-to-mma-sync | FileCheck %s
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 head-dim=128 v-head-dim=128" | sed -e 's/form "mma-sync"/form "simt"/' | not attn-opt -convert-flash-to-simt 2>&1 | FileCheck %s --check-prefix=REFUSED

attn.variant @causal() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// CHECK-LABEL: gpu.func @attnc_causal_bf16_d128v128_m64n64w4s2
// CHECK: %[[TINY:.*]] = arith.constant 1.17549435E-38 : f32
// CHECK: %[[ABS:.*]] = math.absf %[[SCALE:.*]] : f32
// CHECK: arith.maximumf %[[ABS]], %[[TINY]] : f32
// CHECK: %[[NEG:.*]] = arith.cmpf olt, %[[SCALE]], %{{.*}} : f32
// CHECK: %[[SIGN:.*]] = arith.constant -2147450880 : i32
// CHECK: %[[MASK:.*]] = arith.select %[[NEG]], %[[SIGN]], %{{.*}} : i32
// Q: 16 rows x 128 columns per warp, 32 bf16 pairs per thread.
// CHECK-COUNT-32: arith.xori %{{.*}}, %[[MASK]] : i32
// CHECK: scf.for

// REFUSED: error: 'flash.load_query' op takes the scale in the exponents, which the form 'simt' does not for this configuration
