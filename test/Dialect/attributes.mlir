// RUN: attn-opt %s | attn-opt | FileCheck %s
// Extra attributes survive under `attributes`, and the generic form of a
// variant (with #attn.param) parses back to the custom form.

// CHECK: attn.variant @tagged(t: f32[H]) attributes {note = "kept"}
attn.variant @tagged(t: f32[H]) attributes {note = "kept"}
    score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// The generic form has three regions; the third (score_grad) may be empty.
// CHECK: attn.variant @generic(w: i32, bias: f32[H, 16])
"attn.variant"() <{sym_name = "generic",
                   params = [#attn.param<"w", i32, []>,
                             #attn.param<"bias", f32, ["H", 16]>]}> ({
^bb0(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32):
  "attn.yield"(%s) : (f32) -> ()
}, {
^bb0(%b: i32, %h: i32, %q: i32, %kv: i32):
  %t = "arith.constant"() <{value = true}> : () -> i1
  "attn.yield"(%t) : (i1) -> ()
}, {
}) : () -> ()
