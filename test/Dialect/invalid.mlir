// RUN: attn-opt %s -split-input-file -verify-diagnostics
// One case per verifier message of the attn dialect.

// expected-error @+1 {{duplicate parameter 'a'}}
attn.variant @dup(a: f32, a: i32) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

// expected-error @+1 {{scalar parameter 'x' must be f32, i32 or i1, got 'f16'}}
attn.variant @scalar_type(x: f16) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

// expected-error @+1 {{tensor parameter 't' must hold f32, f16, bf16, i32, i64 or i1, got 'f64'}}
attn.variant @tensor_type(t: f64[H]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

// expected-error @+1 {{dimension of 't' must be a symbol name or a positive integer, got 0}}
attn.variant @bad_dim(t: f32[H, 0]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

// expected-error @+1 {{parameter with an empty name}}
attn.variant @empty_name("": f32) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

// expected-error @+1 {{'score_mod' region must take (f32, i32, i32, i32, i32), got (f32, i32, i32, i32)}}
attn.variant @score_args() score_mod(%s: f32, %b: i32, %h: i32, %q: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

// expected-error @+1 {{'mask_mod' region must take (i32, i32, i32, i32), got (i32, i32, f32, i32)}}
attn.variant @mask_args() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: f32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

// A modifier must end in a terminator (MLIR's structural check runs first).
attn.variant @no_yield() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{block with no terminator}}
  %c = arith.constant 1.0 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @score_yield_type() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{'attn.yield' op in 'score_mod' must yield 'f32', got 'i32'}}
  attn.yield %q : i32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @mask_yield_type() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{'attn.yield' op in 'mask_mod' must yield 'i1', got 'i32'}}
  attn.yield %q : i32
}

// -----

attn.variant @unknown_capture(t: f32[H]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{unknown capture '@bias' in variant '@unknown_capture'}}
  %0 = attn.gather @bias[%h] : f32
  attn.yield %0 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @gather_scalar(c: f32) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{'@c' is a scalar; read it with attn.scalar}}
  %0 = attn.gather @c[%h] : f32
  attn.yield %0 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @gather_rank(t: f32[B, H, Q]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{'@t' has rank 3 but 2 indices were given}}
  %0 = attn.gather @t[%b, %h] : f32
  attn.yield %0 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @gather_result(t: bf16[H]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{reading '@t' ('bf16') yields 'f32', not 'i32'}}
  %0 = attn.gather @t[%h] : i32
  %1 = arith.sitofp %0 : i32 to f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @gather_index_type(t: f32[H]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %i = arith.constant 1 : i64
  // expected-error @+1 {{operand #0 must be variadic of 32-bit signless integer, but got 'i64'}}
  %0 = "attn.gather"(%i) <{capture = @t}> : (i64) -> f32
  attn.yield %0 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

func.func @gather_outside(%i: i32) -> f32 {
  // expected-error @+1 {{must be nested in an attn.variant}}
  %0 = attn.gather @t[%i] : f32
  return %0 : f32
}

// -----

attn.variant @unknown_scalar() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{unknown parameter '@w' in variant '@unknown_scalar'}}
  %w = attn.scalar @w : f32
  attn.yield %w : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @scalar_of_tensor(t: f32[H]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{'@t' is a tensor; read it with attn.gather}}
  %t = attn.scalar @t : f32
  attn.yield %t : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @scalar_type_mismatch(w: i32) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{'@w' is 'i32', not 'f32'}}
  %w = attn.scalar @w : f32
  attn.yield %w : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

func.func @scalar_outside() -> f32 {
  // expected-error @+1 {{must be nested in an attn.variant}}
  %0 = attn.scalar @w : f32
  return %0 : f32
}

// -----

func.func @yield_outside(%x: f32) {
  // expected-error @+1 {{expects parent op to be one of 'attn.variant, attn.sum'}}
  attn.yield %x : f32
}

// -----

// expected-error @+1 {{a tensor parameter needs at least one dimension}}
attn.variant @no_dims(t: f32[]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @unknown_size(t: f32[N]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{'M' is neither B, H, HKV, Q, KV nor a free dimension of a capture of '@unknown_size'}}
  %0 = attn.size "M" : i32
  %1 = arith.sitofp %0 : i32 to f32
  attn.yield %1 : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @sum_yield(t: f32[N]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %c = arith.constant 3 : i32
  %r = attn.sum %c : f32 {
  ^bb0(%i: i32):
    // expected-error @+1 {{in an attn.sum of 'f32' must yield 'f32', got 'i32'}}
    attn.yield %i : i32
  }
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @sum_index(t: f32[N]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  %c = arith.constant 3 : i32
  // expected-error @+1 {{body must take one i32 index, got (f32)}}
  %r = attn.sum %c : f32 {
  ^bb0(%i: f32):
    attn.yield %i : f32
  }
  attn.yield %r : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

// expected-error @+1 {{'score_grad' region must take (f32, i32, i32, i32, i32, f32), got (f32, i32, i32, i32, i32)}}
attn.variant @grad_args() score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
} score_grad(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
}

// -----

attn.variant @accumulate_outside(t: f32[H]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  // expected-error @+1 {{must be nested in the score_grad region of an attn.variant}}
  attn.accumulate @t[%h], %s : f32
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
}

// -----

attn.variant @accumulate_int(n: i32[H]) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
} score_grad(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
  // expected-error @+1 {{'@n' is 'i32'; only float parameters have gradients}}
  attn.accumulate @n[%h], %dy : f32
  attn.yield %dy : f32
}

// -----

attn.variant @accumulate_rank(t: f32[H], c: f32) score_mod(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
  attn.yield %s : f32
} mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
  %t = arith.constant true
  attn.yield %t : i1
} score_grad(%s: f32, %b: i32, %h: i32, %q: i32, %kv: i32, %dy: f32) {
  // expected-error @+1 {{'@c' has rank 0 but 1 indices were given}}
  attn.accumulate @c[%h], %dy : f32
  attn.yield %dy : f32
}
