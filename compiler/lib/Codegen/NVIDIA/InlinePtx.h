//===- InlinePtx.h - One PTX instruction as an LLVM asm statement -*- C++ -*-===//
//
// What the sm_90 emitters (Wgmma.h, Tma.h) write instructions with that
// MLIR's NVVM dialect lacks or lowers in another form: an asm statement
// with side effects (never reordered past memory operations when its
// constraints end in ~{memory}).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_NVIDIA_INLINEPTX_H
#define ATTNC_CODEGEN_NVIDIA_INLINEPTX_H

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"

#include <string>

namespace attnc::codegen {

/// `text` with `operands` under `constraints` (LLVM's syntax), returning
/// `results` (none, one, or a struct of several).
inline mlir::LLVM::InlineAsmOp inlinePtx(mlir::ImplicitLocOpBuilder &b,
                                         mlir::TypeRange results,
                                         mlir::ValueRange operands,
                                         const std::string &text,
                                         const std::string &constraints) {
  mlir::Type res;
  if (results.size() == 1)
    res = results[0];
  else if (!results.empty())
    res = mlir::LLVM::LLVMStructType::getLiteral(b.getContext(),
                                                 llvm::to_vector(results));
  return mlir::LLVM::InlineAsmOp::create(
      b, res, operands, text, constraints, /*has_side_effects=*/true,
      /*is_align_stack=*/false, mlir::LLVM::tailcallkind::TailCallKind::None,
      mlir::LLVM::AsmDialectAttr::get(b.getContext(),
                                      mlir::LLVM::AsmDialect::AD_ATT),
      mlir::ArrayAttr());
}

} // namespace attnc::codegen

#endif
