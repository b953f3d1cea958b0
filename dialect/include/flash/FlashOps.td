//===- FlashOps.td - Operations of the flash dialect -------*- tablegen -*-===//
#ifndef FLASH_OPS_TD
#define FLASH_OPS_TD

include "flash/FlashBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"

//===----------------------------------------------------------------------===//
// The kernel
//===----------------------------------------------------------------------===//

def Flash_KernelOp : Flash_Op<"kernel", [Symbol, IsolatedFromAbove,
    SingleBlock, NoTerminator]> {
  let summary = "One kernel of a variant's flash program";
  let description = [{
    The algorithm of one kernel over tiles, for the variant `variant` (an
    `attn.variant` of the enclosing module), the kernel form `form` that
    lowers it (KernelForm.h) and its configuration. `kind` is `forward`
    (O and LSE of a work item), `bwd_q` (dQ and delta of a work item) or
    `bwd_kv` (dK, dV and the parameters' gradients of a KV tile).
    With `key_offsets` the kernel reads each sequence's first key position
    (the modifiers see key row r at that position + r); without it key r
    is at position r. `stages` is the K/V pipeline's stages where the
    request fixed them (0, the default: the form's choice).

    ```mlir
    flash.kernel @attnc_causal_bf16_d64v64_m64n64w4s2 forward form "mma-sync"
        of @causal attributes {block_m = 64 : i64, block_n = 64 : i64,
        dtype = bf16, head_dim = 64 : i64, v_head_dim = 64 : i64,
        vector_width = 8 : i64, warps = 4 : i64} {
      %item = flash.work_item
      ...
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, StrAttr:$kind, StrAttr:$form,
                       FlatSymbolRefAttr:$variant, TypeAttr:$dtype,
                       I64Attr:$head_dim, I64Attr:$v_head_dim, I64Attr:$block_m,
                       I64Attr:$block_n, I64Attr:$warps, I64Attr:$vector_width,
                       UnitAttr:$key_offsets,
                       DefaultValuedAttr<I64Attr, "0">:$stages);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $sym_name $kind `form` $form `of` $variant attr-dict-with-keyword $body
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mlir::Block &getBlock() { return getBody().front(); }
  }];
}

def Flash_YieldOp : Flash_Op<"yield", [Pure, Terminator, ReturnLike,
    ParentOneOf<["ForTilesOp", "ForQueryTilesOp", "RowsMapOp",
                 "ScoresMapOp"]>]> {
  let summary = "Yields a loop iteration's values, or a map's element";
  let arguments = (ins Variadic<AnyType>:$values);
  let builders = [OpBuilder<(ins), [{ /* nothing yielded */ }]>];
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Work items and staging
//===----------------------------------------------------------------------===//

def Flash_WorkItemOp : Flash_Op<"work_item", [Pure]> {
  let summary = "The work item this instance of the kernel computes";
  let description = [{
    Forward and `bwd_q`: a Q tile of one sequence and query head (or a
    group of heads packed into the tile), and its split of the KV tiles.
    `bwd_kv`: a KV tile of one sequence and KV head.
  }];
  let results = (outs Flash_Item:$item);
  let assemblyFormat = "attr-dict";
}

def Flash_LoadQueryOp : Flash_Op<"load_query", [MemoryEffects<[MemRead]>]> {
  let summary = "Stages a work item's query-side rows";
  let description = [{
    `q`: the item's Q rows; `do`: its rows of dO (the backward). Rows past
    the item's end are zero. With `signed_by_scale` (Q only), the rows are
    negated when the run-time softmax scale is negative: a forward that
    takes the scale in its exponents (flash.score_scale) uses |scale| there,
    and Q K^T with Q's sign is then the scaled product's sign.
  }];
  let arguments = (ins Flash_Item:$item, StrAttr:$tensor,
                       UnitAttr:$signed_by_scale);
  let results = (outs Flash_Query:$rows);
  let assemblyFormat = "$tensor `of` $item (`signed_by_scale` $signed_by_scale^)? attr-dict";
  let hasVerifier = 1;
}

def Flash_LoadRowsOp : Flash_Op<"load_rows", [MemoryEffects<[MemRead]>]> {
  let summary = "Reads a per-row value of a work item (the backward)";
  let description = [{
    `lse`: the forward's LSE of each row (-inf past the item's end);
    `delta`: rowsum(dO * O) - dLSE, which `bwd_q` forms (and stores for
    `bwd_kv`) and `bwd_kv` reads back.
  }];
  let arguments = (ins Flash_Item:$item, StrAttr:$value);
  let results = (outs Flash_Rows:$rows);
  let assemblyFormat = "$value `of` $item attr-dict";
  let hasVerifier = 1;
}

def Flash_ForTilesOp : Flash_Op<"for_tiles", [
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "Loops over the visited KV tiles of a work item";
  let description = [{
    Visits, in order, the KV tiles of the item's split that are not empty
    under the mask (the mask analysis classifies them: closed form, a block
    mask, or every tile full when there is no mask). The body gets the tile
    and the iteration values and yields the next ones; the results are the
    last. A form may pipeline the loop (stage the next tile while computing
    this one).

    ```mlir
    %r:3 = flash.for_tiles %item iter_args(%acc0, %m0, %l0)
        : !flash.acc, !flash.rows, !flash.partials {
    ^bb0(%t: !flash.tile, %acc: !flash.acc, %m: !flash.rows, %l: !flash.partials):
      ...
      flash.yield %acc2, %m2, %l2 : !flash.acc, !flash.rows, !flash.partials
    }
    ```
  }];
  let arguments = (ins Flash_Item:$item, Variadic<AnyType>:$inits);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Flash_ForQueryTilesOp : Flash_Op<"for_query_tiles", [
    SingleBlockImplicitTerminator<"YieldOp">, RecursiveMemoryEffects]> {
  let summary = "Loops over the work items a KV tile meets (bwd_kv)";
  let description = [{
    For a `bwd_kv` item (a KV tile), every query head of its KV head's
    group and every Q tile of theirs whose tile pair is not empty. The body
    gets that query-side item, the KV tile as that item sees it (its class
    for that Q tile) and the iteration values.
  }];
  let arguments = (ins Flash_Item:$item, Variadic<AnyType>:$inits);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$body);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Flash_KvTileOfOp : Flash_Op<"kv_tile_of", [Pure]> {
  let summary = "The KV tile a bwd_kv item is";
  let arguments = (ins Flash_Item:$item);
  let results = (outs Flash_Tile:$tile);
  let assemblyFormat = "$item attr-dict";
}

def Flash_LoadKeyValueOp : Flash_Op<"load_kv", [MemoryEffects<[MemRead]>]> {
  let summary = "Stages a KV tile's K and V rows";
  let description = [{
    From contiguous or paged K/V (the page table is a run-time argument);
    keys past the sequence's length are zero.
  }];
  let arguments = (ins Flash_Tile:$tile);
  let results = (outs Flash_KeyValue:$kv);
  let assemblyFormat = "$tile attr-dict";
}

//===----------------------------------------------------------------------===//
// Tile arithmetic
//===----------------------------------------------------------------------===//

def Flash_ProductOp : Flash_Op<"product", [Pure]> {
  let summary = "Query-side rows times a KV tile's K or V rows";
  let description = [{
    `rows x K^T` (`with = "k"`: S = Q K^T) or `rows x V^T` (`with = "v"`:
    dP = dO V^T), in f32, unscaled.
  }];
  let arguments = (ins Flash_Query:$rows, Flash_KeyValue:$kv, StrAttr:$with);
  let results = (outs Flash_Scores:$scores);
  let assemblyFormat = "$rows `x` $with `of` $kv attr-dict";
  let hasVerifier = 1;
}

def Flash_ApplyModsOp : Flash_Op<"apply_mods", [Pure]> {
  let summary = "The variant's modifiers on a tile of scores";
  let description = [{
    Each element x at (b, h, q, kv) becomes score_mod(x * scale, b, h, q,
    kv), with the run-time scale and each element's true positions; on a
    partial tile, or one with keys past the sequence's end, an element
    whose key is past the end or where mask_mod(b, h, q, kv) is false
    becomes -inf. Full tiles without a tail never evaluate mask_mod.

    `unscaled` (for an identity score_mod only): elements stay the products
    (no scale, no score_mod); the forward then takes the scale in its
    exponents (flash.score_scale) and its running maximum is over products.
  }];
  let arguments = (ins Flash_Scores:$scores, Flash_Tile:$tile,
                       UnitAttr:$unscaled);
  let results = (outs Flash_Scores:$result);
  let assemblyFormat = "$scores `on` $tile (`unscaled` $unscaled^)? attr-dict";
}

def Flash_DropoutOp : Flash_Op<"dropout", [Pure]> {
  let summary = "Dropout's keep mask applied to a tile (P, or dP)";
  let description = [{
    Each element x at (b, h, q, kv) becomes x * scale where the pair is
    kept and 0 where it is dropped; the mask and the factor 1 / (1 - p)
    come from the kernel's run-time dropout parameters (the runtime's
    Dropout.h: Philox 4x32-10 of the pair's true positions), so the mask
    is the same in every kernel form and tile. The forward applies it to
    P after the row sums, the backward to P (for dV) and to dP. A kernel
    holding this op is compiled with dropout.
  }];
  let arguments = (ins Flash_Scores:$scores, Flash_Tile:$tile);
  let results = (outs Flash_Scores:$result);
  let assemblyFormat = "$scores `on` $tile attr-dict";
}

def Flash_RowMaxOp : Flash_Op<"row_max", [Pure]> {
  let summary = "The maximum of each row of a tile";
  let arguments = (ins Flash_Scores:$scores);
  let results = (outs Flash_Rows:$rows);
  let assemblyFormat = "$scores attr-dict";
}

def Flash_RowSumOp : Flash_Op<"row_sum", [Pure]> {
  let summary = "The sum of each row of a tile, as partial sums";
  let arguments = (ins Flash_Scores:$scores);
  let results = (outs Flash_Partials:$sums);
  let assemblyFormat = "$scores attr-dict";
}

def Flash_FillRowsOp : Flash_Op<"fill_rows", [Pure]> {
  let summary = "A value for every row";
  let arguments = (ins F32Attr:$value);
  let results = (outs Flash_Rows:$rows);
  let assemblyFormat = "$value attr-dict";
}

def Flash_ScoreScaleOp : Flash_Op<"score_scale", [Pure]> {
  let summary = "|scale| for every row: the scale a forward takes in its exponents";
  let description = [{
    The magnitude of the run-time softmax scale, as a per-row value (a
    zero scale reads as the smallest normal float, so that a masked -inf
    score times it stays -inf; its exponents are still exactly 0). A
    forward whose score_mod is the identity may leave the products unscaled
    (flash.apply_mods unscaled, Q signed_by_scale) and fold |scale| into the
    one FMA each exponent already takes: p = 2^(s c - m c) with c = |scale|
    log2(e), m the running maximum of the products; LSE = |scale| m + ln l.
    Exact in real arithmetic (the maximum commutes with a non-negative
    factor); one multiply fewer per score.
  }];
  let results = (outs Flash_Rows:$rows);
  let assemblyFormat = "attr-dict";
}

def Flash_ZeroPartialsOp : Flash_Op<"zero_partials", [Pure]> {
  let summary = "Partial sums of zero for every row";
  let results = (outs Flash_Partials:$sums);
  let assemblyFormat = "attr-dict";
}

def Flash_RescaleSumOp : Flash_Op<"rescale_sum", [Pure]> {
  let summary = "Running partial sums rescaled, plus a tile's: sum * scale + add";
  let description = [{
    With `lse_only`, the sums serve the LSE alone (O's are its
    accumulator's, `flash.acc_sums`): a form may leave them as they are
    (and skip `add`'s row sums) in a kernel call that writes no LSE.
  }];
  let arguments = (ins Flash_Partials:$sum, Flash_Rows:$scale,
                       Flash_Partials:$add, UnitAttr:$lse_only);
  let results = (outs Flash_Partials:$result);
  let assemblyFormat = "$sum `*` $scale `+` $add attr-dict";
}

def Flash_CompleteOp : Flash_Op<"complete", [Pure]> {
  let summary = "Each row's partial sums, added up";
  let arguments = (ins Flash_Partials:$sums);
  let results = (outs Flash_Rows:$rows);
  let assemblyFormat = "$sums attr-dict";
}

def Flash_RowsMapOp : Flash_Op<"rows_map", [Pure,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "An element-wise function of per-row values";
  let description = [{
    The body takes one f32 per operand (a row's values) and yields the
    row's result; it holds `arith` and `math` only.

    ```mlir
    %mnew = flash.rows_map(%m, %tmax) {
    ^bb0(%a: f32, %b: f32):
      %x = arith.maximumf %a, %b : f32
      flash.yield %x : f32
    }
    ```
  }];
  let arguments = (ins Variadic<Flash_Rows>:$inputs);
  let results = (outs Flash_Rows:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "`(` $inputs `)` attr-dict-with-keyword $body";
  let hasRegionVerifier = 1;
}

def Flash_ScoresMapOp : Flash_Op<"scores_map", [Pure, AttrSizedOperandSegments,
    SingleBlockImplicitTerminator<"YieldOp">]> {
  let summary = "An element-wise function of tiles and per-row values";
  let description = [{
    For each element, the body takes the element of every `scores`
    operand, then its row's value of every `rows` operand (f32 each), and
    yields the result's element; `arith` and `math` only.

    ```mlir
    %p = flash.scores_map(%s) rows(%negm) {
    ^bb0(%x: f32, %n: f32):
      %y = math.fma %x, %log2e, %n : f32
      %e = math.exp2 %y : f32
      flash.yield %e : f32
    }
    ```
  }];
  let arguments = (ins Variadic<Flash_Scores>:$scores,
                       Variadic<Flash_Rows>:$rows);
  let results = (outs Flash_Scores:$result);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `(` $scores `)` (`rows` `(` $rows^ `)`)? attr-dict-with-keyword $body
  }];
  let hasRegionVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Accumulators
//===----------------------------------------------------------------------===//

def Flash_ZeroAccOp : Flash_Op<"zero_acc", [Pure]> {
  let summary = "An accumulator of zeros";
  let description = [{
    `width` is `v` (Dv: O, dV) or `k` (Dqk: dQ, dK). With `row_sums` (`v`
    only), the accumulator has a column of its rows' sums beside them: the
    forward's O with the softmax's sums, added to by `flash.accumulate pv
    {row_sums}` (P [V | 1]), rescaled with O by `flash.scale_acc`, read by
    `flash.acc_sums`.
  }];
  let arguments = (ins StrAttr:$width, UnitAttr:$row_sums);
  let results = (outs Flash_Acc:$acc);
  let assemblyFormat = "$width attr-dict";
  let hasVerifier = 1;
}

def Flash_AccSumsOp : Flash_Op<"acc_sums", [Pure]> {
  let summary = "Each row's sum from an accumulator's sums column";
  let description = [{
    The sums column of an accumulator made by `flash.zero_acc {row_sums}`:
    each row's whole sum (no partial sums to add).
  }];
  let arguments = (ins Flash_Acc:$acc);
  let results = (outs Flash_Rows:$rows);
  let assemblyFormat = "$acc attr-dict";
}

def Flash_ScaleAccOp : Flash_Op<"scale_acc", [Pure]> {
  let summary = "Each row of an accumulator times its row's value";
  let arguments = (ins Flash_Acc:$acc, Flash_Rows:$scale);
  let results = (outs Flash_Acc:$result);
  let assemblyFormat = "$acc `by` $scale attr-dict";
}

def Flash_AccumulateOp : Flash_Op<"accumulate", [Pure]> {
  let summary = "acc += a tile of scores times a KV tile's or query rows";
  let description = [{
    `pv` (forward: O += P V, rows by value dims), `dq` (dQ += dX K), `dv`
    (dV += P^T dO, keys by value dims), `dk` (dK += dX^T Q). `with` is the
    staged operand: the KV tile (pv, dq) or the query-side rows (dv, dk).
    With `row_sums` (pv only, into an accumulator with a sums column), each
    row's sum of the scores is added to that column: P [V | 1], the
    softmax's sums taken from the same rounded P as O (a tensor-core form:
    one MMA per 16 keys instead of an add per score).
  }];
  let arguments = (ins Flash_Acc:$acc, Flash_Scores:$scores,
                       AnyTypeOf<[Flash_KeyValue, Flash_Query]>:$with,
                       StrAttr:$kind, UnitAttr:$row_sums);
  let results = (outs Flash_Acc:$result);
  let assemblyFormat = [{
    $kind $acc `+` $scores `x` $with attr-dict `:` type($with)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// The backward's pair terms
//===----------------------------------------------------------------------===//

def Flash_ProbabilitiesOp : Flash_Op<"probabilities", [Pure]> {
  let summary = "P recomputed from the forward's LSE (the backward)";
  let description = [{
    p = exp(score_mod(s * scale, b, h, q, kv) - lse) where the pair is kept
    (its row has keys, the key is within the sequence and, on partial
    tiles, mask_mod holds), else 0.
  }];
  let arguments = (ins Flash_Scores:$scores, Flash_Rows:$lse, Flash_Tile:$tile);
  let results = (outs Flash_Scores:$result);
  let assemblyFormat = "$scores `lse` $lse `on` $tile attr-dict";
}

def Flash_ScoreGradOp : Flash_Op<"score_grad", [MemoryEffects<[MemWrite]>]> {
  let summary = "dX = scale * score_grad(s * scale, dy = dS) for kept pairs";
  let description = [{
    The variant's score_grad per kept pair (0 elsewhere). `accumulate`
    says which of its `attn.accumulate`s add into the float parameters'
    gradients here, so that each pair adds each once over the two kernels:
    "all" (`bwd_kv`, where `bwd_q` has none), or "query" (those whose
    element reads the query but not the key, qamp[b, h, q]: `bwd_q`, which
    holds a query's row over all its keys and sums them there) and
    "others" (`bwd_kv`: the rest). Absent: none.
  }];
  let arguments = (ins Flash_Scores:$scores, Flash_Scores:$ds, Flash_Rows:$lse,
                       Flash_Tile:$tile, OptionalAttr<StrAttr>:$accumulate);
  let results = (outs Flash_Scores:$result);
  let hasVerifier = 1;
  let assemblyFormat = "$scores `ds` $ds `lse` $lse `on` $tile attr-dict";
}

def Flash_AddOwnedQueryGradOp : Flash_Op<"add_owned_dq", [
    MemoryEffects<[MemRead, MemWrite]>]> {
  let summary = "dQ += dX K where a bwd_kv item owns the query rows";
  let description = [{
    A form whose `bwd_kv` items may cover every KV tile of their (b, KV
    head) (the CPU's, when there are at least as many pairs as threads)
    owns the dQ rows of the group's heads and adds into them here, and
    `bwd_q` is not launched; elsewhere it does nothing.
  }];
  let arguments = (ins Flash_Item:$query_item, Flash_Scores:$dx,
                       Flash_KeyValue:$kv);
  let assemblyFormat = "$dx `x` $kv `of` $query_item attr-dict";
}

//===----------------------------------------------------------------------===//
// Results
//===----------------------------------------------------------------------===//

def Flash_StoreOutputOp : Flash_Op<"store_output", [MemoryEffects<[MemWrite]>]> {
  let summary = "Writes a work item's O and LSE";
  let description = [{
    Row r of O is acc[r] * inv_l[r]; where LSE is asked for, row r's LSE
    is lse[r]. Rows past the item's end are not written; with split-KV,
    the item's split of the partial results.
  }];
  let arguments = (ins Flash_Item:$item, Flash_Acc:$acc, Flash_Rows:$inv_l,
                       Flash_Rows:$lse);
  let assemblyFormat = "$acc `*` $inv_l `lse` $lse `of` $item attr-dict";
}

def Flash_StoreGradOp : Flash_Op<"store_grad", [MemoryEffects<[MemWrite]>]> {
  let summary = "Writes a gradient accumulator (the backward)";
  let description = [{
    `dq` for a `bwd_q` item's rows, `dk` or `dv` for a `bwd_kv` item's
    keys (keys past the sequence's length, up to the K/V capacity, get
    zeros).
  }];
  let arguments = (ins Flash_Item:$item, Flash_Acc:$acc, StrAttr:$grad);
  let assemblyFormat = "$grad $acc `of` $item attr-dict";
  let hasVerifier = 1;
}

#endif // FLASH_OPS_TD
