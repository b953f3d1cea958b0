// RUN: attn-opt %s --mlir-print-op-generic | FileCheck %s
// RUN: attn-opt %s --mlir-print-op-generic | attn-opt | FileCheck %s --check-prefix=BACK
// The generic form spells parameters as #attn.param attributes.

// CHECK: "attn.variant"()
// CHECK-SAME: params = [#attn.param<"slope", f32, ["H"]>, #attn.param<"w", i32, []>]
// CHECK-SAME: sym_name = "swa"
// CHECK: "attn.gather"(%{{.*}}) <{capture = @slope}> : (i32) -> f32
// CHECK: "attn.scalar"() <{param = @w}> : () -> i32
// BACK: attn.variant @swa(slope: f32[H], w: i32)
attn.variant @swa(slope: f32[H], w: i32)
    score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %0 = attn.gather @slope[%h] : f32
  %1 = arith.addf %score, %0 : f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %w = attn.scalar @w : i32
  %0 = arith.subi %q, %kv : i32
  %1 = arith.cmpi slt, %0, %w : i32
  attn.yield %1 : i1
}
