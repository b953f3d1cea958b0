//===- VariantInfo.cpp - attn IR -> the runtime's modifier program ------===//
#include "attnc/Codegen/VariantInfo.h"

#include "llvm/ADT/DenseMap.h"

#include <cmath>
#include <cstdio>
#include <sstream>

using namespace mlir;

namespace attnc {
namespace {

std::string dtypeOf(Type t) {
  if (t.isF32()) return "f32";
  if (t.isF16()) return "f16";
  if (t.isBF16()) return "bf16";
  if (t.isInteger(64)) return "i64";
  if (t.isInteger(1)) return "bool";
  return "i32";
}

std::string floatText(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", d);
  return buf;
}

/// Prints the ops of `block`, naming results %0, %1, ... in order. A sum
/// is `%R = sum COUNT %I` (its index %I), its body, then `endsum TERM`.
void printOps(Block &block, llvm::DenseMap<Value, std::string> &names,
              int &next, std::ostringstream &os) {
  auto use = [&](Value v) { return names.lookup(v); };
  for (Operation &op : block) {
    if (auto y = dyn_cast<attn::YieldOp>(op)) {
      os << (isa<attn::SumOp>(op.getParentOp()) ? "  endsum " : "  yield ")
         << use(y.getValue()) << "\n";
      continue;
    }
    if (auto a = dyn_cast<attn::AccumulateOp>(op)) {
      os << "  accumulate " << a.getParam().str();
      for (Value v : op.getOperands())
        os << " " << use(v);
      os << "\n";
      continue;
    }
    std::string dst = "%" + std::to_string(next++);
    names[op.getResult(0)] = dst;
    os << "  " << dst << " = ";
    if (auto s = dyn_cast<attn::SumOp>(op)) {
      Block &body = s.getBody().front();
      std::string index = "%" + std::to_string(next++);
      names[body.getArgument(0)] = index;
      os << "sum " << use(s.getCount()) << " " << index << "\n";
      printOps(body, names, next, os);
      continue;
    }
    if (auto c = dyn_cast<arith::ConstantOp>(op)) {
      if (auto f = dyn_cast<FloatAttr>(c.getValue()))
        os << "const.f32 " << floatText(f.getValueAsDouble());
      else if (c.getType().isInteger(1))
        os << "const.i1 " << (cast<IntegerAttr>(c.getValue()).getInt() & 1);
      else
        os << "const.i32 " << cast<IntegerAttr>(c.getValue()).getInt();
    } else if (auto g = dyn_cast<attn::GatherOp>(op)) {
      os << "gather " << g.getCapture().str();
      for (Value i : g.getIndices())
        os << " " << use(i);
    } else if (auto s = dyn_cast<attn::ScalarOp>(op)) {
      os << "scalar " << s.getParam().str();
    } else if (auto z = dyn_cast<attn::SizeOp>(op)) {
      os << "size " << z.getDim().str();
    } else {
      os << op.getName().getStringRef().str();
      if (auto c = dyn_cast<arith::CmpIOp>(op))
        os << " " << arith::stringifyCmpIPredicate(c.getPredicate()).str();
      if (auto c = dyn_cast<arith::CmpFOp>(op))
        os << " " << arith::stringifyCmpFPredicate(c.getPredicate()).str();
      for (Value v : op.getOperands())
        os << " " << use(v);
    }
    os << "\n";
  }
}

/// score_mod and score_grad take (score, b, h, q, kv), mask_mod (b, h, q,
/// kv); score_grad's sixth argument, the upstream gradient, is read by an
/// `upstream` op at its start.
void printRegion(Block &block, bool isScore, std::ostringstream &os) {
  llvm::DenseMap<Value, std::string> names;
  const char *scoreArgs[] = {"%score", "%b", "%h", "%q", "%kv"};
  const char *maskArgs[] = {"%b", "%h", "%q", "%kv"};
  int next = 0;
  for (BlockArgument a : block.getArguments()) {
    unsigned i = a.getArgNumber();
    if (i == 5) {
      names[a] = "%" + std::to_string(next++);
      os << "  " << names[a] << " = upstream\n";
    } else {
      names[a] = isScore ? scoreArgs[i] : maskArgs[i];
    }
  }
  printOps(block, names, next, os);
}

} // namespace

std::string printVariantInfo(attn::VariantOp v, const MaskAnalysis &m) {
  std::ostringstream os;
  os << "variant " << v.getSymName().str() << "\n";
  for (Attribute a : v.getParams()) {
    auto p = cast<attn::ParamAttr>(a);
    os << "param " << p.getName().getValue().str() << " "
       << (p.isTensor() ? "tensor " : "scalar ") << dtypeOf(p.getElementType());
    for (Attribute d : p.getDims()) {
      if (auto s = dyn_cast<StringAttr>(d))
        os << " " << s.getValue().str();
      else
        os << " " << cast<IntegerAttr>(d).getInt();
    }
    os << "\n";
  }
  os << "mask-kind "
     << (m.kind == rt::MaskKind::None     ? "none"
         : m.kind == rt::MaskKind::Closed ? "closed"
                                          : "data")
     << "\n";
  os << "mask-uses" << (m.usesBatch ? " b" : "") << (m.usesHead ? " h" : "")
     << "\n";
  os << "score\n";
  printRegion(v.getScoreBlock(), true, os);
  os << "mask\n";
  printRegion(v.getMaskBlock(), false, os);
  if (Block *grad = v.getGradBlock()) {
    os << "grad\n";
    printRegion(*grad, true, os);
  }
  os << "end\n";
  return os.str();
}

} // namespace attnc
