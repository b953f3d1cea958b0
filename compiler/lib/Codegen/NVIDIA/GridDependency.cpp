//===- GridDependency.cpp - The split-KV merge as a dependent launch -----===//
//
// The forward kernel's griddepcontrol.launch_dependents and the merge's
// griddepcontrol.wait (GridDependency.h), as asm statements that clobber
// memory: LLVM's intrinsics for them touch no memory in its model, so a
// load of the partials could be scheduled above the wait.
//
//===----------------------------------------------------------------------===//
#include "GridDependency.h"
#include "InlinePtx.h"
#include "attnc/runtime/Package.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace attnc {

void addGridDependencyControl(ModuleOp module, const std::string &chip) {
  if (rt::targetNumber(chip) < 90)
    return;
  module.walk([&](gpu::GPUModuleOp gm) {
    llvm::StringSet<> names;
    for (gpu::GPUFuncOp f : gm.getOps<gpu::GPUFuncOp>())
      names.insert(f.getName());
    for (gpu::GPUFuncOp f : gm.getOps<gpu::GPUFuncOp>()) {
      if (!f.isKernel() || f.getBody().empty())
        continue;
      Block &entry = f.getBody().front();
      StringRef name = f.getName();
      if (names.contains((name + "_merge").str())) {
        ImplicitLocOpBuilder b(f.getLoc(), f.getContext());
        b.setInsertionPointToStart(&entry);
        codegen::inlinePtx(b, {}, {}, "griddepcontrol.launch_dependents;",
                           "~{memory}");
      }
      StringRef kernel = name;
      if (!kernel.consume_back("_merge") || !names.contains(kernel) ||
          entry.getNumArguments() < 2)
        continue;
      // The first operation of the entry block that reads a partial row
      // (in itself or in a region it holds).
      Operation *first = nullptr;
      for (unsigned a : {0u, 1u})
        for (Operation *user : entry.getArgument(a).getUsers())
          if (Operation *at = entry.findAncestorOpInBlock(*user))
            if (!first || at->isBeforeInBlock(first))
              first = at;
      if (!first)
        continue;
      ImplicitLocOpBuilder b(f.getLoc(), f.getContext());
      b.setInsertionPoint(first);
      codegen::inlinePtx(b, {}, {}, "griddepcontrol.wait;", "~{memory}");
    }
  });
}

} // namespace attnc
