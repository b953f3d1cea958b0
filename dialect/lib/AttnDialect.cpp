//===- AttnDialect.cpp - The attn dialect: ops, verifiers, assembly -------===//
#include "attn/AttnDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::attn;

#include "attn/AttnDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "attn/AttnAttrs.cpp.inc"

void AttnDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "attn/AttnAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "attn/AttnOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// VariantOp
//===----------------------------------------------------------------------===//

ParamAttr VariantOp::lookupParam(StringRef name) {
  for (Attribute a : getParams())
    if (auto p = dyn_cast<ParamAttr>(a); p && p.getName() == name)
      return p;
  return {};
}

void VariantOp::getAsmBlockArgumentNames(Region &region,
                                         OpAsmSetValueNameFn setNameFn) {
  static const char *const scoreNames[] = {"score", "b", "h", "q", "kv"};
  static const char *const maskNames[] = {"b", "h", "q", "kv"};
  static const char *const gradNames[] = {"score", "b", "h", "q", "kv", "dy"};
  bool isScore = &region == &getScoreMod();
  bool isGrad = &region == &getScoreGrad();
  for (BlockArgument arg : region.getArguments()) {
    unsigned i = arg.getArgNumber();
    if (isGrad && i < 6)
      setNameFn(arg, gradNames[i]);
    else if (isScore && i < 5)
      setNameFn(arg, scoreNames[i]);
    else if (!isScore && !isGrad && i < 4)
      setNameFn(arg, maskNames[i]);
  }
}

static bool isTensorElementType(Type t) {
  return t.isF32() || t.isF16() || t.isBF16() || t.isSignlessInteger(32) ||
         t.isSignlessInteger(64) || t.isSignlessInteger(1);
}
static bool isScalarParamType(Type t) {
  return t.isF32() || t.isSignlessInteger(32) || t.isSignlessInteger(1);
}

LogicalResult VariantOp::verify() {
  llvm::StringSet<> names;
  for (Attribute a : getParams()) {
    auto p = cast<ParamAttr>(a);
    if (p.getName().getValue().empty())
      return emitOpError("parameter with an empty name");
    if (!names.insert(p.getName().getValue()).second)
      return emitOpError("duplicate parameter '") << p.getName().getValue()
                                                  << "'";
    if (!p.isTensor()) {
      if (!isScalarParamType(p.getElementType()))
        return emitOpError("scalar parameter '")
               << p.getName().getValue() << "' must be f32, i32 or i1, got "
               << p.getElementType();
      continue;
    }
    if (!isTensorElementType(p.getElementType()))
      return emitOpError("tensor parameter '")
             << p.getName().getValue()
             << "' must hold f32, f16, bf16, i32, i64 or i1, got "
             << p.getElementType();
    for (Attribute d : p.getDims()) {
      if (auto s = dyn_cast<StringAttr>(d); s && !s.getValue().empty())
        continue;
      if (auto i = dyn_cast<IntegerAttr>(d); i && i.getInt() > 0)
        continue;
      return emitOpError("dimension of '")
             << p.getName().getValue()
             << "' must be a symbol name or a positive integer, got " << d;
    }
  }
  return success();
}

static std::string describeTypes(TypeRange types) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "(";
  llvm::interleaveComma(types, os);
  os << ")";
  return s;
}

LogicalResult VariantOp::verifyRegions() {
  Builder b(getContext());
  Type f32 = b.getF32Type(), i32 = b.getI32Type(), i1 = b.getI1Type();
  struct Expect {
    Region *region;
    const char *name;
    SmallVector<Type> args;
    Type result;
  } regions[] = {{&getScoreMod(), "score_mod", {f32, i32, i32, i32, i32}, f32},
                 {&getMaskMod(), "mask_mod", {i32, i32, i32, i32}, i1},
                 {&getScoreGrad(), "score_grad",
                  {f32, i32, i32, i32, i32, f32}, f32}};
  for (Expect &e : regions) {
    if (e.region->empty()) // only score_grad may be (verified as sized)
      continue;
    Block &block = e.region->front();
    if (block.getArgumentTypes() != TypeRange(e.args))
      return emitOpError("'") << e.name << "' region must take "
                              << describeTypes(e.args) << ", got "
                              << describeTypes(block.getArgumentTypes());
    auto yield = block.empty() ? YieldOp() : dyn_cast<YieldOp>(block.back());
    if (!yield)
      return emitOpError("'") << e.name
                              << "' region must end with attn.yield";
    if (yield.getValue().getType() != e.result)
      return yield.emitOpError("in '")
             << e.name << "' must yield " << e.result << ", got "
             << yield.getValue().getType();
  }
  return success();
}

// Custom form:
//   attn.variant @name(p: f32[B, H], s: i32)
//       score_mod(%score: f32, %b: i32, %h: i32, %q: i32, %kv: i32) {...}
//       mask_mod(%b: i32, %h: i32, %q: i32, %kv: i32) {...}
static ParseResult parseParam(OpAsmParser &parser,
                              SmallVectorImpl<Attribute> &params) {
  MLIRContext *ctx = parser.getContext();
  std::string name;
  if (parser.parseKeywordOrString(&name) || parser.parseColon())
    return failure();
  Type elem;
  if (parser.parseType(elem))
    return failure();
  SmallVector<Attribute> dims;
  if (succeeded(parser.parseOptionalLSquare())) {
    auto parseDim = [&]() -> ParseResult {
      int64_t value;
      OptionalParseResult isInt = parser.parseOptionalInteger(value);
      if (isInt.has_value()) {
        if (failed(*isInt))
          return failure();
        dims.push_back(IntegerAttr::get(IntegerType::get(ctx, 64), value));
        return success();
      }
      std::string sym;
      if (parser.parseKeywordOrString(&sym))
        return failure();
      dims.push_back(StringAttr::get(ctx, sym));
      return success();
    };
    if (succeeded(parser.parseOptionalRSquare()))
      return parser.emitError(parser.getCurrentLocation(),
                              "a tensor parameter needs at least one "
                              "dimension");
    if (parser.parseCommaSeparatedList(parseDim) || parser.parseRSquare())
      return failure();
  }
  params.push_back(ParamAttr::get(ctx, StringAttr::get(ctx, name), elem,
                                  ArrayAttr::get(ctx, dims)));
  return success();
}

/// `keyword(args) {...}`; an empty keyword when the caller parsed it.
static ParseResult parseModifier(OpAsmParser &parser, StringRef keyword,
                                 Region &region) {
  if (!keyword.empty() && parser.parseKeyword(keyword))
    return failure();
  SmallVector<OpAsmParser::Argument> args;
  if (parser.parseArgumentList(args, OpAsmParser::Delimiter::Paren,
                               /*allowType=*/true) ||
      parser.parseRegion(region, args))
    return failure();
  if (region.empty())
    return parser.emitError(parser.getCurrentLocation(), "'")
           << keyword << "' region must not be empty";
  return success();
}

ParseResult VariantOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, SymbolTable::getSymbolAttrName(),
                             result.attributes))
    return failure();
  SmallVector<Attribute> params;
  if (parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Paren, [&]() {
        return parseParam(parser, params);
      }))
    return failure();
  result.addAttribute(getParamsAttrName(result.name),
                      parser.getBuilder().getArrayAttr(params));
  if (parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  Region *score = result.addRegion();
  Region *mask = result.addRegion();
  Region *grad = result.addRegion();
  if (parseModifier(parser, "score_mod", *score) ||
      parseModifier(parser, "mask_mod", *mask))
    return failure();
  if (succeeded(parser.parseOptionalKeyword("score_grad")))
    return parseModifier(parser, "", *grad);
  return success();
}

static void printModifier(OpAsmPrinter &p, StringRef keyword, Region &region) {
  p << keyword << "(";
  llvm::interleaveComma(region.getArguments(), p,
                        [&](BlockArgument arg) { p.printRegionArgument(arg); });
  p << ") ";
  p.printRegion(region, /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/true);
}

void VariantOp::print(OpAsmPrinter &p) {
  p << " ";
  p.printSymbolName(getSymName());
  p << "(";
  llvm::interleaveComma(getParams(), p, [&](Attribute a) {
    auto param = cast<ParamAttr>(a);
    p.printKeywordOrString(param.getName().getValue());
    p << ": " << param.getElementType();
    if (!param.isTensor())
      return;
    p << "[";
    llvm::interleaveComma(param.getDims(), p, [&](Attribute d) {
      if (auto s = dyn_cast<StringAttr>(d))
        p.printKeywordOrString(s.getValue());
      else
        p << cast<IntegerAttr>(d).getInt();
    });
    p << "]";
  });
  p << ")";
  p.printOptionalAttrDictWithKeyword(
      (*this)->getAttrs(),
      {SymbolTable::getSymbolAttrName(), getParamsAttrName()});
  p.printNewline();
  p << "    ";
  printModifier(p, "score_mod", getScoreMod());
  p << " ";
  printModifier(p, "mask_mod", getMaskMod());
  if (!getScoreGrad().empty()) {
    p << " ";
    printModifier(p, "score_grad", getScoreGrad());
  }
}

namespace {
/// `x + 0.0` -> `x` inside a modifier. arith keeps it (−0.0 + 0.0 is +0.0),
/// but a modifier's result only feeds exp2 of the softmax and comparisons,
/// where the sign of zero is unobservable, so dropping it is exact for
/// attention. The pattern only fires inside an attn.variant.
struct DropAddOfPositiveZero : OpRewritePattern<arith::AddFOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(arith::AddFOp op,
                                PatternRewriter &rewriter) const override {
    if (!op->getParentOfType<VariantOp>())
      return failure();
    for (unsigned i = 0; i < 2; ++i) {
      FloatAttr c;
      if (matchPattern(op->getOperand(i), m_Constant(&c)) &&
          c.getValue().isZero()) {
        rewriter.replaceOp(op, op->getOperand(1 - i));
        return success();
      }
    }
    return failure();
  }
};
} // namespace

void VariantOp::getCanonicalizationPatterns(RewritePatternSet &results,
                                            MLIRContext *context) {
  results.add<DropAddOfPositiveZero>(context);
}

//===----------------------------------------------------------------------===//
// GatherOp, ScalarOp, SizeOp
//===----------------------------------------------------------------------===//

/// The compute type of a tensor element: f16/bf16 widen to f32, i64 narrows
/// to i32.
static Type computeTypeOf(Type elem) {
  Builder b(elem.getContext());
  if (isa<FloatType>(elem))
    return b.getF32Type();
  if (elem.isSignlessInteger(1))
    return elem;
  return b.getI32Type();
}

LogicalResult GatherOp::verify() {
  auto variant = (*this)->getParentOfType<VariantOp>();
  if (!variant)
    return emitOpError("must be nested in an attn.variant");
  ParamAttr p = variant.lookupParam(getCapture());
  if (!p)
    return emitOpError("unknown capture '@")
           << getCapture() << "' in variant '@" << variant.getSymName()
           << "'";
  if (!p.isTensor())
    return emitOpError("'@") << getCapture()
                            << "' is a scalar; read it with attn.scalar";
  if (getIndices().size() != p.getRank())
    return emitOpError("'@") << getCapture() << "' has rank " << p.getRank()
                            << " but " << getIndices().size()
                            << " indices were given";
  Type want = computeTypeOf(p.getElementType());
  if (getType() != want)
    return emitOpError("reading '@")
           << getCapture() << "' (" << p.getElementType() << ") yields "
           << want << ", not " << getType();
  return success();
}

LogicalResult AccumulateOp::verify() {
  auto variant = (*this)->getParentOfType<VariantOp>();
  if (!variant || !variant.getScoreGrad().isAncestor((*this)->getParentRegion()))
    return emitOpError("must be nested in the score_grad region of an "
                       "attn.variant");
  ParamAttr p = variant.lookupParam(getParam());
  if (!p)
    return emitOpError("unknown parameter '@")
           << getParam() << "' in variant '@" << variant.getSymName() << "'";
  if (!isa<FloatType>(p.getElementType()))
    return emitOpError("'@") << getParam() << "' is "
                            << p.getElementType()
                            << "; only float parameters have gradients";
  unsigned rank = p.isTensor() ? p.getRank() : 0;
  if (getIndices().size() != rank)
    return emitOpError("'@") << getParam() << "' has rank " << rank << " but "
                            << getIndices().size() << " indices were given";
  return success();
}

void ScalarOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  setNameFn(getResult(), getParam());
}

LogicalResult ScalarOp::verify() {
  auto variant = (*this)->getParentOfType<VariantOp>();
  if (!variant)
    return emitOpError("must be nested in an attn.variant");
  ParamAttr p = variant.lookupParam(getParam());
  if (!p)
    return emitOpError("unknown parameter '@")
           << getParam() << "' in variant '@" << variant.getSymName() << "'";
  if (p.isTensor())
    return emitOpError("'@") << getParam()
                            << "' is a tensor; read it with attn.gather";
  if (getType() != p.getElementType())
    return emitOpError("'@") << getParam() << "' is "
                            << p.getElementType() << ", not " << getType();
  return success();
}

void SizeOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  setNameFn(getResult(), getDim());
}

LogicalResult SizeOp::verify() {
  auto variant = (*this)->getParentOfType<VariantOp>();
  if (!variant)
    return emitOpError("must be nested in an attn.variant");
  StringRef d = getDim();
  if (d == "B" || d == "H" || d == "HKV" || d == "Q" || d == "KV")
    return success();
  for (Attribute a : variant.getParams())
    for (Attribute dim : cast<ParamAttr>(a).getDims())
      if (auto s = dyn_cast<StringAttr>(dim); s && s.getValue() == d)
        return success();
  return emitOpError("'") << d
                          << "' is neither B, H, HKV, Q, KV nor a free "
                             "dimension of a capture of '@"
                          << variant.getSymName() << "'";
}

//===----------------------------------------------------------------------===//
// SumOp
//===----------------------------------------------------------------------===//

void SumOp::getAsmBlockArgumentNames(Region &region,
                                     OpAsmSetValueNameFn setNameFn) {
  for (BlockArgument arg : region.getArguments())
    setNameFn(arg, "i");
}

LogicalResult SumOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != 1 || !body.getArgument(0).getType().isInteger(32))
    return emitOpError("body must take one i32 index, got ")
           << describeTypes(body.getArgumentTypes());
  auto yield = body.empty() ? YieldOp() : dyn_cast<YieldOp>(body.back());
  if (!yield)
    return emitOpError("body must end with attn.yield");
  if (yield.getValue().getType() != getType())
    return yield.emitOpError("in an attn.sum of ")
           << getType() << " must yield " << getType() << ", got "
           << yield.getValue().getType();
  return success();
}

void mlir::attn::forEachValueRead(Operation *op,
                                  llvm::function_ref<void(Value)> fn) {
  op->walk([&](Operation *inner) {
    for (Value v : inner->getOperands())
      if (!op->isAncestor(v.getParentRegion()->getParentOp()))
        fn(v);
  });
}

#define GET_OP_CLASSES
#include "attn/AttnOps.cpp.inc"
