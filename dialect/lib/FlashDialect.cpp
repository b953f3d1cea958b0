//===- FlashDialect.cpp - The flash dialect: types, verifiers, assembly ---===//
#include "flash/FlashDialect.h"
#include "attn/AttnDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::flash;

#include "flash/FlashDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "flash/FlashTypes.cpp.inc"

void FlashDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "flash/FlashTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "flash/FlashOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

LogicalResult KernelOp::verify() {
  StringRef kind = getKind();
  if (kind != "forward" && kind != "bwd_q" && kind != "bwd_kv")
    return emitOpError("kind must be forward, bwd_q or bwd_kv, got '")
           << kind << "'";
  Type t = getDtype();
  if (!t.isF32() && !t.isF16() && !t.isBF16())
    return emitOpError("dtype must be f32, f16 or bf16, got ") << t;
  auto value = [](uint64_t x) { return static_cast<int64_t>(x); };
  for (auto [v, what] : {std::pair{value(getHeadDim()), "head_dim"},
                         std::pair{value(getVHeadDim()), "v_head_dim"}})
    if (v <= 0 || v % 8)
      return emitOpError() << what << " must be a positive multiple of 8, got "
                           << v;
  if (value(getBlockM()) <= 0 || value(getBlockN()) <= 0 ||
      value(getVectorWidth()) <= 0 || value(getWarps()) < 0)
    return emitOpError("tile sizes and the vector width must be positive");
  auto module = (*this)->getParentOfType<ModuleOp>();
  Operation *v = module ? SymbolTable::lookupSymbolIn(module, getVariantAttr())
                        : nullptr;
  if (!v || !isa<attn::VariantOp>(v))
    return emitOpError("variant '") << getVariant()
                                    << "' is not an attn.variant of the module";
  return success();
}

//===----------------------------------------------------------------------===//
// Staging and products
//===----------------------------------------------------------------------===//

LogicalResult LoadQueryOp::verify() {
  if (getTensor() != "q" && getTensor() != "do")
    return emitOpError("tensor must be q or do, got '") << getTensor() << "'";
  if (getSignedByScale() && getTensor() != "q")
    return emitOpError("only q is signed by the scale");
  return success();
}

LogicalResult LoadRowsOp::verify() {
  if (getValue() != "lse" && getValue() != "delta")
    return emitOpError("value must be lse or delta, got '") << getValue() << "'";
  return success();
}

LogicalResult ProductOp::verify() {
  if (getWith() != "k" && getWith() != "v")
    return emitOpError("with must be k or v, got '") << getWith() << "'";
  return success();
}

LogicalResult AccumulateOp::verify() {
  StringRef k = getKind();
  bool kvOperand = isa<KeyValueType>(getWith().getType());
  if (k == "pv" || k == "dq") {
    if (!kvOperand)
      return emitOpError() << k << " takes a KV tile";
  } else if (k == "dv" || k == "dk") {
    if (kvOperand)
      return emitOpError() << k << " takes query-side rows";
  } else {
    return emitOpError("kind must be pv, dq, dv or dk, got '") << k << "'";
  }
  if (getRowSums() && k != "pv")
    return emitOpError("row_sums is for pv only, got '") << k << "'";
  return success();
}

LogicalResult ScoreGradOp::verify() {
  std::optional<StringRef> a = getAccumulate();
  if (a && *a != "all" && *a != "query" && *a != "others")
    return emitOpError("accumulate must be all, query or others, got '")
           << *a << "'";
  return success();
}

LogicalResult ZeroAccOp::verify() {
  if (getWidth() != "v" && getWidth() != "k")
    return emitOpError("width must be v or k, got '") << getWidth() << "'";
  if (getRowSums() && getWidth() != "v")
    return emitOpError("row_sums is for width v only");
  return success();
}

LogicalResult StoreGradOp::verify() {
  if (getGrad() != "dq" && getGrad() != "dk" && getGrad() != "dv")
    return emitOpError("grad must be dq, dk or dv, got '") << getGrad() << "'";
  return success();
}

//===----------------------------------------------------------------------===//
// Maps
//===----------------------------------------------------------------------===//

/// A map's body: one f32 argument per input, arith/math only, one f32
/// yielded.
static LogicalResult verifyMapBody(Operation *op, Region &body,
                                   unsigned inputs) {
  Block &b = body.front();
  if (b.getNumArguments() != inputs)
    return op->emitOpError("body must take ")
           << inputs << " f32 arguments (one per input), takes "
           << b.getNumArguments();
  for (BlockArgument a : b.getArguments())
    if (!a.getType().isF32())
      return op->emitOpError("body arguments must be f32, got ") << a.getType();
  for (Operation &inner : b.without_terminator())
    if (!isa<arith::ArithDialect, math::MathDialect>(inner.getDialect()))
      return inner.emitOpError("is not allowed in a flash map: arith and "
                               "math only");
  auto y = cast<YieldOp>(b.getTerminator());
  if (y.getValues().size() != 1 || !y.getValues()[0].getType().isF32())
    return op->emitOpError("body must yield one f32");
  return success();
}

LogicalResult RowsMapOp::verifyRegions() {
  return verifyMapBody(*this, getBody(), getInputs().size());
}

LogicalResult ScoresMapOp::verifyRegions() {
  if (getScores().empty())
    return emitOpError("takes at least one tile of scores");
  return verifyMapBody(*this, getBody(),
                       getScores().size() + getRows().size());
}

//===----------------------------------------------------------------------===//
// Loops
//===----------------------------------------------------------------------===//

/// `%item iter_args(%a, %b) : type, type {region}`; the region's leading
/// arguments are the loop's own (`lead`), then one per iteration value.
static ParseResult parseLoop(OpAsmParser &parser, OperationState &result) {
  OpAsmParser::UnresolvedOperand item;
  SmallVector<OpAsmParser::UnresolvedOperand> inits;
  SmallVector<Type> types;
  if (parser.parseOperand(item) || parser.parseKeyword("iter_args") ||
      parser.parseOperandList(inits, OpAsmParser::Delimiter::Paren))
    return failure();
  if (!inits.empty() && (parser.parseColon() || parser.parseTypeList(types)))
    return failure();
  if (types.size() != inits.size())
    return parser.emitError(parser.getCurrentLocation(),
                            "one type per iteration value expected");
  Type itemTy = ItemType::get(parser.getContext());
  if (parser.resolveOperand(item, itemTy, result.operands) ||
      parser.resolveOperands(inits, types, parser.getCurrentLocation(),
                             result.operands))
    return failure();
  result.addTypes(types);
  Region *body = result.addRegion();
  SmallVector<OpAsmParser::Argument> args;
  if (parser.parseRegion(*body, args, /*enableNameShadowing=*/false) ||
      parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  return success();
}

static void printLoop(OpAsmPrinter &p, Operation *op, Value item,
                      ValueRange inits, Region &body) {
  p << " " << item << " iter_args(" << inits << ")";
  if (!inits.empty())
    p << " : " << inits.getTypes();
  p << " ";
  p.printRegion(body, /*printEntryBlockArgs=*/true,
                /*printBlockTerminators=*/true);
  p.printOptionalAttrDictWithKeyword(op->getAttrs());
}

/// The body's arguments: `lead` then the iteration values' types; it
/// yields the iteration values' types.
static LogicalResult verifyLoop(Operation *op, ArrayRef<Type> lead,
                                ValueRange inits, Region &body) {
  Block &b = body.front();
  SmallVector<Type> want(lead.begin(), lead.end());
  want.append(inits.getTypes().begin(), inits.getTypes().end());
  if (TypeRange(b.getArgumentTypes()) != TypeRange(want))
    return op->emitOpError("body arguments must be ")
           << TypeRange(want) << ", got " << TypeRange(b.getArgumentTypes());
  if (op->getResultTypes() != inits.getTypes())
    return op->emitOpError("results must have the iteration values' types");
  auto y = dyn_cast<YieldOp>(b.getTerminator());
  if (!y || y.getValues().getTypes() != inits.getTypes())
    return op->emitOpError("body must yield the iteration values' types");
  return success();
}

ParseResult ForTilesOp::parse(OpAsmParser &parser, OperationState &result) {
  return parseLoop(parser, result);
}
void ForTilesOp::print(OpAsmPrinter &p) {
  printLoop(p, *this, getItem(), getInits(), getBody());
}
LogicalResult ForTilesOp::verify() {
  return verifyLoop(*this, {TileType::get(getContext())}, getInits(), getBody());
}

ParseResult ForQueryTilesOp::parse(OpAsmParser &parser, OperationState &result) {
  return parseLoop(parser, result);
}
void ForQueryTilesOp::print(OpAsmPrinter &p) {
  printLoop(p, *this, getItem(), getInits(), getBody());
}
LogicalResult ForQueryTilesOp::verify() {
  return verifyLoop(*this,
                    {ItemType::get(getContext()), TileType::get(getContext())},
                    getInits(), getBody());
}

#define GET_OP_CLASSES
#include "flash/FlashOps.cpp.inc"
