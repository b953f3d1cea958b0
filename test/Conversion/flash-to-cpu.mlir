// RUN: attn-opt %s -convert-flash-to-cpu | FileCheck %s
// RUN: attn-opt %s -convert-flash-to-cpu | attn-opt | FileCheck %s --check-prefix=REPARSE
// -convert-flash-to-cpu: the CPU forms lower a causal variant's forward and
// backward kernels (the input is attnc compile --emit=tiled's) to funcs over
// work items, and add the forward's split-KV merge.

module {
  attn.variant @causal()
      score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
    attn.yield %score : f32
  } mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
    %0 = arith.cmpi sge, %q, %kv : i32
    attn.yield %0 : i1
  } score_grad(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
    attn.yield %dy : f32
  }
  flash.kernel @kernel "forward" form "cpu" of @causal attributes {block_m = 64 : i64, block_n = 64 : i64, dtype = f32, head_dim = 64 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 0 : i64} {
    %0 = flash.work_item
    %1 = flash.load_query "q" of %0
    %2 = flash.zero_acc "v"
    %3 = flash.fill_rows 0xFF800000
    %4 = flash.zero_partials
    %5:3 = flash.for_tiles %0 iter_args(%2, %3, %4) : !flash.acc, !flash.rows, !flash.partials {
    ^bb0(%arg0: !flash.tile, %arg1: !flash.acc, %arg2: !flash.rows, %arg3: !flash.partials):
      %9 = flash.load_kv %arg0
      %10 = flash.product %1 x "k" of %9
      %11 = flash.apply_mods %10 on %arg0
      %12 = flash.row_max %11
      %13 = flash.rows_map(%arg2, %12) {
      ^bb0(%arg4: f32, %arg5: f32):
        %22 = arith.maximumf %arg4, %arg5 : f32
        flash.yield %22 : f32
      }
      %14 = flash.rows_map(%13) {
      ^bb0(%arg4: f32):
        %cst = arith.constant 0xFF800000 : f32
        %22 = arith.cmpf oeq, %arg4, %cst : f32
        %cst_0 = arith.constant 0.000000e+00 : f32
        %23 = arith.select %22, %cst_0, %arg4 : f32
        flash.yield %23 : f32
      }
      %15 = flash.rows_map(%14) {
      ^bb0(%arg4: f32):
        %cst = arith.constant 1.44269502 : f32
        %22 = arith.mulf %arg4, %cst : f32
        %23 = arith.negf %22 : f32
        flash.yield %23 : f32
      }
      %16 = flash.rows_map(%arg2, %14) {
      ^bb0(%arg4: f32, %arg5: f32):
        %cst = arith.constant 1.44269502 : f32
        %22 = arith.subf %arg4, %arg5 : f32
        %23 = arith.mulf %22, %cst : f32
        %24 = math.exp2 %23 : f32
        flash.yield %24 : f32
      }
      %17 = flash.scores_map(%11) rows(%15) {
      ^bb0(%arg4: f32, %arg5: f32):
        %cst = arith.constant 1.44269502 : f32
        %22 = math.fma %arg4, %cst, %arg5 : f32
        %23 = math.exp2 %22 : f32
        flash.yield %23 : f32
      }
      %18 = flash.row_sum %17
      %19 = flash.rescale_sum %arg3 * %16 + %18
      %20 = flash.scale_acc %arg1 by %16
      %21 = flash.accumulate "pv" %20 + %17 x %9 : !flash.kv
      flash.yield %21, %13, %19 : !flash.acc, !flash.rows, !flash.partials
    }
    %6 = flash.complete %5#2
    %7 = flash.rows_map(%6) {
    ^bb0(%arg0: f32):
      %cst = arith.constant 0.000000e+00 : f32
      %9 = arith.cmpf une, %arg0, %cst : f32
      %cst_0 = arith.constant 0.000000e+00 : f32
      %cst_1 = arith.constant 1.000000e+00 : f32
      %10 = arith.divf %cst_1, %arg0 : f32
      %11 = arith.select %9, %10, %cst_0 : f32
      flash.yield %11 : f32
    }
    %8 = flash.rows_map(%5#1, %6) {
    ^bb0(%arg0: f32, %arg1: f32):
      %cst = arith.constant 0.000000e+00 : f32
      %9 = arith.cmpf une, %arg1, %cst : f32
      %cst_0 = arith.constant 0.000000e+00 : f32
      %10 = arith.select %9, %arg0, %cst_0 : f32
      %cst_1 = arith.constant 0.693147182 : f32
      %11 = math.log2 %arg1 : f32
      %12 = arith.mulf %11, %cst_1 : f32
      %13 = arith.addf %10, %12 : f32
      %cst_2 = arith.constant 0xFF800000 : f32
      %14 = arith.select %9, %13, %cst_2 : f32
      flash.yield %14 : f32
    }
    flash.store_output %5#0 * %7 lse %8 of %0
  }
  flash.kernel @kernel_bwd_q "bwd_q" form "cpu" of @causal attributes {block_m = 64 : i64, block_n = 64 : i64, dtype = f32, head_dim = 64 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 0 : i64} {
    %0 = flash.work_item
    %1 = flash.load_query "q" of %0
    %2 = flash.load_query "do" of %0
    %3 = flash.load_rows "lse" of %0
    %4 = flash.load_rows "delta" of %0
    %5 = flash.zero_acc "k"
    %6 = flash.for_tiles %0 iter_args(%5) : !flash.acc {
    ^bb0(%arg0: !flash.tile, %arg1: !flash.acc):
      %7 = flash.load_kv %arg0
      %8 = flash.product %1 x "k" of %7
      %9 = flash.product %2 x "v" of %7
      %10 = flash.probabilities %8 lse %3 on %arg0
      %11 = flash.scores_map(%10, %9) rows(%4) {
      ^bb0(%arg2: f32, %arg3: f32, %arg4: f32):
        %14 = arith.subf %arg3, %arg4 : f32
        %15 = arith.mulf %arg2, %14 : f32
        flash.yield %15 : f32
      }
      %12 = flash.score_grad %8 ds %11 lse %3 on %arg0
      %13 = flash.accumulate "dq" %arg1 + %12 x %7 : !flash.kv
      flash.yield %13 : !flash.acc
    }
    flash.store_grad "dq" %6 of %0
  }
  flash.kernel @kernel_bwd_kv "bwd_kv" form "cpu" of @causal attributes {block_m = 64 : i64, block_n = 64 : i64, dtype = f32, head_dim = 64 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 0 : i64} {
    %0 = flash.work_item
    %1 = flash.kv_tile_of %0
    %2 = flash.load_kv %1
    %3 = flash.zero_acc "k"
    %4 = flash.zero_acc "v"
    %5:2 = flash.for_query_tiles %0 iter_args(%3, %4) : !flash.acc, !flash.acc {
    ^bb0(%arg0: !flash.item, %arg1: !flash.tile, %arg2: !flash.acc, %arg3: !flash.acc):
      %6 = flash.load_query "q" of %arg0
      %7 = flash.load_query "do" of %arg0
      %8 = flash.load_rows "lse" of %arg0
      %9 = flash.load_rows "delta" of %arg0
      %10 = flash.product %6 x "k" of %2
      %11 = flash.product %7 x "v" of %2
      %12 = flash.probabilities %10 lse %8 on %arg1
      %13 = flash.scores_map(%12, %11) rows(%9) {
      ^bb0(%arg4: f32, %arg5: f32, %arg6: f32):
        %17 = arith.subf %arg5, %arg6 : f32
        %18 = arith.mulf %arg4, %17 : f32
        flash.yield %18 : f32
      }
      %14 = flash.score_grad %10 ds %13 lse %8 on %arg1 {accumulate = "all"}
      %15 = flash.accumulate "dv" %arg3 + %12 x %7 : !flash.query
      %16 = flash.accumulate "dk" %arg2 + %14 x %6 : !flash.query
      flash.add_owned_dq %14 x %2 of %arg0
      flash.yield %16, %15 : !flash.acc, !flash.acc
    }
    flash.store_grad "dk" %5#0 of %0
    flash.store_grad "dv" %5#1 of %0
  }
}

// CHECK-NOT: flash.kernel
// CHECK: func.func @kernel(
// The loop over the range's work items, then over the item's visited tiles.
// CHECK: scf.for
// CHECK: scf.for
// S = Q K^T, register-blocked.
// CHECK: vector.fma
// One loop over the item's rows: the modifiers with the row maximum (two
// copies, the mask only on partial tiles), then P with the row sum.
// CHECK: scf.if %{{.*}} -> (f32) {
// CHECK: vector.reduction <maximumf>
// CHECK: } else {
// CHECK: arith.cmpi sge, %{{.*}}, %{{.*}} : vector<8xi32>
// CHECK: vector.reduction <maximumf>
// CHECK: math.exp2 %{{.*}} : f32
// CHECK: math.fma %{{.*}} : vector<8xf32>
// CHECK: math.exp2 %{{.*}} : vector<8xf32>
// CHECK: vector.reduction <add>
// acc = acc * alpha + P V.
// CHECK: arith.mulf %{{.*}} : vector<8xf32>
// CHECK: vector.fma
// The epilogue: a row's O and LSE.
// CHECK: math.log2
// The backward: dQ per Q tile, dK/dV (and dQ when the item owns it) per KV
// tile, P recomputed from the LSE with math.exp.
// CHECK: func.func @kernel_bwd_q(
// CHECK: math.exp
// CHECK: func.func @kernel_bwd_kv(
// CHECK: math.exp
// CHECK: func.func @kernel_merge(
// REPARSE: func.func @kernel_bwd_kv(
