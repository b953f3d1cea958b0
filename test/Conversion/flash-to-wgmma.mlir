// RUN: attn-opt %s -convert-flash-to-wgmma | FileCheck %s
// -convert-flash-to-wgmma: the sm_90a form lowers an ALiBi variant's
// forward kernel (bf16, D=64: attnc compile --emit=tiled --target=sm_90a
// --dtype bf16; its tile loop in two versions, the first for items of one
// query head) to a warp-specialized gpu.func of 12 warps: two consumer
// warpgroups issuing wgmma as inline PTX (S = QK^T as 4 m64n128k16 from
// shared-memory descriptors, Dqk 64 = 4 k-steps; O += PV as 8 m64n64k16
// with A from registers, block_n 128 = 8 k-steps; each group fenced
// before, committed and waited with the accumulators tied through the
// wait; beside them the softmax's sums as 8 m64n8k16, P times a column
// of ones in shared memory) and a producer warpgroup that fills three
// stages (what 227 KB
// hold at D=64). The launch
// gives every thread 168 registers; the producer lowers its budget to 40
// and the consumers raise theirs to 232 (setmaxnreg, within the CTA's
// pool: 40 x 128 + 232 x 256 = 168 x 384). Per stage a `full`
// mbarrier (one arrival) and an `empty` one (a consumer warp's arrival
// each) are initialized before the CTA's one barrier. The producer waits
// for `empty` and either issues a tile's two TMA boxes (K's 64 columns and
// V's, 32 KB, through the tensor maps the kernel takes after its first
// item) with one expect-tx arrival, or, where the call's maps are not
// usable, copies by cp.async, fences for the async proxy, meets its own
// barrier (id 2) and arrives once. What both roles read of the call (the
// maps' addresses among it) is read before they part. The consumers load Q, wait for `full`
// per tile, zero a tail tile's rows past the sequence (fenced for the
// async proxy and published by their own barrier, id 1), and release the
// stage (a lane per warp arrives on `empty`, then the warp reconverges):
// no CTA-wide barrier in their loop. The two consumer warpgroups take
// turns issuing their product groups (ping-pong on barriers 3 and 4).
// The loop is overlapped: the first visited tile's S is waited for alone;
// then per tile S = QK^T and the previous tile's O += PV are issued in one
// turn as two groups, the softmax runs after a wait that leaves the PV in
// flight (wait_group 1), and O's rescale waits for it (wait_group 0) and
// releases the previous tile's stage; the last tile's PV follows the loop.
// The shared memory's base is aligned to 1024 bytes for the 128-byte
// swizzle.

module {
  attn.variant @alibi(slope: f32[H])
      score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
    %0 = attn.gather @slope[%h] : f32
    %1 = arith.subi %kv, %q : i32
    %2 = arith.sitofp %1 : i32 to f32
    %3 = arith.mulf %0, %2 : f32
    %4 = arith.addf %score, %3 : f32
    attn.yield %4 : f32
  } mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
    %0 = arith.cmpi sge, %q, %kv : i32
    attn.yield %0 : i1
  } score_grad(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
    %0 = arith.subi %kv, %q : i32
    %1 = arith.sitofp %0 : i32 to f32
    %2 = arith.mulf %dy, %1 : f32
    attn.accumulate @slope[%h], %2 : f32
    attn.yield %dy : f32
  }
  flash.kernel @attnc_alibi_bf16_d64v64_m128n128w12s3 "forward" form "wgmma" of @alibi attributes {block_m = 128 : i64, block_n = 128 : i64, dtype = bf16, head_dim = 64 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 12 : i64} {
    %0 = flash.work_item
    %1 = flash.load_query "q" of %0
    %2 = flash.zero_acc "v" {row_sums}
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
        %21 = arith.maximumf %arg4, %arg5 : f32
        flash.yield %21 : f32
      }
      %14 = flash.rows_map(%13) {
      ^bb0(%arg4: f32):
        %cst = arith.constant 0xFF800000 : f32
        %21 = arith.cmpf oeq, %arg4, %cst : f32
        %cst_0 = arith.constant 0.000000e+00 : f32
        %22 = arith.select %21, %cst_0, %arg4 : f32
        flash.yield %22 : f32
      }
      %15 = flash.rows_map(%arg2, %14) {
      ^bb0(%arg4: f32, %arg5: f32):
        %cst = arith.constant 1.44269502 : f32
        %21 = arith.subf %arg4, %arg5 : f32
        %22 = arith.mulf %21, %cst : f32
        %23 = math.exp2 %22 : f32
        flash.yield %23 : f32
      }
      %16 = flash.scores_map(%11) rows(%14) {
      ^bb0(%arg4: f32, %arg5: f32):
        %cst = arith.constant 1.44269502 : f32
        %21 = arith.subf %arg4, %arg5 : f32
        %22 = arith.mulf %21, %cst : f32
        %23 = math.exp2 %22 : f32
        flash.yield %23 : f32
      }
      %17 = flash.row_sum %16
      %18 = flash.rescale_sum %arg3 * %15 + %17 {lse_only}
      %19 = flash.scale_acc %arg1 by %15
      %20 = flash.accumulate "pv" %19 + %16 x %9 {row_sums} : !flash.kv
      flash.yield %20, %13, %18 : !flash.acc, !flash.rows, !flash.partials
    }
    %6 = flash.complete %5#2
    %sums = flash.acc_sums %5#0
    %7 = flash.rows_map(%sums) {
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
}

// CHECK: module attributes {gpu.container_module}
// CHECK-NOT: flash.kernel
// CHECK: gpu.func @attnc_alibi_bf16_d64v64_m128n128w12s3({{.*}}: i64, %[[KMAP:.*]]: !llvm.ptr {llvm.align = 64 : i64}, %[[VMAP:.*]]: !llvm.ptr {llvm.align = 64 : i64}, %[[FLAG:.*]]: i64) kernel attributes {attnc.kv_tensor_maps, known_block_size = array<i32: 384, 1, 1>, nvvm.maxnreg = 168 : i32}
// CHECK: %[[RAW:.*]] = gpu.dynamic_shared_memory
// CHECK: %[[ALIGNED:.*]] = memref.view %[[RAW]][%{{.*}}][%c114992]
// CHECK: "mbarrier.init.shared::cta.b64 [$0], 1;"
// CHECK: "mbarrier.init.shared::cta.b64 [$0], 8;"
// CHECK: "mbarrier.init.shared::cta.b64 [$0], 1;"
// CHECK: "mbarrier.init.shared::cta.b64 [$0], 8;"
// CHECK: gpu.barrier
// What both roles read of the call, before they part.
// CHECK: llvm.ptrtoint %[[KMAP]]
// CHECK: llvm.ptrtoint %[[VMAP]]
// The producer.
// CHECK: "setmaxnreg.dec.sync.aligned.u32 40;"
// CHECK: scf.while
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK: "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], 32768;"
// CHECK-COUNT-2: "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [$0], [$1, {$2, $3, $4}], [$5];", "r,l,r,r,r,r,~{memory}"
// CHECK: nvvm.bar.warp.sync
// CHECK: scf.while
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK: nvgpu.device_async_copy
// CHECK: nvvm.cp.async.wait.group 0
// CHECK-NEXT: "fence.proxy.async.shared::cta;"
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %c128_i32
// CHECK: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK: nvvm.bar.warp.sync
// The consumers: no CTA-wide barrier from here on.
// CHECK: "setmaxnreg.inc.sync.aligned.u32 232;"
// The turns: barrier 3 for the first warpgroup, 4 for the second.
// CHECK: %[[MINE:.*]] = arith.select %{{.*}}, %c3_i32, %c4_i32 : i32
// CHECK: %[[THEIRS:.*]] = arith.subi %c7_i32, %[[MINE]] : i32
// CHECK-NOT: gpu.barrier
// CHECK: nvgpu.device_async_copy
// CHECK-NOT: gpu.barrier
// The sums' ones (16 keys x 8 columns of 1.0, after the mbarriers) by the
// first 16 consumer threads, before the proxy fence that lets wgmma read
// them.
// CHECK: memref.view %[[ALIGNED]][%c114736][] : {{.*}} to memref<128xbf16, #gpu.address_space<workgroup>>
// CHECK: vector.store %{{.*}} : memref<128xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK: "fence.proxy.async.shared::cta;"
// CHECK: nvvm.barrier id = %c1_i32{{.*}} number_of_threads = %c256_i32
// CHECK-NOT: gpu.barrier
// The second warpgroup hands the first its first turn.
// CHECK: "bar.arrive $0, 256;", "r,~{memory}" %c3_i32
// CHECK-NOT: gpu.barrier
// The first visited tile (peeled): its stage waited for, a tail's rows
// zeroed; S alone, in the warpgroup's turn, the turn passed once it is
// issued.
// CHECK: scf.if
// CHECK-NOT: gpu.barrier
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK-NOT: gpu.barrier
// CHECK: vector.store %{{.*}}, %{{.*}} {alignment = 16 : i64} : memref<57344xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK-NOT: gpu.barrier
// CHECK: "fence.proxy.async.shared::cta;"
// CHECK: nvvm.barrier id = %{{.*}} number_of_threads = %c256_i32
// CHECK-NOT: gpu.barrier
// CHECK: nvvm.barrier id = %[[MINE]] number_of_threads = %c256_i32
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-COUNT-4: "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, 1, 1, 0, 0;"
// CHECK-NEXT: llvm.extractvalue
// CHECK: "wgmma.commit_group.sync.aligned;"
// CHECK-NEXT: "bar.arrive $0, 256;", "r,~{memory}" %[[THEIRS]]
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: llvm.nvvm.ex2.approx.ftz.f32
// CHECK-NOT: wgmma.mma_async
// CHECK: scf.yield
// The loop: S and the previous tile's PV in one turn, two groups.
// CHECK: scf.while
// CHECK-NOT: gpu.barrier
// CHECK: mbarrier.try_wait.parity.shared::cta.b64
// CHECK-NOT: gpu.barrier
// CHECK: nvvm.barrier id = %[[MINE]] number_of_threads = %c256_i32
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-COUNT-4: "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {{.*}}, 1, 1, 0, 0;"
// CHECK: "wgmma.commit_group.sync.aligned;"
// CHECK-NOT: wgmma.fence
// Per 16 keys O's m64n64 and the sums' m64n8 (P times the ones, K-major,
// not transposed), A from the same registers.
// CHECK-COUNT-8: "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {{.*}}}, {$32, $33, $34, $35}, $36, 1, 1, 1, 1;"
// CHECK: "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {$0, $1, $2, $3}, {$4, $5, $6, $7}, $8, 1, 1, 1, 0;"
// CHECK: "wgmma.commit_group.sync.aligned;"
// CHECK-NEXT: "bar.arrive $0, 256;", "r,~{memory}" %[[THEIRS]]
// S waited for, PV left in flight through the softmax; O's rescale waits
// for it with P's registers tied through (held until the wait), then the
// previous tile's stage is released.
// CHECK: "wgmma.wait_group.sync.aligned 1;"
// CHECK: llvm.nvvm.ex2.approx.ftz.f32
// CHECK: "wgmma.wait_group.sync.aligned 0;", "=f,{{.*}}=f,=r,{{.*}}=r,0,1,
// CHECK-NOT: gpu.barrier
// CHECK: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK: nvvm.bar.warp.sync
// CHECK-NOT: gpu.barrier
// CHECK: scf.yield
// The last tile's PV, in its turn.
// CHECK: nvvm.barrier id = %[[MINE]] number_of_threads = %c256_i32
// CHECK: "wgmma.fence.sync.aligned;"
// CHECK-COUNT-8: "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: "wgmma.commit_group.sync.aligned;"
// CHECK-NEXT: "bar.arrive $0, 256;", "r,~{memory}" %[[THEIRS]]
// CHECK: "wgmma.wait_group.sync.aligned 0;"
// CHECK: "mbarrier.arrive.shared::cta.b64 _, [$0];"
// CHECK-NOT: gpu.barrier
// After the loop the first warpgroup takes back the turn left over.
// CHECK: nvvm.barrier id = %c3_i32{{.*}} number_of_threads = %c256_i32
// CHECK-NOT: gpu.barrier
// CHECK: gpu.func @attnc_alibi_bf16_d64v64_m128n128w12s3_merge(
