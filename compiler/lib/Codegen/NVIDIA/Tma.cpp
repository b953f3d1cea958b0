//===- Tma.cpp - TMA loads completed on mbarriers, as inline PTX ----------===//
#include "Tma.h"
#include "InlinePtx.h"

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
