// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 backward=1 dtype=bf16 head-dim=16 v-head-dim=32" -convert-flash-to-mma-sync -canonicalize | FileCheck %s
// The GPU backward on tensor cores (TensorCoreBackwardKernel.cpp): bf16
// with head dims multiples of 16 gets 64-row tiles and 4 warps (128
// threads). Both kernels keep six bf16 tiles in dynamic shared memory (3
// x 64 x ((16 + 8) + (32 + 8)) = 12288 elements: _bwd_q Q and dO, and K
// and V in two stages; _bwd_kv K and V, and Q and dO in two stages) and
// LSE, delta and LSE log2 e per row after them (3 x 64 f32, _bwd_kv two
// stages of them). Tiles are copied by 16-byte cp.async where the tensor's rows
// allow (a run-time check), else element by element; one wait before the
// barrier that publishes them. The first products (S, dP) take B by
// ldmatrix without .trans; the second (dQ, or dV and dK) by
// ldmatrix.trans. Only _bwd_kv adds into the parameters' gradients,
// atomically.

attn.variant @bias(t: f32[H], n: i32[KV]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @t[%h] : f32
  %1 = arith.addf %s, %0 : f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// CHECK-LABEL: gpu.func @attnc_bias_bf16_d16v32_m64n64w4s2_bwd_q(
// CHECK-SAME:    %[[Q:[^:]*]]: memref<?xbf16>,
// CHECK-NOT:     workgroup(
// CHECK-SAME:    kernel attributes {known_block_size = array<i32: 128, 1, 1>}
// CHECK:         %[[RAW:.*]] = gpu.dynamic_shared_memory
// CHECK:         %[[SM:.*]] = memref.view %[[RAW]][%{{.*}}][] : {{.*}} to memref<12288xbf16, #gpu.address_space<workgroup>>
// CHECK:         %[[FS:.*]] = memref.view %[[RAW]][%{{.*}}][] : {{.*}} to memref<192xf32, #gpu.address_space<workgroup>>
// Q and dO rows are staged once, by 16-byte copies or element by element,
// with LSE and delta per row.
// CHECK:         nvgpu.device_async_copy %{{.*}}, %[[SM]][%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK:         memref.store %{{.*}}, %[[SM]]
// CHECK:         memref.store %{{.*}}, %[[FS]]
// CHECK:         nvvm.cp.async.commit.group
// CHECK-NEXT:    nvvm.cp.async.wait.group 0
// CHECK-NEXT:    gpu.barrier
// A thread's two rows: LSE, delta and LSE log2 e (at 0, 64 and 128 of
// fs); one vote of the warp: every row's |LSE log2 e| below 2^10.
// CHECK:         memref.load %[[FS]]
// CHECK:         arith.addi %{{.*}}, %c64 : index
// CHECK-NEXT:    memref.load %[[FS]]
// CHECK-NEXT:    %[[L128:.*]] = arith.addi %{{.*}}, %c128 : index
// CHECK-NEXT:    %[[L:.*]] = memref.load %[[FS]][%[[L128]]]
// CHECK:         math.absf %[[L]] : f32
// CHECK:         %[[SMALL:.*]] = nvvm.vote.sync  all %{{.*}}, %{{.*}} -> i1
// K and V a visited tile ahead, in two stages: the first visited tile
// (a search, tile by tile for this closed-form mask) into stage 0; then
// per visited tile the next one found and its copy issued into the other
// stage, this tile's copy (one group back) waited for and published, then
// S and dP on the tensor cores.
// CHECK:         scf.while
// CHECK:         scf.if
// CHECK:         nvgpu.device_async_copy %{{.*}}, %[[SM]][%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK:         nvvm.cp.async.commit.group
// CHECK-NEXT:    %{{.*}} = scf.while
// CHECK:         scf.while
// CHECK:         scf.if
// CHECK:         nvgpu.device_async_copy %{{.*}}, %[[SM]][%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK:         memref.store %{{.*}}, %[[SM]]
// CHECK:         nvvm.cp.async.commit.group
// CHECK-NEXT:    nvvm.cp.async.wait.group 1
// CHECK-NEXT:    gpu.barrier
// An exact tile (full, all 64 rows and keys in range) whose warp passed
// the vote runs a version of the body without keep flags (the first
// branch); the other tiles select. The tile's stage starts 64 x (24 +
// 40) = 4096 elements on per stage.
// CHECK:         arith.muli %{{.*}}, %c4096 : index
// CHECK:         %[[EXACT:.*]] = arith.andi %{{.*}}, %[[SMALL]] : i1
// CHECK-NEXT:    %{{.*}}:8 = scf.if %[[EXACT]] -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// CHECK:         nvgpu.ldmatrix %[[SM]][%{{.*}}] {numTiles = 4 : i32, transpose = false}
// CHECK:         nvvm.mma.sync
// CHECK-SAME:    multiplicandAPtxType = #nvvm.mma_type<bf16>
// CHECK-SAME:    shape = #nvvm.shape<m = 16, n = 8, k = 16>
// P = 2^(score_mod log2 e - LSE log2 e), one FMA, on ex2.approx.ftz; dX =
// score_grad(...), whose factor `scale` dQ takes once at its store.
// CHECK:         %[[NL:.*]] = arith.negf %[[L]] : f32
// CHECK-NEXT:    %[[X:.*]] = math.fma %{{.*}}, %{{.*}}, %[[NL]] : f32
// CHECK-NEXT:    llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[X]])
// CHECK-NOT:     arith.select
// dQ += dX K: dX rounded to bf16 as A, K by ldmatrix.trans.
// CHECK:         arith.truncf %{{.*}} : f32 to bf16
// CHECK:         nvgpu.ldmatrix %[[SM]][%{{.*}}] {numTiles = 4 : i32, transpose = true}
// CHECK:         nvvm.mma.sync
// CHECK:         gpu.barrier
// CHECK-NOT:     memref.atomic_rmw
// CHECK:         gpu.return

// CHECK-LABEL: gpu.func @attnc_bias_bf16_d16v32_m64n64w4s2_bwd_kv(
// CHECK-NOT:     workgroup(
// CHECK:         %[[KRAW:.*]] = gpu.dynamic_shared_memory
// CHECK:         %[[KSM:.*]] = memref.view %[[KRAW]][%{{.*}}][] : {{.*}} to memref<12288xbf16, #gpu.address_space<workgroup>>
// The bias table's gradient t[h] reads neither q nor kv: a thread sums its
// pairs' in a slot (private memory LLVM keeps in a register).
// CHECK:         %[[SUM:.*]] = memref.alloca() : memref<1xf32>
// K and V stay (copied and awaited once); per query head of the group,
// Q, dO, LSE and delta a visited Q tile ahead in two stages (fs holds two
// stages' rows: 2 x 3 x 64 f32), as _bwd_q's K and V.
// CHECK:         nvgpu.device_async_copy %{{.*}}, %[[KSM]][%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK:         nvvm.cp.async.wait.group 0
// CHECK:         scf.for
// CHECK:         scf.while
// CHECK:         scf.if
// CHECK:         nvgpu.device_async_copy %{{.*}}, %[[KSM]][%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK:         nvvm.cp.async.commit.group
// CHECK-NEXT:    %{{.*}} = scf.while
// CHECK:         scf.if
// CHECK:         nvgpu.device_async_copy %{{.*}}, %[[KSM]][%{{.*}}], 8, %{{.*}} {bypassL1}
// CHECK:         memref.store %{{.*}}, %[[KSM]]
// CHECK:         nvvm.cp.async.commit.group
// CHECK-NEXT:    nvvm.cp.async.wait.group 1
// CHECK-NEXT:    gpu.barrier
// The Q tile's rows' LSE log2 e (at 128 of its stage's fs), two per lane,
// one vote: an exact tile whose rows all passed takes P as one FMA per
// pair.
// CHECK:         %[[KL:.*]] = memref.load %[[KFS:.*]][%{{.*}}] : memref<384xf32, #gpu.address_space<workgroup>>
// CHECK:         math.absf %[[KL]] : f32
// CHECK:         %[[KSMALL:.*]] = nvvm.vote.sync  all %{{.*}}, %{{.*}} -> i1
// CHECK:         %[[KEXACT:.*]] = arith.andi %{{.*}}, %[[KSMALL]] : i1
// CHECK:         nvgpu.ldmatrix %[[KSM]][%{{.*}}] {numTiles = 4 : i32, transpose = false}
// CHECK:         nvvm.mma.sync
// CHECK:         scf.if %[[KEXACT]]
// CHECK-NEXT:    arith.addi %{{.*}}, %c128 : index
// CHECK-NEXT:    arith.addi
// CHECK-NEXT:    %[[PL:.*]] = memref.load %[[KFS]]
// CHECK:         %[[PNL:.*]] = arith.negf %[[PL]] : f32
// CHECK-NEXT:    %[[PX:.*]] = math.fma %{{.*}}, %{{.*}}, %[[PNL]] : f32
// Per pair, into the slot, not the gradient buffer.
// CHECK-NEXT:    llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"(%[[PX]])
// CHECK:         memref.load %[[SUM]]
// CHECK:         memref.store %{{.*}}, %[[SUM]]
// CHECK-NOT:     memref.atomic_rmw
// dV += P^T dO and dK += dX^T Q by ldmatrix.trans.
// CHECK:         nvgpu.ldmatrix %[[KSM]][%{{.*}}] {numTiles = 4 : i32, transpose = true}
// CHECK:         nvvm.mma.sync
// CHECK:         nvgpu.ldmatrix %[[KSM]][%{{.*}}] {numTiles = 4 : i32, transpose = true}
// CHECK:         nvvm.mma.sync
// After the head's Q tiles: the warp's sum by five shuffles, one atomic add
// by its lane 0.
// CHECK:         memref.load %[[SUM]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK:         memref.atomic_rmw addf %{{.*}} : (f32, memref<?xf32>) -> f32
// CHECK-NOT:     memref.atomic_rmw
// CHECK:         gpu.return
