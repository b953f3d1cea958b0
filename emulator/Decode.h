//===- Decode.h - Syntax -> Kernel: operands, symbols, binders -----------===//
//
// The decoder gives every register, immediate and special register a slot,
// every symbol an address and every label a program counter, then asks the
// binders (ExecAlu, ExecConvert, ExecMemory, ExecWarp, ExecWarpgroup) to choose each
// instruction's handler. An opcode no binder takes, or a form a binder does
// not support, is a load error naming the PTX line.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_DECODE_H
#define ATTNC_EMU_DECODE_H

#include "Program.h"
#include "Syntax.h"

#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace attnc::emu {

/// "ld.global.v4.b32" -> {"ld", "global", "v4", "b32"}.
std::vector<std::string> splitOpcode(const std::string &op);
bool hasPart(const std::vector<std::string> &parts, const char *p);
/// The last part that is a type (".b32" of "ld.global.b32"), or Ty::None.
Ty lastType(const std::vector<std::string> &parts);

class Decoder {
public:
  Decoder(Kernel &k, int target, bool archSpecific = false)
      : k_(k), target_(target), archSpecific_(archSpecific) {}

  Kernel &kernel() { return k_; }
  int target() const { return target_; }
  /// sm_90a: wgmma and setmaxnreg need it.
  bool archSpecific() const { return archSpecific_; }
  /// The kernel trades registers between warpgroups (setmaxnreg).
  void noteSetMaxNReg() { k_.setsMaxNReg = true; }

  /// A value operand of type `t`: a register, an immediate (a constant
  /// slot holding its bits as `t`), a special register, a symbol (its
  /// address), or (allowVec) a vector of those; `_` where allowSink.
  bool value(const SynOperand &s, Ty t, Operand &out, std::string &err,
             bool allowVec = false, bool allowSink = false);
  /// A destination: a register (or a vector of registers, `_` allowed).
  bool dest(const SynOperand &s, Operand &out, std::string &err,
            bool allowVec = false);
  /// An address `[reg+off]`, `[symbol+off]` or `[imm]` in space `sp`.
  bool address(const SynOperand &s, Space sp, Operand &out, std::string &err);
  /// A slot holding the constant `bits`.
  int32_t constant(uint64_t bits);

  // Used by Decode.cpp while building the kernel.
  bool declare(const SynKernel &sk, const std::vector<SynVar> &moduleVars,
               std::string &err);
  int32_t registerSlot(const std::string &name) const;
  /// The offset of the kernel parameter `name`; false if there is none.
  bool paramSymbol(const std::string &name, uint64_t &offset) const {
    auto it = paramSyms_.find(name);
    if (it == paramSyms_.end())
      return false;
    offset = it->second;
    return true;
  }
  /// The declared type of a register (Ty::None for non-registers).
  Ty registerType(const std::string &name) const;

private:
  Kernel &k_;
  int target_;
  bool archSpecific_;
  std::unordered_map<std::string, int32_t> regs_;
  std::unordered_map<std::string, Ty> regTypes_;
  std::unordered_map<uint64_t, int32_t> consts_;
  std::map<std::string, uint64_t> sharedSyms_, localSyms_, paramSyms_;
  bool special(const std::string &name, int32_t &slot);
  bool immediate(const SynOperand &s, Ty t, uint64_t &bits, std::string &err);
};

} // namespace attnc::emu

#endif
