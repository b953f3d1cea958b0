//===- Decode.cpp - Syntax -> Kernels: slots, symbols, labels, handlers ---===//
#include "Decode.h"
#include "Float16.h"
#include "Machine.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace attnc::emu {

std::vector<std::string> splitOpcode(const std::string &op) {
  std::vector<std::string> parts;
  std::string cur;
  for (char c : op) {
    if (c == '.') {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  return parts;
}

bool hasPart(const std::vector<std::string> &parts, const char *p) {
  return std::find(parts.begin() + 1, parts.end(), p) != parts.end();
}

Ty lastType(const std::vector<std::string> &parts) {
  for (size_t i = parts.size(); i-- > 1;)
    if (Ty t = parseTy(parts[i]); t != Ty::None)
      return t;
  return Ty::None;
}

namespace {
uint64_t truncBits(uint64_t v, int bits) {
  return bits >= 64 ? v : v & ((uint64_t(1) << bits) - 1);
}
uint32_t alignUp(uint32_t v, uint32_t a) { return a ? (v + a - 1) / a * a : v; }
} // namespace

int32_t Decoder::constant(uint64_t bits) {
  auto it = consts_.find(bits);
  if (it != consts_.end())
    return it->second;
  int32_t s = k_.numSlots++;
  consts_[bits] = s;
  k_.constants.push_back({s, bits});
  return s;
}

Ty Decoder::registerType(const std::string &name) const {
  auto it = regTypes_.find(name);
  return it == regTypes_.end() ? Ty::None : it->second;
}

int32_t Decoder::registerSlot(const std::string &name) const {
  auto it = regs_.find(name);
  return it == regs_.end() ? -1 : it->second;
}

bool Decoder::special(const std::string &name, int32_t &out) {
  static const struct { const char *n; Kernel::Special s; } table[] = {
      {"%tid.x", Kernel::TidX},       {"%tid.y", Kernel::TidY},
      {"%tid.z", Kernel::TidZ},       {"%ntid.x", Kernel::NtidX},
      {"%ntid.y", Kernel::NtidY},     {"%ntid.z", Kernel::NtidZ},
      {"%ctaid.x", Kernel::CtaidX},   {"%ctaid.y", Kernel::CtaidY},
      {"%ctaid.z", Kernel::CtaidZ},   {"%nctaid.x", Kernel::NctaidX},
      {"%nctaid.y", Kernel::NctaidY}, {"%nctaid.z", Kernel::NctaidZ},
      {"%laneid", Kernel::LaneId},    {"%warpid", Kernel::WarpId},
      {"%nwarpid", Kernel::NWarpId}};
  for (const auto &e : table)
    if (name == e.n) {
      if (k_.specials[e.s] < 0)
        k_.specials[e.s] = k_.numSlots++;
      out = k_.specials[e.s];
      return true;
    }
  return false;
}

bool Decoder::immediate(const SynOperand &s, Ty t, uint64_t &bits,
                        std::string &err) {
  int w = tyBits(t);
  if (s.kind == SynOperand::Int) {
    if (t == Ty::F32)
      bits = floatBits(static_cast<float>(s.ival));
    else if (t == Ty::F64)
      bits = doubleBits(static_cast<double>(s.ival));
    else
      bits = truncBits(static_cast<uint64_t>(s.ival), std::max(w, 1));
    return true;
  }
  if (s.kind != SynOperand::Float) {
    err = "expected an immediate";
    return false;
  }
  double d = s.fwidth == 32 ? double(bitsFloat(static_cast<uint32_t>(s.fbits)))
             : s.fwidth == 64 ? bitsDouble(s.fbits)
                              : s.dval;
  switch (t) {
  case Ty::F32:
    bits = s.fwidth == 32 ? s.fbits : floatBits(static_cast<float>(d));
    return true;
  case Ty::F64:
    bits = s.fwidth == 64 ? s.fbits : doubleBits(d);
    return true;
  case Ty::F16:
    bits = floatToF16(static_cast<float>(d));
    return true;
  case Ty::BF16:
    bits = floatToBf16(static_cast<float>(d));
    return true;
  case Ty::B32: case Ty::U32: case Ty::S32:
    if (s.fwidth == 32) { // 0f literals as raw bits, e.g. mov.b32 %r1, 0f3F800000
      bits = s.fbits;
      return true;
    }
    break;
  case Ty::B64: case Ty::U64: case Ty::S64:
    if (s.fwidth == 64) {
      bits = s.fbits;
      return true;
    }
    break;
  default:
    break;
  }
  err = std::string("a floating-point literal where .") + tyName(t) +
        " is expected";
  return false;
}

bool Decoder::value(const SynOperand &s, Ty t, Operand &out, std::string &err,
                    bool allowVec, bool allowSink) {
  out = Operand();
  switch (s.kind) {
  case SynOperand::Reg: {
    int32_t r = registerSlot(s.name);
    if (r < 0 && !special(s.name, r)) {
      err = "unknown register '" + s.name + "'";
      return false;
    }
    out.kind = Operand::Reg;
    out.r[0] = r;
    return true;
  }
  case SynOperand::Int:
  case SynOperand::Float: {
    uint64_t bits;
    if (!immediate(s, t, bits, err))
      return false;
    out.kind = Operand::Reg;
    out.r[0] = constant(bits);
    return true;
  }
  case SynOperand::Name: {
    if (int32_t r = registerSlot(s.name); r >= 0) { // a register named without '%'
      out.kind = Operand::Reg;
      out.r[0] = r;
      return true;
    }
    uint64_t addr;
    if (auto it = sharedSyms_.find(s.name); it != sharedSyms_.end())
      addr = it->second;
    else if (auto it2 = localSyms_.find(s.name); it2 != localSyms_.end())
      addr = it2->second;
    else if (auto it3 = paramSyms_.find(s.name); it3 != paramSyms_.end())
      addr = it3->second;
    else {
      err = "unknown symbol '" + s.name + "'";
      return false;
    }
    out.kind = Operand::Reg;
    out.r[0] = constant(addr + static_cast<uint64_t>(s.offset));
    return true;
  }
  case SynOperand::Sink:
    if (!allowSink) {
      err = "'_' is not allowed here";
      return false;
    }
    out.kind = Operand::Sink;
    return true;
  case SynOperand::Vec: {
    if (!allowVec || s.elems.empty() || s.elems.size() > 4) {
      err = "a vector operand is not allowed here";
      return false;
    }
    out.kind = Operand::Vec;
    out.n = static_cast<uint8_t>(s.elems.size());
    for (size_t i = 0; i < s.elems.size(); ++i) {
      Operand e;
      if (!value(s.elems[i], t, e, err, false, true))
        return false;
      out.r[i] = e.kind == Operand::Sink ? -1 : e.r[0];
    }
    return true;
  }
  default:
    err = "unexpected operand";
    return false;
  }
}

bool Decoder::dest(const SynOperand &s, Operand &out, std::string &err,
                   bool allowVec) {
  if (s.kind == SynOperand::Reg ||
      (s.kind == SynOperand::Name && registerSlot(s.name) >= 0)) {
    int32_t r = registerSlot(s.name);
    if (r < 0) {
      err = "unknown register '" + s.name + "'" +
            (s.name[0] == '%' && s.name.find('.') != std::string::npos
                 ? " (special registers are read-only)"
                 : "");
      return false;
    }
    out = Operand();
    out.kind = Operand::Reg;
    out.r[0] = r;
    return true;
  }
  if (s.kind == SynOperand::Vec && allowVec) {
    for (const SynOperand &e : s.elems)
      if (e.kind != SynOperand::Reg && e.kind != SynOperand::Sink) {
        err = "a destination vector holds registers";
        return false;
      }
    return value(s, Ty::B32, out, err, true, true);
  }
  if (s.kind == SynOperand::Sink) {
    out = Operand();
    out.kind = Operand::Sink;
    return true;
  }
  err = "expected a destination register";
  return false;
}

bool Decoder::address(const SynOperand &s, Space sp, Operand &out,
                      std::string &err) {
  if (s.kind != SynOperand::Addr) {
    err = "expected an address [...]";
    return false;
  }
  if (!s.elems.empty()) {
    err = "coordinates {...} belong only in a tensor operand of cp.async.bulk.tensor";
    return false;
  }
  out = Operand();
  out.kind = Operand::Addr;
  out.off = s.offset;
  if (s.name.empty())
    return true;
  if (int32_t r = registerSlot(s.name); r >= 0) {
    out.base = r;
    out.addr32 = tyBits(registerType(s.name)) == 32;
    return true;
  }
  const std::map<std::string, uint64_t> *syms =
      sp == Space::Shared ? &sharedSyms_
      : sp == Space::Local ? &localSyms_
      : sp == Space::Param ? &paramSyms_
                           : nullptr;
  if (syms)
    if (auto it = syms->find(s.name); it != syms->end()) {
      out.off += static_cast<int64_t>(it->second);
      return true;
    }
  err = "unknown register or symbol '" + s.name + "' in an address";
  return false;
}

bool Decoder::declare(const SynKernel &sk, const std::vector<SynVar> &moduleVars,
                      std::string &err) {
  for (int i = 0; i < Kernel::NumSpecials; ++i)
    k_.specials[i] = -1;
  for (const SynReg &r : sk.regs) {
    if (r.count < 0) {
      regs_[r.name] = k_.numSlots++;
      regTypes_[r.name] = r.type;
    } else {
      for (int i = 0; i < r.count; ++i) {
        regs_[r.name + std::to_string(i)] = k_.numSlots++;
        regTypes_[r.name + std::to_string(i)] = r.type;
      }
    }
  }
  // Parameters: natural alignment unless .align says otherwise.
  uint32_t off = 0;
  for (const SynParam &p : sk.params) {
    uint32_t size = static_cast<uint32_t>(tyBits(p.type) / 8 * p.count);
    uint32_t align = p.align ? p.align : std::max(1, tyBits(p.type) / 8);
    off = alignUp(off, align);
    k_.params.push_back({p.name, off, size});
    paramSyms_[p.name] = off;
    off += size;
  }
  k_.paramBytes = off;
  // Shared and local variables; extern shared arrays start after the rest.
  uint32_t shared = 0, local = 0, dynAlign = 16;
  std::vector<const SynVar *> vars;
  for (const SynVar &v : moduleVars)
    vars.push_back(&v);
  for (const SynVar &v : sk.vars)
    vars.push_back(&v);
  std::vector<const SynVar *> externs;
  for (const SynVar *v : vars) {
    uint32_t elem = static_cast<uint32_t>(tyBits(v->type) / 8);
    uint32_t align = std::max<uint32_t>(v->align, elem);
    if (v->space == Space::Shared) {
      if (v->count < 0 || v->isExtern) {
        externs.push_back(v);
        dynAlign = std::max(dynAlign, align);
        continue;
      }
      shared = alignUp(shared, align);
      sharedSyms_[v->name] = shared;
      shared += static_cast<uint32_t>(elem * v->count);
    } else if (v->space == Space::Local) {
      if (v->count < 0) {
        err = "line " + std::to_string(v->line) + ": a .local array needs a size";
        return false;
      }
      local = alignUp(local, align);
      localSyms_[v->name] = local;
      local += static_cast<uint32_t>(elem * v->count);
    } else {
      err = "line " + std::to_string(v->line) +
            ": only .shared and .local variables are supported in a kernel";
      return false;
    }
  }
  k_.staticShared = shared;
  k_.dynamicSharedBase = alignUp(shared, dynAlign);
  for (const SynVar *v : externs)
    sharedSyms_[v->name] = k_.dynamicSharedBase;
  k_.localBytes = alignUp(local, 16);
  return true;
}

namespace {

void nop(Cta &, Warp &, const Instr &, uint32_t) {}

/// Control flow and synchronization that the scheduler itself carries out.
bool bindControl(Decoder &d, const SynInstr &s, Instr &in, std::string &err,
                 const std::map<std::string, int> &labels) {
  std::vector<std::string> p = splitOpcode(s.opcode);
  const std::string &op = p[0];
  if (op == "bra") {
    in.ctl = Ctl::Branch;
    in.aux = hasPart(p, "uni");
    if (s.ops.size() != 1 || s.ops[0].kind != SynOperand::Name) {
      err = "bra takes a label";
      return true;
    }
    auto it = labels.find(s.ops[0].name);
    if (it == labels.end()) {
      err = "unknown label '" + s.ops[0].name + "'";
      return true;
    }
    in.target = it->second;
    return true;
  }
  if (op == "ret" || op == "exit") {
    in.ctl = Ctl::Exit;
    return true;
  }
  if (op == "trap") {
    in.ctl = Ctl::Trap;
    return true;
  }
  bool arrive = (op == "bar" || op == "barrier") && hasPart(p, "arrive");
  // (bar.warp.sync is the warp's, decoded with the other warp operations.)
  if ((op == "bar" || op == "barrier") && !(p.size() >= 2 && p[1] == "warp") &&
      (hasPart(p, "sync") || arrive || p.size() == 1 ||
       (p.size() == 2 && p[1] == "aligned") || (p.size() == 2 && p[1] == "cta"))) {
    // bar.sync a{, b} / bar.arrive a, b: barrier a; b threads (default: the
    // whole CTA).
    in.ctl = arrive ? Ctl::BarArrive : Ctl::Barrier;
    if (arrive && s.ops.size() != 2) {
      err = "bar.arrive takes a barrier and a thread count";
      return true;
    }
    if (s.ops.empty() || s.ops.size() > 2) {
      err = "bar.sync takes a barrier and an optional thread count";
      return true;
    }
    if (s.ops[0].kind != SynOperand::Int) {
      // A register id (LLVM merges bar.sync 3 / bar.sync 4 on two paths
      // into one with a select): read per warp when it arrives.
      if (!d.value(s.ops[0], Ty::U32, in.op[0], err))
        return true;
      in.aux = kBarrierIdInRegister;
    } else {
      in.aux = static_cast<uint32_t>(s.ops[0].ival);
      if (in.aux > 15) {
        err = "barrier number out of range (0..15)";
        return true;
      }
    }
    // bar.sync is barrier.sync.aligned: every thread at the same instruction.
    if (op == "bar" || hasPart(p, "aligned"))
      in.aux |= kBarrierAligned;
    if (s.ops.size() == 2) {
      if (s.ops[1].kind != SynOperand::Int) {
        err = "the emulator supports bar.sync with an immediate thread count";
        return true;
      }
      in.aux2 = static_cast<uint32_t>(s.ops[1].ival);
    }
    return true;
  }
  if (op == "membar" || (op == "fence" && s.opcode.rfind("fence.proxy", 0) != 0)) {
    in.fn = nop; // accesses are sequentially consistent here
    return true;
  }
  (void)d;
  return false;
}

std::vector<std::string> lines(const std::string &text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string l;
  while (std::getline(ss, l)) {
    size_t a = l.find_first_not_of(" \t");
    out.push_back(a == std::string::npos ? "" : l.substr(a));
  }
  return out;
}

} // namespace

int loadModuleCode(const std::string &ptx, int cc, std::unique_ptr<Module> &out,
                   std::string &log) {
  SynModule sm;
  std::string err;
  if (!parsePtx(ptx, sm, err)) {
    log = "emucuda: " + err;
    return 218; // CUDA_ERROR_INVALID_PTX
  }
  if (sm.target == 0) {
    log = "emucuda: the module has no .target";
    return 218;
  }
  if (sm.target > cc || (sm.archSpecific && sm.target != cc)) {
    log = "emucuda: the module targets sm_" + std::to_string(sm.target) +
          (sm.archSpecific ? "a (that compute capability only)" : "") +
          " but the device is sm_" + std::to_string(cc);
    return 209; // CUDA_ERROR_NO_BINARY_FOR_GPU
  }
  std::vector<std::string> src = lines(ptx);
  auto m = std::make_unique<Module>();
  m->target = sm.target;
  m->archSpecific = sm.archSpecific;
  for (const SynKernel &sk : sm.kernels) {
    auto k = std::make_unique<Kernel>();
    k->name = sk.name;
    k->line = sk.line;
    if (sk.reqntid[0])
      for (int i = 0; i < 3; ++i)
        k->reqntid[i] = sk.reqntid[i];
    if (sk.maxntid[0])
      k->maxThreads = sk.maxntid[0] * sk.maxntid[1] * sk.maxntid[2];
    if (sk.reqntid[0])
      k->maxThreads = sk.reqntid[0] * sk.reqntid[1] * sk.reqntid[2];
    k->maxnreg = sk.maxnreg;
    Decoder d(*k, sm.target, sm.archSpecific);
    if (!d.declare(sk, sm.vars, err)) {
      log = "emucuda: " + err;
      return 218;
    }
    if (k->staticShared > 48 * 1024) {
      log = "emucuda: line " + std::to_string(sk.line) + ": kernel '" + sk.name +
            "' uses " + std::to_string(k->staticShared) +
            " bytes of static shared memory (at most 49152)";
      return 218;
    }
    std::map<std::string, int> labels;
    int pc = 0;
    for (const SynStmt &st : sk.body) {
      if (!st.label.empty())
        labels[st.label] = pc;
      else
        ++pc;
    }
    for (const SynStmt &st : sk.body) {
      if (!st.label.empty())
        continue;
      const SynInstr &s = st.instr;
      Instr in;
      in.line = s.line;
      std::string e;
      if (!s.guard.empty()) {
        in.guard = d.registerSlot(s.guard);
        in.guardNeg = s.guardNeg;
        if (in.guard < 0)
          e = "unknown predicate '" + s.guard + "'";
      }
      bool taken =
          e.empty() &&
          (bindControl(d, s, in, e, labels) || bindAlu(d, s, in, e) ||
           bindConvert(d, s, in, e) || bindAsync(d, s, in, e) ||
           bindGridDependency(d, s, in, e) || bindMemory(d, s, in, e) ||
           bindWarp(d, s, in, e) || bindWarpgroup(d, s, in, e));
      if (e.empty() && !taken)
        e = "instruction '" + s.opcode + "' is not supported by the emulator";
      if (e.empty() && in.ctl == Ctl::Plain && !in.fn)
        e = "internal: no handler for '" + s.opcode + "'";
      if (!e.empty()) {
        log = "emucuda: line " + std::to_string(s.line) + ": " + e + "\n  " +
              (s.line - 1 < static_cast<int>(src.size()) ? src[s.line - 1] : "");
        return 218;
      }
      k->code.push_back(in);
      k->text.push_back(s.line - 1 < static_cast<int>(src.size()) ? src[s.line - 1]
                                                                  : s.opcode);
    }
    // A kernel that falls off its end exits.
    Instr ret;
    ret.ctl = Ctl::Exit;
    ret.line = sk.line;
    k->code.push_back(ret);
    k->text.push_back("(end of " + sk.name + ")");
    // setmaxnreg moves registers between warpgroups from the launch's
    // count, which the kernel must fix (PTX ISA: setmaxnreg needs .maxnreg).
    if (k->setsMaxNReg && !k->maxnreg) {
      log = "emucuda: line " + std::to_string(sk.line) + ": kernel '" + sk.name +
            "' uses setmaxnreg without .maxnreg (the launch's register count)";
      return 218;
    }
    m->kernels.push_back(std::move(k));
  }
  out = std::move(m);
  return 0;
}

bool loadModule(const std::string &ptx, int cc, std::unique_ptr<Module> &out,
                std::string &log) {
  return loadModuleCode(ptx, cc, out, log) == 0;
}

} // namespace attnc::emu
