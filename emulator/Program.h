//===- Program.h - Decoded kernels: instructions ready to execute ---------===//
//
// The decoder turns the syntax of a module into Kernels: every register,
// immediate and special register is a slot in a per-lane register file
// (immediates and specials are slots filled before the kernel starts), every
// label a program counter, every symbol an address, and every instruction a
// handler chosen once for its opcode and types.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_PROGRAM_H
#define ATTNC_EMU_PROGRAM_H

#include "Syntax.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnc::emu {

struct Cta;
struct Warp;
struct Instr;

/// Executes one instruction for the lanes in `mask` (already filtered by
/// the guard predicate). Faults are thrown as `Fault`.
using Handler = void (*)(Cta &, Warp &, const Instr &, uint32_t mask);

/// How the warp scheduler treats an instruction.
enum class Ctl : uint8_t {
  Plain,      // a handler, per lane
  Branch,     // bra / bra.uni to `target`
  Exit,       // ret / exit
  Barrier,    // bar.sync / barrier.sync: the threads of barrier `aux`
  BarArrive,  // bar.arrive: counts at barrier `aux` without waiting
  MbarWait,   // mbarrier.try_wait (parks) / test_wait (aux bit 0: polls)
  Collective, // shfl/ldmatrix/mma/vote/bar.warp: every lane of `membermask`
  Warpgroup,  // wgmma.*: every lane of the 4 warps of the warpgroup
  Trap,       // trap: a fault
};

/// Instr::aux of a Barrier/BarArrive: the barrier id (0..15), with this bit
/// for the .aligned forms (bar.sync, barrier.sync.aligned).
constexpr uint32_t kBarrierAligned = 0x100;
/// ... and this bit where the id is a register (Instr::op[0], uniform
/// over the warp) rather than the immediate in the low bits.
constexpr uint32_t kBarrierIdInRegister = 0x200;

struct Operand {
  enum Kind : uint8_t { None, Reg, Addr, Vec, Sink };
  Kind kind = None;
  uint8_t n = 0;        // Vec: element count
  int32_t r[4] = {-1, -1, -1, -1}; // Reg: r[0]; Vec: elements (-1: sink)
  int32_t base = -1;    // Addr: base register slot, or -1 for an absolute address
  int64_t off = 0;      // Addr: offset (symbols are resolved into it)
  bool addr32 = false;  // Addr: a 32-bit base register (register + offset
                        // wraps at 2^32, as 32-bit shared addresses do)
};

struct Instr {
  Handler fn = nullptr;
  Ctl ctl = Ctl::Plain;
  Ty t = Ty::None;  // the instruction type (destination type for cvt)
  Ty t2 = Ty::None; // cvt: source type; setp: comparison type
  Space space = Space::None;
  uint8_t nops = 0;
  uint8_t vec = 1;   // ld/st .v2/.v4
  uint32_t aux = 0;  // opcode-specific (compare op, shuffle mode, flags...)
  uint32_t aux2 = 0;
  int32_t guard = -1; // predicate slot
  bool guardNeg = false;
  int32_t target = -1; // Branch: program counter
  int32_t membermask = -1; // Collective: slot of the member mask; -1: all lanes
  int line = 0;
  Operand op[6];
  /// Register slots of operands wider than a Vec (wgmma's accumulators and
  /// A fragments): op[k].n of them from op[k].r[0] on, an index here.
  std::vector<int32_t> wide;
};

/// Where a kernel parameter lives in the parameter buffer.
struct ParamSlot {
  std::string name;
  uint32_t offset = 0, size = 0;
};

struct Kernel {
  std::string name;
  int line = 0;
  std::vector<Instr> code;
  std::vector<std::string> text; // the PTX text of each instruction
  int numSlots = 0;              // register-file slots per lane
  /// Slots filled before the kernel runs: immediates.
  std::vector<std::pair<int32_t, uint64_t>> constants;
  /// Slots of special registers (-1 where the kernel does not read them).
  enum Special { TidX, TidY, TidZ, NtidX, NtidY, NtidZ, CtaidX, CtaidY, CtaidZ,
                 NctaidX, NctaidY, NctaidZ, LaneId, WarpId, NWarpId, NumSpecials };
  int32_t specials[NumSpecials];
  std::vector<ParamSlot> params;
  uint32_t paramBytes = 0;
  uint32_t staticShared = 0;   // bytes of .shared variables
  uint32_t dynamicSharedBase = 0; // where `extern .shared` arrays start
  uint32_t localBytes = 0;     // per thread
  int maxThreads = 1024;       // .maxntid / .reqntid product, else 1024
  int reqntid[3] = {0, 0, 0};
  /// Registers per thread at launch: .maxnreg where the kernel trades
  /// registers between warpgroups (setmaxnreg, which needs it: ptxas then
  /// gives every thread exactly that many); 0 otherwise (ptxas's count,
  /// which the emulator does not know).
  int launchRegisters() const { return setsMaxNReg ? maxnreg : 0; }
  bool setsMaxNReg = false; // the kernel has a setmaxnreg
  int maxnreg = 0;          // .maxnreg, 0 when absent
  /// Set by cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES).
  uint32_t maxDynamicShared = 0;
};

struct Module {
  int target = 0;
  bool archSpecific = false;
  std::vector<std::unique_ptr<Kernel>> kernels;
  const Kernel *find(const std::string &name) const {
    for (const auto &k : kernels)
      if (k->name == name)
        return k.get();
    return nullptr;
  }
};

/// Parses and decodes PTX for a device of compute capability `cc` (90 for
/// sm_90). On failure, `log` reads like a JIT log: "emucuda: line N: ...".
bool loadModule(const std::string &ptx, int cc, std::unique_ptr<Module> &out,
                std::string &log);
/// The same, returning the CUDA error code (0, 218 invalid PTX, 209 no
/// binary for the device).
int loadModuleCode(const std::string &ptx, int cc, std::unique_ptr<Module> &out,
                   std::string &log);

} // namespace attnc::emu

#endif
