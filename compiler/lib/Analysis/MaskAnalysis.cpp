//===- MaskAnalysis.cpp - Closed-form tile classes for affine masks ------===//
#include "attnc/Analysis/MaskAnalysis.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <sstream>

using namespace mlir;

namespace attnc {
namespace {

class Analyzer {
public:
  explicit Analyzer(attn::VariantOp v) : block_(v.getMaskBlock()) {
    q_ = block_.getArgument(2);
    kv_ = block_.getArgument(3);
    dependent_.insert(q_);
    dependent_.insert(kv_);
    for (Operation &op : block_) {
      bool dep = false;
      attn::forEachValueRead(&op, [&](Value v) { dep |= dependent_.contains(v); });
      if (dep)
        for (Value r : op.getResults())
          dependent_.insert(r);
    }
  }

  MaskAnalysis run() {
    MaskAnalysis m;
    m.usesBatch = !block_.getArgument(0).use_empty();
    m.usesHead = !block_.getArgument(1).use_empty();
    Value root = cast<attn::YieldOp>(block_.getTerminator()).getValue();
    if (matchPattern(root, m_One())) {
      m.kind = rt::MaskKind::None;
      return m;
    }
    if (build(root, m.nodes) < 0) {
      m.kind = rt::MaskKind::Data;
      m.nodes.clear();
      return m;
    }
    m.kind = rt::MaskKind::Closed;
    return m;
  }

private:
  /// The affine form of `v`, or nullopt; every i32 value computed from q
  /// or kv on the way (sums, products, dividends) is appended to `checks`.
  /// Coefficients that would overflow i64 make the form unknown.
  std::optional<AffineForm> affine(Value v, std::vector<AffineForm> &checks) {
    AffineForm f;
    APInt c;
    if (matchPattern(v, m_ConstantInt(&c))) {
      f.c0 = c.getSExtValue();
      return f;
    }
    if (v == q_) {
      f.cq = 1;
      return f;
    }
    if (v == kv_) {
      f.ckv = 1;
      return f;
    }
    if (!dependent_.contains(v)) {
      f.inv.push_back({v, 1});
      return f;
    }
    Operation *op = v.getDefiningOp();
    if (!op)
      return std::nullopt;
    bool overflow = false;
    auto addTo = [&](int64_t &a, int64_t b) {
      overflow |= __builtin_add_overflow(a, b, &a);
    };
    auto mulBy = [&](int64_t &a, int64_t k) {
      overflow |= __builtin_mul_overflow(a, k, &a);
    };
    auto scale = [&](AffineForm a, int64_t k) {
      mulBy(a.cq, k);
      mulBy(a.ckv, k);
      mulBy(a.c0, k);
      for (auto &[val, coef] : a.inv)
        mulBy(coef, k);
      for (DivTerm &d : a.divs)
        mulBy(d.coef, k);
      return a;
    };
    auto combine = [&](AffineForm a, const AffineForm &b, int64_t sign) {
      AffineForm s = sign > 0 ? b : scale(b, -1);
      addTo(a.cq, s.cq);
      addTo(a.ckv, s.ckv);
      addTo(a.c0, s.c0);
      for (auto iv : s.inv)
        a.inv.push_back(iv);
      for (const DivTerm &d : s.divs)
        a.divs.push_back(d);
      return a;
    };
    std::optional<AffineForm> r;
    if (isa<arith::DivSIOp>(op) &&
        matchPattern(op->getOperand(1), m_ConstantInt(&c)) &&
        c.getSExtValue() > 0) {
      // The quotient of an in-range dividend by a positive constant is in
      // range: only the dividend is checked.
      auto inner = affine(op->getOperand(0), checks);
      if (!inner)
        return std::nullopt;
      DivTerm d;
      d.inner = std::make_shared<AffineForm>(*inner);
      d.divisor = c.getSExtValue();
      f.divs.push_back(d);
      return f;
    }
    if (isa<arith::AddIOp, arith::SubIOp>(op)) {
      auto a = affine(op->getOperand(0), checks);
      auto b = a ? affine(op->getOperand(1), checks) : std::nullopt;
      if (!a || !b)
        return std::nullopt;
      r = combine(*a, *b, isa<arith::AddIOp>(op) ? 1 : -1);
    } else if (isa<arith::MulIOp>(op)) {
      for (int i = 0; i < 2 && !r; ++i) {
        if (!matchPattern(op->getOperand(i), m_ConstantInt(&c)))
          continue;
        auto a = affine(op->getOperand(1 - i), checks);
        if (!a)
          return std::nullopt;
        r = scale(*a, c.getSExtValue());
      }
    }
    if (!r || overflow || magnitudeBound(*r) >= (__int128(1) << 62))
      return std::nullopt;
    checks.push_back(*r);
    return r;
  }

  static bool affinePredicate(arith::CmpIPredicate p) {
    using P = arith::CmpIPredicate;
    return p == P::eq || p == P::ne || p == P::slt || p == P::sle ||
           p == P::sgt || p == P::sge;
  }

  /// Appends the formula for `v`; returns its node index or -1.
  int build(Value v, std::vector<MaskNode> &nodes) {
    auto push = [&](MaskNode n) {
      nodes.push_back(std::move(n));
      return static_cast<int>(nodes.size()) - 1;
    };
    if (matchPattern(v, m_One()))
      return push({MaskNode::True});
    if (matchPattern(v, m_Zero()))
      return push({MaskNode::False});
    if (!dependent_.contains(v)) {
      MaskNode n{MaskNode::Invariant};
      n.value = v;
      return push(n);
    }
    Operation *op = v.getDefiningOp();
    if (!op)
      return -1;
    if (isa<arith::AndIOp, arith::OrIOp>(op)) {
      int a = build(op->getOperand(0), nodes);
      int b = a < 0 ? -1 : build(op->getOperand(1), nodes);
      if (b < 0)
        return -1;
      MaskNode n{isa<arith::AndIOp>(op) ? MaskNode::And : MaskNode::Or};
      n.lhs = a;
      n.rhs = b;
      return push(n);
    }
    if (isa<arith::XOrIOp>(op)) {
      for (int i = 0; i < 2; ++i)
        if (matchPattern(op->getOperand(i), m_One())) {
          int a = build(op->getOperand(1 - i), nodes);
          if (a < 0)
            return -1;
          MaskNode n{MaskNode::Not};
          n.lhs = a;
          return push(n);
        }
      return -1;
    }
    if (auto sel = dyn_cast<arith::SelectOp>(op)) {
      // c ? a : b == (c && a) || (!c && b)
      int c = build(sel.getCondition(), nodes);
      int a = c < 0 ? -1 : build(sel.getTrueValue(), nodes);
      int b = a < 0 ? -1 : build(sel.getFalseValue(), nodes);
      if (b < 0)
        return -1;
      MaskNode notC{MaskNode::Not};
      notC.lhs = c;
      int nc = push(notC);
      MaskNode l{MaskNode::And}, r{MaskNode::And}, o{MaskNode::Or};
      l.lhs = c, l.rhs = a;
      r.lhs = nc, r.rhs = b;
      o.lhs = push(l);
      o.rhs = push(r);
      return push(o);
    }
    if (auto cmp = dyn_cast<arith::CmpIOp>(op)) {
      if (!affinePredicate(cmp.getPredicate()) ||
          !cmp.getLhs().getType().isInteger(32))
        return -1;
      MaskNode n{MaskNode::Atom};
      auto a = affine(cmp.getLhs(), n.checks);
      auto b = a ? affine(cmp.getRhs(), n.checks) : std::nullopt;
      if (!a || !b)
        return -1;
      n.pred = cmp.getPredicate();
      n.form = *a;
      bool overflow = false;
      overflow |= __builtin_sub_overflow(n.form.cq, b->cq, &n.form.cq);
      overflow |= __builtin_sub_overflow(n.form.ckv, b->ckv, &n.form.ckv);
      overflow |= __builtin_sub_overflow(n.form.c0, b->c0, &n.form.c0);
      for (auto [val, coef] : b->inv)
        n.form.inv.push_back({val, -coef});
      for (DivTerm d : b->divs) {
        d.coef = -d.coef;
        n.form.divs.push_back(d);
      }
      if (overflow || magnitudeBound(n.form) >= (__int128(1) << 62))
        return -1;
      return push(n);
    }
    return -1;
  }

  Block &block_;
  Value q_, kv_;
  llvm::DenseSet<Value> dependent_;
};

std::string valueName(Value v) {
  if (auto s = v.getDefiningOp<attn::ScalarOp>())
    return s.getParam().str();
  if (auto z = v.getDefiningOp<attn::SizeOp>())
    return z.getDim().str();
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getArgNumber() == 0 ? "b" : "h";
  return "<invariant>";
}

/// Evaluates an invariant i32/i1 value from scalars, b and h, if it can.
std::optional<int64_t> evalInvariant(Value v,
                                     const std::map<std::string, int64_t> &sc,
                                     int64_t b, int64_t h) {
  APInt c;
  if (matchPattern(v, m_ConstantInt(&c)))
    return c.getSExtValue();
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getArgNumber() == 0 ? b : h;
  Operation *op = v.getDefiningOp();
  if (auto s = dyn_cast<attn::ScalarOp>(op)) {
    auto it = sc.find(s.getParam().str());
    if (it == sc.end())
      return std::nullopt;
    return it->second;
  }
  // A problem size, by its name (a parameter of that name would have
  // shadowed it in the source, so the names cannot collide).
  if (auto z = dyn_cast<attn::SizeOp>(op)) {
    auto it = sc.find(z.getDim().str());
    if (it == sc.end())
      return std::nullopt;
    return it->second;
  }
  if (isa<arith::AndIOp, arith::OrIOp, arith::XOrIOp>(op)) {
    // On i1 (bool scalars, !c) or i32; an i1 constant true reads as -1.
    auto x = evalInvariant(op->getOperand(0), sc, b, h);
    auto y = evalInvariant(op->getOperand(1), sc, b, h);
    if (!x || !y)
      return std::nullopt;
    int64_t r = isa<arith::AndIOp>(op)  ? (*x & *y)
                : isa<arith::OrIOp>(op) ? (*x | *y)
                                        : (*x ^ *y);
    if (op->getResult(0).getType().isInteger(1))
      r &= 1;
    return r;
  }
  if (isa<arith::AddIOp, arith::SubIOp, arith::MulIOp>(op)) {
    auto x = evalInvariant(op->getOperand(0), sc, b, h);
    auto y = evalInvariant(op->getOperand(1), sc, b, h);
    if (!x || !y)
      return std::nullopt;
    int64_t r = isa<arith::AddIOp>(op)   ? *x + *y
                : isa<arith::SubIOp>(op) ? *x - *y
                                         : *x * *y;
    return static_cast<int32_t>(static_cast<uint32_t>(r));
  }
  return std::nullopt;
}

/// The range of `f` over q in [qlo, qhi], kv in [klo, khi] (exact: 128-bit
/// arithmetic); nullopt when an invariant cannot be evaluated.
std::optional<std::pair<__int128, __int128>>
rangeOf(const AffineForm &f, const std::map<std::string, int64_t> &sc,
        int64_t b, int64_t h, int64_t qlo, int64_t qhi, int64_t klo,
        int64_t khi) {
  using W = __int128;
  W base = f.c0;
  for (auto [val, coef] : f.inv) {
    auto x = evalInvariant(val, sc, b, h);
    if (!x)
      return std::nullopt;
    base += W(coef) * *x;
  }
  W lo = base + std::min(W(f.cq) * qlo, W(f.cq) * qhi) +
         std::min(W(f.ckv) * klo, W(f.ckv) * khi);
  W hi = base + std::max(W(f.cq) * qlo, W(f.cq) * qhi) +
         std::max(W(f.ckv) * klo, W(f.ckv) * khi);
  for (const DivTerm &d : f.divs) {
    auto r = rangeOf(*d.inner, sc, b, h, qlo, qhi, klo, khi);
    if (!r)
      return std::nullopt;
    W a = W(d.coef) * (r->first / d.divisor);
    W z = W(d.coef) * (r->second / d.divisor);
    lo += std::min(a, z);
    hi += std::max(a, z);
  }
  return std::pair{lo, hi};
}

} // namespace

MaskAnalysis analyzeMask(attn::VariantOp v) { return Analyzer(v).run(); }

__int128 magnitudeBound(const AffineForm &f) {
  auto abs128 = [](int64_t x) { return x < 0 ? -__int128(x) : __int128(x); };
  __int128 coefs = abs128(f.cq) + abs128(f.ckv);
  for (auto [val, coef] : f.inv)
    coefs += abs128(coef);
  __int128 m = coefs * (__int128(1) << 31) + abs128(f.c0);
  for (const DivTerm &d : f.divs)
    m += magnitudeBound(*d.inner) + abs128(d.coef) * (__int128(1) << 31);
  return m;
}

std::string MaskAnalysis::describe() const {
  if (kind == rt::MaskKind::None)
    return "none (every tile is full)";
  if (kind == rt::MaskKind::Data)
    return "data-dependent (a block mask is built at run time)";
  std::function<std::string(int)> str = [&](int i) -> std::string {
    const MaskNode &n = nodes[i];
    switch (n.kind) {
    case MaskNode::True: return "true";
    case MaskNode::False: return "false";
    case MaskNode::Invariant: return "invariant(" + valueName(n.value) + ")";
    case MaskNode::Not: return "!" + str(n.lhs);
    case MaskNode::And: return "(" + str(n.lhs) + " && " + str(n.rhs) + ")";
    case MaskNode::Or: return "(" + str(n.lhs) + " || " + str(n.rhs) + ")";
    case MaskNode::Atom: {
      std::ostringstream os;
      bool first = true;
      auto term = [&](int64_t k, const std::string &name) {
        if (k == 0)
          return;
        if (!first)
          os << (k < 0 ? " - " : " + ");
        else if (k < 0)
          os << "-";
        if (std::abs(k) != 1 || name.empty())
          os << std::abs(k) << (name.empty() ? "" : "*");
        os << name;
        first = false;
      };
      std::function<std::string(const AffineForm &)> inner =
          [&](const AffineForm &f) {
            std::ostringstream is;
            bool first2 = true;
            auto t2 = [&](int64_t k, const std::string &name) {
              if (k == 0)
                return;
              is << (first2 ? (k < 0 ? "-" : "") : (k < 0 ? " - " : " + "));
              if (std::abs(k) != 1 || name.empty())
                is << std::abs(k) << (name.empty() ? "" : "*");
              is << name;
              first2 = false;
            };
            t2(f.cq, "q");
            t2(f.ckv, "kv");
            for (auto [val, coef] : f.inv)
              t2(coef, valueName(val));
            t2(f.c0, "");
            return first2 ? std::string("0") : is.str();
          };
      term(n.form.cq, "q");
      term(n.form.ckv, "kv");
      for (auto [val, coef] : n.form.inv)
        term(coef, valueName(val));
      for (const DivTerm &d : n.form.divs)
        term(d.coef, "(" + inner(*d.inner) + ") / " +
                         std::to_string(d.divisor));
      term(n.form.c0, "");
      if (first)
        os << "0";
      os << " " << stringifyCmpIPredicate(n.pred).str() << " 0";
      return "(" + os.str() + ")";
    }
    }
    return "?";
  };
  return "closed form: " + str(static_cast<int>(nodes.size()) - 1);
}

rt::abi::TileClass classifyTile(const MaskAnalysis &m,
                                const std::map<std::string, int64_t> &scalars,
                                int64_t b, int64_t h, int64_t qlo, int64_t qhi,
                                int64_t klo, int64_t khi) {
  using rt::abi::TileClass;
  if (m.kind == rt::MaskKind::None)
    return TileClass::kFull;
  if (m.kind == rt::MaskKind::Data)
    return TileClass::kPartial;
  // (mayBeTrue, mayBeFalse) per node, bottom-up (children precede parents).
  std::vector<std::pair<bool, bool>> tv(m.nodes.size());
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    const MaskNode &n = m.nodes[i];
    switch (n.kind) {
    case MaskNode::True: tv[i] = {true, false}; break;
    case MaskNode::False: tv[i] = {false, true}; break;
    case MaskNode::Not: tv[i] = {tv[n.lhs].second, tv[n.lhs].first}; break;
    case MaskNode::And:
      tv[i] = {tv[n.lhs].first && tv[n.rhs].first,
               tv[n.lhs].second || tv[n.rhs].second};
      break;
    case MaskNode::Or:
      tv[i] = {tv[n.lhs].first || tv[n.rhs].first,
               tv[n.lhs].second && tv[n.rhs].second};
      break;
    case MaskNode::Invariant: {
      auto x = evalInvariant(n.value, scalars, b, h);
      tv[i] = x ? std::pair{*x != 0, *x == 0} : std::pair{true, true};
      break;
    }
    case MaskNode::Atom: {
      auto range = rangeOf(n.form, scalars, b, h, qlo, qhi, klo, khi);
      // Undecided when an i32 value on the way may wrap over the tile.
      bool wraps = false;
      for (const AffineForm &c : n.checks) {
        auto r = rangeOf(c, scalars, b, h, qlo, qhi, klo, khi);
        wraps |= !r || r->first < INT32_MIN || r->second > INT32_MAX;
      }
      if (!range || wraps) {
        tv[i] = {true, true};
        break;
      }
      auto [lo, hi] = *range;
      using P = arith::CmpIPredicate;
      switch (n.pred) {
      case P::slt: tv[i] = {lo < 0, hi >= 0}; break;
      case P::sle: tv[i] = {lo <= 0, hi > 0}; break;
      case P::sgt: tv[i] = {hi > 0, lo <= 0}; break;
      case P::sge: tv[i] = {hi >= 0, lo < 0}; break;
      case P::eq: tv[i] = {lo <= 0 && hi >= 0, !(lo == 0 && hi == 0)}; break;
      default: tv[i] = {!(lo == 0 && hi == 0), lo <= 0 && hi >= 0}; break;
      }
      break;
    }
    }
  }
  auto [mayTrue, mayFalse] = tv.back();
  if (!mayTrue)
    return TileClass::kEmpty;
  return mayFalse ? TileClass::kPartial : TileClass::kFull;
}

} // namespace attnc
