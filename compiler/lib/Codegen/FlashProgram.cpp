//===- FlashProgram.cpp - Build the tiled flash-attention program --------===//
//
// The program is scf loops over 1-D memrefs with vector ops for the two
// matrix products (vector width from the config) and scalar code for the
// modifiers and the softmax, which LLVM vectorizes further. Tile scratch
// (Q, K^T, V, S/P, the accumulator, running max and sum) lives in
// stack-allocated f32 buffers, one set per call; input dtypes and strides
// are handled once, where tiles are loaded.
//
//===----------------------------------------------------------------------===//
#include "attnc/Codegen/FlashProgram.h"

#include "attnc/runtime/KernelABI.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/ImplicitLocOpBuilder.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"

#include <cmath>
#include <climits>
#include <functional>
#include <limits>

using namespace mlir;
namespace abi = attnc::rt::abi;

namespace attnc {
namespace {

Type storageType(MLIRContext *ctx, rt::DType t) {
  Builder b(ctx);
  switch (t) {
  case rt::DType::F32: return b.getF32Type();
  case rt::DType::F16: return b.getF16Type();
  case rt::DType::BF16: return b.getBF16Type();
  case rt::DType::I32: return b.getI32Type();
  case rt::DType::I64: return b.getI64Type();
  case rt::DType::Bool: return b.getI8Type();
  }
  return {};
}

rt::DType paramDType(Type t) {
  if (t.isF32()) return rt::DType::F32;
  if (t.isF16()) return rt::DType::F16;
  if (t.isBF16()) return rt::DType::BF16;
  if (t.isInteger(64)) return rt::DType::I64;
  if (t.isInteger(1)) return rt::DType::Bool;
  return rt::DType::I32;
}

class ProgramBuilder {
public:
  ProgramBuilder(ModuleOp module, attn::VariantOp v, const MaskAnalysis &mask,
           const FlashConfig &cfg)
      : ctx_(module.getContext()), b_(v.getLoc(), ctx_), v_(v), mask_(mask),
        cfg_(cfg) {
    b_.setInsertionPointToEnd(module.getBody());
    f32_ = b_.getF32Type();
    i32_ = b_.getI32Type();
    i64_ = b_.getI64Type();
    elem_ = storageType(ctx_, cfg.spec.dtype);
    BM = cfg.spec.blockM;
    BN = cfg.spec.blockN;
    D = cfg.spec.headDim;
    DV = cfg.spec.vHeadDim;
    VW = cfg.vectorWidth;
    // Register blocking: RB rows at a time; CB vectors of keys (QK^T) and
    // CBP vectors of value dims (P.V), as many as the register file holds
    // (32 vector registers with AVX-512, 16 otherwise) and as divide the
    // tile evenly.
    RB = BM % 4 == 0 ? 4 : 1;
    int64_t cap = VW == 16 ? 4 : 2;
    auto fit = [&](int64_t n) {
      for (int64_t c : {4, 2, 1})
        if (c <= cap && n % c == 0)
          return c;
      return int64_t(1);
    };
    CB = fit(BN / VW);
    VWP = VW == 16 && DV % 16 == 0 ? 16 : 8;
    CBP = fit(DV / VWP);

    // The ABI's parameter layout, from the same code the runtime uses.
    for (Attribute a : v.getParams()) {
      auto p = cast<attn::ParamAttr>(a);
      rt::ParamSpec ps;
      ps.name = p.getName().getValue().str();
      ps.isTensor = p.isTensor();
      ps.dtype = paramDType(p.getElementType());
      ps.dims.resize(p.getRank());
      info_.params.push_back(ps);
    }
    layout_ = abi::computeLayout(info_);
  }

  LogicalResult buildKernel(StringRef name);
  /// The block-mask builder: a func over [begin, end) items, or with
  /// `gpuModule` a gpu.func with one block per item.
  LogicalResult buildMaskBuilder(StringRef name,
                                 gpu::GPUModuleOp gpuModule = nullptr);
  /// The SIMT GPU form: a gpu.func with one block per work item and one
  /// thread per query row; K and V tiles are staged in shared memory.
  LogicalResult buildGpuKernel(gpu::GPUModuleOp module, StringRef name);
  /// The tensor-core form (f16/bf16): warps of 16 query rows, K/V tiles
  /// through shared memory with cp.async in two stages, ldmatrix operands,
  /// mma.sync m16n8k16 with f32 accumulation, softmax on the fragments.
  LogicalResult buildTensorCoreKernel(gpu::GPUModuleOp module, StringRef name);

private:
  // ---- small helpers ----
  Value cIdx(int64_t v) { return arith::ConstantIndexOp::create(b_, v); }
  Value cF32(double v) {
    return arith::ConstantOp::create(b_, b_.getF32FloatAttr(float(v)));
  }
  Value cI32(int64_t v) {
    return arith::ConstantOp::create(b_, b_.getI32IntegerAttr(int32_t(v)));
  }
  Value add(Value a, Value c) { return arith::AddIOp::create(b_, a, c); }
  Value sub(Value a, Value c) { return arith::SubIOp::create(b_, a, c); }
  Value mul(Value a, Value c) { return arith::MulIOp::create(b_, a, c); }
  Value minI(Value a, Value c) { return arith::MinSIOp::create(b_, a, c); }
  Value maxI(Value a, Value c) { return arith::MaxSIOp::create(b_, a, c); }
  Value load(Value m, Value i) { return memref::LoadOp::create(b_, m, i); }
  void store(Value x, Value m, Value i) { memref::StoreOp::create(b_, x, m, i); }
  Value toIdx(Value i) {
    return arith::IndexCastOp::create(b_, b_.getIndexType(), i);
  }
  Value ipAt(int64_t slot) { return toIdx(load(ip_, cIdx(slot))); }
  Value ipAt(Value slot) { return toIdx(load(ip_, slot)); }
  Value toF32(Value x) {
    return x.getType() == f32_ ? x : Value(arith::ExtFOp::create(b_, f32_, x));
  }
  Value fromF32(Value x) {
    return elem_ == f32_ ? x : Value(arith::TruncFOp::create(b_, elem_, x));
  }
  Value alloca(int64_t n) {
    return memref::AllocaOp::create(b_, MemRefType::get({n}, f32_));
  }
  /// for (i = lb; i < ub; i += step) with loop-carried values.
  scf::ForOp loop(Value lb, Value ub, int64_t step, ValueRange iters,
                  function_ref<SmallVector<Value>(Value, ValueRange)> body) {
    auto f = scf::ForOp::create(b_, lb, ub, cIdx(step), iters);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPointToStart(f.getBody());
    SmallVector<Value> next = body(f.getInductionVar(), f.getRegionIterArgs());
    // ForOp::create adds an empty yield when there are no iter args.
    if (!iters.empty() || f.getBody()->empty() ||
        !isa<scf::YieldOp>(f.getBody()->back()))
      scf::YieldOp::create(b_, next);
    else
      f.getBody()->back().setOperands(next);
    return f;
  }
  void loop0(Value lb, Value ub, int64_t step, function_ref<void(Value)> body) {
    loop0(lb, ub, cIdx(step), body);
  }
  void loop0(Value lb, Value ub, Value step, function_ref<void(Value)> body) {
    auto f = scf::ForOp::create(b_, lb, ub, step);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(f.getBody()->getTerminator());
    body(f.getInductionVar());
  }
  void ifThen(Value cond, function_ref<void()> then) {
    auto op = scf::IfOp::create(b_, cond, /*withElseRegion=*/false);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
  }
  void ifThenElse(Value cond, function_ref<void()> then,
                  function_ref<void()> otherwise) {
    auto op = scf::IfOp::create(b_, cond, /*withElseRegion=*/true);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPoint(op.thenBlock()->getTerminator());
    then();
    b_.setInsertionPoint(op.elseBlock()->getTerminator());
    otherwise();
  }
  /// if (cond) then() else keep: yields `then`'s values or `keep`.
  SmallVector<Value> ifYield(Value cond, ValueRange keep,
                             function_ref<SmallVector<Value>()> then) {
    auto op = scf::IfOp::create(b_, keep.getTypes(), cond, /*withElse=*/true);
    OpBuilder::InsertionGuard g(b_);
    b_.setInsertionPointToStart(op.thenBlock());
    scf::YieldOp::create(b_, then());
    b_.setInsertionPointToStart(op.elseBlock());
    scf::YieldOp::create(b_, keep);
    return SmallVector<Value>(op.getResults());
  }
  Value select(Value c, Value a, Value x) {
    return arith::SelectOp::create(b_, c, a, x);
  }

  void loadEntryValues(ValueRange fnArgs, unsigned firstCapture);

  /// Problem-wide values of a kernel, read once at its entry.
  struct Entry {
    Value q, k, v, o, lse;
    Value Hq, Lq, B, nQT, G, P; // P: query heads per work item
    SmallVector<Value> qs, ks, vs, os, ls; // strides of q, k, v, out, lse
    Value hasLse, scale, ninf, zeroF, log2e, ln2;
  };
  /// Binds ip/fp/blockmask and the captures from the kernel's arguments
  /// (ABI order) and loads the problem-wide values.
  Entry loadEntry(ValueRange fnArgs);
  /// A work item's coordinates: sequence, head, Q tile and its rows.
  struct Item {
    Value qt, h, b, kvh, kvLen, qpos0, r0, rows, bI32, hI32, qlo, qhi;
    Value kBase, vBase; // offsets of this (b, kv head) in K and V
    // h is the item's first query head (classification, block masks); with
    // packed heads each row has its own, from rowCoords.
  };
  Item decodeItem(const Entry &e, Value item);
  /// Row r of the item's tile: its query head and query index.
  std::pair<Value, Value> rowCoords(const Entry &e, const Item &it, Value r);
  /// The KV tiles of a work item that are not empty: for each, `body` gets
  /// the tile's first key, its number of keys, its class, and whether the
  /// mask can be skipped (a full tile without a tail).
  struct Tile {
    Value j, kv0, cols, khi, cls, visit, skipMask;
  };
  void forEachVisitedTile(const Item &it, function_ref<void(const Tile &)> body);
  /// Tile j of a work item: its keys and class (`inv` holds the mask's
  /// values that do not depend on q or kv).
  Tile tileAt(const Item &it, Value j, IRMapping &inv);
  /// The kernel operands of the GPU forms (KernelABI.h order, then the
  /// launch's first work item).
  SmallVector<Type> gpuKernelArgs();
  /// Writes row `r` of the tile: O = acc / l (0 when l = 0) and, if asked
  /// for, LSE = (m + log2 l) ln 2 (-inf when l = 0).
  void emitRowEpilogue(const Entry &e, const Item &it, Value r, Value m,
                       Value l, function_ref<Value(Value)> acc);
  Value materialize(Value v, IRMapping &map);
  Value gather(attn::GatherOp g, IRMapping &map);
  /// The modifier on scalars; values already in `hoisted` (computed once,
  /// outside the loop) are reused.
  Value emitModifier(Block &block, ValueRange args,
                     const IRMapping *hoisted = nullptr);
  /// The values of `block` that depend on none of its arguments `varying`,
  /// computed here for `args` (e.g. a row's q-only values).
  IRMapping hoistUniform(Block &block, ArrayRef<unsigned> varying,
                         ValueRange args);
  /// Values of `block` that do not depend on its arguments `varying`.
  llvm::DenseSet<Value> uniformValues(Block &block, ArrayRef<unsigned> varying);
  /// The modifier over W lanes: `vecArgs` maps the varying block arguments
  /// to vectors; uniform values come from `uniform` (scalars, computed once
  /// outside the lane loop) and are broadcast.
  Value emitModifierVec(Block &block, const llvm::DenseMap<Value, Value> &vecArgs,
                        const llvm::DenseSet<Value> &uniformSet,
                        IRMapping &uniform, int64_t W);
  Value gatherVec(attn::GatherOp g, ArrayRef<Value> idx, int64_t W);
  /// Reads elements [0, n) of a K or V row starting at `row` (stride
  /// `stride`) as f32, zero where `keep` is false, and hands each to
  /// `put(d, x)`; with unit stride, 8 at a time, to `put8(d, x8)` when given
  /// (else lane by lane to `put`).
  void forTileRow(Value mem, Value row, Value stride, int64_t n, Value keep,
                  function_ref<void(Value, Value)> put,
                  function_ref<void(Value, Value)> put8 = nullptr);
  /// The register-blocked micro-kernel of both matrix products: for rows
  /// r..r+rb and cb vectors of `vt` starting at column col0,
  ///   acc[i][j] += A[(r + i) * aStride + x] * B[x * bStride + col0 + j*W]
  /// over x in [0, depth). Returns the rb * cb accumulators (row-major).
  SmallVector<Value> outerProduct(Value A, int64_t aStride, Value B,
                                  int64_t bStride, Value r, Value col0,
                                  int64_t depth, int64_t rb, int64_t cb,
                                  VectorType vt, ValueRange init);
  Value classify(Value b, Value h, Value qt, Value j, Value qlo, Value qhi,
                 Value klo, Value khi, IRMapping &inv);
  /// Computes, here, every q/kv-independent value the tile classifier of a
  /// closed-form mask reads (b and h already mapped in `inv`), so that
  /// classify() finds them all computed at a point that dominates its uses.
  void materializeMaskInvariants(IRMapping &inv);

  MLIRContext *ctx_;
  ImplicitLocOpBuilder b_;
  attn::VariantOp v_;
  const MaskAnalysis &mask_;
  const FlashConfig &cfg_;
  Type f32_, i32_, i64_, elem_;
  int64_t BM, BN, D, DV, VW, RB = 1, CB = 1, VWP = 8, CBP = 1;
  rt::VariantInfo info_;
  abi::Layout layout_;

  // Entry values of the function being built.
  Value ip_, fp_, bm_;
  SmallVector<Value> captures_;               // per param (null for scalars)
  SmallVector<SmallVector<Value>> capDims_, capStrides_;
  SmallVector<Value> scalars_;                // per param (null for tensors)
};

void ProgramBuilder::loadEntryValues(ValueRange fnArgs, unsigned firstCapture) {
  unsigned argNo = firstCapture;
  for (size_t i = 0; i < info_.params.size(); ++i) {
    const rt::ParamSpec &p = info_.params[i];
    captures_.push_back({});
    capDims_.push_back({});
    capStrides_.push_back({});
    scalars_.push_back({});
    if (!p.isTensor) {
      if (p.dtype == rt::DType::F32)
        scalars_.back() = load(fp_, cIdx(1 + i));
      else
        scalars_.back() = arith::TruncIOp::create(
            b_, i32_, load(ip_, cIdx(layout_.paramBase + i)));
      continue;
    }
    captures_.back() = fnArgs[argNo++];
    int64_t base = layout_.captureBase[i], r = p.dims.size();
    for (int64_t d = 0; d < r; ++d) {
      capDims_.back().push_back(ipAt(base + d));
      capStrides_.back().push_back(ipAt(base + r + d));
    }
  }
}

/// A gather with every index clamped into its dimension: never out of
/// bounds, whatever the modifier computes.
Value ProgramBuilder::gather(attn::GatherOp g, IRMapping &map) {
  size_t pi = 0;
  while (info_.params[pi].name != g.getCapture())
    ++pi;
  Value off = cIdx(0);
  for (auto [d, idx] : llvm::enumerate(g.getIndices())) {
    Value i = toIdx(map.lookup(idx));
    Value hi = sub(capDims_[pi][d], cIdx(1));
    i = minI(maxI(i, cIdx(0)), hi);
    off = add(off, mul(i, capStrides_[pi][d]));
  }
  Value x = load(captures_[pi], off);
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
  } else
    r = b_.clone(*op, map)->getResult(0);
  map.map(v, r);
  return r;
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

llvm::DenseSet<Value> ProgramBuilder::uniformValues(Block &block,
                                              ArrayRef<unsigned> varying) {
  llvm::DenseSet<Value> dependent, uniform;
  for (unsigned a : varying)
    dependent.insert(block.getArgument(a));
  for (BlockArgument a : block.getArguments())
    if (!dependent.contains(a))
      uniform.insert(a);
  for (Operation &op : block) {
    bool dep = llvm::any_of(op.getOperands(),
                            [&](Value v) { return dependent.contains(v); });
    for (Value r : op.getResults())
      (dep ? dependent : uniform).insert(r);
  }
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

ProgramBuilder::Entry ProgramBuilder::loadEntry(ValueRange fnArgs) {
  Entry e;
  e.q = fnArgs[0];
  e.k = fnArgs[1];
  e.v = fnArgs[2];
  e.o = fnArgs[3];
  e.lse = fnArgs[4];
  ip_ = fnArgs[5];
  fp_ = fnArgs[6];
  bm_ = fnArgs[7];
  loadEntryValues(fnArgs, 8);
  e.Hq = ipAt(abi::kHq);
  e.Lq = ipAt(abi::kLq);
  e.B = ipAt(abi::kB);
  e.nQT = ipAt(abi::kNumQTiles);
  e.G = arith::DivUIOp::create(b_, e.Hq, ipAt(abi::kHkv));
  e.P = ipAt(abi::kPackHeads);
  for (int d = 0; d < 4; ++d) {
    e.qs.push_back(ipAt(abi::kQStride + d));
    e.ks.push_back(ipAt(abi::kKStride + d));
    e.vs.push_back(ipAt(abi::kVStride + d));
    e.os.push_back(ipAt(abi::kOStride + d));
  }
  for (int d = 0; d < 3; ++d)
    e.ls.push_back(ipAt(abi::kLseStride + d));
  e.hasLse = arith::CmpIOp::create(
      b_, arith::CmpIPredicate::ne, load(ip_, cIdx(abi::kHasLse)),
      arith::ConstantOp::create(b_, b_.getI64IntegerAttr(0)));
  e.scale = load(fp_, cIdx(0));
  e.ninf = cF32(-std::numeric_limits<double>::infinity());
  e.zeroF = cF32(0.0);
  e.log2e = cF32(1.4426950408889634);
  e.ln2 = cF32(0.6931471805599453);
  return e;
}

ProgramBuilder::Item ProgramBuilder::decodeItem(const Entry &e, Value item) {
  Item it;
  Value heads = arith::DivUIOp::create(b_, e.Hq, e.P); // item heads
  it.qt = arith::RemUIOp::create(b_, item, e.nQT);
  Value t = arith::DivUIOp::create(b_, item, e.nQT);
  Value hi = arith::RemUIOp::create(b_, t, heads);
  it.b = arith::DivUIOp::create(b_, t, heads);
  it.h = mul(hi, e.P);
  it.kvh = arith::DivUIOp::create(b_, it.h, e.G);
  it.kvLen = ipAt(add(cIdx(layout_.seqBase), it.b));
  it.qpos0 = ipAt(add(add(cIdx(layout_.seqBase), e.B), it.b));
  it.r0 = mul(it.qt, cIdx(BM));
  it.rows = minI(cIdx(BM), sub(mul(e.P, e.Lq), it.r0));
  it.bI32 = arith::IndexCastOp::create(b_, i32_, it.b);
  it.hI32 = arith::IndexCastOp::create(b_, i32_, it.h);
  // The tile's query positions: exact when its rows stay within one head,
  // else every position of the chunk (conservative for classification).
  Value i0 = arith::RemUIOp::create(b_, it.r0, e.Lq);
  Value oneHead = arith::CmpIOp::create(b_, arith::CmpIPredicate::ule,
                                        add(i0, it.rows), e.Lq);
  it.qlo = add(it.qpos0, select(oneHead, i0, cIdx(0)));
  it.qhi = add(it.qpos0, select(oneHead, sub(add(i0, it.rows), cIdx(1)),
                                sub(e.Lq, cIdx(1))));
  it.kBase = add(mul(it.b, e.ks[0]), mul(it.kvh, e.ks[1]));
  it.vBase = add(mul(it.b, e.vs[0]), mul(it.kvh, e.vs[1]));
  return it;
}

std::pair<Value, Value> ProgramBuilder::rowCoords(const Entry &e, const Item &it,
                                            Value r) {
  Value p = add(it.r0, r);
  Value h = add(it.h, arith::DivUIOp::create(b_, p, e.Lq));
  return {h, arith::RemUIOp::create(b_, p, e.Lq)};
}

void ProgramBuilder::forEachVisitedTile(const Item &it,
                                  function_ref<void(const Tile &)> body) {
  // The mask's q/kv-independent values, once per work item.
  IRMapping inv;
  inv.map(v_.getMaskBlock().getArgument(0), it.bI32);
  inv.map(v_.getMaskBlock().getArgument(1), it.hI32);
  materializeMaskInvariants(inv);
  Value nKT = arith::CeilDivUIOp::create(b_, it.kvLen, cIdx(BN));
  loop0(cIdx(0), nKT, 1, [&](Value j) {
    Tile t = tileAt(it, j, inv);
    ifThen(t.visit, [&] { body(t); });
  });
}

ProgramBuilder::Tile ProgramBuilder::tileAt(const Item &it, Value j,
                                            IRMapping &inv) {
  Tile t;
  t.j = j;
  t.kv0 = mul(j, cIdx(BN));
  t.cols = minI(cIdx(BN), sub(it.kvLen, t.kv0));
  t.khi = sub(add(t.kv0, t.cols), cIdx(1));
  t.cls = classify(it.b, it.h, it.qt, j, it.qlo, it.qhi, t.kv0, t.khi, inv);
  auto i8 = [&](int64_t c) {
    return arith::ConstantOp::create(b_, b_.getI8IntegerAttr(c));
  };
  t.visit = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne, t.cls,
                                  i8(abi::kEmpty));
  Value full = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, t.cls,
                                     i8(abi::kFull));
  Value noTail = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, t.cols,
                                       cIdx(BN));
  t.skipMask = arith::AndIOp::create(b_, full, noTail);
  return t;
}

void ProgramBuilder::emitRowEpilogue(const Entry &e, const Item &it, Value r,
                               Value m, Value l,
                               function_ref<Value(Value)> acc) {
  // l == 0: no key (0, LSE -inf); a NaN l (non-finite scores) propagates.
  Value pos = arith::CmpFOp::create(b_, arith::CmpFPredicate::UNE, l, e.zeroF);
  Value invL = select(pos, arith::DivFOp::create(b_, cF32(1.0), l), e.zeroF);
  auto [h, i] = rowCoords(e, it, r);
  Value oRow = add(add(mul(it.b, e.os[0]), mul(h, e.os[1])), mul(i, e.os[2]));
  loop0(cIdx(0), cIdx(DV), 1, [&](Value d) {
    Value x = arith::MulFOp::create(b_, acc(d), invL);
    store(fromF32(x), e.o, add(oRow, mul(d, e.os[3])));
  });
  ifThen(e.hasLse, [&] {
    Value lg = arith::MulFOp::create(
        b_, arith::AddFOp::create(b_, m, math::Log2Op::create(b_, l)), e.ln2);
    Value at = add(add(mul(it.b, e.ls[0]), mul(h, e.ls[1])), mul(i, e.ls[2]));
    store(select(pos, lg, e.ninf), e.lse, at);
  });
}

SmallVector<Value> ProgramBuilder::outerProduct(Value A, int64_t aStride, Value B,
                                          int64_t bStride, Value r, Value col0,
                                          int64_t depth, int64_t rb, int64_t cb,
                                          VectorType vt, ValueRange init) {
  int64_t W = vt.getNumElements();
  auto l = loop(cIdx(0), cIdx(depth), 1, init, [&](Value x, ValueRange acc) {
    SmallVector<Value> a, bv, next;
    for (int64_t i = 0; i < rb; ++i)
      a.push_back(vector::BroadcastOp::create(
          b_, vt, load(A, add(mul(add(r, cIdx(i)), cIdx(aStride)), x))));
    for (int64_t j = 0; j < cb; ++j)
      bv.push_back(vector::LoadOp::create(
          b_, vt, B, ValueRange{add(mul(x, cIdx(bStride)), add(col0, cIdx(j * W)))}));
    for (int64_t i = 0; i < rb; ++i)
      for (int64_t j = 0; j < cb; ++j)
        next.push_back(vector::FMAOp::create(b_, a[i], bv[j], acc[i * cb + j]));
    return next;
  });
  return SmallVector<Value>(l.getResults());
}

void ProgramBuilder::forTileRow(Value mem, Value row, Value stride, int64_t n,
                          Value keep, function_ref<void(Value, Value)> put,
                          function_ref<void(Value, Value)> put8) {
  Value zeroF = cF32(0.0);
  Value unit = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, stride,
                                     cIdx(1));
  auto ifUnit = scf::IfOp::create(b_, unit, /*withElse=*/true);
  OpBuilder::InsertionGuard g(b_);
  b_.setInsertionPoint(ifUnit.thenBlock()->getTerminator());
  VectorType v8 = VectorType::get({8}, f32_);
  Value zero8 = vector::BroadcastOp::create(b_, v8, zeroF);
  loop0(cIdx(0), cIdx(n), 8, [&](Value d) {
    Value x = vector::LoadOp::create(b_, VectorType::get({8}, elem_), mem,
                                     ValueRange{add(row, d)});
    if (elem_ != f32_)
      x = arith::ExtFOp::create(b_, v8, x);
    x = select(keep, x, zero8);
    if (put8) {
      put8(d, x);
      return;
    }
    for (int64_t lane = 0; lane < 8; ++lane)
      put(add(d, cIdx(lane)),
          vector::ExtractOp::create(b_, x, ArrayRef<int64_t>{lane}));
  });
  b_.setInsertionPoint(ifUnit.elseBlock()->getTerminator());
  loop0(cIdx(0), cIdx(n), 1, [&](Value d) {
    put(d, select(keep, toF32(load(mem, add(row, mul(d, stride)))), zeroF));
  });
}

void ProgramBuilder::materializeMaskInvariants(IRMapping &inv) {
  if (mask_.kind != rt::MaskKind::Closed)
    return;
  std::function<void(const AffineForm &)> form = [&](const AffineForm &f) {
    for (auto [val, coef] : f.inv)
      materialize(val, inv);
    for (const DivTerm &d : f.divs)
      form(*d.inner);
  };
  for (const MaskNode &n : mask_.nodes) {
    if (n.kind == MaskNode::Invariant)
      materialize(n.value, inv);
    if (n.kind != MaskNode::Atom)
      continue;
    form(n.form);
    for (const AffineForm &c : n.checks)
      form(c);
  }
}

/// The tile's class as an i8 (abi::TileClass).
Value ProgramBuilder::classify(Value b, Value h, Value qt, Value j, Value qlo,
                         Value qhi, Value klo, Value khi, IRMapping &inv) {
  auto i8 = [&](int64_t c) {
    return arith::ConstantOp::create(b_, b_.getI8IntegerAttr(c));
  };
  if (mask_.kind == rt::MaskKind::None)
    return i8(abi::kFull);
  if (mask_.kind == rt::MaskKind::Data) {
    // From the block mask when one was given; otherwise partial.
    Value has = arith::CmpIOp::create(b_, arith::CmpIPredicate::ne,
                                      load(ip_, cIdx(abi::kHasBlockMask)),
                                      arith::ConstantOp::create(
                                          b_, b_.getI64IntegerAttr(0)));
    auto ifOp = scf::IfOp::create(b_, TypeRange{b_.getI8Type()}, has,
                                  /*withElse=*/true);
    {
      OpBuilder::InsertionGuard g(b_);
      b_.setInsertionPointToStart(ifOp.thenBlock());
      Value off = add(add(mul(b, ipAt(abi::kBMStrideB)),
                          mul(h, ipAt(abi::kBMStrideH))),
                      add(mul(qt, ipAt(abi::kNumKTiles)), j));
      scf::YieldOp::create(b_, load(bm_, off));
      b_.setInsertionPointToStart(ifOp.elseBlock());
      scf::YieldOp::create(b_, Value(i8(abi::kPartial)));
    }
    return ifOp.getResult(0);
  }
  // Closed form: (mayBeTrue, mayBeFalse) per node, in i1.
  Value t = arith::ConstantOp::create(b_, b_.getBoolAttr(true));
  Value f = arith::ConstantOp::create(b_, b_.getBoolAttr(false));
  auto toI64 = [&](Value x) { return arith::IndexCastOp::create(b_, i64_, x); };
  Value qlo64 = toI64(qlo), qhi64 = toI64(qhi), klo64 = toI64(klo),
        khi64 = toI64(khi);
  auto c64 = [&](int64_t x) {
    return arith::ConstantOp::create(b_, b_.getI64IntegerAttr(x));
  };
  std::vector<std::pair<Value, Value>> tv;
  for (const MaskNode &n : mask_.nodes) {
    switch (n.kind) {
    case MaskNode::True: tv.push_back({t, f}); break;
    case MaskNode::False: tv.push_back({f, t}); break;
    case MaskNode::Not: tv.push_back({tv[n.lhs].second, tv[n.lhs].first}); break;
    case MaskNode::And:
      tv.push_back({arith::AndIOp::create(b_, tv[n.lhs].first, tv[n.rhs].first),
                    arith::OrIOp::create(b_, tv[n.lhs].second,
                                         tv[n.rhs].second)});
      break;
    case MaskNode::Or:
      tv.push_back({arith::OrIOp::create(b_, tv[n.lhs].first, tv[n.rhs].first),
                    arith::AndIOp::create(b_, tv[n.lhs].second,
                                          tv[n.rhs].second)});
      break;
    case MaskNode::Invariant: {
      Value x = materialize(n.value, inv);
      tv.push_back({x, arith::XOrIOp::create(b_, x, t)});
      break;
    }
    case MaskNode::Atom: {
      // The range of an affine form over the tile (i64, no overflow for
      // i32 positions): c * x over x in [lo, hi] peaks at an end chosen by
      // c's sign, known at compile time; division terms divide the range of
      // their inner form (monotone for a positive constant divisor).
      std::function<std::pair<Value, Value>(const AffineForm &)> rangeOf =
          [&](const AffineForm &form) -> std::pair<Value, Value> {
        Value base = c64(form.c0);
        for (auto [val, coef] : form.inv)
          base = add(base, mul(arith::ExtSIOp::create(b_, i64_,
                                                      materialize(val, inv)),
                               c64(coef)));
        auto ext = [&](int64_t c, Value lo, Value hi, bool wantMax) {
          bool useHi = (c >= 0) == wantMax;
          return mul(c64(c), useHi ? hi : lo);
        };
        Value lo = add(base, add(ext(form.cq, qlo64, qhi64, false),
                                 ext(form.ckv, klo64, khi64, false)));
        Value hi = add(base, add(ext(form.cq, qlo64, qhi64, true),
                                 ext(form.ckv, klo64, khi64, true)));
        for (const DivTerm &d : form.divs) {
          auto [ilo, ihi] = rangeOf(*d.inner);
          Value a = arith::DivSIOp::create(b_, ilo, c64(d.divisor));
          Value z = arith::DivSIOp::create(b_, ihi, c64(d.divisor));
          lo = add(lo, ext(d.coef, a, z, false));
          hi = add(hi, ext(d.coef, a, z, true));
        }
        return {lo, hi};
      };
      auto [lo, hi] = rangeOf(n.form);
      Value zero = c64(0);
      using P = arith::CmpIPredicate;
      auto cmp = [&](P p, Value a, Value c) {
        return arith::CmpIOp::create(b_, p, a, c);
      };
      std::pair<Value, Value> r;
      switch (n.pred) {
      case P::slt: r = {cmp(P::slt, lo, zero), cmp(P::sge, hi, zero)}; break;
      case P::sle: r = {cmp(P::sle, lo, zero), cmp(P::sgt, hi, zero)}; break;
      case P::sgt: r = {cmp(P::sgt, hi, zero), cmp(P::sle, lo, zero)}; break;
      case P::sge: r = {cmp(P::sge, hi, zero), cmp(P::slt, lo, zero)}; break;
      default: {
        Value straddles = arith::AndIOp::create(b_, cmp(P::sle, lo, zero),
                                                cmp(P::sge, hi, zero));
        Value exact = arith::AndIOp::create(b_, cmp(P::eq, lo, zero),
                                            cmp(P::eq, hi, zero));
        Value notExact = arith::XOrIOp::create(b_, exact, t);
        r = n.pred == P::eq ? std::pair{straddles, notExact}
                            : std::pair{notExact, straddles};
      }
      }
      // Undecided (both may hold) where an i32 value computed on the way
      // from q and kv may wrap over this tile.
      Value wraps = f;
      for (const AffineForm &c : n.checks) {
        auto [clo, chi] = rangeOf(c);
        wraps = arith::OrIOp::create(
            b_, wraps,
            arith::OrIOp::create(b_, cmp(P::slt, clo, c64(INT32_MIN)),
                                 cmp(P::sgt, chi, c64(INT32_MAX))));
      }
      tv.push_back({arith::OrIOp::create(b_, r.first, wraps),
                    arith::OrIOp::create(b_, r.second, wraps)});
      break;
    }
    }
  }
  auto [mayTrue, mayFalse] = tv.back();
  Value cls = select(mayFalse, i8(abi::kPartial), i8(abi::kFull));
  return select(mayTrue, cls, i8(abi::kEmpty));
}

LogicalResult ProgramBuilder::buildKernel(StringRef name) {
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args = {dyn(elem_), dyn(elem_), dyn(elem_), dyn(elem_),
                            dyn(f32_),  dyn(i64_),  dyn(f32_),
                            dyn(b_.getI8Type())};
  for (const rt::ParamSpec &p : info_.params)
    if (p.isTensor)
      args.push_back(dyn(storageType(ctx_, p.dtype)));
  args.push_back(i64_);
  args.push_back(i64_);
  auto fn = func::FuncOp::create(b_, name, b_.getFunctionType(args, {}));
  Block *entry = fn.addEntryBlock();
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(entry);
  Entry e = loadEntry(fn.getArguments());
  Value q = e.q, k = e.k, v = e.v;
  Value begin = toIdx(fn.getArgument(fn.getNumArguments() - 2));
  Value end = toIdx(fn.getArgument(fn.getNumArguments() - 1));
  const SmallVector<Value> &qs = e.qs, &ks = e.ks, &vs = e.vs;
  Value scale = e.scale, ninf = e.ninf, zeroF = e.zeroF, log2e = e.log2e;
  Value c0 = cIdx(0), c1 = cIdx(1);

  Value Qs = alloca(BM * D), Kt = alloca(D * BN), Vs = alloca(BN * DV),
        S = alloca(BM * BN), Acc = alloca(BM * DV), M = alloca(BM),
        L = alloca(BM), Alpha = alloca(BM);
  VectorType vecQK = VectorType::get({VW}, f32_);
  VectorType vecPV = VectorType::get({VWP}, f32_);

  loop0(begin, end, 1, [&](Value item) {
    Item it = decodeItem(e, item);
    Value bb = it.b, rows = it.rows, bI32 = it.bI32, kBase = it.kBase,
          vBase = it.vBase;
    // The matrix products cover the live rows rounded up to the register
    // block (decode: 4 rows, not 64); the extra rows of Qs are zero.
    Value rowsUp = mul(arith::CeilDivUIOp::create(b_, rows, cIdx(RB)), cIdx(RB));

    // Q tile -> Qs (f32); rows past the end are zero.
    loop0(c0, cIdx(BM), 1, [&](Value r) {
      loop0(c0, cIdx(D), 1, [&](Value d) {
        store(zeroF, Qs, add(mul(r, cIdx(D)), d));
      });
    });
    loop0(c0, rows, 1, [&](Value r) {
      auto [hr, ir] = rowCoords(e, it, r);
      Value rowBase =
          add(add(mul(bb, qs[0]), mul(hr, qs[1])), mul(ir, qs[2]));
      loop0(c0, cIdx(D), 1, [&](Value d) {
        store(toF32(load(q, add(rowBase, mul(d, qs[3])))), Qs,
              add(mul(r, cIdx(D)), d));
      });
    });
    loop0(c0, cIdx(BM), 1, [&](Value r) {
      store(ninf, M, r);
      store(zeroF, L, r);
      store(cF32(1.0), Alpha, r);
      loop0(c0, cIdx(DV), 1, [&](Value d) {
        store(zeroF, Acc, add(mul(r, cIdx(DV)), d));
      });
    });

    forEachVisitedTile(it, [&](const Tile &tile) {
        Value kv0 = tile.kv0, cols = tile.cols, skipMask = tile.skipMask;
        // K^T and V tiles (f32); columns past the end are zero.
        loop0(c0, cIdx(BN), 1, [&](Value c) {
          Value inRange = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt,
                                                c, cols);
          Value row = minI(add(kv0, c), sub(add(kv0, cols), c1));
          Value kRow = add(kBase, mul(row, ks[2]));
          Value vRow = add(vBase, mul(row, vs[2]));
          // Rows with unit stride along D (every usual layout) are read 8
          // elements at a time; other strides element by element. K is
          // stored transposed, V as is.
          forTileRow(k, kRow, ks[3], D, inRange,
                     [&](Value d, Value x) {
                       store(x, Kt, add(mul(d, cIdx(BN)), c));
                     });
          forTileRow(v, vRow, vs[3], DV, inRange,
                     [&](Value d, Value x) {
                       store(x, Vs, add(mul(c, cIdx(DV)), d));
                     },
                     [&](Value d, Value x8) {
                       vector::StoreOp::create(
                           b_, x8, Vs, ValueRange{add(mul(c, cIdx(DV)), d)});
                     });
        });
        // S = Qs . Kt, register-blocked: RB rows x CB vectors of VW keys
        // per step over d, so each loaded K vector and broadcast Q value
        // feeds several FMAs. Padding rows of Qs are zero, so computing all
        // BM rows is harmless.
        loop0(c0, rowsUp, RB, [&](Value r) {
          loop0(c0, cIdx(BN), VW * CB, [&](Value cv) {
            Value zero = arith::ConstantOp::create(
                b_, DenseElementsAttr::get(vecQK, 0.0f));
            SmallVector<Value> init(RB * CB, zero);
            SmallVector<Value> dl =
                outerProduct(Qs, D, Kt, BN, r, cv, D, RB, CB, vecQK, init);
            for (int64_t i = 0; i < RB; ++i)
              for (int64_t j = 0; j < CB; ++j)
                vector::StoreOp::create(
                    b_, dl[i * CB + j], S,
                    ValueRange{add(mul(add(r, cIdx(i)), cIdx(BN)),
                                   add(cv, cIdx(j * VW)))});
          });
        });
        // Modifiers, mask (partial tiles and tails only), online softmax.
        loop0(c0, rows, 1, [&](Value r) {
          auto [hr, ir] = rowCoords(e, it, r);
          Value qpos =
              arith::IndexCastOp::create(b_, i32_, add(it.qpos0, ir));
          Value hI32 = arith::IndexCastOp::create(b_, i32_, hr);
          Value sRow = mul(r, cIdx(BN));
          // The scores of one row, W keys at a time: scale, score_mod on
          // every key, x log2(e), and the mask only on partial tiles and
          // tails (two copies of the loop, chosen once per tile). Values that
          // do not depend on kv (or score) are computed once per row.
          int64_t W = VW;
          VectorType vF = VectorType::get({W}, f32_);
          VectorType vI = VectorType::get({W}, i32_);
          SmallVector<int32_t> lanes;
          for (int64_t i = 0; i < W; ++i)
            lanes.push_back(int32_t(i));
          Value iota = arith::ConstantOp::create(
              b_, DenseElementsAttr::get(vI, ArrayRef<int32_t>(lanes)));
          Block &scoreBlock = v_.getScoreBlock(), &maskBlock = v_.getMaskBlock();
          IRMapping scoreUni, maskUni;
          scoreUni.map(scoreBlock.getArgument(1), bI32);
          scoreUni.map(scoreBlock.getArgument(2), hI32);
          scoreUni.map(scoreBlock.getArgument(3), qpos);
          maskUni.map(maskBlock.getArgument(0), bI32);
          maskUni.map(maskBlock.getArgument(1), hI32);
          maskUni.map(maskBlock.getArgument(2), qpos);
          llvm::DenseSet<Value> scoreU = uniformValues(scoreBlock, {0, 4});
          llvm::DenseSet<Value> maskU = uniformValues(maskBlock, {3});
          // Hoist: every uniform value that a lane-varying op (or the yield)
          // uses is computed here, once per row.
          auto hoist = [&](Block &block, const llvm::DenseSet<Value> &uni,
                           IRMapping &map) {
            for (Operation &op : block)
              for (Value operand : op.getOperands())
                if (uni.contains(operand) &&
                    (isa<attn::YieldOp>(op) || !uni.contains(op.getResult(0))))
                  materialize(operand, map);
          };
          hoist(scoreBlock, scoreU, scoreUni);
          hoist(maskBlock, maskU, maskUni);
          Value vNinf = vector::BroadcastOp::create(b_, vF, ninf);
          Value vScale = vector::BroadcastOp::create(b_, vF, scale);
          Value vLog2e = vector::BroadcastOp::create(b_, vF, log2e);
          Value kv0I32 = arith::IndexCastOp::create(b_, i32_, kv0);
          Value colsI32 = arith::IndexCastOp::create(b_, i32_, cols);
          auto scoreLoop = [&](bool withMask) {
            auto l = loop(c0, cIdx(BN), W, {vNinf}, [&](Value c, ValueRange it) {
              Value cI32 = arith::IndexCastOp::create(b_, i32_, c);
              Value col = arith::AddIOp::create(
                  b_, vector::BroadcastOp::create(b_, vI, cI32), iota);
              Value kvv = arith::AddIOp::create(
                  b_, vector::BroadcastOp::create(b_, vI, kv0I32), col);
              Value sv = arith::MulFOp::create(
                  b_, vector::LoadOp::create(b_, vF, S, ValueRange{add(sRow, c)}),
                  vScale);
              llvm::DenseMap<Value, Value> args;
              args[scoreBlock.getArgument(0)] = sv;
              args[scoreBlock.getArgument(4)] = kvv;
              sv = emitModifierVec(scoreBlock, args, scoreU, scoreUni, W);
              sv = arith::MulFOp::create(b_, sv, vLog2e);
              if (withMask) {
                Value inRange = arith::CmpIOp::create(
                    b_, arith::CmpIPredicate::slt, col,
                    vector::BroadcastOp::create(b_, vI, colsI32));
                llvm::DenseMap<Value, Value> margs;
                margs[maskBlock.getArgument(3)] = kvv;
                Value m = emitModifierVec(maskBlock, margs, maskU, maskUni, W);
                sv = select(arith::AndIOp::create(b_, inRange, m), sv, vNinf);
              }
              vector::StoreOp::create(b_, sv, S, ValueRange{add(sRow, c)});
              return SmallVector<Value>{arith::MaximumFOp::create(b_, it[0], sv)};
            });
            return Value(vector::ReductionOp::create(
                b_, vector::CombiningKind::MAXIMUMF, l.getResult(0)));
          };
          auto branch = scf::IfOp::create(b_, TypeRange{f32_}, skipMask,
                                          /*withElse=*/true);
          {
            OpBuilder::InsertionGuard g(b_);
            b_.setInsertionPointToStart(branch.thenBlock());
            scf::YieldOp::create(b_, scoreLoop(false));
            b_.setInsertionPointToStart(branch.elseBlock());
            scf::YieldOp::create(b_, scoreLoop(true));
          }
          Value rowMax = branch.getResult(0);
          Value mOld = load(M, r);
          Value mNew = arith::MaximumFOp::create(b_, mOld, rowMax);
          Value isNinf = arith::CmpFOp::create(b_, arith::CmpFPredicate::OEQ,
                                               mNew, ninf);
          Value mUse = select(isNinf, zeroF, mNew);
          Value alpha = math::Exp2Op::create(b_, arith::SubFOp::create(b_, mOld, mUse));
          Value vM = vector::BroadcastOp::create(b_, vF, mUse);
          Value vZero = vector::BroadcastOp::create(b_, vF, zeroF);
          auto sumv = loop(c0, cIdx(BN), W, {vZero}, [&](Value c, ValueRange it) {
            Value p = math::Exp2Op::create(
                b_, arith::SubFOp::create(
                        b_, vector::LoadOp::create(b_, vF, S, ValueRange{add(sRow, c)}),
                        vM));
            vector::StoreOp::create(b_, p, S, ValueRange{add(sRow, c)});
            return SmallVector<Value>{arith::AddFOp::create(b_, it[0], p)};
          });
          Value sum = vector::ReductionOp::create(b_, vector::CombiningKind::ADD,
                                                  sumv.getResult(0));
          store(arith::AddFOp::create(
                    b_, arith::MulFOp::create(b_, load(L, r), alpha), sum),
                L, r);
          store(mNew, M, r);
          store(alpha, Alpha, r);
        });
        // acc = acc * alpha + P . V, register-blocked like QK^T: RB rows x
        // CBP vectors of VWP value dims per step over the keys.
        loop0(c0, rowsUp, RB, [&](Value r) {
          loop0(c0, cIdx(DV), VWP * CBP, [&](Value d0) {
            SmallVector<Value> init;
            for (int64_t i = 0; i < RB; ++i) {
              Value alphaV = vector::BroadcastOp::create(
                  b_, vecPV, load(Alpha, add(r, cIdx(i))));
              for (int64_t j = 0; j < CBP; ++j) {
                Value at = add(mul(add(r, cIdx(i)), cIdx(DV)),
                               add(d0, cIdx(j * VWP)));
                init.push_back(arith::MulFOp::create(
                    b_, vector::LoadOp::create(b_, vecPV, Acc, ValueRange{at}),
                    alphaV));
              }
            }
            SmallVector<Value> pv =
                outerProduct(S, BN, Vs, DV, r, d0, BN, RB, CBP, vecPV, init);
            for (int64_t i = 0; i < RB; ++i)
              for (int64_t j = 0; j < CBP; ++j)
                vector::StoreOp::create(
                    b_, pv[i * CBP + j], Acc,
                    ValueRange{add(mul(add(r, cIdx(i)), cIdx(DV)),
                                   add(d0, cIdx(j * VWP)))});
          });
        });
    });

    // Epilogue: O = acc / l (0 for fully masked rows), LSE = ln(sum e^s).
    loop0(c0, rows, 1, [&](Value r) {
      emitRowEpilogue(e, it, r, load(M, r), load(L, r), [&](Value d) {
        return load(Acc, add(mul(r, cIdx(DV)), d));
      });
    });
  });
  func::ReturnOp::create(b_);
  return success();
}

SmallVector<Type> ProgramBuilder::gpuKernelArgs() {
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args = {dyn(elem_), dyn(elem_), dyn(elem_), dyn(elem_),
                            dyn(f32_),  dyn(i64_),  dyn(f32_),
                            dyn(b_.getI8Type())};
  for (const rt::ParamSpec &p : info_.params)
    if (p.isTensor)
      args.push_back(dyn(storageType(ctx_, p.dtype)));
  args.push_back(i64_); // first work item of this launch
  return args;
}

LogicalResult ProgramBuilder::buildGpuKernel(gpu::GPUModuleOp module, StringRef name) {
  SmallVector<Type> args = gpuKernelArgs();
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToEnd(module.getBody());
  auto fn = gpu::GPUFuncOp::create(b_, name, b_.getFunctionType(args, {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
  auto shared = gpu::AddressSpaceAttr::get(ctx_, gpu::AddressSpace::Workgroup);
  Value Kt = fn.addWorkgroupAttribution(
      MemRefType::get({D * BN}, f32_, MemRefLayoutAttrInterface(), shared),
      fn.getLoc());
  Value Vs = fn.addWorkgroupAttribution(
      MemRefType::get({BN * DV}, f32_, MemRefLayoutAttrInterface(), shared),
      fn.getLoc());
  b_.setInsertionPointToStart(&fn.getBody().front());
  Entry e = loadEntry(fn.getArguments());
  Value q = e.q, k = e.k, v = e.v;
  Value item = add(toIdx(fn.getArgument(fn.getNumArguments() - 1)),
                   gpu::BlockIdOp::create(b_, gpu::Dimension::x));
  Value r = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
  const SmallVector<Value> &qs = e.qs, &ks = e.ks, &vs = e.vs;
  Value scale = e.scale, ninf = e.ninf, zeroF = e.zeroF, log2e = e.log2e;
  Value c0 = cIdx(0), c1 = cIdx(1);
  // Per-thread state: the query row, one row of scores, the accumulator,
  // and the running max and sum.
  Value Qp = alloca(D), Sp = alloca(BN), Acc = alloca(DV), ML = alloca(2);

  Item it = decodeItem(e, item);
  Value bb = it.b, bI32 = it.bI32, kBase = it.kBase, vBase = it.vBase;
  Value live =
      arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, r, it.rows);
  // Rows past the end read the last row (their results are not stored).
  auto [hr, ir] = rowCoords(e, it, minI(r, sub(it.rows, c1)));
  Value qpos = arith::IndexCastOp::create(b_, i32_, add(it.qpos0, ir));
  Value hI32 = arith::IndexCastOp::create(b_, i32_, hr);
  Value qRow = add(add(mul(bb, qs[0]), mul(hr, qs[1])), mul(ir, qs[2]));
  loop0(c0, cIdx(D), 1, [&](Value d) {
    Value x = toF32(load(q, add(qRow, mul(d, qs[3]))));
    store(select(live, x, zeroF), Qp, d);
  });
  loop0(c0, cIdx(DV), 1, [&](Value d) { store(zeroF, Acc, d); });
  store(ninf, ML, c0);
  store(zeroF, ML, c1);

  // The class is the same for every thread of the block, so the barriers
  // inside are reached by all or none.
  forEachVisitedTile(it, [&](const Tile &tile) {
      Value kv0 = tile.kv0, cols = tile.cols, khi = tile.khi,
            skipMask = tile.skipMask;
      // The block's threads stage K^T and V (f32) in shared memory.
      loop0(r, cIdx(BN * D), BM, [&](Value idx) {
        Value c = arith::DivUIOp::create(b_, idx, cIdx(D));
        Value d = arith::RemUIOp::create(b_, idx, cIdx(D));
        Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
        Value row = minI(add(kv0, c), khi);
        Value x = toF32(load(k, add(add(kBase, mul(row, ks[2])), mul(d, ks[3]))));
        store(select(in, x, zeroF), Kt, add(mul(d, cIdx(BN)), c));
      });
      loop0(r, cIdx(BN * DV), BM, [&](Value idx) {
        Value c = arith::DivUIOp::create(b_, idx, cIdx(DV));
        Value d = arith::RemUIOp::create(b_, idx, cIdx(DV));
        Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
        Value row = minI(add(kv0, c), khi);
        Value x = toF32(load(v, add(add(vBase, mul(row, vs[2])), mul(d, vs[3]))));
        store(select(in, x, zeroF), Vs, add(mul(c, cIdx(DV)), d));
      });
      gpu::BarrierOp::create(b_);
      ifThen(live, [&] {
        auto mx = loop(c0, cIdx(BN), 1, {ninf}, [&](Value c, ValueRange it) {
          auto dot = loop(c0, cIdx(D), 1, {zeroF}, [&](Value d, ValueRange a) {
            Value prod = arith::MulFOp::create(
                b_, load(Qp, d), load(Kt, add(mul(d, cIdx(BN)), c)));
            return SmallVector<Value>{arith::AddFOp::create(b_, a[0], prod)};
          });
          Value kvpos = arith::IndexCastOp::create(b_, i32_, add(kv0, c));
          Value s = arith::MulFOp::create(b_, dot.getResult(0), scale);
          s = emitModifier(v_.getScoreBlock(), {s, bI32, hI32, qpos, kvpos});
          s = arith::MulFOp::create(b_, s, log2e);
          auto keep = scf::IfOp::create(b_, TypeRange{b_.getI1Type()}, skipMask,
                                        /*withElse=*/true);
          {
            OpBuilder::InsertionGuard g(b_);
            b_.setInsertionPointToStart(keep.thenBlock());
            scf::YieldOp::create(
                b_, Value(arith::ConstantOp::create(b_, b_.getBoolAttr(true))));
            b_.setInsertionPointToStart(keep.elseBlock());
            Value in = arith::CmpIOp::create(b_, arith::CmpIPredicate::slt, c, cols);
            Value m = emitModifier(v_.getMaskBlock(), {bI32, hI32, qpos, kvpos});
            scf::YieldOp::create(b_, Value(arith::AndIOp::create(b_, in, m)));
          }
          s = select(keep.getResult(0), s, ninf);
          store(s, Sp, c);
          return SmallVector<Value>{arith::MaximumFOp::create(b_, it[0], s)};
        });
        Value mOld = load(ML, c0);
        Value mNew = arith::MaximumFOp::create(b_, mOld, mx.getResult(0));
        Value isNinf = arith::CmpFOp::create(b_, arith::CmpFPredicate::OEQ, mNew, ninf);
        Value mUse = select(isNinf, zeroF, mNew);
        Value alpha = math::Exp2Op::create(b_, arith::SubFOp::create(b_, mOld, mUse));
        auto sum = loop(c0, cIdx(BN), 1, {zeroF}, [&](Value c, ValueRange it) {
          Value p = math::Exp2Op::create(
              b_, arith::SubFOp::create(b_, load(Sp, c), mUse));
          store(p, Sp, c);
          return SmallVector<Value>{arith::AddFOp::create(b_, it[0], p)};
        });
        store(mNew, ML, c0);
        store(arith::AddFOp::create(
                  b_, arith::MulFOp::create(b_, load(ML, c1), alpha),
                  sum.getResult(0)),
              ML, c1);
        loop0(c0, cIdx(DV), 1, [&](Value d) {
          auto pv = loop(c0, cIdx(BN), 1,
                         {arith::MulFOp::create(b_, load(Acc, d), alpha)},
                         [&](Value c, ValueRange a) {
                           Value prod = arith::MulFOp::create(
                               b_, load(Sp, c), load(Vs, add(mul(c, cIdx(DV)), d)));
                           return SmallVector<Value>{
                               arith::AddFOp::create(b_, a[0], prod)};
                         });
          store(pv.getResult(0), Acc, d);
        });
      });
      // Everyone is done with this tile before it is overwritten.
      gpu::BarrierOp::create(b_);
  });
  ifThen(live, [&] {
    emitRowEpilogue(e, it, r, load(ML, c0), load(ML, c1),
                    [&](Value d) { return load(Acc, d); });
  });
  gpu::ReturnOp::create(b_);
  return success();
}

LogicalResult ProgramBuilder::buildTensorCoreKernel(gpu::GPUModuleOp module,
                                                    StringRef name) {
  // Warps of 16 query rows; S = Q K^T in n-tiles of 8 keys, O in n-tiles of
  // 8 value dims, both as mma.sync m16n8k16 accumulator fragments: lane l
  // holds rows g = l / 4 and g + 8, columns 2 (l % 4) and 2 (l % 4) + 1.
  const int64_t NW = BM / 16, NT = BN / 8, KS = D / 16, DT = DV / 8,
                KP = BN / 16, TH = NW * 32;
  // Shared rows padded by 16 bytes: the 8 row addresses of an ldmatrix hit
  // 8 different bank groups.
  const int64_t LDK = D + 8, LDV = DV + 8;
  OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToEnd(module.getBody());
  auto fn = gpu::GPUFuncOp::create(b_, name,
                                   b_.getFunctionType(gpuKernelArgs(), {}));
  fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
  fn.setKnownBlockSizeAttr(b_.getDenseI32ArrayAttr({int32_t(TH), 1, 1}));
  auto shared = gpu::AddressSpaceAttr::get(ctx_, gpu::AddressSpace::Workgroup);
  Value Ks = fn.addWorkgroupAttribution(
      MemRefType::get({2 * BN * LDK}, elem_, MemRefLayoutAttrInterface(), shared),
      fn.getLoc());
  Value Vs = fn.addWorkgroupAttribution(
      MemRefType::get({2 * BN * LDV}, elem_, MemRefLayoutAttrInterface(), shared),
      fn.getLoc());
  // cp.async and ldmatrix need 16-byte aligned shared addresses.
  for (unsigned i = 0; i < 2; ++i)
    fn.setWorkgroupAttributionAttr(i, LLVM::LLVMDialect::getAlignAttrName(),
                                   b_.getI64IntegerAttr(16));
  b_.setInsertionPointToStart(&fn.getBody().front());
  Entry e = loadEntry(fn.getArguments());
  Value c0 = cIdx(0), c1 = cIdx(1);
  Value item = add(toIdx(fn.getArgument(fn.getNumArguments() - 1)),
                   gpu::BlockIdOp::create(b_, gpu::Dimension::x));
  Value tid = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
  auto divu = [&](Value a, int64_t d) {
    return Value(arith::DivUIOp::create(b_, a, cIdx(d)));
  };
  auto remu = [&](Value a, int64_t d) {
    return Value(arith::RemUIOp::create(b_, a, cIdx(d)));
  };
  auto cmp = [&](arith::CmpIPredicate p, Value a, Value c) {
    return Value(arith::CmpIOp::create(b_, p, a, c));
  };
  Value lane = remu(tid, 32), warp = divu(tid, 32);
  Value g = divu(lane, 4), tig = remu(lane, 4);
  Item it = decodeItem(e, item);

  // This thread's two rows of the tile: r = 16 warp + g (+ 8).
  struct Row {
    Value live, h, i, hI32, qpos, qRow;
  };
  Row rows[2];
  for (int k = 0; k < 2; ++k) {
    Value r = add(add(mul(warp, cIdx(16)), g), cIdx(8 * k));
    rows[k].live = cmp(arith::CmpIPredicate::slt, r, it.rows);
    // Rows past the end read the last row; their results are not stored.
    auto [h, i] = rowCoords(e, it, minI(r, sub(it.rows, c1)));
    rows[k].h = h;
    rows[k].i = i;
    rows[k].hI32 = arith::IndexCastOp::create(b_, i32_, h);
    rows[k].qpos = arith::IndexCastOp::create(b_, i32_, add(it.qpos0, i));
    rows[k].qRow = add(add(mul(it.b, e.qs[0]), mul(h, e.qs[1])),
                       mul(i, e.qs[2]));
  }
  // What the modifiers compute from (b, h, q) alone (e.g. a gather by q),
  // once per row for the whole work item: score_mod's values that depend
  // on neither score nor kv, mask_mod's that do not depend on kv.
  IRMapping scoreRow[2], maskRow[2];
  for (int k = 0; k < 2; ++k) {
    Value x = e.zeroF, kv0 = cI32(0);
    scoreRow[k] = hoistUniform(v_.getScoreBlock(), {0, 4},
                               {x, it.bI32, rows[k].hI32, rows[k].qpos, kv0});
    maskRow[k] = hoistUniform(v_.getMaskBlock(), {3},
                              {it.bI32, rows[k].hI32, rows[k].qpos, kv0});
  }

  // mma.sync operands: pairs of f16 as vector<2xf16>, of bf16 as i32.
  bool isF16 = elem_.isF16();
  auto asOperand = [&](Value pair) -> Value {
    if (isF16)
      return pair;
    Value v = vector::BitCastOp::create(b_, VectorType::get({1}, i32_), pair);
    return vector::ExtractOp::create(b_, v, ArrayRef<int64_t>{0});
  };
  auto pack = [&](Value x0, Value x1) {
    return asOperand(vector::FromElementsOp::create(
        b_, VectorType::get({2}, elem_), ValueRange{x0, x1}));
  };
  Type accTy = LLVM::LLVMStructType::getLiteral(ctx_, {f32_, f32_, f32_, f32_});
  auto mma = [&](ArrayRef<Value> a, ArrayRef<Value> bOp, ArrayRef<Value> c) {
    NVVM::MMATypes t = isF16 ? NVVM::MMATypes::f16 : NVVM::MMATypes::bf16;
    Value d = NVVM::MmaOp::create(
        b_, accTy, a, bOp, c, ArrayRef<int64_t>{16, 8, 16}, std::nullopt,
        std::nullopt, std::array<NVVM::MMATypes, 2>{t, t},
        std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row,
                                       NVVM::MMALayout::col});
    SmallVector<Value, 4> out;
    for (int64_t k = 0; k < 4; ++k)
      out.push_back(LLVM::ExtractValueOp::create(b_, d, ArrayRef<int64_t>{k}));
    return out;
  };
  /// ldmatrix x4 at `idx` of `smem`; the four 8x8 matrices' pairs.
  auto ldmatrix = [&](Value smem, Value idx, bool trans) {
    Value m = nvgpu::LdMatrixOp::create(b_, VectorType::get({4, 2}, elem_),
                                        smem, ValueRange{idx}, trans, 4);
    SmallVector<Value, 4> regs;
    for (int64_t k = 0; k < 4; ++k)
      regs.push_back(asOperand(
          vector::ExtractOp::create(b_, m, ArrayRef<int64_t>{k})));
    return regs;
  };

  // A row's 4 lanes (l / 4 equal) exchange values with xor 1 and 2.
  auto shfl = [&](Value x, int64_t off) {
    return gpu::ShuffleOp::create(b_, x, cI32(off), cI32(32),
                                  gpu::ShuffleMode::XOR)
        .getShuffleResult();
  };

  // The Q fragments, held in registers for the whole work item: for k-step
  // ks, registers (row g, cols 16 ks + 2 tig), (row g + 8, same), (row g,
  // + 8), (row g + 8, + 8).
  Value zeroE = arith::ConstantOp::create(b_, b_.getZeroAttr(elem_));
  SmallVector<SmallVector<Value, 4>> qf(KS);
  for (int64_t ks = 0; ks < KS; ++ks)
    for (int64_t reg = 0; reg < 4; ++reg) {
      const Row &R = rows[reg & 1];
      Value col = add(mul(tig, cIdx(2)), cIdx(16 * ks + 8 * (reg >> 1)));
      Value x0 = load(e.q, add(R.qRow, mul(col, e.qs[3])));
      Value x1 = load(e.q, add(R.qRow, mul(add(col, c1), e.qs[3])));
      qf[ks].push_back(pack(select(R.live, x0, zeroE), select(R.live, x1, zeroE)));
    }

  // 16-byte cp.async needs unit stride along D, strides in multiples of 8
  // elements and 16-byte aligned bases; otherwise tiles are copied element
  // by element (same result, slower).
  Value fast = arith::ConstantOp::create(b_, b_.getBoolAttr(true));
  auto all = [&](Value c) { fast = arith::AndIOp::create(b_, fast, c); };
  all(cmp(arith::CmpIPredicate::eq, e.ks[3], c1));
  all(cmp(arith::CmpIPredicate::eq, e.vs[3], c1));
  for (int d = 0; d < 3; ++d) {
    all(cmp(arith::CmpIPredicate::eq, remu(e.ks[d], 8), c0));
    all(cmp(arith::CmpIPredicate::eq, remu(e.vs[d], 8), c0));
  }
  for (Value m : {e.k, e.v})
    all(cmp(arith::CmpIPredicate::eq,
            remu(memref::ExtractAlignedPointerAsIndexOp::create(b_, m), 16), c0));

  // Tile j's K and V rows into stage `stage`; rows past the sequence are
  // zero (cp.async zero-fill: nothing is read out of bounds).
  auto loadTile = [&](Value j, Value stage) {
    Value kv0 = mul(j, cIdx(BN));
    Value last = sub(it.kvLen, c1);
    for (auto [src, dst, base, st, n, ld] :
         {std::tuple{e.k, Ks, it.kBase, &e.ks, D, LDK},
          std::tuple{e.v, Vs, it.vBase, &e.vs, DV, LDV}}) {
      Value off = mul(stage, cIdx(BN * ld));
      ifThenElse(
          fast,
          [&, src = src, dst = dst, base = base, st = st, n = n, ld = ld] {
            loop0(tid, cIdx(BN * n / 8), cIdx(TH), [&](Value c) {
              Value row = divu(c, n / 8), ch = remu(c, n / 8);
              Value key = add(kv0, row);
              Value valid = cmp(arith::CmpIPredicate::slt, key, it.kvLen);
              Value from = add(add(base, mul(minI(key, last), (*st)[2])),
                               mul(ch, cIdx(8)));
              Value to = add(add(off, mul(row, cIdx(ld))), mul(ch, cIdx(8)));
              nvgpu::DeviceAsyncCopyOp::create(
                  b_, nvgpu::DeviceAsyncTokenType::get(ctx_), dst,
                  ValueRange{to}, src, ValueRange{from}, b_.getIndexAttr(8),
                  select(valid, cIdx(8), c0), b_.getUnitAttr());
            });
          },
          [&, src = src, dst = dst, base = base, st = st, n = n, ld = ld] {
            loop0(tid, cIdx(BN * n), cIdx(TH), [&](Value x) {
              Value row = divu(x, n), d = remu(x, n);
              Value key = add(kv0, row);
              Value valid = cmp(arith::CmpIPredicate::slt, key, it.kvLen);
              Value v = load(src, add(add(base, mul(minI(key, last), (*st)[2])),
                                      mul(d, (*st)[3])));
              store(select(valid, v, zeroE), dst,
                    add(add(off, mul(row, cIdx(ld))), d));
            });
          });
    }
  };

  IRMapping inv;
  inv.map(v_.getMaskBlock().getArgument(0), it.bI32);
  inv.map(v_.getMaskBlock().getArgument(1), it.hI32);
  materializeMaskInvariants(inv);
  materializeMaskInvariants(inv);
  Value nKT = arith::CeilDivUIOp::create(b_, it.kvLen, cIdx(BN));
  ifThen(cmp(arith::CmpIPredicate::ugt, nKT, c0), [&] {
    Tile t = tileAt(it, c0, inv);
    ifThen(t.visit, [&] { loadTile(c0, c0); });
  });
  NVVM::CpAsyncCommitGroupOp::create(b_);

  // Loop state: O fragments (DT x 4), then m and l of both rows (l is this
  // thread's partial sum; the 4 lanes of a row add theirs at the end).
  SmallVector<Value> init(DT * 4, e.zeroF);
  init.append({e.ninf, e.ninf, e.zeroF, e.zeroF});
  auto loopOp = scf::ForOp::create(b_, c0, nKT, c1, init);
  {
    OpBuilder::InsertionGuard g2(b_);
    b_.setInsertionPointToStart(loopOp.getBody());
    Value j = loopOp.getInductionVar();
    ValueRange state = loopOp.getRegionIterArgs();
    // Prefetch the next visited tile into the other stage.
    Value next = add(j, c1);
    ifThen(cmp(arith::CmpIPredicate::ult, next, nKT), [&] {
      Tile tn = tileAt(it, next, inv);
      ifThen(tn.visit, [&] { loadTile(next, remu(next, 2)); });
    });
    NVVM::CpAsyncCommitGroupOp::create(b_);
    Tile t = tileAt(it, j, inv);
    SmallVector<Value> result = ifYield(t.visit, state, [&] {
      // This tile's group is complete (only the prefetch may be pending).
      NVVM::CpAsyncWaitGroupOp::create(b_, 1);
      gpu::BarrierOp::create(b_);
      Value stage = remu(j, 2);
      Value kOff = mul(stage, cIdx(BN * LDK)), vOff = mul(stage, cIdx(BN * LDV));
      Value mat = divu(lane, 8), r8 = remu(lane, 8);
      // S = Q K^T: K rows are B's columns (ldmatrix, not transposed).
      SmallVector<SmallVector<Value, 4>> S(NT, SmallVector<Value, 4>(4, e.zeroF));
      for (int64_t ks = 0; ks < KS; ++ks)
        for (int64_t nt2 = 0; nt2 < NT / 2; ++nt2) {
          Value key = add(mul(add(cIdx(2 * nt2), divu(mat, 2)), cIdx(8)), r8);
          Value dim = add(cIdx(16 * ks), mul(remu(mat, 2), cIdx(8)));
          auto regs = ldmatrix(Ks, add(add(kOff, mul(key, cIdx(LDK))), dim),
                               /*trans=*/false);
          for (int64_t h = 0; h < 2; ++h)
            S[2 * nt2 + h] = mma(qf[ks], {regs[2 * h], regs[2 * h + 1]},
                                 S[2 * nt2 + h]);
        }
      // Scale and score_mod on every element, then (partial tiles and
      // tails only) mask_mod; all in log2 units.
      SmallVector<Value> kvpos(NT * 2);
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t c = 0; c < 2; ++c)
          kvpos[nt * 2 + c] = arith::IndexCastOp::create(
              b_, i32_, add(t.kv0, add(mul(tig, cIdx(2)), cIdx(8 * nt + c))));
      SmallVector<Value> sv;
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          const Row &R = rows[c >> 1];
          Value x = arith::MulFOp::create(b_, S[nt][c], e.scale);
          x = emitModifier(v_.getScoreBlock(),
                           {x, it.bI32, R.hI32, R.qpos, kvpos[nt * 2 + (c & 1)]},
                           &scoreRow[c >> 1]);
          sv.push_back(arith::MulFOp::create(b_, x, e.log2e));
        }
      auto masked = scf::IfOp::create(b_, ValueRange(sv).getTypes(),
                                      t.skipMask, /*withElse=*/true);
      {
        OpBuilder::InsertionGuard g3(b_);
        b_.setInsertionPointToStart(masked.thenBlock());
        scf::YieldOp::create(b_, sv);
        b_.setInsertionPointToStart(masked.elseBlock());
        SmallVector<Value> out;
        for (int64_t nt = 0; nt < NT; ++nt)
          for (int64_t c = 0; c < 4; ++c) {
            const Row &R = rows[c >> 1];
            Value col = add(mul(tig, cIdx(2)), cIdx(8 * nt + (c & 1)));
            Value in = cmp(arith::CmpIPredicate::slt, col, t.cols);
            Value m = emitModifier(v_.getMaskBlock(),
                                   {it.bI32, R.hI32, R.qpos,
                                    kvpos[nt * 2 + (c & 1)]},
                                   &maskRow[c >> 1]);
            out.push_back(select(arith::AndIOp::create(b_, in, m),
                                 sv[nt * 4 + c], e.ninf));
          }
        scf::YieldOp::create(b_, out);
      }
      // Online softmax per row: max over the 4 lanes of the row (xor 1, 2).
      SmallVector<Value> next(state.begin(), state.end());
      Value alpha[2], mUse[2];
      for (int64_t r = 0; r < 2; ++r) {
        Value mx = e.ninf;
        for (int64_t nt = 0; nt < NT; ++nt)
          for (int64_t c = 2 * r; c < 2 * r + 2; ++c)
            mx = arith::MaximumFOp::create(b_, mx, masked.getResult(nt * 4 + c));
        mx = arith::MaximumFOp::create(b_, mx, shfl(mx, 1));
        mx = arith::MaximumFOp::create(b_, mx, shfl(mx, 2));
        Value mOld = state[DT * 4 + r];
        Value mNew = arith::MaximumFOp::create(b_, mOld, mx);
        Value isNinf = arith::CmpFOp::create(b_, arith::CmpFPredicate::OEQ,
                                             mNew, e.ninf);
        mUse[r] = select(isNinf, e.zeroF, mNew);
        alpha[r] = math::Exp2Op::create(b_, arith::SubFOp::create(b_, mOld, mUse[r]));
        next[DT * 4 + r] = mNew;
      }
      SmallVector<Value> P(NT * 4);
      Value sum[2] = {e.zeroF, e.zeroF};
      for (int64_t nt = 0; nt < NT; ++nt)
        for (int64_t c = 0; c < 4; ++c) {
          Value p = math::Exp2Op::create(
              b_, arith::SubFOp::create(b_, masked.getResult(nt * 4 + c),
                                        mUse[c >> 1]));
          P[nt * 4 + c] = p;
          sum[c >> 1] = arith::AddFOp::create(b_, sum[c >> 1], p);
        }
      for (int64_t r = 0; r < 2; ++r)
        next[DT * 4 + 2 + r] = arith::AddFOp::create(
            b_, arith::MulFOp::create(b_, state[DT * 4 + 2 + r], alpha[r]),
            sum[r]);
      SmallVector<SmallVector<Value, 4>> O(DT);
      for (int64_t dt = 0; dt < DT; ++dt)
        for (int64_t c = 0; c < 4; ++c)
          O[dt].push_back(
              arith::MulFOp::create(b_, state[dt * 4 + c], alpha[c >> 1]));
      // O += P V: P's accumulator fragments are the A fragments of the
      // next MMA (converted in registers); V through ldmatrix.trans.
      auto packP = [&](int64_t nt, int64_t c) {
        return pack(arith::TruncFOp::create(b_, elem_, P[nt * 4 + c]),
                    arith::TruncFOp::create(b_, elem_, P[nt * 4 + c + 1]));
      };
      for (int64_t kk = 0; kk < KP; ++kk) {
        SmallVector<Value, 4> a = {packP(2 * kk, 0), packP(2 * kk, 2),
                                   packP(2 * kk + 1, 0), packP(2 * kk + 1, 2)};
        for (int64_t dt2 = 0; dt2 < DT / 2; ++dt2) {
          Value key = add(add(cIdx(16 * kk), mul(remu(mat, 2), cIdx(8))), r8);
          Value dim = mul(add(cIdx(2 * dt2), divu(mat, 2)), cIdx(8));
          auto regs = ldmatrix(Vs, add(add(vOff, mul(key, cIdx(LDV))), dim),
                               /*trans=*/true);
          for (int64_t h = 0; h < 2; ++h)
            O[2 * dt2 + h] = mma(a, {regs[2 * h], regs[2 * h + 1]}, O[2 * dt2 + h]);
        }
      }
      for (int64_t dt = 0; dt < DT; ++dt)
        for (int64_t c = 0; c < 4; ++c)
          next[dt * 4 + c] = O[dt][c];
      return next;
    });
    // Every warp is done with this stage before the next prefetch reuses it.
    gpu::BarrierOp::create(b_);
    scf::YieldOp::create(b_, result);
  }
  NVVM::CpAsyncWaitGroupOp::create(b_, 0);

  // Epilogue: the row's sum over its 4 lanes, O / l (0 for rows with no
  // key), LSE = (m + log2 l) ln 2 (-inf for those), written by lane tig 0.
  ValueRange fin = loopOp.getResults();
  for (int64_t r = 0; r < 2; ++r) {
    const Row &R = rows[r];
    Value l = fin[DT * 4 + 2 + r];
    l = arith::AddFOp::create(b_, l, shfl(l, 1));
    l = arith::AddFOp::create(b_, l, shfl(l, 2));
    Value m = fin[DT * 4 + r];
    ifThen(R.live, [&] {
      // l == 0: no key (0, LSE -inf); a NaN l (non-finite scores) propagates.
  Value pos = arith::CmpFOp::create(b_, arith::CmpFPredicate::UNE, l, e.zeroF);
      Value invL = select(pos, arith::DivFOp::create(b_, cF32(1.0), l), e.zeroF);
      Value oRow = add(add(mul(it.b, e.os[0]), mul(R.h, e.os[1])),
                       mul(R.i, e.os[2]));
      for (int64_t dt = 0; dt < DT; ++dt)
        for (int64_t c = 2 * r; c < 2 * r + 2; ++c) {
          Value d = add(mul(tig, cIdx(2)), cIdx(8 * dt + (c & 1)));
          Value x = arith::MulFOp::create(b_, fin[dt * 4 + c], invL);
          store(fromF32(x), e.o, add(oRow, mul(d, e.os[3])));
        }
      ifThen(arith::AndIOp::create(b_, e.hasLse,
                                   cmp(arith::CmpIPredicate::eq, tig, c0)),
             [&] {
               Value lg = arith::MulFOp::create(
                   b_, arith::AddFOp::create(b_, m, math::Log2Op::create(b_, l)),
                   e.ln2);
               Value at = add(add(mul(it.b, e.ls[0]), mul(R.h, e.ls[1])),
                              mul(R.i, e.ls[2]));
               store(select(pos, lg, e.ninf), e.lse, at);
             });
    });
  }
  gpu::ReturnOp::create(b_);
  return success();
}

LogicalResult ProgramBuilder::buildMaskBuilder(StringRef name,
                                               gpu::GPUModuleOp gpuModule) {
  auto dyn = [&](Type t) { return MemRefType::get({ShapedType::kDynamic}, t); };
  SmallVector<Type> args = {dyn(i64_), dyn(f32_), dyn(b_.getI8Type())};
  for (const rt::ParamSpec &p : info_.params)
    if (p.isTensor)
      args.push_back(dyn(storageType(ctx_, p.dtype)));
  args.push_back(i64_);
  if (!gpuModule)
    args.push_back(i64_);
  OpBuilder::InsertionGuard guard(b_);
  Block *entry = nullptr;
  if (gpuModule) {
    b_.setInsertionPointToEnd(gpuModule.getBody());
    auto fn = gpu::GPUFuncOp::create(b_, name, b_.getFunctionType(args, {}));
    fn->setAttr(gpu::GPUDialect::getKernelFuncAttrName(), b_.getUnitAttr());
    entry = &fn.getBody().front();
  } else {
    auto fn = func::FuncOp::create(b_, name, b_.getFunctionType(args, {}));
    entry = fn.addEntryBlock();
  }
  b_.setInsertionPointToStart(entry);
  ValueRange fargs = entry->getArguments();
  ip_ = fargs[0];
  fp_ = fargs[1];
  Value out = fargs[2];
  captures_.clear();
  capDims_.clear();
  capStrides_.clear();
  scalars_.clear();
  loadEntryValues(fargs, 3);
  Value c0 = cIdx(0), c1 = cIdx(1);
  // CPU: items [begin, end), each KV tile in turn. GPU: one block per item
  // (the last operand is the launch's first item), its threads striding
  // over the KV tiles.
  Value begin, end, jBegin = c0, jStep = c1;
  if (gpuModule) {
    begin = add(toIdx(fargs.back()), gpu::BlockIdOp::create(b_, gpu::Dimension::x));
    end = add(begin, c1);
    jBegin = gpu::ThreadIdOp::create(b_, gpu::Dimension::x);
    jStep = gpu::BlockDimOp::create(b_, gpu::Dimension::x);
  } else {
    begin = toIdx(fargs[fargs.size() - 2]);
    end = toIdx(fargs.back());
  }
  Value B = ipAt(abi::kB), Hq = ipAt(abi::kHq), Lq = ipAt(abi::kLq),
        nQT = ipAt(abi::kNumQTiles), nKT = ipAt(abi::kNumKTiles),
        sB = ipAt(abi::kBMStrideB), sH = ipAt(abi::kBMStrideH);
  Value shared = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, sH, c0);
  Value heads = select(shared, c1, Hq);
  auto i8 = [&](int64_t c) {
    return arith::ConstantOp::create(b_, b_.getI8IntegerAttr(c));
  };
  loop0(begin, end, 1, [&](Value item) {
    Value qt = arith::RemUIOp::create(b_, item, nQT);
    Value t = arith::DivUIOp::create(b_, item, nQT);
    Value h = arith::RemUIOp::create(b_, t, heads);
    Value bb = arith::DivUIOp::create(b_, t, heads);
    Value kvLen = ipAt(add(cIdx(layout_.seqBase), bb));
    Value qpos0 = ipAt(add(add(cIdx(layout_.seqBase), B), bb));
    Value r0 = mul(qt, cIdx(BM));
    Value rows = minI(cIdx(BM), sub(Lq, r0));
    Value bI32 = arith::IndexCastOp::create(b_, i32_, bb);
    Value hI32 = arith::IndexCastOp::create(b_, i32_, h);
    loop0(jBegin, nKT, jStep, [&](Value j) {
      Value kv0 = mul(j, cIdx(BN));
      Value cols = maxI(c0, minI(cIdx(BN), sub(kvLen, kv0)));
      auto count = loop(c0, rows, 1, {c0}, [&](Value r, ValueRange it) {
        Value qpos = arith::IndexCastOp::create(b_, i32_, add(add(qpos0, r0), r));
        auto inner = loop(c0, cols, 1, {it[0]}, [&](Value c, ValueRange it2) {
          Value kvpos = arith::IndexCastOp::create(b_, i32_, add(kv0, c));
          Value m = emitModifier(v_.getMaskBlock(), {bI32, hI32, qpos, kvpos});
          Value one = arith::IndexCastOp::create(
              b_, b_.getIndexType(), arith::ExtUIOp::create(b_, i64_, m));
          return SmallVector<Value>{add(it2[0], one)};
        });
        return SmallVector<Value>{inner.getResult(0)};
      });
      Value total = mul(rows, cols);
      Value n = count.getResult(0);
      Value none = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, n, c0);
      Value all = arith::CmpIOp::create(b_, arith::CmpIPredicate::eq, n, total);
      Value cls = select(none, i8(abi::kEmpty),
                         select(all, i8(abi::kFull), i8(abi::kPartial)));
      Value at = add(add(mul(bb, sB), mul(h, sH)), add(mul(qt, nKT), j));
      store(cls, out, at);
    });
  });
  if (gpuModule)
    gpu::ReturnOp::create(b_);
  else
    func::ReturnOp::create(b_);
  return success();
}

} // namespace

bool useTensorCores(const rt::KernelSpec &s) {
  return (s.dtype == rt::DType::F16 || s.dtype == rt::DType::BF16) &&
         s.headDim % 16 == 0 && s.vHeadDim % 16 == 0 && s.headDim <= 128 &&
         s.vHeadDim <= 128 && s.blockM % 16 == 0 && s.blockM >= 16 &&
         s.blockM <= 128 && s.blockN % 16 == 0 && s.blockN >= 16;
}

LogicalResult buildGpuFlashProgram(gpu::GPUModuleOp module,
                                   attn::VariantOp variant,
                                   const MaskAnalysis &mask,
                                   const FlashConfig &config, StringRef name) {
  const rt::KernelSpec &s = config.spec;
  if (s.headDim % 8 || s.vHeadDim % 8 || s.blockM <= 0 || s.blockM > 1024)
    return variant.emitError("invalid GPU kernel configuration");
  module->getContext()
      ->loadDialect<gpu::GPUDialect, memref::MemRefDialect, scf::SCFDialect,
                    arith::ArithDialect, math::MathDialect>();
  module->getContext()
      ->loadDialect<vector::VectorDialect, NVVM::NVVMDialect,
                    nvgpu::NVGPUDialect, LLVM::LLVMDialect>();
  ProgramBuilder kernel(module->getParentOfType<ModuleOp>(), variant, mask, config);
  if (failed(useTensorCores(s) ? kernel.buildTensorCoreKernel(module, name)
                               : kernel.buildGpuKernel(module, name)))
    return failure();
  if (mask.kind == rt::MaskKind::Data) {
    ProgramBuilder builder(module->getParentOfType<ModuleOp>(), variant, mask,
                           config);
    if (failed(builder.buildMaskBuilder((name + "_block_mask").str(), module)))
      return failure();
  }
  return success();
}

LogicalResult buildFlashProgram(ModuleOp module, attn::VariantOp variant,
                                const MaskAnalysis &mask,
                                const FlashConfig &config, StringRef name) {
  const rt::KernelSpec &s = config.spec;
  if (s.headDim % 8 || s.vHeadDim % 8 || s.blockN % config.vectorWidth ||
      s.blockM <= 0 || s.headDim <= 0 || s.vHeadDim <= 0)
    return variant.emitError("invalid kernel configuration: head dims must be "
                             "multiples of 8 and blockN a multiple of the "
                             "vector width");
  module->getContext()
      ->loadDialect<func::FuncDialect, memref::MemRefDialect, scf::SCFDialect,
                    vector::VectorDialect, arith::ArithDialect,
                    math::MathDialect>();
  ProgramBuilder kernel(module, variant, mask, config);
  if (failed(kernel.buildKernel(name)))
    return failure();
  if (mask.kind == rt::MaskKind::Data) {
    ProgramBuilder builder(module, variant, mask, config);
    if (failed(builder.buildMaskBuilder((name + "_block_mask").str())))
      return failure();
  }
  return success();
}

} // namespace attnc
