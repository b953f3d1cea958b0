//===- ModifierEmission.cpp - score_mod and mask_mod as code ----------------===//
//
// Clones a modifier's region into the kernel being built: gathers clamp
// every index into its dimension, scalars come from the entry, values
// that do not vary along the loop are hoisted, and the CPU form emits the
// modifier over vector lanes.
//
//===----------------------------------------------------------------------===//
#include "ProgramBuilder.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc::codegen {

Value ProgramBuilder::clampedIndex(size_t pi, size_t d, Value i) {
  Value hi = arith::IndexCastOp::create(
      b_, i32_,
      minI(sub(capDims_[pi][d], cIdx(1)),
           cIdx(std::numeric_limits<int32_t>::max())));
  return minI(maxI(i, cI32(0)), hi);
}

/// A gather with every index clamped into its dimension: never out of
/// bounds, whatever the modifier computes. A literal extent is a constant
/// (loadEntryValues), so the clamp folds with the modifier's own
/// (relative_bias's min(..., 255)).
Value ProgramBuilder::gather(attn::GatherOp g, IRMapping &map) {
  size_t pi = 0;
  while (info_.params[pi].name != g.getCapture())
    ++pi;
  // The clamp in i32, the index's type: an extent past 2^31 - 1 holds
  // every i32 index, so it saturates there. The clamped index (>= 0) is
  // widened unsigned, so its product with the 64-bit stride is a 32 x 64
  // one: two compares and a multiply-add fewer per gather than the clamp
  // and product in 64 bits (synaptic's key_factor, once per key column).
  //
  // On the GPU the address is formed in bytes, base + sum of index *
  // (stride * size), and the last dimension's byte stride is 32-bit (the
  // runtime checks it is below 2^32: resolveProblem): its index times it
  // plus the other dimensions' 64-bit address is one mul.wide.u32 and add,
  // an IMAD.WIDE.U32 in SASS. memref.load's element offset, scaled after
  // the sum, took a 64-bit multiply, shift and add (relative_bias's gather
  // cost 8 integer instructions per diagonal, 5 now) and the live 64-bit
  // stride a register pair. The CPU loads through the memref: x86 scales
  // an element index in the address itself.
  Type elemTy = cast<MemRefType>(captures_[pi].getType()).getElementType();
  const int64_t bytes = int64_t(rt::dtypeSize(info_.params[pi].dtype));
  Value addr =
      byteAddressedGathers_
          ? memref::ExtractAlignedPointerAsIndexOp::create(b_, captures_[pi])
          : cIdx(0);
  const size_t last = g.getIndices().size() - 1;
  for (auto [d, idx] : llvm::enumerate(g.getIndices())) {
    Value i = clampedIndex(pi, d, map.lookup(idx));
    Value stride = capStrides_[pi][d];
    Value term;
    if (!byteAddressedGathers_) {
      term =
          mul(arith::IndexCastUIOp::create(b_, b_.getIndexType(), i), stride);
    } else if (d == last) {
      Value bs32 = arith::TruncIOp::create(
          b_, i32_,
          arith::IndexCastUIOp::create(b_, i64_, mul(stride, cIdx(bytes))));
      term = arith::IndexCastUIOp::create(
          b_, b_.getIndexType(),
          arith::MulIOp::create(b_, arith::ExtUIOp::create(b_, i64_, i),
                                arith::ExtUIOp::create(b_, i64_, bs32)));
    } else {
      term = mul(arith::IndexCastUIOp::create(b_, b_.getIndexType(), i),
                 mul(stride, cIdx(bytes)));
    }
    addr = add(addr, term);
  }
  Value x;
  if (byteAddressedGathers_) {
    auto global = LLVM::LLVMPointerType::get(ctx_, /*addressSpace=*/1);
    Value ptr = LLVM::IntToPtrOp::create(
        b_, global, Value(arith::IndexCastUIOp::create(b_, i64_, addr)),
        LLVM::DereferenceableAttr());
    x = LLVM::LoadOp::create(b_, elemTy, ptr, bytes);
  } else {
    x = load(captures_[pi], addr);
  }
  switch (info_.params[pi].dtype) {
  case rt::DType::F16:
  case rt::DType::BF16: return arith::ExtFOp::create(b_, f32_, x);
  case rt::DType::I64: return arith::TruncIOp::create(b_, i32_, x);
  case rt::DType::Bool:
    return arith::CmpIOp::create(b_, arith::CmpIPredicate::ne, x,
                                 arith::ConstantOp::create(
                                     b_, b_.getI8IntegerAttr(0)));
  default: return x;
  }
}

/// Clones the ops that compute `v` (already-mapped values are reused).
Value ProgramBuilder::materialize(Value v, IRMapping &map) {
  if (Value m = map.lookupOrNull(v))
    return m;
  Operation *op = v.getDefiningOp();
  for (Value operand : op->getOperands())
    materialize(operand, map);
  Value r;
  if (auto g = dyn_cast<attn::GatherOp>(op))
    r = gather(g, map);
  else if (auto s = dyn_cast<attn::ScalarOp>(op)) {
    size_t pi = 0;
    while (info_.params[pi].name != s.getParam())
      ++pi;
    r = scalars_[pi];
  } else if (auto z = dyn_cast<attn::SizeOp>(op))
    r = problemSize(z.getDim());
  else if (auto s = dyn_cast<attn::SumOp>(op))
    r = sum(s, map);
  else {
    Operation *c = b_.clone(*op, map);
    if (!v_.getMaskBlock().getParent()->isAncestor(op->getParentRegion()))
      if (arith::FastMathFlags f = scoreFlags(op);
          f != arith::FastMathFlags::none)
        c->setAttr("fastmath", arith::FastMathFlagsAttr::get(ctx_, f));
    r = c->getResult(0);
  }
  map.map(v, r);
  return r;
}

Value ProgramBuilder::sum(attn::SumOp s, IRMapping &map) {
  attn::forEachValueRead(s, [&](Value v) { materialize(v, map); });
  Block &body = s.getBody().front();
  bool isF = s.getType().isF32();
  Value zero = isF ? cF32(0) : cI32(0);
  Value ub = toIdx(maxI(map.lookup(s.getCount()), cI32(0)));
  auto f = loop(cIdx(0), ub, 1, {zero}, [&](Value i, ValueRange acc) {
    IRMapping inner = map; // the body's values stay inside the loop
    inner.map(body.getArgument(0), arith::IndexCastOp::create(b_, i32_, i));
    Value t = materialize(
        cast<attn::YieldOp>(body.getTerminator()).getValue(), inner);
    Value next = isF ? Value(arith::AddFOp::create(b_, acc[0], t))
                     : Value(arith::AddIOp::create(b_, acc[0], t));
    return SmallVector<Value>{next};
  });
  return f.getResult(0);
}

Value ProgramBuilder::sumVec(attn::SumOp s,
                             const llvm::DenseMap<Value, Value> &vec,
                             const llvm::DenseSet<Value> &uniformSet,
                             IRMapping &uniform, int64_t W) {
  // What the body reads from outside: uniform values as scalars here (not
  // once per iteration); lane-varying ones are already vectors.
  attn::forEachValueRead(s, [&](Value v) {
    if (uniformSet.contains(v))
      materialize(v, uniform);
  });
  Block &body = s.getBody().front();
  bool isF = s.getType().isF32();
  VectorType vt = VectorType::get({W}, s.getType());
  VectorType vI = VectorType::get({W}, i32_);
  Value zero = arith::ConstantOp::create(
      b_, DenseElementsAttr::get(vt, b_.getZeroAttr(s.getType())));
  Value count, countVec;
  if (uniformSet.contains(s.getCount())) {
    count = uniform.lookup(s.getCount());
  } else {
    countVec = vec.lookup(s.getCount());
    count = vector::ReductionOp::create(b_, vector::CombiningKind::MAXSI,
                                        countVec);
  }
  Value ub = toIdx(maxI(count, cI32(0)));
  auto f = loop(cIdx(0), ub, 1, {zero}, [&](Value i, ValueRange acc) {
    IRMapping inner = uniform;
    Value iI32 = arith::IndexCastOp::create(b_, i32_, i);
    inner.map(body.getArgument(0), iI32);
    Value t = emitModifierVec(body, vec, uniformSet, inner, W);
    if (countVec) // lanes past their own count add nothing
      t = select(arith::CmpIOp::create(b_, arith::CmpIPredicate::slt,
                                       vector::BroadcastOp::create(b_, vI, iI32),
                                       countVec),
                 t, zero);
    Value next = isF ? Value(arith::AddFOp::create(b_, acc[0], t))
                     : Value(arith::AddIOp::create(b_, acc[0], t));
    return SmallVector<Value>{next};
  });
  return f.getResult(0);
}

/// A problem size as i32: from the fixed part of `ip`, or a free dimension
/// from the first capture whose shape names it (the runtime has checked
/// that every capture naming it agrees).
Value ProgramBuilder::problemSize(StringRef dim) {
  // B and Q from ip's first slots; H, HKV and KV from their own (the
  // model's head counts with a head offset; the key-position extent with
  // key offsets).
  const int64_t slots[5] = {abi::kB, abi::kHSize, abi::kHkvSize, abi::kLq,
                            abi::kKvSize};
  for (int64_t k = 0; k < 5; ++k)
    if (dim == rt::kProblemSizeNames[k])
      return arith::TruncIOp::create(b_, i32_, load(ip_, cIdx(slots[k])));
  for (size_t i = 0; i < info_.params.size(); ++i)
    for (size_t d = 0; d < info_.params[i].dims.size(); ++d)
      if (info_.params[i].dims[d].symbol == dim)
        return arith::IndexCastOp::create(b_, i32_, capDims_[i][d]);
  llvm_unreachable("attn.size of a dimension the verifier rejects");
}

arith::FastMathFlags ProgramBuilder::scoreProductFlags() const {
  using F = arith::FastMathFlags;
  F f = fuseScoreProducts_ ? F::contract : F::none;
  return approximateScoreFunctions_ ? f | F::reassoc | F::nsz : f;
}

arith::FastMathFlags ProgramBuilder::scoreFlags(Operation *op) const {
  using F = arith::FastMathFlags;
  if (isa<arith::MulFOp>(op))
    return scoreProductFlags();
  if (isa<arith::AddFOp, arith::SubFOp>(op))
    return fuseScoreProducts_ ? F::contract : F::none;
  if (isa<math::TanhOp, math::ExpOp, arith::DivFOp>(op))
    return approximateScoreFunctions_ ? F::afn : F::none;
  return F::none;
}

Value ProgramBuilder::scaledScore(Value x, Value scale, Value b, Value h,
                                  Value q, Value kv, const IRMapping *row) {
  Value xs = arith::MulFOp::create(b_, x, scale, scoreProductFlags());
  return emitModifier(v_.getScoreBlock(), {xs, b, h, q, kv}, row);
}

Value ProgramBuilder::keptByMask(Value inRange, Value b, Value h, Value q,
                                 Value kv, const IRMapping *row) {
  Value m = emitModifier(v_.getMaskBlock(), {b, h, q, kv}, row);
  return arith::AndIOp::create(b_, inRange, m);
}

Value ProgramBuilder::emitModifier(Block &block, ValueRange args,
                                   const IRMapping *hoisted) {
  IRMapping map;
  if (hoisted)
    map = *hoisted;
  for (auto [a, x] : llvm::zip(block.getArguments(), args))
    map.map(a, x);
  return materialize(cast<attn::YieldOp>(block.getTerminator()).getValue(),
                     map);
}

ProgramBuilder::DiagonalValues
ProgramBuilder::diagonalValues(Block &block, ArrayRef<unsigned> varying) {
  enum : unsigned { Element = 1, Q = 2, KV = 4, Diff = 8 };
  llvm::DenseMap<Value, unsigned> of;
  for (unsigned i : varying)
    of[block.getArgument(i)] = Element;
  Value q = block.getArgument(3), kv = block.getArgument(4);
  of[q] = Q;
  of[kv] = KV;
  DiagonalValues d;
  for (Operation &op : block.without_terminator()) {
    unsigned deps = 0;
    auto sub = dyn_cast<arith::SubIOp>(op);
    if (sub && ((sub.getLhs() == kv && sub.getRhs() == q) ||
                (sub.getLhs() == q && sub.getRhs() == kv))) {
      deps = Diff;
      d.differences.push_back(&op);
    } else {
      attn::forEachValueRead(&op, [&](Value v) { deps |= of.lookup(v); });
      if ((deps & Diff) && !(deps & (Element | Q | KV)) && op.getNumResults() == 1)
        d.ops.push_back(&op);
      d.positionGathers |= isa<attn::GatherOp>(op) && (deps & (Q | KV));
    }
    for (Value r : op.getResults())
      of[r] = deps;
  }
  findBucket(block, d);
  return d;
}

namespace {
/// Positions lie in [0, 2^30) (resolveProblem), and a thread's diagonals
/// reach at most a tile past a difference of two.
constexpr int64_t kDifferenceBound = (int64_t(1) << 30) + (int64_t(1) << 16);

struct IntRange {
  int64_t lo, hi;
};

std::optional<int64_t> constantOf(Value v) {
  APInt c;
  if (v && matchPattern(v, m_ConstantInt(&c)))
    return c.getSExtValue();
  return std::nullopt;
}

/// The range of `op`'s i32 result when it is monotone in its one varying
/// operand `x` (range `r`) and cannot wrap there; nullopt otherwise.
std::optional<IntRange> monotoneRange(Operation *op, Value x, IntRange r) {
  Value y = op->getNumOperands() == 2
                ? op->getOperand(op->getOperand(0) == x ? 1 : 0)
                : Value();
  std::optional<int64_t> c = constantOf(y);
  bool xFirst = op->getOperand(0) == x;
  IntRange out;
  if (isa<math::AbsIOp>(op))
    out = r.lo >= 0   ? r
          : r.hi <= 0 ? IntRange{-r.hi, -r.lo}
                      : IntRange{0, std::max(-r.lo, r.hi)};
  else if (isa<arith::AddIOp>(op) && c)
    out = {r.lo + *c, r.hi + *c};
  else if (isa<arith::SubIOp>(op) && c)
    out = xFirst ? IntRange{r.lo - *c, r.hi - *c}
                 : IntRange{*c - r.hi, *c - r.lo};
  else if (isa<arith::MulIOp>(op) && c)
    out = *c >= 0 ? IntRange{*c * r.lo, *c * r.hi}
                  : IntRange{*c * r.hi, *c * r.lo};
  else if (isa<arith::MinSIOp>(op))
    out = c ? IntRange{std::min(r.lo, *c), std::min(r.hi, *c)}
            : IntRange{INT32_MIN, r.hi};
  else if (isa<arith::MaxSIOp>(op))
    out = c ? IntRange{std::max(r.lo, *c), std::max(r.hi, *c)}
            : IntRange{r.lo, INT32_MAX};
  else if (isa<arith::DivSIOp>(op) && xFirst && c && *c != 0)
    // (C++'s division truncates as arith.divsi does)
    out = {std::min(r.lo / *c, r.hi / *c), std::max(r.lo / *c, r.hi / *c)};
  else if (isa<arith::ShRSIOp>(op) && xFirst && c && *c >= 0 && *c < 32)
    out = {r.lo >> *c, r.hi >> *c};
  else
    return std::nullopt;
  if (out.lo < INT32_MIN || out.hi > INT32_MAX)
    return std::nullopt;
  return out;
}
} // namespace

void ProgramBuilder::findBucket(Block &block, DiagonalValues &d) {
  // The chain: the differences and the monotone i32 ops of one value of it
  // (and of values that do not vary by diagonal), with their ranges.
  llvm::DenseSet<Value> diagonal;
  llvm::DenseMap<Value, IntRange> chain;
  llvm::DenseSet<Operation *> chainOps;
  // (values of the chain past a clamp, a division or a shift: only those
  // can be the same on two diagonals of one sign)
  llvm::DenseSet<Value> manyToOne;
  for (Operation *s : d.differences) {
    chain[s->getResult(0)] = {-kDifferenceBound, kDifferenceBound};
    chainOps.insert(s);
    diagonal.insert(s->getResult(0));
  }
  for (Operation *op : d.ops)
    diagonal.insert(op->getResult(0));
  SmallVector<Operation *> absOps;
  for (Operation *op : d.ops) {
    Value x;
    int varying = 0;
    for (Value o : op->getOperands())
      if (diagonal.contains(o)) {
        ++varying;
        x = o;
      }
    if (varying != 1 || !chain.count(x) || op->getNumRegions() != 0 ||
        !op->getResult(0).getType().isInteger(32))
      continue;
    std::optional<IntRange> r = monotoneRange(op, x, chain[x]);
    if (!r)
      continue;
    if (isa<math::AbsIOp>(op) && chain[x].lo < 0 && chain[x].hi > 0)
      absOps.push_back(op);
    chain[op->getResult(0)] = *r;
    chainOps.insert(op);
    if (manyToOne.contains(x) ||
        isa<arith::MinSIOp, arith::MaxSIOp, arith::DivSIOp, arith::ShRSIOp>(op))
      manyToOne.insert(op->getResult(0));
  }
  // The bucket: the one chain value read outside the chain.
  Value bucket;
  bool one = true;
  for (Operation &op : block) {
    if (chainOps.contains(&op))
      continue;
    attn::forEachValueRead(&op, [&](Value v) {
      if (!chain.count(v))
        return;
      if (bucket && bucket != v)
        one = false;
      bucket = v;
    });
  }
  // A one-to-one bucket (a difference, its abs, a multiple) takes a value
  // per diagonal: nothing to share.
  if (!one || !bucket || !manyToOne.contains(bucket))
    return;
  d.bucket = bucket;
  d.bucketAbs = std::move(absOps);
}

Value ProgramBuilder::bucketConstant(const DiagonalValues &d,
                                     const DiagonalTile &t, int64_t atLo,
                                     int64_t atHi, const IRMapping &args) {
  auto at = [&](int64_t a) {
    IRMapping m = args;
    Value kvMinusQ = add(t.base, cI32(a));
    for (Operation *s : d.differences) {
      auto sub = cast<arith::SubIOp>(s);
      bool kvFirst = cast<BlockArgument>(sub.getLhs()).getArgNumber() == 4;
      m.map(s->getResult(0),
            kvFirst ? kvMinusQ : arith::SubIOp::create(b_, cI32(0), kvMinusQ));
    }
    return m;
  };
  IRMapping lo = at(atLo), hi = at(atHi);
  Value same = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq,
                                     materialize(d.bucket, lo),
                                     materialize(d.bucket, hi));
  // An abs is monotone where its operand keeps one sign; the operand is
  // monotone in the diagonal, so its two ends say.
  for (Operation *a : d.bucketAbs) {
    Value x = materialize(a->getOperand(0), lo),
          y = materialize(a->getOperand(0), hi);
    same = arith::AndIOp::create(
        b_, same,
        arith::CmpIOp::create(b_, arith::CmpIPredicate::sge,
                              arith::XOrIOp::create(b_, x, y), cI32(0)));
  }
  return same;
}

namespace {
/// f32(kv - q) in a modifier's diagonal values: an arith.sitofp of one of
/// its differences (sign +1 for kv - q, -1 for q - kv), or of math.absi
/// of one (`abs`). A difference of two positions never is INT32_MIN, so
/// abs of it never wraps and |f32(d)| = f32(|d|).
struct FloatDifference {
  int sign;
  bool abs;
};
std::optional<FloatDifference> floatDifference(Operation *op, Value kv) {
  auto cvt = dyn_cast<arith::SIToFPOp>(op);
  if (!cvt || !cvt.getType().isF32())
    return std::nullopt;
  Operation *from = cvt.getIn().getDefiningOp();
  bool abs = isa_and_nonnull<math::AbsIOp>(from);
  if (abs)
    from = from->getOperand(0).getDefiningOp();
  auto sub = dyn_cast_or_null<arith::SubIOp>(from);
  if (!sub || !sub.getType().isInteger(32))
    return std::nullopt;
  Value q = sub.getLhs() == kv ? sub.getRhs() : sub.getLhs();
  if ((sub.getLhs() != kv && sub.getRhs() != kv) || !isa<BlockArgument>(q) ||
      cast<BlockArgument>(q).getArgNumber() != 3)
    return std::nullopt;
  return FloatDifference{sub.getLhs() == kv ? 1 : -1, abs};
}
/// A product c f32(kv - q) with c the same on every diagonal: c (the
/// other factor) and the difference's sign, or null.
std::pair<Value, int> scaledDifference(Operation *op,
                                       ArrayRef<Operation *> diagonalOps,
                                       ArrayRef<Operation *> differences,
                                       Value kv) {
  auto mul = dyn_cast<arith::MulFOp>(op);
  if (!mul || !mul.getType().isF32())
    return {};
  for (auto [x, c] : {std::pair{mul.getLhs(), mul.getRhs()},
                      std::pair{mul.getRhs(), mul.getLhs()}}) {
    Operation *def = x.getDefiningOp();
    std::optional<FloatDifference> f =
        def ? floatDifference(def, kv) : std::nullopt;
    if (!f || f->abs)
      continue;
    Operation *cdef = c.getDefiningOp();
    if (cdef && (llvm::is_contained(diagonalOps, cdef) ||
                 llvm::is_contained(differences, cdef)))
      continue; // c varies by diagonal
    return {c, f->sign};
  }
  return {};
}
} // namespace

ProgramBuilder::DiagonalTile
ProgramBuilder::diagonalTile(const DiagonalValues &d, Block &block, Value base,
                             const IRMapping &args) {
  DiagonalTile t;
  t.base = base;
  if (!approximateScoreFunctions_)
    return t;
  Value kv = block.getArgument(4);
  // f32(kv - q) and f32(q - kv) (abs's: either), each converted from i32 so
  // that a diagonal at 0 is +0 as f32(0) is.
  for (Operation *op : d.ops)
    if (std::optional<FloatDifference> f = floatDifference(op, kv)) {
      Value &x = f->sign > 0 || f->abs ? t.baseF : t.negBaseF;
      if (!x)
        x = arith::SIToFPOp::create(b_, f32_,
                                    &x == &t.baseF ? base : sub(cI32(0), base));
    }
  IRMapping m = args;
  for (Operation *op : d.ops)
    if (auto [c, sign] = scaledDifference(op, d.ops, d.differences, kv); c) {
      Value factor = materialize(c, m);
      t.scaled[op] = {factor,
                      arith::MulFOp::create(b_, factor,
                                            sign > 0 ? t.baseF : t.negBaseF,
                                            scoreProductFlags()),
                      sign};
    }
  return t;
}

IRMapping ProgramBuilder::diagonalAt(const DiagonalValues &d, Block &block,
                                     const DiagonalTile &t, int64_t at,
                                     const IRMapping &args) {
  IRMapping m = args, out;
  Value kv = block.getArgument(4);
  Value kvMinusQ = add(t.base, cI32(at));
  for (Operation *s : d.differences)
    m.map(s->getResult(0), s->getOperand(0) == kv
                               ? kvMinusQ
                               : arith::SubIOp::create(b_, cI32(0), kvMinusQ).getResult());
  for (Operation *op : d.ops) {
    Value r;
    if (auto it = t.scaled.find(op); it != t.scaled.end()) {
      // c f32(s (base + at)) = fma(c, s at, c f32(s base)).
      const DiagonalTile::Scaled &p = it->second;
      r = at == 0 ? p.product
                  : math::FmaOp::create(b_, p.factor, cF32(float(p.sign * at)),
                                        p.product)
                        .getResult();
    } else if (std::optional<FloatDifference> f = t.baseF || t.negBaseF
                                                      ? floatDifference(op, kv)
                                                      : std::nullopt) {
      // f32(s (base + at)) = f32(s base) + s at; abs's |f32(base) + at|.
      int sign = f->abs ? 1 : f->sign;
      r = sign > 0 ? t.baseF : t.negBaseF;
      if (at != 0)
        r = arith::AddFOp::create(b_, r, cF32(float(sign * at)));
      if (f->abs)
        r = math::AbsFOp::create(b_, r);
    }
    auto absi = dyn_cast<math::AbsIOp>(op);
    if (!r && absi &&
        llvm::is_contained(d.differences, absi.getOperand().getDefiningOp())) {
      // A difference of positions (both in [0, 2^30)) is never INT32_MIN:
      // its abs is non-negative, which spares a gather's clamp at 0.
      r = LLVM::AbsOp::create(b_, i32_, m.lookup(absi.getOperand()),
                              b_.getBoolAttr(true));
    }
    if (r)
      m.map(op->getResult(0), r);
    out.map(op->getResult(0), r ? r : materialize(op->getResult(0), m));
  }
  return out;
}

IRMapping ProgramBuilder::hoistUniform(Block &block, ArrayRef<unsigned> varying,
                                       ValueRange args) {
  llvm::DenseSet<Value> uniform = uniformValues(block, varying);
  IRMapping map;
  for (auto [a, x] : llvm::zip(block.getArguments(), args))
    map.map(a, x);
  for (Operation &op : block)
    if (!isa<attn::YieldOp>(op) && op.getNumResults() == 1 &&
        uniform.contains(op.getResult(0)))
      materialize(op.getResult(0), map);
  return map;
}

bool ProgramBuilder::gathersVarying(Block &block, ArrayRef<unsigned> varying) {
  llvm::DenseSet<Value> uniform = uniformValues(block, varying);
  bool any = false;
  block.walk(
      [&](attn::GatherOp g) { any |= !uniform.contains(g.getResult()); });
  return any;
}

llvm::DenseSet<Value> ProgramBuilder::uniformValues(Block &block,
                                              ArrayRef<unsigned> varying) {
  llvm::DenseSet<Value> dependent, uniform;
  for (unsigned a : varying)
    dependent.insert(block.getArgument(a));
  // Sums' bodies too: their index is uniform, and a body value is uniform
  // when nothing it reads is dependent (a sum is, when its body reads
  // something that is).
  std::function<void(Block &)> visit = [&](Block &blk) {
    for (BlockArgument a : blk.getArguments())
      if (!dependent.contains(a))
        uniform.insert(a);
    for (Operation &op : blk) {
      bool dep = false;
      attn::forEachValueRead(&op,
                             [&](Value v) { dep |= dependent.contains(v); });
      for (Value r : op.getResults())
        (dep ? dependent : uniform).insert(r);
      for (Region &region : op.getRegions())
        for (Block &inner : region)
          visit(inner);
    }
  };
  visit(block);
  return uniform;
}

/// A gather over W lanes: per-lane clamped offsets, then vector.gather.
Value ProgramBuilder::gatherVec(attn::GatherOp g, ArrayRef<Value> idx, int64_t W) {
  size_t pi = 0;
  while (info_.params[pi].name != g.getCapture())
    ++pi;
  VectorType v64 = VectorType::get({W}, i64_);
  auto splat64 = [&](Value idxScalar) {
    return vector::BroadcastOp::create(
        b_, v64, arith::IndexCastOp::create(b_, i64_, idxScalar));
  };
  Value zero = arith::ConstantOp::create(
      b_, DenseElementsAttr::get(v64, ArrayRef<int64_t>{0}));
  Value off = zero;
  for (size_t d = 0; d < idx.size(); ++d) {
    Value i = arith::ExtSIOp::create(b_, v64, idx[d]);
    Value hi = splat64(sub(capDims_[pi][d], cIdx(1)));
    i = arith::MinSIOp::create(b_, arith::MaxSIOp::create(b_, i, zero), hi);
    off = arith::AddIOp::create(
        b_, off, arith::MulIOp::create(b_, i, splat64(capStrides_[pi][d])));
  }
  Type st = storageType(ctx_, info_.params[pi].dtype);
  VectorType vt = VectorType::get({W}, st);
  Value mask = arith::ConstantOp::create(
      b_, DenseElementsAttr::get(VectorType::get({W}, b_.getI1Type()), true));
  Value pass = arith::ConstantOp::create(
      b_, DenseElementsAttr::get(vt, b_.getZeroAttr(st)));
  Value x = vector::GatherOp::create(b_, vt, captures_[pi], ValueRange{cIdx(0)},
                                     off, mask, pass);
  switch (info_.params[pi].dtype) {
  case rt::DType::F16:
  case rt::DType::BF16:
    return arith::ExtFOp::create(b_, VectorType::get({W}, f32_), x);
  case rt::DType::I64:
    return arith::TruncIOp::create(b_, VectorType::get({W}, i32_), x);
  case rt::DType::Bool: {
    Value z = arith::ConstantOp::create(
        b_, DenseElementsAttr::get(vt, b_.getZeroAttr(st)));
    return arith::CmpIOp::create(b_, arith::CmpIPredicate::ne, x, z);
  }
  default: return x;
  }
}

Value ProgramBuilder::emitMapBody(
    Block &body, ValueRange args,
    function_ref<Value(Operation &, ArrayRef<Value>)> custom) {
  int64_t W = 0;
  for (Value a : args)
    if (auto vt = dyn_cast<VectorType>(a.getType()))
      W = vt.getNumElements();
  IRMapping map;
  for (auto [a, x] : llvm::zip(body.getArguments(), args))
    map.map(a, x);
  auto widen = [&](Value x) -> Value {
    if (!W || isa<VectorType>(x.getType()))
      return x;
    return vector::BroadcastOp::create(
        b_, VectorType::get({W}, x.getType()), x);
  };
  for (Operation &op : body.without_terminator()) {
    SmallVector<Value> operands;
    for (Value v : op.getOperands())
      operands.push_back(widen(map.lookup(v)));
    if (custom)
      if (Value r = custom(op, operands)) {
        map.map(op.getResult(0), r);
        continue;
      }
    if (!W || op.getNumOperands() == 0) {
      // Scalars, and constants (broadcast where a vector op uses them).
      Operation *c = b_.clone(op, map);
      map.map(op.getResult(0), c->getResult(0));
      continue;
    }
    // arith/math ops are elementwise-mappable: the same op on vectors.
    OperationState st(op.getLoc(), op.getName());
    st.addOperands(operands);
    st.addAttributes(op.getAttrs());
    for (Type t : op.getResultTypes())
      st.addTypes(VectorType::get({W}, t));
    map.map(op.getResult(0), b_.create(st)->getResult(0));
  }
  Value y = map.lookup(body.getTerminator()->getOperand(0));
  return widen(y);
}

Value ProgramBuilder::emitModifierVec(Block &block,
                                const llvm::DenseMap<Value, Value> &vecArgs,
                                const llvm::DenseSet<Value> &uniformSet,
                                IRMapping &uniform, int64_t W) {
  llvm::DenseMap<Value, Value> vec(vecArgs);
  auto vecOf = [&](Value v) -> Value {
    if (Value x = vec.lookup(v))
      return x;
    // A uniform value: computed once (as a scalar) and broadcast.
    Value s = uniform.lookupOrNull(v);
    if (!s)
      s = materialize(v, uniform);
    Value x = vector::BroadcastOp::create(b_, VectorType::get({W}, s.getType()), s);
    vec[v] = x;
    return x;
  };
  for (Operation &op : block) {
    if (auto y = dyn_cast<attn::YieldOp>(op))
      return vecOf(y.getValue());
    if (uniformSet.contains(op.getResult(0)))
      continue; // broadcast on first use
    Value r;
    if (auto g = dyn_cast<attn::GatherOp>(op)) {
      SmallVector<Value> idx;
      for (Value i : g.getIndices())
        idx.push_back(vecOf(i));
      r = gatherVec(g, idx, W);
    } else if (auto s = dyn_cast<attn::SumOp>(op)) {
      attn::forEachValueRead(s, [&](Value v) {
        if (!uniformSet.contains(v))
          vecOf(v);
      });
      r = sumVec(s, vec, uniformSet, uniform, W);
    } else {
      // arith/math ops are elementwise-mappable: the same op on vectors.
      OperationState st(op.getLoc(), op.getName());
      for (Value v : op.getOperands())
        st.addOperands(vecOf(v));
      st.addAttributes(op.getAttrs());
      for (Type t : op.getResultTypes())
        st.addTypes(VectorType::get({W}, t));
      r = b_.create(st)->getResult(0);
    }
    vec[op.getResult(0)] = r;
  }
  return {};
}

} // namespace attnc::codegen
