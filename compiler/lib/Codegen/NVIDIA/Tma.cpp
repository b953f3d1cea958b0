//===- Tma.cpp - TMA loads, mbarriers and warp roles, as inline PTX -------===//
#include "Tma.h"
#include "InlinePtx.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <string>

using namespace mlir;

namespace attnc::codegen {

void TmaEmitter::init(Value bar, int64_t count) {
  inlinePtx(b_, {}, {bar},
            "mbarrier.init.shared::cta.b64 [$0], " + std::to_string(count) + ";",
            "r,~{memory}");
}

void TmaEmitter::arriveExpectTx(Value bar, int64_t bytes) {
  inlinePtx(b_, {}, {bar},
            "mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], " +
                std::to_string(bytes) + ";",
            "r,~{memory}");
}

void TmaEmitter::arrive(Value bar) {
  inlinePtx(b_, {}, {bar}, "mbarrier.arrive.shared::cta.b64 _, [$0];",
            "r,~{memory}");
}

void TmaEmitter::namedBarrier(int64_t id, int64_t threads) {
  namedBarrier(arith::ConstantOp::create(b_, b_.getI32IntegerAttr(int32_t(id))),
               threads);
}

void TmaEmitter::namedBarrier(Value id, int64_t threads) {
  NVVM::BarrierOp::create(
      b_, TypeRange{}, id,
      arith::ConstantOp::create(b_, b_.getI32IntegerAttr(int32_t(threads))),
      NVVM::BarrierReductionAttr(), Value());
}

void TmaEmitter::namedArrive(Value id, int64_t threads) {
  // (NVVM's barrier.arrive is built from PTX by a pass this pipeline does
  // not run.)
  inlinePtx(b_, {}, {id}, "bar.arrive $0, " + std::to_string(threads) + ";",
            "r,~{memory}");
}

void TmaEmitter::syncWarp() {
  // The intrinsic, not an asm statement: LLVM knows it is convergent and
  // never duplicates it into the branches before it (each lane would then
  // meet a different instruction).
  NVVM::SyncWarpOp::create(
      b_, arith::ConstantOp::create(b_, b_.getI32IntegerAttr(-1)));
}

void TmaEmitter::setMaxRegisters(bool increase, int64_t count) {
  inlinePtx(b_, {}, {},
            std::string("setmaxnreg.") + (increase ? "inc" : "dec") +
                ".sync.aligned.u32 " + std::to_string(count) + ";",
            "~{memory}");
}

void TmaEmitter::waitParity(Value bar, Value parity) {
  // A block of its own: its register and label are local to it, so the
  // statement may appear (or be duplicated by LLVM) any number of times.
  inlinePtx(b_, {}, {bar, parity},
            "{\n\t.reg .pred attnc_done;\n"
            "attnc_wait:\n"
            "\tmbarrier.try_wait.parity.shared::cta.b64 attnc_done, [$0], $1;\n"
            "\t@!attnc_done bra.uni attnc_wait;\n}",
            "r,r,~{memory}");
}

void TmaEmitter::load3d(Value dst, Value map, Value x, Value y, Value z,
                        Value bar) {
  inlinePtx(b_, {}, {dst, map, x, y, z, bar},
            "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::"
            "complete_tx::bytes [$0], [$1, {$2, $3, $4}], [$5];",
            "r,l,r,r,r,r,~{memory}");
}

} // namespace attnc::codegen
