// attn-opt -attn-mask-analysis: the mask analysis as a pass on attn IR,
// annotating each variant with its kind and closed form.
// RUN: attn-opt %s -attn-mask-analysis | FileCheck %s

// CHECK: attn.variant @sliding_window(window: i32) attributes {attn.mask = "closed form: ((q - kv sge 0) && (q - kv - window slt 0))", attn.mask_kind = "closed"}
attn.variant @sliding_window(window: i32)
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %score : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = arith.cmpi sge, %q, %kv : i32
  %1 = arith.subi %q, %kv : i32
  %window = attn.scalar @window : i32
  %2 = arith.cmpi slt, %1, %window : i32
  %3 = arith.andi %0, %2 : i1
  attn.yield %3 : i1
}

// CHECK: attn.variant @docs(doc: i32[B, KV]) attributes {attn.mask = "data-dependent (a block mask is built at run time)", attn.mask_kind = "data"}
attn.variant @docs(doc: i32[B, KV])
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %score : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @doc[%b, %q] : i32
  %1 = attn.gather @doc[%b, %kv] : i32
  %2 = arith.cmpi eq, %0, %1 : i32
  attn.yield %2 : i1
}

// CHECK: attn.variant @plain() attributes {attn.mask = "none (every tile is full)", attn.mask_kind = "none"}
attn.variant @plain()
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %score : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %true = arith.constant true
  attn.yield %true : i1
}
