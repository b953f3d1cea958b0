// Key offsets (KernelSpec::keyOffsets, flash.kernel's key_offsets): a
// kernel built with them reads each sequence's first key position from
// ip (masked to [0, 2^30), which the runtime guarantees) and adds it to
// the tile's first key row with no-wrap flags; the modifiers and the tile
// classifier then see positions. Without them nothing of this is emitted:
// key r is at position r (docs/runtime.md).
// RUN: attn-opt %s -attn-build-tiled="key-offsets=1" | FileCheck %s --check-prefix=TILED
// RUN: attn-opt %s -attn-build-tiled="key-offsets=1" | attn-opt -convert-flash-to-cpu | FileCheck %s --check-prefix=OFFSETS
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=f32 form=simt key-offsets=1" | attn-opt -convert-flash-to-simt | FileCheck %s --check-prefix=OFFSETS
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 key-offsets=1" | attn-opt -convert-flash-to-mma-sync | FileCheck %s --check-prefix=OFFSETS
// RUN: attn-opt %s -attn-build-tiled="target=sm_90a dtype=bf16 key-offsets=1" | attn-opt -convert-flash-to-wgmma | FileCheck %s --check-prefix=OFFSETS
// RUN: attn-opt %s -attn-build-tiled | attn-opt -convert-flash-to-cpu | FileCheck %s --check-prefix=NONE
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16" | attn-opt -convert-flash-to-mma-sync | FileCheck %s --check-prefix=NONE

attn.variant @causal() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// TILED: flash.kernel {{.*}} key_offsets,

// OFFSETS: %[[MASK:.*]] = arith.constant 1073741823 : index
// OFFSETS: %[[FIRST:.*]] = arith.andi %{{.*}}, %[[MASK]] : index
// OFFSETS: arith.addi %{{.*}}, %[[FIRST]] overflow<nsw, nuw> : index

// NONE-NOT: 1073741823
