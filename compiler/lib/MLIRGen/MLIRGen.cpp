//===- MLIRGen.cpp - Emit the attn dialect from the checked AST ----------===//
//
// Types map as i32 -> i32, f32 -> f32, bool -> i1. Implicit i32 -> f32
// promotions become arith.sitofp. Integer division and remainder are
// total: x / 0 = 0 and x % 0 = x (so that (x/y)*y + x%y == x), and
// INT_MIN / -1 wraps; the guards are only emitted when the divisor is not a
// constant that makes them unnecessary. i32(f) truncates toward zero,
// saturates at the i32 range and maps NaN to 0.
//
//===----------------------------------------------------------------------===//
#include "attnc/MLIRGen/MLIRGen.h"

#include "attn/AttnDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"

#include <cmath>
#include <limits>
#include <map>

namespace attnc {
namespace {

using namespace mlir;

class Generator {
public:
  Generator(MLIRContext &ctx, const Module &m, const std::string &file)
      : ctx_(ctx), m_(m), b_(&ctx), file_(StringAttr::get(&ctx, file)) {}

  OwningOpRef<ModuleOp> run(const std::string &only) {
    auto module = ModuleOp::create(FileLineColLoc::get(file_, 1, 1));
    b_.setInsertionPointToEnd(module.getBody());
    bool found = only.empty();
    for (const Variant &v : m_.variants) {
      if (!only.empty() && v.name != only)
        continue;
      found = true;
      emitVariant(v);
    }
    if (!found) {
      module->erase();
      return nullptr;
    }
    return module;
  }

private:
  Location loc(SourceLoc l) {
    return FileLineColLoc::get(file_, l.line, l.col);
  }
  mlir::Type mlirType(attnc::Type t) {
    switch (t) {
    case attnc::Type::I32: return b_.getI32Type();
    case attnc::Type::F32: return b_.getF32Type();
    default: return b_.getI1Type();
    }
  }
  mlir::Type elemType(ElemType t) {
    switch (t) {
    case ElemType::F32: return b_.getF32Type();
    case ElemType::F16: return b_.getF16Type();
    case ElemType::BF16: return b_.getBF16Type();
    case ElemType::I32: return b_.getI32Type();
    case ElemType::I64: return b_.getI64Type();
    case ElemType::Bool: return b_.getI1Type();
    }
    return {};
  }

  void emitVariant(const Variant &v) {
    SmallVector<Attribute> params;
    for (const VariantParam &p : v.params) {
      SmallVector<Attribute> dims;
      for (const Dim &d : p.dims)
        dims.push_back(d.symbol.empty()
                           ? Attribute(b_.getI64IntegerAttr(d.value))
                           : Attribute(b_.getStringAttr(d.symbol)));
      mlir::Type t = p.isTensor ? elemType(p.elem) : mlirType(p.scalarType);
      params.push_back(attn::ParamAttr::get(&ctx_, b_.getStringAttr(p.name), t,
                                            b_.getArrayAttr(dims)));
    }
    OpBuilder::InsertionGuard guard(b_);
    auto op = attn::VariantOp::create(b_, loc(v.loc),
                                      b_.getStringAttr(v.name),
                                      b_.getArrayAttr(params));
    variant_ = &v;
    mlir::Type f32 = b_.getF32Type(), i32 = b_.getI32Type();

    // score_mod(score: f32, b, h, q, kv: i32) -> f32
    {
      Location l = loc(v.scoreMod.present ? v.scoreMod.loc : v.loc);
      Block *block = b_.createBlock(&op.getScoreMod(), {},
                                    {f32, i32, i32, i32, i32},
                                    SmallVector<Location>(5, l));
      b_.setInsertionPointToStart(block);
      Value result = block->getArgument(0);
      if (v.scoreMod.present) {
        env_.clear();
        for (unsigned i = 0; i < 5; ++i)
          env_[v.scoreMod.params[i].name] = block->getArgument(i);
        result = convert(emitBody(v.scoreMod.body), attnc::Type::F32,
                         v.scoreMod.body.result->loc);
      }
      attn::YieldOp::create(b_, l, result);
    }
    // mask_mod(b, h, q, kv: i32) -> i1
    {
      Location l = loc(v.maskMod.present ? v.maskMod.loc : v.loc);
      Block *block = b_.createBlock(&op.getMaskMod(), {}, {i32, i32, i32, i32},
                                    SmallVector<Location>(4, l));
      b_.setInsertionPointToStart(block);
      Value result;
      if (v.maskMod.present) {
        env_.clear();
        for (unsigned i = 0; i < 4; ++i)
          env_[v.maskMod.params[i].name] = block->getArgument(i);
        result = emitBody(v.maskMod.body);
      } else {
        result = arith::ConstantOp::create(b_, l, b_.getBoolAttr(true));
      }
      attn::YieldOp::create(b_, l, result);
    }
  }

  /// Emits lets then the result, in the current environment.
  Value emitBody(const Body &body) {
    std::map<std::string, Value> saved = env_;
    for (const LetStmt &l : body.lets)
      env_[l.name] = emit(*l.value);
    Value r = emit(*body.result);
    env_ = std::move(saved);
    return r;
  }

  /// Converts `v` (of AST type `from`, inferred from its MLIR type) to `to`.
  Value convert(Value v, attnc::Type to, SourceLoc at) {
    if (to == attnc::Type::F32 && v.getType().isSignlessInteger(32))
      return arith::SIToFPOp::create(b_, loc(at), b_.getF32Type(), v);
    return v;
  }
  Value toF32(Value v, SourceLoc at) {
    return convert(v, attnc::Type::F32, at);
  }

  Value constI32(int64_t v, Location l) {
    return arith::ConstantOp::create(
        b_, l, b_.getI32IntegerAttr(static_cast<int32_t>(v)));
  }
  Value constF32(double v, Location l) {
    return arith::ConstantOp::create(
        b_, l, b_.getF32FloatAttr(static_cast<float>(v)));
  }

  Value emit(const Expr &e) {
    Location l = loc(e.loc);
    switch (e.kind) {
    case Expr::Kind::IntLit: return constI32(e.intValue, l);
    case Expr::Kind::FloatLit: return constF32(e.floatValue, l);
    case Expr::Kind::InfLit:
      return constF32(std::numeric_limits<double>::infinity(), l);
    case Expr::Kind::BoolLit:
      return arith::ConstantOp::create(b_, l, b_.getBoolAttr(e.boolValue));
    case Expr::Kind::Name: {
      if (e.ref == RefKind::Scalar) {
        const VariantParam &p = variant_->params[e.refIndex];
        return attn::ScalarOp::create(b_, l, mlirType(p.scalarType),
                                      FlatSymbolRefAttr::get(&ctx_, p.name));
      }
      if (e.ref == RefKind::Size)
        return attn::SizeOp::create(b_, l, b_.getI32Type(),
                                    b_.getStringAttr(e.name));
      if (e.ref == RefKind::Tensor) { // rank 0: held as [1]
        const VariantParam &p = variant_->params[e.refIndex];
        return attn::GatherOp::create(b_, l, mlirType(e.type),
                                      FlatSymbolRefAttr::get(&ctx_, p.name),
                                      ValueRange{constI32(0, l)});
      }
      return env_.at(e.name);
    }
    case Expr::Kind::Index: {
      SmallVector<Value> idx;
      for (const ExprPtr &o : e.operands)
        idx.push_back(emit(*o));
      const VariantParam &p = variant_->params[e.refIndex];
      return attn::GatherOp::create(b_, l, mlirType(e.type),
                                    FlatSymbolRefAttr::get(&ctx_, p.name),
                                    idx);
    }
    case Expr::Kind::Unary: {
      Value v = emit(*e.operands[0]);
      if (e.op == Tok::Bang || (e.op == Tok::Tilde && e.type == attnc::Type::Bool))
        return arith::XOrIOp::create(
            b_, l, v, arith::ConstantOp::create(b_, l, b_.getBoolAttr(true)));
      if (e.op == Tok::Tilde)
        return arith::XOrIOp::create(b_, l, v, constI32(-1, l));
      if (e.type == attnc::Type::F32)
        return arith::NegFOp::create(b_, l, v);
      return arith::SubIOp::create(b_, l, constI32(0, l), v);
    }
    case Expr::Kind::Binary: return emitBinary(e);
    case Expr::Kind::Sum: {
      Value n = emit(*e.operands[0]);
      mlir::Type t = mlirType(e.type);
      auto sum = attn::SumOp::create(b_, l, t, n);
      OpBuilder::InsertionGuard guard(b_);
      Block *body = b_.createBlock(&sum.getBody(), {}, {b_.getI32Type()},
                                   {loc(e.varLoc)});
      std::map<std::string, Value> saved = env_;
      env_[e.name] = body->getArgument(0);
      Value term = convert(emit(*e.operands[1]), e.type, e.operands[1]->loc);
      attn::YieldOp::create(b_, l, term);
      env_ = std::move(saved);
      return sum.getResult();
    }
    case Expr::Kind::Ternary: {
      Value c = emit(*e.operands[0]);
      Value a = emit(*e.operands[1]);
      Value b = emit(*e.operands[2]);
      if (e.type == attnc::Type::F32) {
        a = toF32(a, e.operands[1]->loc);
        b = toF32(b, e.operands[2]->loc);
      }
      return arith::SelectOp::create(b_, l, c, a, b);
    }
    case Expr::Kind::Call: return emitCall(e);
    }
    return {};
  }

  static bool isConstNotIn(Value v, std::initializer_list<int64_t> bad) {
    APInt c;
    if (!matchPattern(v, m_ConstantInt(&c)))
      return false;
    for (int64_t b : bad)
      if (c.getSExtValue() == b)
        return false;
    return true;
  }

  /// Total integer division/remainder; see the file comment.
  Value emitIntDivRem(bool isDiv, Value x, Value y, Location l) {
    if (isConstNotIn(y, {0, -1}))
      return isDiv ? Value(arith::DivSIOp::create(b_, l, x, y))
                   : Value(arith::RemSIOp::create(b_, l, x, y));
    Value zero = constI32(0, l), one = constI32(1, l), minus1 = constI32(-1, l);
    Value isZero =
        arith::CmpIOp::create(b_, l, arith::CmpIPredicate::eq, y, zero);
    Value isMinus1 =
        arith::CmpIOp::create(b_, l, arith::CmpIPredicate::eq, y, minus1);
    Value unsafe = arith::OrIOp::create(b_, l, isZero, isMinus1);
    Value safeY = arith::SelectOp::create(b_, l, unsafe, one, y);
    if (isDiv) {
      Value q = arith::DivSIOp::create(b_, l, x, safeY);
      Value neg = arith::SubIOp::create(b_, l, zero, x); // wraps for INT_MIN
      Value r = arith::SelectOp::create(b_, l, isMinus1, neg, q);
      return arith::SelectOp::create(b_, l, isZero, zero, r);
    }
    Value r = arith::RemSIOp::create(b_, l, x, safeY);
    r = arith::SelectOp::create(b_, l, isMinus1, zero, r);
    return arith::SelectOp::create(b_, l, isZero, x, r);
  }

  /// x << n and x >> n (arithmetic) with every count defined: a count
  /// outside [0, 31] gives 0 for <<, and x's sign (0 or -1) for >>, what
  /// Python's shifts give once wrapped to i32 (for counts of 32 and more).
  Value emitShift(bool left, Value x, Value n, Location l) {
    Value inRange = arith::CmpIOp::create(b_, l, arith::CmpIPredicate::ult, n,
                                          constI32(32, l));
    Value safeN = arith::SelectOp::create(b_, l, inRange, n, constI32(0, l));
    if (left) {
      Value s = arith::ShLIOp::create(b_, l, x, safeN);
      return arith::SelectOp::create(b_, l, inRange, s, constI32(0, l));
    }
    Value s = arith::ShRSIOp::create(b_, l, x, safeN);
    Value fill = arith::ShRSIOp::create(b_, l, x, constI32(31, l));
    return arith::SelectOp::create(b_, l, inRange, s, fill);
  }

  /// Python's floor division and modulo on i32 from the total truncating
  /// ones: the quotient rounds down and the remainder takes the divisor's
  /// sign; y = 0 gives 0 and x, as / and % do.
  Value emitFloorDivMod(bool isDiv, Value x, Value y, Location l) {
    Value zero = constI32(0, l);
    Value r = emitIntDivRem(false, x, y, l);
    // r != 0 && sign(r) != sign(y) (then y != 0 too).
    Value rNonZero =
        arith::CmpIOp::create(b_, l, arith::CmpIPredicate::ne, r, zero);
    Value signsDiffer = arith::CmpIOp::create(
        b_, l, arith::CmpIPredicate::slt, arith::XOrIOp::create(b_, l, r, y),
        zero);
    Value adjust = arith::AndIOp::create(b_, l, rNonZero, signsDiffer);
    if (isDiv) {
      Value q = emitIntDivRem(true, x, y, l);
      return arith::SelectOp::create(
          b_, l, adjust, arith::SubIOp::create(b_, l, q, constI32(1, l)), q);
    }
    return arith::SelectOp::create(b_, l, adjust,
                                   arith::AddIOp::create(b_, l, r, y), r);
  }

  Value emitBinary(const Expr &e) {
    Location l = loc(e.loc);
    const Expr &lhsE = *e.operands[0], &rhsE = *e.operands[1];
    Value x = emit(lhsE), y = emit(rhsE);
    switch (e.op) {
    case Tok::AndAnd:
    case Tok::Amp: return arith::AndIOp::create(b_, l, x, y);
    case Tok::OrOr:
    case Tok::Pipe: return arith::OrIOp::create(b_, l, x, y);
    case Tok::Caret: return arith::XOrIOp::create(b_, l, x, y);
    case Tok::Shl:
    case Tok::Shr: return emitShift(e.op == Tok::Shl, x, y, l);
    default: break;
    }
    bool isCmp = e.op == Tok::Lt || e.op == Tok::Le || e.op == Tok::Gt ||
                 e.op == Tok::Ge || e.op == Tok::EqEq || e.op == Tok::NotEq;
    bool floatOp = lhsE.type == attnc::Type::F32 ||
                   rhsE.type == attnc::Type::F32;
    if (isCmp && lhsE.type == attnc::Type::Bool) {
      auto pred = e.op == Tok::EqEq ? arith::CmpIPredicate::eq
                                    : arith::CmpIPredicate::ne;
      return arith::CmpIOp::create(b_, l, pred, x, y);
    }
    if (floatOp) {
      x = toF32(x, lhsE.loc);
      y = toF32(y, rhsE.loc);
    }
    if (isCmp) {
      if (floatOp) {
        // Ordered predicates: comparisons with NaN are false, except !=.
        arith::CmpFPredicate p;
        switch (e.op) {
        case Tok::Lt: p = arith::CmpFPredicate::OLT; break;
        case Tok::Le: p = arith::CmpFPredicate::OLE; break;
        case Tok::Gt: p = arith::CmpFPredicate::OGT; break;
        case Tok::Ge: p = arith::CmpFPredicate::OGE; break;
        case Tok::EqEq: p = arith::CmpFPredicate::OEQ; break;
        default: p = arith::CmpFPredicate::UNE; break;
        }
        return arith::CmpFOp::create(b_, l, p, x, y);
      }
      arith::CmpIPredicate p;
      switch (e.op) {
      case Tok::Lt: p = arith::CmpIPredicate::slt; break;
      case Tok::Le: p = arith::CmpIPredicate::sle; break;
      case Tok::Gt: p = arith::CmpIPredicate::sgt; break;
      case Tok::Ge: p = arith::CmpIPredicate::sge; break;
      case Tok::EqEq: p = arith::CmpIPredicate::eq; break;
      default: p = arith::CmpIPredicate::ne; break;
      }
      return arith::CmpIOp::create(b_, l, p, x, y);
    }
    if (floatOp) {
      switch (e.op) {
      case Tok::Plus: return arith::AddFOp::create(b_, l, x, y);
      case Tok::Minus: return arith::SubFOp::create(b_, l, x, y);
      case Tok::Star: return arith::MulFOp::create(b_, l, x, y);
      case Tok::Slash: return arith::DivFOp::create(b_, l, x, y);
      default: return arith::RemFOp::create(b_, l, x, y);
      }
    }
    switch (e.op) {
    case Tok::Plus: return arith::AddIOp::create(b_, l, x, y);
    case Tok::Minus: return arith::SubIOp::create(b_, l, x, y);
    case Tok::Star: return arith::MulIOp::create(b_, l, x, y);
    case Tok::Slash: return emitIntDivRem(true, x, y, l);
    default: return emitIntDivRem(false, x, y, l);
    }
  }

  /// x^y = 2^(y log2|x|), with the sign of a negative base for an odd
  /// integer y, NaN for a negative base and a non-integer y, and 1 for
  /// y = 0 (also for a NaN x), as C's pow.
  Value emitPow(Value x, Value y, Location l) {
    Value zero = constF32(0.0, l), one = constF32(1.0, l);
    Value ax = math::AbsFOp::create(b_, l, x);
    Value mag = math::Exp2Op::create(
        b_, l, arith::MulFOp::create(b_, l, y, math::Log2Op::create(b_, l, ax)));
    Value yInt = arith::CmpFOp::create(b_, l, arith::CmpFPredicate::OEQ,
                                       math::FloorOp::create(b_, l, y), y);
    Value half = arith::MulFOp::create(b_, l, y, constF32(0.5, l));
    Value yOdd = arith::AndIOp::create(
        b_, l, yInt,
        arith::CmpFOp::create(b_, l, arith::CmpFPredicate::ONE,
                              math::FloorOp::create(b_, l, half), half));
    Value xNeg =
        arith::CmpFOp::create(b_, l, arith::CmpFPredicate::OLT, x, zero);
    Value signed_ = arith::SelectOp::create(
        b_, l, yOdd, arith::NegFOp::create(b_, l, mag), mag);
    Value nan = constF32(std::numeric_limits<double>::quiet_NaN(), l);
    Value negBase = arith::SelectOp::create(b_, l, yInt, signed_, nan);
    Value r = arith::SelectOp::create(b_, l, xNeg, negBase, mag);
    Value yZero =
        arith::CmpFOp::create(b_, l, arith::CmpFPredicate::OEQ, y, zero);
    return arith::SelectOp::create(b_, l, yZero, one, r);
  }

  Value emitCall(const Expr &e) {
    Location l = loc(e.loc);
    SmallVector<Value> args;
    for (const ExprPtr &o : e.operands)
      args.push_back(emit(*o));
    if (e.fnIndex >= 0) {
      // Inline the helper: bind its parameters to the arguments.
      const FnDecl &fn = m_.fns[e.fnIndex];
      std::map<std::string, Value> saved = std::move(env_);
      env_.clear();
      for (size_t i = 0; i < args.size(); ++i)
        env_[fn.params[i].name] =
            convert(args[i], fn.params[i].type, e.operands[i]->loc);
      Value r = convert(emitBody(fn.body), fn.returnType, e.loc);
      env_ = std::move(saved);
      return r;
    }
    bool allInt = e.type == attnc::Type::I32;
    auto f32arg = [&](size_t i) { return toF32(args[i], e.operands[i]->loc); };
    switch (e.builtin) {
    case Builtin::Exp: return math::ExpOp::create(b_, l, f32arg(0));
    case Builtin::Exp2: return math::Exp2Op::create(b_, l, f32arg(0));
    case Builtin::Log: return math::LogOp::create(b_, l, f32arg(0));
    case Builtin::Log2: return math::Log2Op::create(b_, l, f32arg(0));
    case Builtin::Sqrt: return math::SqrtOp::create(b_, l, f32arg(0));
    case Builtin::Rsqrt: return math::RsqrtOp::create(b_, l, f32arg(0));
    case Builtin::Tanh: return math::TanhOp::create(b_, l, f32arg(0));
    case Builtin::Floor: return math::FloorOp::create(b_, l, f32arg(0));
    case Builtin::Sin: return math::SinOp::create(b_, l, f32arg(0));
    case Builtin::Cos: return math::CosOp::create(b_, l, f32arg(0));
    case Builtin::Tan: {
      Value x = f32arg(0);
      return arith::DivFOp::create(b_, l, math::SinOp::create(b_, l, x),
                                   math::CosOp::create(b_, l, x));
    }
    case Builtin::Log1p: return math::Log1pOp::create(b_, l, f32arg(0));
    case Builtin::Expm1: return math::ExpM1Op::create(b_, l, f32arg(0));
    case Builtin::Erf: return math::ErfOp::create(b_, l, f32arg(0));
    case Builtin::Pow: return emitPow(f32arg(0), f32arg(1), l);
    case Builtin::Sign: {
      // -1, 0 or 1; for f32 +-0 and NaN stay themselves.
      if (allInt) {
        Value zero = constI32(0, l);
        Value pos = arith::ExtUIOp::create(
            b_, l, b_.getI32Type(),
            arith::CmpIOp::create(b_, l, arith::CmpIPredicate::sgt, args[0], zero));
        Value neg = arith::ExtUIOp::create(
            b_, l, b_.getI32Type(),
            arith::CmpIOp::create(b_, l, arith::CmpIPredicate::slt, args[0], zero));
        return arith::SubIOp::create(b_, l, pos, neg);
      }
      Value x = f32arg(0);
      Value gt = arith::CmpFOp::create(b_, l, arith::CmpFPredicate::OGT, x,
                                       constF32(0.0, l));
      Value lt = arith::CmpFOp::create(b_, l, arith::CmpFPredicate::OLT, x,
                                       constF32(0.0, l));
      Value r = arith::SelectOp::create(b_, l, lt, constF32(-1.0, l), x);
      return arith::SelectOp::create(b_, l, gt, constF32(1.0, l), r);
    }
    case Builtin::FloorDiv:
    case Builtin::FloorMod: {
      bool isDiv = e.builtin == Builtin::FloorDiv;
      if (allInt)
        return emitFloorDivMod(isDiv, args[0], args[1], l);
      // f32: floor(x / y) and x - floor(x / y) * y.
      Value x = f32arg(0), y = f32arg(1);
      Value q = math::FloorOp::create(b_, l, arith::DivFOp::create(b_, l, x, y));
      if (isDiv)
        return q;
      return arith::SubFOp::create(b_, l, x, arith::MulFOp::create(b_, l, q, y));
    }
    case Builtin::Where: {
      Value a = args[1], b = args[2];
      if (e.type == attnc::Type::F32) {
        a = toF32(a, e.operands[1]->loc);
        b = toF32(b, e.operands[2]->loc);
      }
      return arith::SelectOp::create(b_, l, args[0], a, b);
    }
    case Builtin::IsNan: {
      Value x = f32arg(0);
      return arith::CmpFOp::create(b_, l, arith::CmpFPredicate::UNO, x, x);
    }
    case Builtin::IsInf:
      return arith::CmpFOp::create(
          b_, l, arith::CmpFPredicate::OEQ, math::AbsFOp::create(b_, l, f32arg(0)),
          constF32(std::numeric_limits<double>::infinity(), l));
    case Builtin::Ceil: return math::CeilOp::create(b_, l, f32arg(0));
    case Builtin::Sigmoid: {
      // 1 / (1 + exp(-x))
      Value x = f32arg(0);
      Value negx = arith::NegFOp::create(b_, l, x);
      Value ex = math::ExpOp::create(b_, l, negx);
      Value one = constF32(1.0, l);
      Value den = arith::AddFOp::create(b_, l, one, ex);
      return arith::DivFOp::create(b_, l, one, den);
    }
    case Builtin::Abs:
      if (allInt)
        return math::AbsIOp::create(b_, l, args[0]);
      return math::AbsFOp::create(b_, l, args[0]);
    case Builtin::Min:
    case Builtin::Max: {
      bool isMin = e.builtin == Builtin::Min;
      if (allInt)
        return isMin ? Value(arith::MinSIOp::create(b_, l, args[0], args[1]))
                     : Value(arith::MaxSIOp::create(b_, l, args[0], args[1]));
      Value x = f32arg(0), y = f32arg(1);
      return isMin ? Value(arith::MinimumFOp::create(b_, l, x, y))
                   : Value(arith::MaximumFOp::create(b_, l, x, y));
    }
    case Builtin::Clamp: {
      if (allInt) {
        Value lo = arith::MaxSIOp::create(b_, l, args[0], args[1]);
        return arith::MinSIOp::create(b_, l, lo, args[2]);
      }
      Value lo = arith::MaximumFOp::create(b_, l, f32arg(0), f32arg(1));
      return arith::MinimumFOp::create(b_, l, lo, f32arg(2));
    }
    case Builtin::CastF32: {
      Value x = args[0];
      if (x.getType().isSignlessInteger(1))
        return arith::UIToFPOp::create(b_, l, b_.getF32Type(), x);
      return toF32(x, e.operands[0]->loc);
    }
    case Builtin::CastI32: {
      Value x = args[0];
      if (x.getType().isSignlessInteger(1))
        return arith::ExtUIOp::create(b_, l, b_.getI32Type(), x);
      if (x.getType().isSignlessInteger(32))
        return x;
      // Saturating to [-2^31, 2^31 - 1], NaN -> 0 (fptosi alone is poison
      // out of range): clamp into what fptosi takes, then x >= 2^31 gives
      // 2^31 - 1, which no f32 below 2^31 converts to.
      Value lo = constF32(-2147483648.0, l);
      Value hi = constF32(2147483520.0, l); // largest f32 below 2^31
      Value c = arith::MaximumFOp::create(b_, l, x, lo);
      c = arith::MinimumFOp::create(b_, l, c, hi);
      Value isNan =
          arith::CmpFOp::create(b_, l, arith::CmpFPredicate::UNO, x, x);
      c = arith::SelectOp::create(b_, l, isNan, constF32(0.0, l), c);
      Value r = arith::FPToSIOp::create(b_, l, b_.getI32Type(), c);
      Value big = arith::CmpFOp::create(b_, l, arith::CmpFPredicate::OGE, x,
                                        constF32(2147483648.0, l));
      Value max = arith::ConstantOp::create(b_, l, b_.getI32IntegerAttr(2147483647));
      return arith::SelectOp::create(b_, l, big, max, r);
    }
    case Builtin::None: break;
    }
    return {};
  }

  MLIRContext &ctx_;
  const Module &m_;
  OpBuilder b_;
  StringAttr file_;
  const Variant *variant_ = nullptr;
  std::map<std::string, Value> env_;
};

} // namespace

OwningOpRef<ModuleOp> emitAttn(MLIRContext &ctx, const Module &m,
                               const std::string &fileName,
                               const std::string &onlyVariant) {
  ctx.loadDialect<attn::AttnDialect, arith::ArithDialect, math::MathDialect>();
  return Generator(ctx, m, fileName).run(onlyVariant);
}

} // namespace attnc
