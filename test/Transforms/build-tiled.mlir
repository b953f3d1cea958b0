// -attn-build-tiled: the tiled program (flash dialect) of every variant, for
// the kernel form the request gets on the target.
// RUN: attn-opt %s -attn-build-tiled | FileCheck %s --check-prefix=CPU
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 head-dim=128 v-head-dim=128" | FileCheck %s --check-prefix=MMA
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 form=simt" | FileCheck %s --check-prefix=SIMT
// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 dtype=f16 backward=1" | FileCheck %s --check-prefix=BWD
// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 dtype=f16 backward=1 form=simt" | FileCheck %s --check-prefix=BWDSIMT
// RUN: attn-opt %s -attn-build-tiled | attn-opt | FileCheck %s --check-prefix=CPU
// RUN: not attn-opt %s -attn-build-tiled="backward=1" 2>&1 | FileCheck %s --check-prefix=NOGRAD
// RUN: not attn-opt %s -attn-build-tiled="target=sm_70" 2>&1 | FileCheck %s --check-prefix=TARGET
// RUN: not attn-opt %s -attn-build-tiled="form=wgmma" 2>&1 | FileCheck %s --check-prefix=FORM

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

// The CPU form, named after the variant; the online softmax in the scores'
// units: the running max, -inf kept out of the exponent, log2(e) folded
// into one FMA per score, the old sums and accumulator rescaled by alpha.
// CPU: flash.kernel @alibi_kernel "forward" form "cpu" of @alibi attributes {block_m = 64 : i64, block_n = 64 : i64, dtype = f32, head_dim = 64 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 0 : i64}
// CPU: %[[ITEM:.*]] = flash.work_item
// CPU: flash.for_tiles %[[ITEM]]
// CPU: ^bb0(%[[T:.*]]: !flash.tile, %[[ACC:.*]]: !flash.acc, %[[M:.*]]: !flash.rows, %[[L:.*]]: !flash.partials):
// CPU: %[[S:.*]] = flash.apply_mods %{{.*}} on %[[T]]
// CPU: %[[TMAX:.*]] = flash.row_max %[[S]]
// The lazy maximum: the row's reference moves only where the tile's
// maximum rises above it by more than 8 in exponent units (log2(e) here:
// the scores are scaled).
// CPU: %[[MNEW:.*]] = flash.rows_map(%[[M]], %[[TMAX]]) {
// CPU-NEXT: ^bb0(%[[MO:.*]]: f32, %[[TM:.*]]: f32):
// CPU-NEXT:   %[[LOG2E:.*]] = arith.constant 1.44269502 : f32
// CPU-NEXT:   %[[RISE:.*]] = arith.subf %[[TM]], %[[MO]] : f32
// CPU-NEXT:   %[[UNITS:.*]] = arith.mulf %[[RISE]], %[[LOG2E]] : f32
// CPU-NEXT:   %[[EIGHT:.*]] = arith.constant 8.000000e+00 : f32
// CPU-NEXT:   %[[KEEP:.*]] = arith.cmpf ole, %[[UNITS]], %[[EIGHT]] : f32
// CPU-NEXT:   %[[MAX:.*]] = arith.maximumf %[[MO]], %[[TM]] : f32
// CPU-NEXT:   %[[NEW:.*]] = arith.select %[[KEEP]], %[[MO]], %[[MAX]] : f32
// CPU-NEXT:   flash.yield %[[NEW]] : f32
// CPU: %[[MUSE:.*]] = flash.rows_map(%[[MNEW]]) {
// CPU:   arith.cmpf oeq
// CPU:   arith.select
// CPU: %[[ALPHA:.*]] = flash.rows_map(%[[M]], %[[MUSE]]) {
// CPU:   math.exp2
// The exponent is (s - m) log2(e): the difference first, exact near the
// row's maximum at any magnitude (one FMA, s c - round(m c), is not).
// CPU: %[[P:.*]] = flash.scores_map(%[[S]]) rows(%[[MUSE]]) {
// CPU-NEXT: ^bb0(%[[X:.*]]: f32, %[[MU:.*]]: f32):
// CPU:   %[[D:.*]] = arith.subf %[[X]], %[[MU]] : f32
// CPU:   %[[E:.*]] = arith.mulf %[[D]], %{{.*}} : f32
// CPU:   math.exp2 %[[E]]
// CPU: %[[SUM:.*]] = flash.row_sum %[[P]]
// CPU: %[[LNEW:.*]] = flash.rescale_sum %[[L]] * %[[ALPHA]] + %[[SUM]]
// CPU: %[[SCALED:.*]] = flash.scale_acc %[[ACC]] by %[[ALPHA]]
// CPU: %[[ANEW:.*]] = flash.accumulate "pv" %[[SCALED]] + %[[P]] x %{{.*}} : !flash.kv
// CPU: flash.yield %[[ANEW]], %[[MNEW]], %[[LNEW]]
// The epilogue: O = acc / l (0 without keys), LSE = m + ln l (-inf).
// CPU: flash.complete
// CPU: arith.divf
// CPU: arith.constant 0.693147182 : f32
// CPU: math.log2
// CPU: flash.store_output

// On a GPU target: the configuration table's tiles, named after them.
// MMA: flash.kernel @attnc_alibi_bf16_d128v128_m64n64w4s2 "forward" form "mma-sync" of @alibi
// MMA-SAME: block_m = 64 : i64, block_n = 64 : i64, dtype = bf16, head_dim = 128 : i64
// MMA-SAME: warps = 4 : i64

// A form asked for by name.
// SIMT: flash.kernel @attnc_alibi_bf16_d64v64_m64n64w2s1 "forward" form "simt" of @alibi

// The backward: two kernels of the mma.sync backward form.
// Its _bwd_q adds score_grad's accumulates of a query (summed per row),
// _bwd_kv the others (KernelForm::sumsQueryGradsInQueryKernel); the SIMT
// form's _bwd_kv adds them all.
// BWD: flash.kernel @attnc_alibi_f16_d64v64_m64n64w4s2_bwd_q "bwd_q" form "mma-sync"
// BWD: flash.load_rows "delta"
// BWD: flash.score_grad {{.*}} {accumulate = "query"}
// BWD: flash.accumulate "dq"
// BWD: flash.kernel @attnc_alibi_f16_d64v64_m64n64w4s2_bwd_kv "bwd_kv" form "mma-sync"
// BWD: flash.score_grad {{.*}} {accumulate = "others"}
// BWDSIMT: flash.kernel {{.*}}_bwd_q "bwd_q" form "simt"
// BWDSIMT: flash.score_grad
// BWDSIMT-NOT: accumulate
// BWDSIMT-SAME: {{$}}
// BWDSIMT: flash.kernel {{.*}}_bwd_kv "bwd_kv" form "simt"
// BWDSIMT: flash.score_grad {{.*}} {accumulate = "all"}

// NOGRAD: error: the variant has no score_grad region; run -attn-differentiate first
// TARGET: error: unknown target 'sm_70'
// FORM: error: no kernel form takes the configuration on cpu
