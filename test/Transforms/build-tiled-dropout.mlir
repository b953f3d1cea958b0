// -attn-build-tiled with dropout: the forward's flash.dropout takes P after
// the row sums (the sums keep every probability) and feeds P V; the
// backward applies it to dP in both kernels and to P for dV in _bwd_kv
// (docs/dropout.md). Without the option no kernel drops.
// RUN: attn-opt %s -attn-build-tiled="dropout=1" | FileCheck %s --check-prefix=FWD
// RUN: attn-opt %s -attn-build-tiled="dropout=1" | attn-opt | FileCheck %s --check-prefix=FWD
// RUN: attn-opt %s -attn-build-tiled="target=sm_90 dtype=bf16 dropout=1" | FileCheck %s --check-prefix=FWD
// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="backward=1 dropout=1" | FileCheck %s --check-prefix=BWD
// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="target=sm_80 dtype=f16 backward=1 dropout=1" | FileCheck %s --check-prefix=BWD
// RUN: attn-opt %s -attn-build-tiled | FileCheck %s --check-prefix=NONE
// RUN: attn-opt %s -attn-differentiate -attn-build-tiled="backward=1" | FileCheck %s --check-prefix=NONE

attn.variant @causal() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  attn.yield %0 : i1
}

// FWD-LABEL: flash.kernel
// FWD-SAME: "forward"
// FWD: flash.for_tiles
// FWD: ^bb0(%[[T:.*]]: !flash.tile,
// FWD: %[[P:.*]] = flash.scores_map
// FWD: %[[L:.*]] = flash.row_sum %[[P]]
// FWD: flash.rescale_sum %{{.*}} + %[[L]]
// FWD: %[[A:.*]] = flash.scale_acc
// FWD: %[[D:.*]] = flash.dropout %[[P]] on %[[T]]
// FWD-NEXT: flash.accumulate "pv" %[[A]] + %[[D]] x
// FWD-NOT: flash.dropout

// BWD-LABEL: flash.kernel @{{.*}}bwd_q "bwd_q"
// BWD: ^bb0(%[[T:.*]]: !flash.tile,
// BWD: %[[DP:.*]] = flash.product %{{.*}} x "v"
// BWD: %[[P:.*]] = flash.probabilities
// BWD-NEXT: %[[DD:.*]] = flash.dropout %[[DP]] on %[[T]]
// BWD-NEXT: flash.scores_map(%[[P]], %[[DD]])
// BWD: flash.score_grad
// BWD-NOT: flash.dropout
// BWD: flash.accumulate "dq"
// BWD-LABEL: flash.kernel @{{.*}}bwd_kv "bwd_kv"
// BWD: ^bb0(%{{.*}}: !flash.item, %[[T2:.*]]: !flash.tile,
// BWD: %[[DP2:.*]] = flash.product %{{.*}} x "v"
// BWD: %[[P2:.*]] = flash.probabilities
// BWD-NEXT: %[[DD2:.*]] = flash.dropout %[[DP2]] on %[[T2]]
// BWD-NEXT: flash.scores_map(%[[P2]], %[[DD2]])
// BWD: flash.score_grad
// BWD-NEXT: %[[PD:.*]] = flash.dropout %[[P2]] on %[[T2]]
// BWD-NEXT: flash.accumulate "dv" %{{.*}} + %[[PD]] x

// NONE-NOT: flash.dropout
