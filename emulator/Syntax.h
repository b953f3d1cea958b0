//===- Syntax.h - PTX as parsed: directives, registers, instructions -------===//
//
// What the parser produces from PTX text, before any meaning is given to
// opcodes: the decoder (Decode.cpp) turns this into executable kernels and
// rejects whatever it does not know, naming the line.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_SYNTAX_H
#define ATTNC_EMU_SYNTAX_H

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::emu {

/// A PTX fundamental type (the `.b32` of `.reg .b32`, `ld.global.b32`, ...).
enum class Ty : uint8_t {
  None, Pred,
  B8, B16, B32, B64,
  U8, U16, U32, U64,
  S8, S16, S32, S64,
  F16, F16x2, BF16, BF16x2, F32, F64,
};
/// ".b32" or "b32" -> Ty::B32; Ty::None when it is not a type.
Ty parseTy(const std::string &s);
const char *tyName(Ty t);
int tyBits(Ty t); // Pred: 1
inline bool tySigned(Ty t) { return t >= Ty::S8 && t <= Ty::S64; }
inline bool tyFloat(Ty t) { return t >= Ty::F16; }

/// A state space.
enum class Space : uint8_t { None, Global, Shared, Local, Param, Const };

struct SynOperand {
  enum Kind : uint8_t {
    Reg,     // %r1 (name)
    NotReg,  // !%p1 (name)
    Int,     // 42, -1, 0xff (ival)
    Float,   // 0f3F800000 (fbits, fwidth 32), 0d... (64), 1.5 (dval)
    Addr,    // [base+offset]: base is a register, a symbol, or empty;
             // [base, {c0, c1, ...}] (a tensor map and its coordinates):
             // the coordinates in elems
    Vec,     // {a, b, ...} (elems)
    Pair,    // %p|%q (elems)
    Name,    // a label or a symbol
    Sink,    // _
  };
  Kind kind = Int;
  std::string name;
  int64_t ival = 0;
  uint64_t fbits = 0;
  int fwidth = 0; // 32/64 for hex floats; 0 for a decimal literal in dval
  double dval = 0;
  int64_t offset = 0;
  std::vector<SynOperand> elems;
};

struct SynInstr {
  std::string opcode; // "ld.global.b32"
  std::string guard;  // "" or the predicate register
  bool guardNeg = false;
  std::vector<SynOperand> ops;
  int line = 0;
};

/// `.shared/.local/.global .align A .b8 name[N]` (count -1 for `[]`).
struct SynVar {
  Space space = Space::None;
  int align = 1;
  Ty type = Ty::B8;
  std::string name;
  int64_t count = 1;
  bool isExtern = false;
  int line = 0;
};

struct SynReg {
  Ty type = Ty::None;
  std::string name;
  int count = -1; // %r<806>: 806; a single register: -1
};

struct SynParam {
  Ty type = Ty::None;
  std::string name;
  int align = 0;
  int64_t count = 1; // .param .align 8 .b8 p[16]: 16
};

/// One statement of a kernel body: a label or an instruction.
struct SynStmt {
  std::string label; // non-empty: a label
  SynInstr instr;
};

struct SynKernel {
  std::string name;
  int line = 0;
  std::vector<SynParam> params;
  int maxntid[3] = {0, 0, 0};
  int reqntid[3] = {0, 0, 0};
  int maxnreg = 0; // .maxnreg, 0 when absent
  std::vector<SynReg> regs;
  std::vector<SynVar> vars;
  std::vector<SynStmt> body;
};

struct SynModule {
  int version = 0; // 80 for .version 8.0
  int target = 0;  // 90 for .target sm_90 (sm_90a: 90)
  bool archSpecific = false; // sm_90a: loads on compute capability 9.0 only
  std::vector<SynVar> vars; // module-scope .shared
  std::vector<SynKernel> kernels;
};

/// Parses PTX text. On failure, `error` is "line N: what".
bool parsePtx(const std::string &text, SynModule &out, std::string &error);

} // namespace attnc::emu

#endif
