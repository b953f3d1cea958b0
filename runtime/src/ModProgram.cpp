//===- ModProgram.cpp - Parse and interpret the modifier program --------===//
//
// This is the reference semantics of a variant, independent of every code
// generator: a direct interpreter of the `attn` IR's ops, with f32 values
// (every float result is rounded to f32, as the kernels compute; the
// operations themselves are exact or correctly rounded in double) and
// wrapping 32-bit arithmetic for integers. Opcodes are the MLIR op names
// (arith.addf, math.tanh, ...); `gather` and `scalar` read the variant's
// parameters, `size` a problem size or a free dimension, and
// `%R = sum %N %I` ... `endsum %T` sums the body's term %T over the index
// %I in [0, %N) (f32 sums rounded per addition, i32 sums wrapping). The
// `grad` section (score_mod's derivative) also has `upstream` (the gradient
// into score_mod's result) and `accumulate P INDICES... V` (adds V into
// float parameter P's gradient at the clamped indices). A program is
// input (packages are files): every line, operand count, operand type and
// constant is checked before it is run.
//
//===----------------------------------------------------------------------===//
#include "attnc/runtime/Variant.h"
#include "attnc/runtime/Parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>

namespace attnc::rt {

enum class Op {
  ConstI, ConstF, ConstB,
  AddI, SubI, MulI, DivSI, RemSI, MinSI, MaxSI, AndI, OrI, XorI, ShLI, ShRSI,
  CmpI,
  AddF, SubF, MulF, DivF, RemF, NegF, MinimumF, MaximumF, CmpF,
  Select, SIToFP, UIToFP, FPToSI, ExtUI, TruncI,
  Exp, Exp2, Log, Log2, Sqrt, Rsqrt, Tanh, Floor, Ceil, AbsF, AbsI, Fma,
  Sin, Cos, Erf, Log1p, Expm1,
  Gather, Scalar, Size, Sum, Yield, Upstream, Accumulate,
};

/// A value's type in the program: i32, f32 or i1.
enum class VType : uint8_t { None, I32, F32, I1 };

struct Instr {
  Op op;
  VType type = VType::None; // of the result
  int dst = -1;
  std::vector<int> args;
  int64_t imm = 0;   // ConstI/ConstB value, predicate code, param index;
                     // Size: k < 5 for kProblemSizeNames[k], else
                     // 5 + 8 * param + dim for a free dimension
  double fimm = 0.0; // ConstF
  // Sum: args = {count}, imm = the index's value slot; the body ends with
  // a Yield of the term.
  std::vector<Instr> body;
};

class ModProgram {
public:
  std::vector<Instr> score, mask, grad; // grad: empty when absent
  int numValues = 5; // %score %b %h %q %kv, then %0..
};

namespace {

const std::map<std::string, Op> &opTable() {
  static const std::map<std::string, Op> t = {
      {"arith.addi", Op::AddI},       {"arith.subi", Op::SubI},
      {"arith.muli", Op::MulI},       {"arith.divsi", Op::DivSI},
      {"arith.remsi", Op::RemSI},     {"arith.minsi", Op::MinSI},
      {"arith.maxsi", Op::MaxSI},     {"arith.andi", Op::AndI},
      {"arith.ori", Op::OrI},         {"arith.xori", Op::XorI},
      {"arith.shli", Op::ShLI},       {"arith.shrsi", Op::ShRSI},
      {"math.sin", Op::Sin},          {"math.cos", Op::Cos},
      {"math.erf", Op::Erf},          {"math.log1p", Op::Log1p},
      {"math.expm1", Op::Expm1},
      {"arith.cmpi", Op::CmpI},       {"arith.addf", Op::AddF},
      {"arith.subf", Op::SubF},       {"arith.mulf", Op::MulF},
      {"arith.divf", Op::DivF},       {"arith.remf", Op::RemF},
      {"arith.negf", Op::NegF},       {"arith.minimumf", Op::MinimumF},
      {"arith.maximumf", Op::MaximumF}, {"arith.cmpf", Op::CmpF},
      {"arith.select", Op::Select},   {"arith.sitofp", Op::SIToFP},
      {"arith.uitofp", Op::UIToFP},   {"arith.fptosi", Op::FPToSI},
      {"arith.extui", Op::ExtUI},     {"arith.trunci", Op::TruncI},
      {"math.exp", Op::Exp},          {"math.exp2", Op::Exp2},
      {"math.log", Op::Log},          {"math.log2", Op::Log2},
      {"math.sqrt", Op::Sqrt},        {"math.rsqrt", Op::Rsqrt},
      {"math.tanh", Op::Tanh},        {"math.floor", Op::Floor},
      {"math.ceil", Op::Ceil},        {"math.absf", Op::AbsF},
      {"math.absi", Op::AbsI},        {"math.fma", Op::Fma},
      {"gather", Op::Gather},         {"scalar", Op::Scalar},
      {"size", Op::Size},             {"sum", Op::Sum},
      {"const.i32", Op::ConstI},      {"const.f32", Op::ConstF},
      {"const.i1", Op::ConstB},       {"upstream", Op::Upstream},
  };
  return t;
}

// Predicate codes: the position in these lists.
const std::vector<std::string> kCmpI = {"eq",  "ne",  "slt", "sle", "sgt",
                                        "sge", "ult", "ule", "ugt", "uge"};
const std::vector<std::string> kCmpF = {
    "false", "oeq", "ogt", "oge", "olt", "ole", "one", "ord",
    "ueq",   "ugt", "uge", "ult", "ule", "une", "uno", "true"};

std::vector<std::string> split(const std::string &line) {
  std::istringstream is(line);
  std::vector<std::string> out;
  std::string w;
  while (is >> w)
    out.push_back(w);
  return out;
}

int valueIndex(const std::string &tok, int limit) {
  static const std::map<std::string, int> args = {
      {"%score", 0}, {"%b", 1}, {"%h", 2}, {"%q", 3}, {"%kv", 4}};
  auto it = args.find(tok);
  if (it != args.end())
    return it->second;
  if (tok.size() < 2 || tok[0] != '%')
    return -1;
  char *end = nullptr;
  long n = std::strtol(tok.c_str() + 1, &end, 10);
  // n >= limit - 5, not n + 5 >= limit: strtol gives LONG_MAX for a
  // number too long, and n + 5 would overflow (found by fuzz-package).
  if (*end != '\0' || n < 0 || n >= static_cast<long>(limit) - 5)
    return -1;
  return static_cast<int>(n) + 5;
}

} // namespace

namespace {

/// The operand types an op takes and the type it gives; every program is
/// checked against these before it runs, so the interpreter never reads a
/// missing operand or a value of the wrong kind.
/// Type-checks `code` (a modifier, or a sum's body at depth > 0): every
/// operand defined before use and of the type its op takes. `term` gets the
/// type a body yields.
enum class Section { Score, Mask, Grad };

Status typeCheckCode(std::vector<Instr> &code, std::vector<VType> &type,
                     const VariantInfo &v, Section section, int depth,
                     VType *term) {
  using T = VType;
  bool isMask = section == Section::Mask;
  const char *where = isMask ? "mask"
                      : section == Section::Grad ? "grad" : "score";
  for (size_t k = 0; k < code.size(); ++k) {
      Instr &in = code[k];
      auto fail = [&](const std::string &what) {
        return Status::invalidArgument(fmt::format(
            "modifier program ({} op {}{}): {}", where, k + 1,
            depth ? " of a sum" : "", what));
      };
      std::vector<T> at;
      for (int a : in.args) {
        if (a >= static_cast<int>(type.size()) || type[a] == T::None)
          return fail("a value is used before it is defined");
        at.push_back(type[a]);
      }
      auto arity = [&](size_t n) { return at.size() == n; };
      auto all = [&](T t) {
        return std::all_of(at.begin(), at.end(), [&](T x) { return x == t; });
      };
      bool ok = true;
      T r = T::None;
      switch (in.op) {
      case Op::ConstI: ok = arity(0); r = T::I32; break;
      case Op::ConstB: ok = arity(0); r = T::I1; break;
      case Op::ConstF: ok = arity(0); r = T::F32; break;
      case Op::AddI: case Op::SubI: case Op::MulI: case Op::DivSI:
      case Op::RemSI: case Op::MinSI: case Op::MaxSI: case Op::ShLI:
      case Op::ShRSI:
        ok = arity(2) && all(T::I32); r = T::I32; break;
      case Op::AndI: case Op::OrI: case Op::XorI:
        ok = arity(2) && at[0] == at[1] && at[0] != T::F32; r = ok ? at[0] : T::None; break;
      case Op::CmpI:
        ok = arity(2) && at[0] == at[1] && at[0] != T::F32; r = T::I1; break;
      case Op::AddF: case Op::SubF: case Op::MulF: case Op::DivF:
      case Op::RemF: case Op::MinimumF: case Op::MaximumF:
        ok = arity(2) && all(T::F32); r = T::F32; break;
      case Op::CmpF: ok = arity(2) && all(T::F32); r = T::I1; break;
      case Op::Select:
        ok = arity(3) && at[0] == T::I1 && at[1] == at[2]; r = ok ? at[1] : T::None; break;
      case Op::SIToFP: ok = arity(1) && at[0] == T::I32; r = T::F32; break;
      case Op::UIToFP: ok = arity(1) && at[0] != T::F32; r = T::F32; break;
      case Op::FPToSI: ok = arity(1) && at[0] == T::F32; r = T::I32; break;
      case Op::ExtUI: ok = arity(1) && at[0] == T::I1; r = T::I32; break;
      case Op::TruncI: ok = arity(1) && at[0] == T::I32; r = T::I1; break;
      case Op::Exp: case Op::Exp2: case Op::Log: case Op::Log2: case Op::Sqrt:
      case Op::Rsqrt: case Op::Tanh: case Op::Floor: case Op::Ceil:
      case Op::AbsF: case Op::NegF: case Op::Sin: case Op::Cos: case Op::Erf:
      case Op::Log1p: case Op::Expm1:
        ok = arity(1) && all(T::F32); r = T::F32; break;
      case Op::AbsI: ok = arity(1) && all(T::I32); r = T::I32; break;
      case Op::Fma: ok = arity(3) && all(T::F32); r = T::F32; break;
      case Op::Scalar:
        ok = arity(0);
        r = v.params[in.imm].dtype == DType::F32    ? T::F32
            : v.params[in.imm].dtype == DType::Bool ? T::I1
                                                    : T::I32;
        break;
      case Op::Size: ok = arity(0); r = T::I32; break;
      case Op::Upstream:
        ok = arity(0) && section == Section::Grad; r = T::F32; break;
      case Op::Accumulate: {
        const ParamSpec &ps = v.params[in.imm];
        if (section != Section::Grad)
          return fail("accumulate outside the grad section");
        if (!isFloatDType(ps.dtype))
          return fail("accumulate into '" + ps.name +
                      "', which is not a float parameter");
        ok = at.size() == ps.dims.size() + 1 && at.back() == T::F32 &&
             std::all_of(at.begin(), at.end() - 1,
                         [](T x) { return x == T::I32; });
        if (!ok)
          return fail("accumulate into '" + ps.name + "' takes " +
                      std::to_string(ps.dims.size()) +
                      " i32 indices and an f32 value");
        continue; // no result
      }
      case Op::Gather: {
        ok = all(T::I32); // the rank was checked when parsed
        DType dt = v.params[in.imm].dtype;
        r = dt == DType::Bool ? T::I1
            : (dt == DType::I32 || dt == DType::I64) ? T::I32 : T::F32;
        break;
      }
      case Op::Sum: {
        if (!arity(1) || at[0] != T::I32)
          return fail("a sum's count must be one i32");
        if (depth >= 16)
          return fail("sums are nested more than 16 deep");
        if (in.imm == in.dst || type[in.imm] != T::None)
          return fail("a sum's index must be a new value");
        type[in.imm] = T::I32;
        T t = T::None;
        if (Status s = typeCheckCode(in.body, type, v, section, depth + 1, &t);
            !s)
          return s;
        // The body's values (and the index) are not visible after it.
        type[in.imm] = T::None;
        for (const Instr &b : in.body)
          if (b.dst >= 0)
            type[b.dst] = T::None;
        if (t != T::F32 && t != T::I32)
          return fail("a sum's term must be f32 or i32");
        r = t;
        break;
      }
      case Op::Yield:
        if (depth > 0) {
          ok = arity(1) && at[0] != T::None;
          if (!ok || k + 1 != code.size())
            return fail("a sum's body must end with 'endsum' of one value");
          *term = at[0];
          continue;
        }
        ok = arity(1) && at[0] == (isMask ? T::I1 : T::F32);
        if (!ok)
          return fail(std::string("the ") + where + " modifier must yield " +
                      (isMask ? "an i1" : "an f32"));
        if (k + 1 != code.size())
          return fail("yield is not the last op");
        continue;
      }
      if (!ok)
        return fail("wrong number or types of operands");
      if (type[in.dst] != T::None)
        return fail("a value is defined twice");
      in.type = r;
      type[in.dst] = r;
  }
  if (depth > 0 && (code.empty() || code.back().op != Op::Yield))
    return Status::invalidArgument(fmt::format(
        "modifier program ({}): a sum's body does not end with 'endsum'", where));
  return Status::ok();
}

Status typeCheck(ModProgram &prog, const VariantInfo &v) {
  using T = VType;
  for (Section section : {Section::Score, Section::Mask, Section::Grad}) {
    std::vector<Instr> &code = section == Section::Score  ? prog.score
                               : section == Section::Mask ? prog.mask
                                                          : prog.grad;
    if (section == Section::Grad && code.empty())
      continue; // optional
    std::vector<T> type(prog.numValues, T::None);
    if (section != Section::Mask)
      type[0] = T::F32; // %score
    for (int a = 1; a < 5; ++a)
      type[a] = T::I32; // %b %h %q %kv
    if (Status s = typeCheckCode(code, type, v, section, 0, nullptr); !s)
      return s;
  }
  return Status::ok();
}

} // namespace

const ParamSpec *VariantInfo::findParam(const std::string &n) const {
  for (const ParamSpec &p : params)
    if (p.name == n)
      return &p;
  return nullptr;
}

Status VariantInfo::parse(const std::string &text, VariantInfo &out) {
  out = VariantInfo();
  out.text = text;
  auto prog = std::make_shared<ModProgram>();
  std::istringstream is(text);
  std::string line;
  int lineNo = 0;
  std::vector<Instr> *section = nullptr;
  std::vector<std::vector<Instr> *> enclosing; // sections around open sums
  constexpr int kMaxValues = 1 << 20;
  auto err = [&](const std::string &m) {
    return Status::invalidArgument(
        fmt::format("modifier program line {}: {}", lineNo, m));
  };
  bool ended = false;
  while (std::getline(is, line)) {
    ++lineNo;
    std::vector<std::string> w = split(line);
    if (w.empty() || w[0][0] == '#')
      continue;
    if (w[0] == "variant" && w.size() == 2) {
      out.name = w[1];
    } else if (w[0] == "param" && w.size() >= 4) {
      ParamSpec p;
      p.name = w[1];
      auto dt = parseDType(w[3]);
      if (!dt)
        return err("unknown dtype '" + w[3] + "'");
      p.dtype = *dt;
      p.isTensor = w[2] == "tensor";
      if (!p.isTensor && w[2] != "scalar")
        return err("expected 'tensor' or 'scalar'");
      if (out.findParam(p.name))
        return err("parameter '" + p.name + "' is declared twice");
      if (p.isTensor ? (p.dtype == DType::F32 || p.dtype == DType::F16 ||
                        p.dtype == DType::BF16 || p.dtype == DType::I32 ||
                        p.dtype == DType::I64 || p.dtype == DType::Bool) == false
                     : (p.dtype != DType::F32 && p.dtype != DType::I32 &&
                        p.dtype != DType::Bool))
        return err("parameter '" + p.name + "' has a dtype it cannot have");
      if (w.size() - 4 > 8)
        return err("parameter '" + p.name + "' has more than 8 dimensions");
      for (size_t i = 4; i < w.size(); ++i) {
        DimSpec d;
        if (std::isdigit(static_cast<unsigned char>(w[i][0]))) {
          if (!parseInt(w[i], 1, INT32_MAX, d.size))
            return err("bad dimension '" + w[i] + "'");
        } else {
          d.symbol = w[i];
        }
        p.dims.push_back(d);
      }
      if (p.isTensor == p.dims.empty())
        return err(p.isTensor ? "a tensor parameter needs dimensions"
                              : "a scalar parameter has no dimensions");
      out.params.push_back(std::move(p));
    } else if (w[0] == "mask-kind" && w.size() == 2) {
      if (w[1] == "none")
        out.maskKind = MaskKind::None;
      else if (w[1] == "closed")
        out.maskKind = MaskKind::Closed;
      else if (w[1] == "data")
        out.maskKind = MaskKind::Data;
      else
        return err("unknown mask kind '" + w[1] + "'");
    } else if (w[0] == "mask-uses") {
      out.maskUsesBatch = std::find(w.begin(), w.end(), "b") != w.end();
      out.maskUsesHead = std::find(w.begin(), w.end(), "h") != w.end();
    } else if ((w[0] == "score" || w[0] == "mask" || w[0] == "grad" ||
                w[0] == "end") &&
               !enclosing.empty()) {
      return err("a sum is not closed with 'endsum'");
    } else if (w[0] == "score" && w.size() == 1) {
      section = &prog->score;
    } else if (w[0] == "mask" && w.size() == 1) {
      section = &prog->mask;
    } else if (w[0] == "grad" && w.size() == 1) {
      section = &prog->grad;
    } else if (section && w[0] == "accumulate" && w.size() >= 3) {
      Instr in;
      in.op = Op::Accumulate;
      auto p = std::find_if(out.params.begin(), out.params.end(),
                            [&](const ParamSpec &s) { return s.name == w[1]; });
      if (p == out.params.end())
        return err("unknown parameter '" + w[1] + "'");
      in.imm = p - out.params.begin();
      for (size_t i = 2; i < w.size(); ++i) {
        int v = valueIndex(w[i], kMaxValues);
        if (v < 0)
          return err("bad operand '" + w[i] + "'");
        in.args.push_back(v);
      }
      section->push_back(std::move(in));
    } else if (w[0] == "end") {
      ended = true;
      break;
    } else if (section && (w[0] == "yield" || w[0] == "endsum") &&
               w.size() == 2) {
      bool endsum = w[0] == "endsum";
      if (endsum == enclosing.empty())
        return err(endsum ? "'endsum' without a sum"
                          : "'yield' inside a sum (close it with 'endsum')");
      Instr in;
      in.op = Op::Yield;
      int v = valueIndex(w[1], kMaxValues);
      if (v < 0)
        return err("bad value '" + w[1] + "'");
      in.args.push_back(v);
      section->push_back(in);
      if (endsum) {
        section = enclosing.back();
        enclosing.pop_back();
      }
    } else if (section && w.size() >= 3 && w[1] == "=") {
      Instr in;
      in.dst = valueIndex(w[0], kMaxValues);
      if (in.dst < 5)
        return err("bad result '" + w[0] + "'");
      auto it = opTable().find(w[2]);
      if (it == opTable().end())
        return err("unsupported operation '" + w[2] + "'");
      in.op = it->second;
      size_t i = 3;
      auto need = [&](size_t n) { return w.size() >= i + n; };
      switch (in.op) {
      case Op::ConstI:
      case Op::ConstB:
        if (!need(1) ||
            !parseInt(w[i], in.op == Op::ConstB ? 0 : INT32_MIN,
                      in.op == Op::ConstB ? 1 : INT32_MAX, in.imm))
          return err("bad or missing constant");
        ++i;
        break;
      case Op::ConstF: {
        if (!need(1))
          return err("missing constant");
        const std::string &t = w[i++];
        if (t == "nan")
          in.fimm = std::numeric_limits<double>::quiet_NaN();
        else if (t == "inf" || t == "-inf")
          in.fimm = t == "inf" ? INFINITY : -INFINITY;
        else if (!parseFinite(t, in.fimm))
          return err("bad constant '" + t + "'");
        in.fimm = static_cast<float>(in.fimm); // an f32 constant
        break;
      }
      case Op::CmpI:
      case Op::CmpF: {
        const auto &names = in.op == Op::CmpI ? kCmpI : kCmpF;
        auto p = need(1) ? std::find(names.begin(), names.end(), w[i])
                         : names.end();
        if (p == names.end())
          return err("bad predicate");
        in.imm = p - names.begin();
        ++i;
        break;
      }
      case Op::Size: {
        if (!need(1))
          return err("missing size name");
        in.imm = -1;
        for (int k = 0; k < 5; ++k)
          if (w[i] == kProblemSizeNames[k])
            in.imm = k;
        for (size_t pi = 0; in.imm < 0 && pi < out.params.size(); ++pi)
          for (size_t d = 0; in.imm < 0 && d < out.params[pi].dims.size(); ++d)
            if (out.params[pi].dims[d].symbol == w[i])
              in.imm = 5 + 8 * static_cast<int64_t>(pi) + static_cast<int64_t>(d);
        if (in.imm < 0)
          return err("'" + w[i] + "' is neither a problem size nor a free "
                     "dimension of a parameter");
        ++i;
        break;
      }
      case Op::Gather:
      case Op::Scalar: {
        if (!need(1))
          return err("missing parameter name");
        auto p = std::find_if(out.params.begin(), out.params.end(),
                              [&](const ParamSpec &s) { return s.name == w[i]; });
        if (p == out.params.end())
          return err("unknown parameter '" + w[i] + "'");
        if (p->isTensor != (in.op == Op::Gather))
          return err("'" + w[i] + "' used as the wrong kind of parameter");
        in.imm = p - out.params.begin();
        ++i;
        if (in.op == Op::Gather && w.size() - i != p->dims.size())
          return err("gather of '" + p->name + "' has the wrong rank");
        break;
      }
      case Op::Sum: {
        if (w.size() != i + 2)
          return err("a sum is '%R = sum COUNT %INDEX'");
        int idx = valueIndex(w[i + 1], kMaxValues);
        if (idx < 5)
          return err("bad sum index '" + w[i + 1] + "'");
        in.imm = idx;
        prog->numValues = std::max(prog->numValues, idx + 1);
        w.pop_back();
        break;
      }
      default:
        break;
      }
      for (; i < w.size(); ++i) {
        int v = valueIndex(w[i], kMaxValues);
        if (v < 0)
          return err("bad operand '" + w[i] + "'");
        in.args.push_back(v);
      }
      prog->numValues = std::max(prog->numValues, in.dst + 1);
      bool opens = in.op == Op::Sum;
      section->push_back(std::move(in));
      if (opens) {
        if (enclosing.size() >= 16)
          return err("sums are nested more than 16 deep");
        enclosing.push_back(section);
        section = &section->back().body;
      }
    } else {
      return err("cannot parse '" + line + "'");
    }
  }
  if (!ended)
    return Status::invalidArgument("modifier program: missing 'end'");
  for (auto *s : {&prog->score, &prog->mask, &prog->grad})
    if ((s != &prog->grad || !s->empty()) &&
        (s->empty() || s->back().op != Op::Yield))
      return Status::invalidArgument(
          "modifier program: a modifier does not end with 'yield'");
  if (Status st = typeCheck(*prog, out); !st)
    return st;
  out.program = prog;
  return Status::ok();
}

namespace {

struct Val {
  double f = 0.0;
  int64_t i = 0; // i32 values (wrapped) and i1 (0/1)
};

int32_t wrap(int64_t v) { return static_cast<int32_t>(static_cast<uint32_t>(v)); }

bool cmpI(int64_t pred, int32_t a, int32_t b) {
  uint32_t ua = static_cast<uint32_t>(a), ub = static_cast<uint32_t>(b);
  switch (pred) {
  case 0: return a == b;
  case 1: return a != b;
  case 2: return a < b;
  case 3: return a <= b;
  case 4: return a > b;
  case 5: return a >= b;
  case 6: return ua < ub;
  case 7: return ua <= ub;
  case 8: return ua > ub;
  default: return ua >= ub;
  }
}

bool cmpF(int64_t pred, double a, double b) {
  bool uno = std::isnan(a) || std::isnan(b);
  switch (pred) {
  case 0: return false;
  case 1: return !uno && a == b;
  case 2: return !uno && a > b;
  case 3: return !uno && a >= b;
  case 4: return !uno && a < b;
  case 5: return !uno && a <= b;
  case 6: return !uno && a != b;
  case 7: return !uno;
  case 8: return uno || a == b;
  case 9: return uno || a > b;
  case 10: return uno || a >= b;
  case 11: return uno || a < b;
  case 12: return uno || a <= b;
  case 13: return uno || a != b;
  case 14: return uno;
  default: return true;
  }
}

double nanMin(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::nan("") : std::min(a, b);
}
double nanMax(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::nan("") : std::max(a, b);
}

/// What a run reads besides its values, and where its gradients go.
struct RunEnv {
  const VariantInfo &v;
  const std::vector<BoundParam> &params;
  GatherViolation *violation = nullptr;
  bool exact = false;          // no rounding to f32
  double upstream = 0.0;       // grad: dy
  ParamGradients *grads = nullptr;
};

/// The clamped indices `args[0, n)` of a read of parameter `bp`: the
/// element offset (strided) and the dense row-major index; whether any
/// index was outside its dimension, and the unclamped indices.
struct ElementAt {
  int64_t offset = 0, dense = 0;
  bool clamped = false;
  std::vector<int64_t> index;
};
ElementAt elementAt(const BoundParam &bp, const std::vector<Val> &vals,
                    const std::vector<int> &args, size_t n) {
  ElementAt e;
  for (size_t d = 0; d < n; ++d) {
    int64_t i = static_cast<int32_t>(vals[args[d]].i);
    e.index.push_back(i);
    int64_t c = std::clamp<int64_t>(i, 0, bp.shape[d] - 1);
    e.clamped |= c != i;
    e.offset += c * bp.strides[d];
    e.dense = e.dense * bp.shape[d] + c;
  }
  return e;
}

/// Runs `code` over `vals` up to its Yield; returns the yielded value.
Val runCode(const RunEnv &env, const std::vector<Instr> &code,
            std::vector<Val> &vals) {
  const VariantInfo &v = env.v;
  const std::vector<BoundParam> &params = env.params;
  for (const Instr &in : code) {
    auto A = [&](int k) -> const Val & { return vals[in.args[k]]; };
    Val r;
    switch (in.op) {
    case Op::ConstI: r.i = wrap(in.imm); break;
    case Op::ConstB: r.i = in.imm != 0; break;
    case Op::ConstF: r.f = in.fimm; break;
    case Op::AddI: r.i = wrap(A(0).i + A(1).i); break;
    case Op::SubI: r.i = wrap(A(0).i - A(1).i); break;
    case Op::MulI: r.i = wrap(A(0).i * A(1).i); break;
    case Op::DivSI:
    case Op::RemSI: {
      int64_t x = A(0).i, y = A(1).i;
      bool div = in.op == Op::DivSI;
      if (y == 0)
        r.i = div ? 0 : x; // total, as the front end defines it
      else
        r.i = wrap(div ? x / y : x % y);
      break;
    }
    case Op::MinSI: r.i = std::min(A(0).i, A(1).i); break;
    case Op::MaxSI: r.i = std::max(A(0).i, A(1).i); break;
    case Op::AndI: r.i = wrap(A(0).i & A(1).i); break;
    case Op::OrI: r.i = wrap(A(0).i | A(1).i); break;
    case Op::XorI: r.i = wrap(A(0).i ^ A(1).i); break;
    case Op::ShLI:
    case Op::ShRSI: {
      // Counts outside [0, 31]: 0 for <<, the sign for >> (the front end
      // never lets one through; total all the same).
      int64_t x = A(0).i, n = A(1).i;
      bool ok = n >= 0 && n < 32;
      if (in.op == Op::ShLI)
        r.i = ok ? wrap(static_cast<int64_t>(static_cast<uint32_t>(x) << n)) : 0;
      else
        r.i = ok ? (static_cast<int32_t>(x) >> n) : (x < 0 ? -1 : 0);
      break;
    }
    case Op::CmpI:
      r.i = cmpI(in.imm, static_cast<int32_t>(A(0).i),
                 static_cast<int32_t>(A(1).i));
      break;
    case Op::AddF: r.f = A(0).f + A(1).f; break;
    case Op::SubF: r.f = A(0).f - A(1).f; break;
    case Op::MulF: r.f = A(0).f * A(1).f; break;
    case Op::DivF: r.f = A(0).f / A(1).f; break;
    case Op::RemF: r.f = std::fmod(A(0).f, A(1).f); break;
    case Op::NegF: r.f = -A(0).f; break;
    case Op::MinimumF: r.f = nanMin(A(0).f, A(1).f); break;
    case Op::MaximumF: r.f = nanMax(A(0).f, A(1).f); break;
    case Op::CmpF: r.i = cmpF(in.imm, A(0).f, A(1).f); break;
    case Op::Select: r = A(0).i ? A(1) : A(2); break;
    case Op::SIToFP: r.f = static_cast<double>(A(0).i); break;
    case Op::UIToFP: r.f = static_cast<double>(static_cast<uint32_t>(A(0).i));
      break;
    case Op::FPToSI: {
      double x = A(0).f;
      r.i = std::isnan(x) ? 0
                          : static_cast<int64_t>(std::clamp(
                                std::trunc(x), -2147483648.0, 2147483647.0));
      break;
    }
    case Op::ExtUI: r.i = A(0).i & 1; break;
    case Op::TruncI: r.i = A(0).i & 1; break;
    case Op::Exp: r.f = std::exp(A(0).f); break;
    case Op::Exp2: r.f = std::exp2(A(0).f); break;
    case Op::Log: r.f = std::log(A(0).f); break;
    case Op::Log2: r.f = std::log2(A(0).f); break;
    case Op::Sqrt: r.f = std::sqrt(A(0).f); break;
    case Op::Rsqrt: r.f = 1.0 / std::sqrt(A(0).f); break;
    case Op::Tanh: r.f = std::tanh(A(0).f); break;
    case Op::Sin: r.f = std::sin(A(0).f); break;
    case Op::Cos: r.f = std::cos(A(0).f); break;
    case Op::Erf: r.f = std::erf(A(0).f); break;
    case Op::Log1p: r.f = std::log1p(A(0).f); break;
    case Op::Expm1: r.f = std::expm1(A(0).f); break;
    case Op::Floor: r.f = std::floor(A(0).f); break;
    case Op::Ceil: r.f = std::ceil(A(0).f); break;
    case Op::AbsF: r.f = std::fabs(A(0).f); break;
    case Op::AbsI: r.i = wrap(A(0).i < 0 ? -A(0).i : A(0).i); break;
    case Op::Fma: r.f = A(0).f * A(1).f + A(2).f; break;
    case Op::Scalar: {
      const ParamSpec &ps = v.params[in.imm];
      double s = params[in.imm].scalar;
      if (ps.dtype == DType::F32)
        r.f = s;
      else if (ps.dtype == DType::Bool)
        r.i = s != 0.0;
      else
        r.i = wrap(static_cast<int64_t>(s));
      break;
    }
    case Op::Size: {
      if (in.imm < 5) {
        size_t at = v.params.size() + static_cast<size_t>(in.imm);
        r.i = at < params.size() ? wrap(static_cast<int64_t>(params[at].scalar)) : 0;
      } else {
        const BoundParam &bp = params[(in.imm - 5) / 8];
        size_t d = static_cast<size_t>((in.imm - 5) % 8);
        r.i = d < bp.shape.size() ? wrap(bp.shape[d]) : 0;
      }
      break;
    }
    case Op::Gather: {
      const BoundParam &bp = params[in.imm];
      ElementAt at = elementAt(bp, vals, in.args, in.args.size());
      int64_t off = at.offset;
      GatherViolation *violation = env.violation;
      if (at.clamped && violation && violation->capture.empty()) {
        violation->capture = v.params[in.imm].name;
        violation->index = at.index;
        violation->shape = bp.shape;
      }
      double x = loadAsDouble(bp.data, bp.dtype, off);
      if (isFloatDType(bp.dtype))
        r.f = x;
      else if (bp.dtype == DType::Bool)
        r.i = x != 0.0;
      else if (bp.dtype == DType::I64)
        r.i = wrap(static_cast<const int64_t *>(bp.data)[off]);
      else
        r.i = static_cast<int64_t>(x);
      break;
    }
    case Op::Sum: {
      // In index order from 0, as the kernels add.
      int64_t n = static_cast<int32_t>(A(0).i);
      for (int64_t i = 0; i < n; ++i) {
        vals[in.imm].i = i;
        Val t = runCode(env, in.body, vals);
        if (in.type == VType::F32)
          r.f = env.exact ? r.f + t.f : static_cast<float>(r.f + t.f);
        else
          r.i = wrap(r.i + t.i);
      }
      break;
    }
    case Op::Upstream: r.f = env.upstream; break;
    case Op::Accumulate: {
      if (!env.grads)
        continue;
      const BoundParam &bp = params[in.imm];
      size_t n = in.args.size() - 1;
      int64_t dense = n ? elementAt(bp, vals, in.args, n).dense : 0;
      ParamGradients &g = *env.grads;
      if (g.size() != v.params.size())
        g = zeroParamGradients(v, params);
      g[in.imm][static_cast<size_t>(dense)] += vals[in.args.back()].f;
      continue; // no result
    }
    case Op::Yield: return A(0);
    }
    if (in.type == VType::F32 && !env.exact)
      r.f = static_cast<float>(r.f); // f32 arithmetic: one rounding per op
    vals[in.dst] = r;
  }
  return Val();
}

Val run(const RunEnv &env, const std::vector<Instr> &code, Val args[5]) {
  std::vector<Val> vals(env.v.program->numValues);
  std::copy(args, args + 5, vals.begin());
  return runCode(env, code, vals);
}

} // namespace

ParamGradients zeroParamGradients(const VariantInfo &v,
                                  const std::vector<BoundParam> &params) {
  ParamGradients g(v.params.size());
  for (size_t i = 0; i < v.params.size(); ++i) {
    if (!isFloatDType(v.params[i].dtype))
      continue;
    int64_t n = 1;
    for (int64_t d : params[i].shape) // empty for a scalar: one element
      n *= d;
    g[i].assign(static_cast<size_t>(n), 0.0);
  }
  return g;
}

bool VariantInfo::hasScoreGrad() const {
  return program && !program->grad.empty();
}

namespace {
/// score_mod's arguments (score_grad's first five): the score as the f32
/// the kernels hand it over, unless `exact`.
void scoreArgs(Val args[5], double score, int32_t b, int32_t h, int32_t q,
               int32_t kv, bool exact) {
  args[0].f = exact ? score : static_cast<float>(score);
  args[1].i = b;
  args[2].i = h;
  args[3].i = q;
  args[4].i = kv;
}
} // namespace

double evalScoreMod(const VariantInfo &v, const std::vector<BoundParam> &params,
                    double score, int32_t b, int32_t h, int32_t q, int32_t kv,
                    GatherViolation *violation, bool exact) {
  Val args[5];
  scoreArgs(args, score, b, h, q, kv, exact);
  return run(RunEnv{v, params, violation, exact}, v.program->score, args).f;
}

double evalScoreGrad(const VariantInfo &v, const std::vector<BoundParam> &params,
                     double score, int32_t b, int32_t h, int32_t q, int32_t kv,
                     double dy, ParamGradients *grads, bool exact) {
  Val args[5];
  scoreArgs(args, score, b, h, q, kv, exact);
  RunEnv env{v, params, nullptr, exact, exact ? dy : static_cast<float>(dy),
             grads};
  return run(env, v.program->grad, args).f;
}

bool evalMaskMod(const VariantInfo &v, const std::vector<BoundParam> &params,
                 int32_t b, int32_t h, int32_t q, int32_t kv,
                 GatherViolation *violation) {
  // mask_mod's arguments are (b, h, q, kv): slots 0..3 of the text form's
  // %b %h %q %kv, which the compiler prints as %b %h %q %kv too.
  Val args[5];
  args[1].i = b;
  args[2].i = h;
  args[3].i = q;
  args[4].i = kv;
  return run(RunEnv{v, params, violation}, v.program->mask, args).i != 0;
}

} // namespace attnc::rt
