//===- AttnBase.td - The attn dialect and its attributes ---*- tablegen -*-===//
#ifndef ATTN_BASE_TD
#define ATTN_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Attn_Dialect : Dialect {
  let name = "attn";
  let summary = "Attention variants: score_mod and mask_mod closures";
  let description = [{
    The `attn` dialect holds attention variants as written by users: an
    `attn.variant` op with the variant's captured tensors and scalars, a
    `score_mod` region `(score: f32, b, h, q, kv: i32) -> f32` and a
    `mask_mod` region `(b, h, q, kv: i32) -> i1`. Everything inside the
    regions is `arith` and `math`, plus `attn.gather` (read a captured
    tensor) and `attn.scalar` (read a scalar parameter).
  }];
  let cppNamespace = "::mlir::attn";
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
  let useDefaultAttributePrinterParser = 1;
}

class Attn_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Attn_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Attn_ParamAttr : Attn_Attr<"Param", "param"> {
  let summary = "A variant parameter: a captured tensor or a scalar";
  let description = [{
    `name` is the parameter's name in the source; `elementType` is one of
    f32, f16, bf16, i32, i64, i1 for a tensor, f32 or i32 for a scalar;
    `dims` lists the tensor's dimensions, each a symbol string ("B", "H",
    "HKV", "Q", "KV" or a free name bound at run time) or a positive
    integer. A scalar has no dims.

    ```mlir
    #attn.param<"qamp", f32, ["B", "H", "Q"]>
    ```
  }];
  let parameters = (ins "::mlir::StringAttr":$name, "::mlir::Type":$elementType,
                        "::mlir::ArrayAttr":$dims);
  let assemblyFormat = "`<` $name `,` $elementType `,` $dims `>`";
  let extraClassDeclaration = [{
    bool isTensor() const { return !getDims().empty(); }
    unsigned getRank() const { return getDims().size(); }
  }];
}

class Attn_Op<string mnemonic, list<Trait> traits = []>
    : Op<Attn_Dialect, mnemonic, traits>;

#endif // ATTN_BASE_TD
