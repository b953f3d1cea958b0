//===- BalanceLogic.h - and/or chains as balanced trees ---------*- C++ -*-===//
//
// -attn-balance-logic as a function (the attn pipeline runs it): every
// unbalanced tree of arith.andi or arith.ori under `root` becomes a
// balanced tree over the same leaves (BalanceLogic.cpp says why).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_BALANCELOGIC_H
#define ATTNC_CODEGEN_BALANCELOGIC_H

#include "mlir/IR/Operation.h"

namespace attnc {

void balanceLogic(mlir::Operation *root);

} // namespace attnc

#endif
