//===- AttnOps.td - Operations of the attn dialect ---------*- tablegen -*-===//
#ifndef ATTN_OPS_TD
#define ATTN_OPS_TD

include "attn/AttnBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/IR/OpAsmInterface.td"

def Attn_VariantOp : Attn_Op<"variant", [Symbol, IsolatedFromAbove,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "An attention variant: captures, score_mod and mask_mod";
  let description = [{
    Declares a variant's parameters and holds its two modifiers. Both
    regions are always present; an omitted modifier is the identity
    (`score_mod` yields `score`, `mask_mod` yields `true`). `q` and `kv` are
    absolute positions.

    ```mlir
    attn.variant @alibi(slope: f32[H])
        score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {
      %s = attn.gather @slope[%h] : f32
      %d = arith.subi %kv, %q : i32
      %df = arith.sitofp %d : i32 to f32
      %bias = arith.mulf %s, %df : f32
      %r = arith.addf %score, %bias : f32
      attn.yield %r : f32
    } mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {
      %true = arith.constant true
      attn.yield %true : i1
    }
    ```

    A third region, `score_grad`, is empty until `-attn-differentiate`
    builds it: the reverse-mode derivative of score_mod. It takes
    score_mod's arguments and `%dy`, the gradient flowing into score_mod's
    result, yields `%dy` times the derivative with respect to `score`, and
    adds `%dy` times the derivative with respect to each gathered float
    element and float scalar into that parameter's gradient with
    `attn.accumulate`.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypedArrayAttrBase<Attn_ParamAttr,
                                          "variant parameters">:$params);
  let regions = (region SizedRegion<1>:$score_mod, SizedRegion<1>:$mask_mod,
                        MaxSizedRegion<1>:$score_grad);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let hasCanonicalizer = 1;
  let extraClassDeclaration = [{
    /// The parameter named `name`, or null.
    ::mlir::attn::ParamAttr lookupParam(::llvm::StringRef name);
    ::mlir::Block &getScoreBlock() { return getScoreMod().front(); }
    ::mlir::Block &getMaskBlock() { return getMaskMod().front(); }
    /// The derivative region, or null before -attn-differentiate built it.
    ::mlir::Block *getGradBlock() {
      return getScoreGrad().empty() ? nullptr : &getScoreGrad().front();
    }
  }];
}

def Attn_AccumulateOp : Attn_Op<"accumulate", [
    MemoryEffects<[MemWrite]>]> {
  let summary = "Adds to the gradient of a float parameter";
  let description = [{
    Inside a `score_grad` region: adds `value` to the gradient of the
    enclosing variant's float parameter at `indices` (one i32 per dimension
    of a tensor, none for a scalar). A kernel adds every term of every
    (query, key) pair; where the kernels run several threads, the adds are
    atomic or reduced per thread, so the order is unspecified. Indices are
    clamped into the tensor, as a gather's are, so the gradient lands where
    the forward read.

    ```mlir
    attn.accumulate @qamp[%b, %h, %q], %g : f32
    attn.accumulate @barrier[], %g2 : f32
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param, Variadic<I32>:$indices,
                       F32:$value);
  let assemblyFormat =
      "$param `[` $indices `]` `,` $value attr-dict `:` type($value)";
  let hasVerifier = 1;
}

def Attn_YieldOp : Attn_Op<"yield", [Pure, Terminator, ReturnLike,
                                     ParentOneOf<["VariantOp", "SumOp"]>]> {
  let summary = "Yields a modifier's result, or a sum's term";
  let description = [{
    Ends a `score_mod` region with an `f32`, a `mask_mod` region with an
    `i1`, or the body of an `attn.sum` with the term of one index.

    ```mlir
    attn.yield %r : f32
    ```
  }];
  let arguments = (ins AnyType:$value);
  let assemblyFormat = "$value attr-dict `:` type($value)";
}

def Attn_GatherOp : Attn_Op<"gather", [Pure]> {
  let summary = "Reads one element of a captured tensor";
  let description = [{
    Reads `capture[indices...]` from the enclosing variant's captured tensor.
    There must be one `i32` index per dimension. The result is the element
    widened for computing: f32 for f32/f16/bf16 tensors, i32 for i32/i64
    tensors (i64 elements are truncated; the runtime refuses host data
    outside i32's range before a run), i1 for bool tensors. A rank-0 tensor
    of the language is a `[1]` tensor here, read at index 0.
    Out-of-range indices are clamped into the tensor by the backends; a
    gather never reads outside its buffer.

    ```mlir
    %v = attn.gather @qamp[%b, %h, %q] : f32
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$capture, Variadic<I32>:$indices);
  let results = (outs AnyTypeOf<[F32, I32, I1]>:$result);
  let assemblyFormat =
      "$capture `[` $indices `]` attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Attn_ScalarOp : Attn_Op<"scalar", [Pure,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "Reads a scalar parameter of the enclosing variant";
  let description = [{
    ```mlir
    %w = attn.scalar @window : i32
    %c = attn.scalar @causal : i1
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$param);
  let results = (outs AnyTypeOf<[F32, I32, I1]>:$result);
  let assemblyFormat = "$param attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Attn_SizeOp : Attn_Op<"size", [Pure,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmResultNames"]>]> {
  let summary = "Reads a problem size: B, H, HKV, Q, KV or a free dimension";
  let description = [{
    The call's batch size (`B`), query heads (`H`), key/value heads (`HKV`),
    query length (`Q`: the queries of this call) and key/value capacity
    (`KV`: the length of the K/V sequence axis), or the run-time value of a
    free dimension named in a captured tensor's shape, as an `i32`. These
    are the same sizes the shapes of the captures use.

    ```mlir
    %n = attn.size "KV" : i32
    ```
  }];
  let arguments = (ins StrAttr:$dim);
  let results = (outs I32:$result);
  let assemblyFormat = "$dim attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Attn_SumOp : Attn_Op<"sum", [RecursiveMemoryEffects,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "Sums a term over an index 0 <= i < count";
  let description = [{
    The language's `sum(i < N: term)`. The body takes the index `i` (i32)
    and yields the term (f32 or i32); the result is the sum of the terms in
    index order, starting from 0 (f32 additions rounded one by one; i32
    additions wrapping). A count of 0 or less sums nothing. The body may
    use values of the enclosing region; the count is i32.

    ```mlir
    %r = attn.sum %n : f32 {
    ^bb0(%i: i32):
      %a = attn.gather @qr[%b, %h, %q, %i] : f32
      %c = attn.gather @kr[%b, %kv, %i] : f32
      %t = arith.mulf %a, %c : f32
      attn.yield %t : f32
    }
    ```
  }];
  let arguments = (ins I32:$count);
  let results = (outs AnyTypeOf<[F32, I32]>:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$count `:` type($result) $body attr-dict";
  let hasVerifier = 1;
}

#endif // ATTN_OPS_TD
