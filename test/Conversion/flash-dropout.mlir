// The forms' lowering of flash.dropout: Philox 4x32-10 (two 32x32->64
// multiplies per round by the constants 0xD2511F53 and 0xCD9E8D57, ten
// rounds) and the keep test `word >= threshold` (unsigned). The CPU draws
// one block per 4 lanes (8 f32 lanes: vectors of 2 blocks) and spreads the
// words over the lanes by shuffles; SIMT draws per key; mma.sync one
// block per thread's key pair and row (docs/dropout.md).
// RUN: attn-opt %s -attn-build-tiled="dropout=1" | attn-opt -convert-flash-to-cpu | FileCheck %s --check-prefixes=PHILOX,CPU
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=f32 form=simt dropout=1" | attn-opt -convert-flash-to-simt | FileCheck %s --check-prefixes=PHILOX,SIMT
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 dropout=1" | attn-opt -convert-flash-to-mma-sync | FileCheck %s --check-prefixes=PHILOX,MMA
// RUN: attn-opt %s -attn-build-tiled | attn-opt -convert-flash-to-cpu | FileCheck %s --check-prefix=NONE
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16" | attn-opt -convert-flash-to-mma-sync | FileCheck %s --check-prefix=NONE

attn.variant @causal() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// PHILOX: arith.constant -766435501 : i32
// CPU: arith.mului_extended %{{.*}}, %{{.*}} : vector<2xi32>
// SIMT: arith.mului_extended %{{.*}}, %{{.*}} : i32
// MMA: arith.mului_extended %{{.*}}, %{{.*}} : i32
// PHILOX: arith.constant -845247145 : i32
// CPU-COUNT-19: arith.mului_extended {{.*}} : vector<2xi32>
// CPU: vector.shuffle %{{.*}}, %{{.*}} [0, 2, 1, 3] : vector<2xi32>, vector<2xi32>
// CPU: vector.shuffle %{{.*}}, %{{.*}} [0, 1, 4, 5, 2, 3, 6, 7] : vector<4xi32>, vector<4xi32>
// CPU: arith.cmpi uge, %{{.*}} : vector<8xi32>
// SIMT-COUNT-19: arith.mului_extended {{.*}} : i32
// SIMT: arith.cmpi uge
// MMA-COUNT-19: arith.mului_extended {{.*}} : i32
// MMA: arith.cmpi uge

// NONE-NOT: mului_extended
