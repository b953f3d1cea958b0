// -attn-build-tiled: where the score_mod is the identity and the form takes
// it (the mma.sync forward with Q in registers), the scale goes into the
// exponents: the products stay unscaled, Q takes the scale's sign once, the
// running maximum is over products and every exponent's factor is
// c = |scale| log2(e), fixed before the loop; LSE = |scale| m + ln l.
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 head-dim=128 v-head-dim=128" | FileCheck %s --check-prefix=MMA
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 head-dim=128 v-head-dim=128" | attn-opt | FileCheck %s --check-prefix=MMA
// RUN: attn-opt %s -attn-build-tiled | FileCheck %s --check-prefix=UNFOLDED
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 form=simt" | FileCheck %s --check-prefix=UNFOLDED
// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 dtype=f16 backward=1" | FileCheck %s --check-prefix=UNFOLDED

attn.variant @causal() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

attn.variant @softcap() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %c = arith.constant 30.0 : f32
  %0 = arith.divf %s, %c : f32
  %1 = math.tanh %0 : f32
  %2 = arith.mulf %1, %c : f32
  attn.yield %2 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// MMA-LABEL: flash.kernel @attnc_causal_bf16_d128v128_m64n64w4s2 "forward" form "mma-sync" of @causal
// MMA: %[[ITEM:.*]] = flash.work_item
// MMA: %[[Q:.*]] = flash.load_query "q" of %[[ITEM]] signed_by_scale
// MMA: %[[SCALE:.*]] = flash.score_scale
// MMA: %[[C:.*]] = flash.rows_map(%[[SCALE]]) {
// MMA:   arith.constant 1.44269502 : f32
// MMA:   arith.mulf
// MMA: flash.for_tiles %[[ITEM]]
// MMA: ^bb0(%[[T:.*]]: !flash.tile, %{{.*}}: !flash.acc, %[[M:.*]]: !flash.rows, %{{.*}}: !flash.partials):
// MMA: %[[KV:.*]] = flash.load_kv %[[T]]
// MMA: %[[PROD:.*]] = flash.product %[[Q]] x "k" of %[[KV]]
// MMA: %[[S:.*]] = flash.apply_mods %[[PROD]] on %[[T]] unscaled
// MMA: %[[MNEW:.*]] = flash.rows_map(%[[M]], %{{.*}}) {
// MMA: %[[MUSE:.*]] = flash.rows_map(%[[MNEW]]) {
// MMA: flash.rows_map(%[[M]], %[[MUSE]], %[[C]]) {
// MMA-NOT: 1.44269502
// MMA: flash.scores_map(%[[S]]) rows(%[[MUSE]], %[[C]]) {
// MMA-NEXT: ^bb0(%[[X:.*]]: f32, %[[MU:.*]]: f32, %[[CC:.*]]: f32):
// MMA-NEXT:   %[[D:.*]] = arith.subf %[[X]], %[[MU]] : f32
// MMA-NEXT:   %[[E:.*]] = arith.mulf %[[D]], %[[CC]] : f32
// MMA-NEXT:   math.exp2 %[[E]]
// The epilogue's LSE: |scale| m + ln l.
// MMA: flash.complete
// MMA: flash.rows_map(%{{.*}}, %{{.*}}, %[[SCALE]]) {
// MMA-NEXT: ^bb0(%[[MF:.*]]: f32, %{{.*}}: f32, %[[SC:.*]]: f32):
// MMA: arith.mulf %[[MF]], %[[SC]] : f32
// MMA: flash.store_output

// softcap's score_mod is not the identity: it scales first, as every form.
// MMA-LABEL: flash.kernel @attnc_softcap_bf16_d128v128_m64n64w4s2 "forward" form "mma-sync" of @softcap
// MMA: flash.load_query "q" of %{{.*}}{{$}}
// MMA-NOT: score_scale
// MMA-NOT: unscaled
// MMA: flash.store_output

// The CPU and SIMT forms and the backward never fold.
// UNFOLDED: flash.kernel
// UNFOLDED-NOT: signed_by_scale
// UNFOLDED-NOT: score_scale
// UNFOLDED-NOT: unscaled
