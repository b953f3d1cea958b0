// RUN: attn-opt %s -split-input-file -verify-diagnostics
// Every verifier message of the flash dialect.

// expected-error @+1 {{kind must be forward, bwd_q or bwd_kv, got 'sideways'}}
flash.kernel @k "sideways" form "cpu" of @v attributes {block_m = 64 : i64, block_n = 64 : i64, dtype = f32, head_dim = 64 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 0 : i64} {
}

// -----

// expected-error @+1 {{variant 'v' is not an attn.variant of the module}}
flash.kernel @k "forward" form "cpu" of @v attributes {block_m = 64 : i64, block_n = 64 : i64, dtype = f32, head_dim = 64 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 0 : i64} {
}

// -----

attn.variant @v() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}
// expected-error @+1 {{head_dim must be a positive multiple of 8, got 12}}
flash.kernel @k "forward" form "cpu" of @v attributes {block_m = 64 : i64, block_n = 64 : i64, dtype = f32, head_dim = 12 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 0 : i64} {
}

// -----

attn.variant @v() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}
// expected-error @+1 {{dtype must be f32, f16 or bf16, got 'i32'}}
flash.kernel @k "forward" form "cpu" of @v attributes {block_m = 64 : i64, block_n = 64 : i64, dtype = i32, head_dim = 64 : i64, v_head_dim = 64 : i64, vector_width = 8 : i64, warps = 0 : i64} {
}

// -----

func.func @f(%i: !flash.item) {
  // expected-error @+1 {{tensor must be q or do, got 'k'}}
  %q = flash.load_query "k" of %i
  return
}

// -----

func.func @f(%i: !flash.item) {
  // expected-error @+1 {{only q is signed by the scale}}
  %q = flash.load_query "do" of %i signed_by_scale
  return
}

// -----

func.func @f(%i: !flash.item) {
  // expected-error @+1 {{value must be lse or delta, got 'm'}}
  %r = flash.load_rows "m" of %i
  return
}

// -----

func.func @f(%q: !flash.query, %kv: !flash.kv) {
  // expected-error @+1 {{with must be k or v, got 'q'}}
  %s = flash.product %q x "q" of %kv
  return
}

// -----

func.func @f(%a: !flash.acc, %s: !flash.scores, %q: !flash.query) {
  // expected-error @+1 {{pv takes a KV tile}}
  %r = flash.accumulate "pv" %a + %s x %q : !flash.query
  return
}

// -----

func.func @f(%a: !flash.acc, %s: !flash.scores, %kv: !flash.kv) {
  // expected-error @+1 {{dk takes query-side rows}}
  %r = flash.accumulate "dk" %a + %s x %kv : !flash.kv
  return
}

// -----

func.func @f(%a: !flash.acc, %s: !flash.scores, %kv: !flash.kv) {
  // expected-error @+1 {{kind must be pv, dq, dv or dk, got 'qq'}}
  %r = flash.accumulate "qq" %a + %s x %kv : !flash.kv
  return
}

// -----

func.func @f(%a: !flash.acc, %s: !flash.scores, %kv: !flash.kv) {
  // expected-error @+1 {{row_sums is for pv only, got 'dq'}}
  %r = flash.accumulate "dq" %a + %s x %kv {row_sums} : !flash.kv
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{row_sums is for width v only}}
  %a = flash.zero_acc "k" {row_sums}
  return
}

// -----

func.func @f() {
  // expected-error @+1 {{width must be v or k, got 'w'}}
  %a = flash.zero_acc "w"
  return
}

// -----

func.func @f(%i: !flash.item, %a: !flash.acc) {
  // expected-error @+1 {{grad must be dq, dk or dv, got 'do'}}
  flash.store_grad "do" %a of %i
  return
}

// -----

func.func @f(%r: !flash.rows) {
  // expected-error @+1 {{body must take 1 f32 arguments (one per input), takes 2}}
  %x = flash.rows_map(%r) {
  ^bb0(%a: f32, %b: f32):
    flash.yield %a : f32
  }
  return
}

// -----

func.func @f(%r: !flash.rows) {
  // expected-error @+1 {{body arguments must be f32, got 'i32'}}
  %x = flash.rows_map(%r) {
  ^bb0(%a: i32):
    %c = arith.constant 0.0 : f32
    flash.yield %c : f32
  }
  return
}

// -----

func.func @f(%r: !flash.rows) {
  // expected-error @+1 {{body must yield one f32}}
  %x = flash.rows_map(%r) {
  ^bb0(%a: f32):
    %c = arith.constant 0 : i32
    flash.yield %c : i32
  }
  return
}

// -----

func.func @f(%r: !flash.rows) {
  %x = flash.rows_map(%r) {
  ^bb0(%a: f32):
    // expected-error @+1 {{is not allowed in a flash map: arith and math only}}
    %c = vector.broadcast %a : f32 to vector<4xf32>
    flash.yield %a : f32
  }
  return
}

// -----

func.func @f(%r: !flash.rows) {
  // expected-error @+1 {{takes at least one tile of scores}}
  %x = flash.scores_map() rows(%r) {
  ^bb0(%a: f32):
    flash.yield %a : f32
  }
  return
}

// -----

func.func @f(%i: !flash.item, %a: !flash.acc) {
  // expected-error @+1 {{body arguments must be '!flash.tile', '!flash.acc', got '!flash.item', '!flash.acc'}}
  %r = flash.for_tiles %i iter_args(%a) : !flash.acc {
  ^bb0(%t: !flash.item, %x: !flash.acc):
    flash.yield %x : !flash.acc
  }
  return
}

// -----

func.func @f(%i: !flash.item, %a: !flash.acc, %r: !flash.rows) {
  // expected-error @+1 {{body must yield the iteration values' types}}
  %o = flash.for_tiles %i iter_args(%a) : !flash.acc {
  ^bb0(%t: !flash.tile, %x: !flash.acc):
    flash.yield %r : !flash.rows
  }
  return
}

// -----

func.func @f(%i: !flash.item, %a: !flash.acc) {
  // expected-error @+1 {{body arguments must be '!flash.item', '!flash.tile', '!flash.acc', got '!flash.tile', '!flash.acc'}}
  %r = flash.for_query_tiles %i iter_args(%a) : !flash.acc {
  ^bb0(%t: !flash.tile, %x: !flash.acc):
    flash.yield %x : !flash.acc
  }
  return
}

// -----

func.func @f(%s: !flash.scores, %ds: !flash.scores, %l: !flash.rows, %t: !flash.tile) {
  // expected-error @+1 {{accumulate must be all, query or others, got 'some'}}
  %x = flash.score_grad %s ds %ds lse %l on %t {accumulate = "some"}
  return
}
