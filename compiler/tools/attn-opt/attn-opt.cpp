//===- attn-opt.cpp - mlir-opt with the attn dialect ---------------------===//
//
// The compiler engineer's tool: parses, verifies, transforms and prints
// `attn` IR with the dialects it uses and the project's passes.
//
//===----------------------------------------------------------------------===//
#include "attn/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerInlinerPass();
  mlir::registerSymbolDCEPass();

  mlir::DialectRegistry registry;
  registry.insert<mlir::attn::AttnDialect, mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::func::FuncDialect,
                  mlir::scf::SCFDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "attn optimizer driver\n", registry));
}
