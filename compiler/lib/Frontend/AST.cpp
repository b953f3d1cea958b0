//===- AST.cpp - Type names, builtins and the AST printer ----------------===//
#include "attnc/Frontend/AST.h"

namespace attnc {

const char *typeName(Type t) {
  switch (t) {
  case Type::Error: return "<error>";
  case Type::I32: return "i32";
  case Type::F32: return "f32";
  case Type::Bool: return "bool";
  }
  return "?";
}

const char *elemTypeName(ElemType t) {
  switch (t) {
  case ElemType::F32: return "f32";
  case ElemType::F16: return "f16";
  case ElemType::BF16: return "bf16";
  case ElemType::I32: return "i32";
  case ElemType::I64: return "i64";
  case ElemType::Bool: return "bool";
  }
  return "?";
}

Type computeType(ElemType t) {
  switch (t) {
  case ElemType::F32:
  case ElemType::F16:
  case ElemType::BF16: return Type::F32;
  case ElemType::I32:
  case ElemType::I64: return Type::I32;
  case ElemType::Bool: return Type::Bool;
  }
  return Type::Error;
}

namespace {
struct BuiltinEntry {
  const char *name;
  Builtin id;
};
constexpr BuiltinEntry kBuiltins[] = {
    {"exp", Builtin::Exp},       {"exp2", Builtin::Exp2},
    {"log", Builtin::Log},       {"log2", Builtin::Log2},
    {"sqrt", Builtin::Sqrt},     {"rsqrt", Builtin::Rsqrt},
    {"tanh", Builtin::Tanh},     {"sigmoid", Builtin::Sigmoid},
    {"floor", Builtin::Floor},   {"ceil", Builtin::Ceil},
    {"abs", Builtin::Abs},       {"min", Builtin::Min},
    {"max", Builtin::Max},       {"clamp", Builtin::Clamp},
    {"f32", Builtin::CastF32},   {"i32", Builtin::CastI32},
    {"sin", Builtin::Sin},       {"cos", Builtin::Cos},
    {"tan", Builtin::Tan},       {"log1p", Builtin::Log1p},
    {"expm1", Builtin::Expm1},   {"erf", Builtin::Erf},
    {"pow", Builtin::Pow},       {"sign", Builtin::Sign},
    {"floordiv", Builtin::FloorDiv}, {"floormod", Builtin::FloorMod},
    {"where", Builtin::Where},   {"isnan", Builtin::IsNan},
    {"isinf", Builtin::IsInf},
};
} // namespace

Builtin lookupBuiltin(const std::string &name) {
  for (const auto &b : kBuiltins)
    if (name == b.name)
      return b.id;
  return Builtin::None;
}

std::vector<std::string> builtinNames() {
  std::vector<std::string> out;
  for (const auto &b : kBuiltins)
    out.push_back(b.name);
  return out;
}

const char *builtinName(Builtin id) {
  for (const auto &b : kBuiltins)
    if (b.id == id)
      return b.name;
  return "<none>";
}

const Variant *Module::findVariant(const std::string &name) const {
  for (const Variant &v : variants)
    if (v.name == name)
      return &v;
  return nullptr;
}

namespace {

void indent(std::ostream &os, int n) {
  for (int i = 0; i < n; ++i)
    os << "  ";
}

void printExpr(const Expr &e, std::ostream &os, int depth) {
  indent(os, depth);
  switch (e.kind) {
  case Expr::Kind::IntLit: os << "Int " << e.intValue; break;
  case Expr::Kind::FloatLit: os << "Float " << e.floatValue; break;
  case Expr::Kind::BoolLit: os << "Bool " << (e.boolValue ? "true" : "false");
    break;
  case Expr::Kind::InfLit: os << "Inf"; break;
  case Expr::Kind::Name: {
    static const char *kinds[] = {"?", "modparam", "let", "fnparam", "scalar",
                                  "tensor", "size", "sum index"};
    os << "Name " << e.name << " (" << kinds[static_cast<int>(e.ref)] << ")";
    break;
  }
  case Expr::Kind::Unary: os << "Unary '" << tokSpelling(e.op) + 1; break;
  case Expr::Kind::Binary: os << "Binary '" << tokSpelling(e.op) + 1; break;
  case Expr::Kind::Ternary: os << "Select"; break;
  case Expr::Kind::Call:
    os << "Call " << e.name << (e.fnIndex >= 0 ? " (fn)" : "");
    break;
  case Expr::Kind::Index: os << "Gather " << e.name; break;
  case Expr::Kind::Sum: os << "Sum " << e.name << " <"; break;
  }
  os << " : " << typeName(e.type) << "\n";
  for (const ExprPtr &o : e.operands)
    printExpr(*o, os, depth + 1);
}

void printBody(const Body &b, std::ostream &os, int depth) {
  for (const LetStmt &l : b.lets) {
    indent(os, depth);
    os << "Let " << l.name << "\n";
    printExpr(*l.value, os, depth + 1);
  }
  if (b.result) {
    indent(os, depth);
    os << "Return\n";
    printExpr(*b.result, os, depth + 1);
  }
}

void printModifier(const char *kw, const Modifier &m, std::ostream &os) {
  os << "  " << kw << " (";
  if (!m.present) {
    os << "omitted)\n";
    return;
  }
  for (size_t i = 0; i < m.params.size(); ++i)
    os << (i ? ", " : "") << m.params[i].name;
  os << ")\n";
  printBody(m.body, os, 2);
}

} // namespace

void printAST(const Module &m, std::ostream &os) {
  for (const FnDecl &fn : m.fns) {
    os << "Fn " << fn.name << "(";
    for (size_t i = 0; i < fn.params.size(); ++i)
      os << (i ? ", " : "") << fn.params[i].name << ": "
         << typeName(fn.params[i].type);
    os << ") -> " << typeName(fn.returnType) << "\n";
    printBody(fn.body, os, 1);
  }
  for (const Variant &v : m.variants) {
    os << "Variant " << v.name << "\n";
    for (const VariantParam &p : v.params) {
      os << "  Param " << p.name << ": ";
      if (!p.isTensor) {
        os << typeName(p.scalarType) << "\n";
        continue;
      }
      os << elemTypeName(p.elem) << "[";
      for (size_t i = 0; i < p.dims.size() && !p.rank0; ++i) {
        os << (i ? ", " : "");
        if (p.dims[i].symbol.empty())
          os << p.dims[i].value;
        else
          os << p.dims[i].symbol;
      }
      os << "]\n";
    }
    printModifier("ScoreMod", v.scoreMod, os);
    printModifier("MaskMod", v.maskMod, os);
  }
}

} // namespace attnc
