//===- attn-opt.cpp - mlir-opt with the attn dialect ---------------------===//
//
// The compiler engineer's tool: parses, verifies, transforms and prints
// `attn` IR with the dialects it uses and the project's passes.
//
//===----------------------------------------------------------------------===//
#include "attn/AttnDialect.h"
#include "flash/FlashDialect.h"
#include "attnc/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::registerInlinerPass();
  mlir::registerSymbolDCEPass();
  attnc::registerAttncPasses();

  mlir::DialectRegistry registry;
  // attn and what its modifiers use, plus the dialects of the later stages
  // (`attnc compile --emit=tiled|gpu|nvvm`), so their output re-parses.
  registry.insert<mlir::attn::AttnDialect, mlir::flash::FlashDialect,
                  mlir::arith::ArithDialect,
                  mlir::math::MathDialect, mlir::func::FuncDialect,
                  mlir::scf::SCFDialect, mlir::memref::MemRefDialect,
                  mlir::vector::VectorDialect, mlir::gpu::GPUDialect,
                  mlir::LLVM::LLVMDialect, mlir::NVVM::NVVMDialect,
                  mlir::nvgpu::NVGPUDialect>();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "attn optimizer driver\n", registry));
}
