//===- FlashBase.td - The flash dialect and its types ------*- tablegen -*-===//
#ifndef FLASH_BASE_TD
#define FLASH_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Flash_Dialect : Dialect {
  let name = "flash";
  let summary = "The tiled flash-attention algorithm, target-neutral";
  let description = [{
    The level between a variant (`attn`) and a kernel form's target code.
    A `flash.kernel` holds the algorithm of one kernel over tiles: for a
    work item (a Q tile of a sequence and head), a loop over its visited
    KV tiles with tile-level ops — QK^T, the variant's modifiers, the
    online softmax as row reductions and element-wise maps in one unit
    convention, the accumulator's rescale, P V — and the epilogue; the
    backward's kernels likewise. Values are tiles whose layout is the
    form's business: a kernel form lowers each op (the conversion passes
    `-convert-flash-to-<form>`), so the algorithm is written once, here,
    and every form shares it.
  }];
  let cppNamespace = "::mlir::flash";
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
  let useDefaultTypePrinterParser = 1;
}

class Flash_Type<string name, string typeMnemonic, string summaryText>
    : TypeDef<Flash_Dialect, name> {
  let mnemonic = typeMnemonic;
  let summary = summaryText;
}

def Flash_Item : Flash_Type<"Item", "item",
    "A work item: a Q tile of one sequence and query head (or head group), "
    "and its KV split">;
def Flash_Tile : Flash_Type<"Tile", "tile",
    "A visited KV tile of a work item: its keys and class (full, partial)">;
def Flash_Query : Flash_Type<"Query", "query",
    "A work item's query-side rows, staged for products (Q, or dO)">;
def Flash_KeyValue : Flash_Type<"KeyValue", "kv",
    "A KV tile's K and V rows, staged for products">;
def Flash_Scores : Flash_Type<"Scores", "scores",
    "An f32 tile over (query row, key) of the work item and KV tile">;
def Flash_Rows : Flash_Type<"Rows", "rows",
    "An f32 value per query row of the work item">;
def Flash_Partials : Flash_Type<"Partials", "partials",
    "An f32 value per query row kept as partial sums (a form may hold each "
    "row's sum in pieces until flash.complete)">;
def Flash_Acc : Flash_Type<"Acc", "acc",
    "An f32 accumulator over (query row, value dim): O">;

class Flash_Op<string mnemonic, list<Trait> traits = []>
    : Op<Flash_Dialect, mnemonic, traits>;

#endif // FLASH_BASE_TD
