//===- ExecWarp.cpp - Warp-collective instructions -----------------------===//
//
// shfl.sync, vote.sync, redux.sync (integer), bar.warp.sync, activemask,
// ldmatrix and mma.sync.
// The scheduler calls these handlers once every lane of the member mask has
// arrived (Ctl::Collective), with `mask` the lanes taking part. mma.sync
// multiplies the exact f16/bf16 values and sums each dot product exactly
// (in double) before one rounding to f32 with the accumulator.
//
//===----------------------------------------------------------------------===//
#include "Decode.h"
#include "MemoryAccess.h"
#include "Values.h"

#include <algorithm>
#include <vector>

namespace attnc::emu {

namespace {

enum ShflMode : uint32_t { Up, Down, Bfly, Idx };

/// shfl.sync.mode.b32 d[|p], a, b, c, membermask: op[0] d, op[1] p or
/// Sink, op[2] a, op[3] b, op[4] c.
void shfl(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  uint32_t src[32];
  int32_t a = in.op[2].r[0], b = in.op[3].r[0], cc = in.op[4].r[0];
  for (int l = 0; l < 32; ++l)
    src[l] = (m >> l) & 1 ? get<uint32_t>(w, a, l) : 0;
  int32_t d = in.op[0].r[0], p = in.op[1].kind == Operand::Reg ? in.op[1].r[0] : -1;
  uint32_t dv[32];
  bool pv[32];
  forLanes(m, [&](int l) {
    uint32_t bval = get<uint32_t>(w, b, l) & 31, cv = get<uint32_t>(w, cc, l);
    int clamp = int(cv & 31), seg = int((cv >> 8) & 31);
    int maxLane = (l & seg) | (clamp & ~seg), minLane = l & seg;
    int j = l;
    bool ok = false;
    switch (in.aux) {
    case Up: j = l - int(bval); ok = j >= maxLane; break;
    case Down: j = l + int(bval); ok = j <= maxLane; break;
    case Bfly: j = l ^ int(bval); ok = j <= maxLane; break;
    case Idx: j = minLane | (int(bval) & ~seg); ok = j <= maxLane; break;
    }
    if (!ok)
      j = l;
    if (!((m >> j) & 1))
      c.fault(w, in, l, kErrLaunchFailed,
              "shfl.sync reads lane " + std::to_string(j) +
                  ", which does not take part in it (undefined value)");
    dv[l] = src[j];
    pv[l] = ok;
  });
  forLanes(m, [&](int l) {
    put<uint32_t>(w, d, l, dv[l]);
    if (p >= 0)
      slot(w, p, l) = pv[l];
  });
}

enum VoteMode : uint32_t { VAll, VAny, VUni, VBallot };
/// vote.sync.mode d, {!}a, membermask: aux = mode, aux2 = 1 when negated.
void vote(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  uint32_t ballot = 0;
  forLanes(m, [&](int l) {
    bool v = (slot(w, a, l) != 0) != (in.aux2 == 1);
    ballot |= uint32_t(v) << l;
  });
  forLanes(m, [&](int l) {
    switch (in.aux) {
    case VAll: slot(w, d, l) = ballot == m; break;
    case VAny: slot(w, d, l) = ballot != 0; break;
    case VUni: slot(w, d, l) = ballot == 0 || ballot == m; break;
    default: put<uint32_t>(w, d, l, ballot); break;
    }
  });
}

enum ReduxKind : uint32_t { RAdd, RMin, RMax, RAnd, ROr, RXor };
/// redux.sync.op.type d, a, membermask (b32/u32/s32): aux = op, aux2 = 1
/// when signed (min and max compare as s32); every lane of the mask gets
/// the reduction over them all.
void redux(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  bool first = true;
  uint32_t acc = 0;
  forLanes(m, [&](int l) {
    uint32_t x = get<uint32_t>(w, a, l);
    if (first) {
      acc = x;
      first = false;
      return;
    }
    switch (in.aux) {
    case RAdd:
      acc += x;
      break;
    case RMin:
      acc = in.aux2 ? uint32_t(std::min(int32_t(acc), int32_t(x)))
                    : std::min(acc, x);
      break;
    case RMax:
      acc = in.aux2 ? uint32_t(std::max(int32_t(acc), int32_t(x)))
                    : std::max(acc, x);
      break;
    case RAnd:
      acc &= x;
      break;
    case ROr:
      acc |= x;
      break;
    default:
      acc ^= x;
      break;
    }
  });
  forLanes(m, [&](int l) { put<uint32_t>(w, d, l, acc); });
}

void warpSync(Cta &, Warp &, const Instr &, uint32_t) {}

void activemask(Cta &, Warp &w, const Instr &in, uint32_t m) {
  forLanes(m, [&](int l) { put<uint32_t>(w, in.op[0].r[0], l, m); });
}

/// ldmatrix.sync.aligned.m8n8.xN{.trans}.shared.b16 d, [a]: aux = N,
/// aux2 = 1 for .trans.
void ldmatrix(Cta &c, Warp &w, const Instr &in, uint32_t) {
  uint16_t mat[4][8][8];
  uint32_t num = in.aux;
  for (uint32_t i = 0; i < num; ++i)
    for (int r = 0; r < 8; ++r) {
      int provider = int(i) * 8 + r;
      uint64_t addr = address(w, in.op[1], provider);
      std::memcpy(mat[i][r], sharedLoad<16>(c, w, in, provider, addr, mat[i][r]), 16);
    }
  const Operand &d = in.op[0];
  for (int l = 0; l < 32; ++l) {
    int row = l / 4, col = 2 * (l % 4);
    for (uint32_t i = 0; i < num; ++i) {
      uint16_t lo, hi;
      if (in.aux2) {
        lo = mat[i][col][row];
        hi = mat[i][col + 1][row];
      } else {
        lo = mat[i][row][col];
        hi = mat[i][row][col + 1];
      }
      put<uint32_t>(w, d.r[i], l, uint32_t(lo) | (uint32_t(hi) << 16));
    }
  }
}

/// Every f16 bit pattern as a float (exact), built once.
const float *f16Table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h)
      t[h] = f16ToFloat(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

/// mma.sync.aligned.m16n8kK.row.col.D.A.B.C d, a, b, c: aux = K (8 or 16),
/// aux2 bit 0: A/B are bf16; bit 1: C/D are f16 (else f32). The products
/// of two halves are exact in double; they and C are summed in double and
/// rounded once to f32.
template <int K, bool Bf, bool HalfAcc>
void mmaT(Cta &, Warp &w, const Instr &in, uint32_t) {
  constexpr bool halfAcc = HalfAcc;
  const float *f16 = f16Table();
  auto half = [&](uint32_t h) {
    return Bf ? double(bf16ToFloat(uint16_t(h))) : double(f16[h & 0xffff]);
  };
  double A[16][16], Bt[8][16]; // Bt[n][k]
  double C[16][8];
  const Operand &od = in.op[0], &oa = in.op[1], &ob = in.op[2], &oc = in.op[3];
  for (int l = 0; l < 32; ++l) {
    int g = l >> 2, t = l & 3;
    // A: row-major 16 x K; registers hold (lo, hi) pairs of adjacent columns.
    for (int reg = 0; reg < oa.n; ++reg) {
      uint32_t v = get<uint32_t>(w, oa.r[reg], l);
      int row = g + 8 * (reg & 1), col = 2 * t + 8 * (reg >> 1);
      A[row][col] = half(v);
      A[row][col + 1] = half(v >> 16);
    }
    // B: K x 8, column-major; pairs of adjacent k.
    for (int reg = 0; reg < ob.n; ++reg) {
      uint32_t v = get<uint32_t>(w, ob.r[reg], l);
      int k = 2 * t + 8 * reg;
      Bt[g][k] = half(v);
      Bt[g][k + 1] = half(v >> 16);
    }
    if (halfAcc) {
      for (int reg = 0; reg < 2; ++reg) {
        uint32_t v = get<uint32_t>(w, oc.r[reg], l);
        C[g + 8 * reg][2 * t] = f16[v & 0xffff];
        C[g + 8 * reg][2 * t + 1] = f16[v >> 16];
      }
    } else {
      for (int reg = 0; reg < 4; ++reg)
        C[g + 8 * (reg >> 1)][2 * t + (reg & 1)] = get<float>(w, oc.r[reg], l);
    }
  }
  float D[16][8];
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double s = 0;
      for (int k = 0; k < K; ++k)
        s += A[i][k] * Bt[j][k];
      D[i][j] = canon(static_cast<float>(C[i][j] + s));
    }
  for (int l = 0; l < 32; ++l) {
    int g = l >> 2, t = l & 3;
    if (halfAcc) {
      for (int reg = 0; reg < 2; ++reg)
        put<uint32_t>(w, od.r[reg], l,
                      uint32_t(floatToF16(D[g + 8 * reg][2 * t])) |
                          (uint32_t(floatToF16(D[g + 8 * reg][2 * t + 1])) << 16));
    } else {
      for (int reg = 0; reg < 4; ++reg)
        put<float>(w, od.r[reg], l, D[g + 8 * (reg >> 1)][2 * t + (reg & 1)]);
    }
  }
}

Handler mmaFor(int k, bool bf, bool halfAcc) {
  if (k == 16)
    return bf ? mmaT<16, true, false> : halfAcc ? mmaT<16, false, true> : mmaT<16, false, false>;
  return bf ? mmaT<8, true, false> : halfAcc ? mmaT<8, false, true> : mmaT<8, false, false>;
}

bool vectorOf(Decoder &d, const SynOperand &s, size_t n, bool isDest, Operand &out,
              std::string &err, const char *what) {
  if (s.kind != SynOperand::Vec || s.elems.size() != n) {
    err = std::string(what) + " must be a vector of " + std::to_string(n) + " registers";
    return false;
  }
  for (const SynOperand &e : s.elems)
    if (e.kind != SynOperand::Reg) {
      err = std::string(what) + " must hold registers";
      return false;
    }
  return isDest ? d.dest(s, out, err, true) : d.value(s, Ty::B32, out, err, true);
}

} // namespace

bool bindWarp(Decoder &d, const SynInstr &s, Instr &in, std::string &err) {
  std::vector<std::string> p = splitOpcode(s.opcode);
  const std::string &op = p[0];
  if (op == "shfl") {
    if (!hasPart(p, "sync")) {
      err = "shfl without .sync is not supported (sm_70+ needs shfl.sync)";
      return true;
    }
    static const char *modes[] = {"up", "down", "bfly", "idx"};
    in.aux = 99;
    for (uint32_t i = 0; i < 4; ++i)
      if (hasPart(p, modes[i]))
        in.aux = i;
    if (in.aux == 99 || lastType(p) != Ty::B32 || s.ops.size() != 5) {
      err = "expected shfl.sync.{up,down,bfly,idx}.b32 d[|p], a, b, c, membermask";
      return true;
    }
    in.ctl = Ctl::Collective;
    const SynOperand &dst = s.ops[0];
    if (dst.kind == SynOperand::Pair) {
      if (!d.dest(dst.elems[0], in.op[0], err) || !d.dest(dst.elems[1], in.op[1], err))
        return true;
    } else {
      if (!d.dest(dst, in.op[0], err))
        return true;
      in.op[1].kind = Operand::Sink;
    }
    Operand mm;
    if (!d.value(s.ops[1], Ty::B32, in.op[2], err) || !d.value(s.ops[2], Ty::B32, in.op[3], err) ||
        !d.value(s.ops[3], Ty::B32, in.op[4], err) || !d.value(s.ops[4], Ty::B32, mm, err))
      return true;
    in.membermask = mm.r[0];
    in.fn = shfl;
    return true;
  }
  if (op == "vote") {
    static const char *modes[] = {"all", "any", "uni", "ballot"};
    in.aux = 99;
    for (uint32_t i = 0; i < 4; ++i)
      if (hasPart(p, modes[i]))
        in.aux = i;
    if (in.aux == 99 || !hasPart(p, "sync") || s.ops.size() != 3) {
      err = "expected vote.sync.{all,any,uni,ballot} d, {!}a, membermask";
      return true;
    }
    in.ctl = Ctl::Collective;
    SynOperand a = s.ops[1];
    if (a.kind == SynOperand::NotReg) {
      a.kind = SynOperand::Reg;
      in.aux2 = 1;
    }
    Operand mm;
    if (!d.dest(s.ops[0], in.op[0], err) || !d.value(a, Ty::Pred, in.op[1], err) ||
        !d.value(s.ops[2], Ty::B32, mm, err))
      return true;
    in.membermask = mm.r[0];
    in.fn = vote;
    return true;
  }
  if (op == "redux" && !hasPart(p, "f32")) {
    static const char *kinds[] = {"add", "min", "max", "and", "or", "xor"};
    in.aux = 99;
    for (uint32_t i = 0; i < 6; ++i)
      if (hasPart(p, kinds[i]))
        in.aux = i;
    bool typed = hasPart(p, "u32") || hasPart(p, "s32") || hasPart(p, "b32");
    if (in.aux == 99 || !hasPart(p, "sync") || !typed || s.ops.size() != 3) {
      err = "expected redux.sync.{add,min,max,and,or,xor}.{u32,s32,b32} d, a, "
            "membermask";
      return true;
    }
    in.aux2 = hasPart(p, "s32") ? 1 : 0;
    in.ctl = Ctl::Collective;
    Operand mm;
    if (!d.dest(s.ops[0], in.op[0], err) ||
        !d.value(s.ops[1], Ty::B32, in.op[1], err) ||
        !d.value(s.ops[2], Ty::B32, mm, err))
      return true;
    in.membermask = mm.r[0];
    in.fn = redux;
    return true;
  }
  if (op == "bar" && p.size() >= 2 && p[1] == "warp") {
    Operand mm;
    if (s.ops.size() != 1 || !d.value(s.ops[0], Ty::B32, mm, err)) {
      if (err.empty())
        err = "bar.warp.sync takes a member mask";
      return true;
    }
    in.ctl = Ctl::Collective;
    in.membermask = mm.r[0];
    in.fn = warpSync;
    return true;
  }
  if (op == "activemask") {
    if (s.ops.size() != 1 || !d.dest(s.ops[0], in.op[0], err)) {
      if (err.empty())
        err = "activemask takes a destination";
      return true;
    }
    in.fn = activemask;
    return true;
  }
  if (op == "ldmatrix") {
    in.aux = hasPart(p, "x4") ? 4 : hasPart(p, "x2") ? 2 : hasPart(p, "x1") ? 1 : 0;
    in.aux2 = hasPart(p, "trans");
    bool shared = hasPart(p, "shared") || hasPart(p, "shared::cta");
    if (!in.aux || !hasPart(p, "m8n8") || lastType(p) != Ty::B16 || !shared ||
        !hasPart(p, "sync") || !hasPart(p, "aligned") || s.ops.size() != 2) {
      err = "expected ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 d, [a]";
      return true;
    }
    if (d.target() < 75) {
      err = "ldmatrix needs sm_75 or newer";
      return true;
    }
    in.ctl = Ctl::Collective;
    if (!vectorOf(d, s.ops[0], in.aux, true, in.op[0], err, "ldmatrix's destination") ||
        !d.address(s.ops[1], Space::Shared, in.op[1], err))
      return true;
    in.fn = ldmatrix;
    return true;
  }
  if (op == "mma") {
    bool k16 = hasPart(p, "m16n8k16"), k8 = hasPart(p, "m16n8k8");
    std::vector<Ty> types;
    for (size_t i = 1; i < p.size(); ++i)
      if (Ty t = parseTy(p[i]); t != Ty::None)
        types.push_back(t);
    if (!(k16 || k8) || !hasPart(p, "row") || !hasPart(p, "col") || types.size() != 4 ||
        !hasPart(p, "sync") || !hasPart(p, "aligned")) {
      err = "only mma.sync.aligned.m16n8k{8,16}.row.col with f16/bf16 inputs is supported by the emulator";
      return true;
    }
    Ty dt = types[0], at = types[1], bt = types[2], ct = types[3];
    bool okAB = at == bt && (at == Ty::F16 || at == Ty::BF16);
    bool okCD = dt == ct && (dt == Ty::F32 || (dt == Ty::F16 && at == Ty::F16));
    if (!okAB || !okCD) {
      err = "mma types ." + std::string(tyName(dt)) + "." + tyName(at) + "." + tyName(bt) + "." +
            tyName(ct) + " are not supported by the emulator";
      return true;
    }
    if (d.target() < 80 && (k16 || at == Ty::BF16)) {
      err = "this mma shape needs sm_80 or newer";
      return true;
    }
    in.ctl = Ctl::Collective;
    in.aux = k16 ? 16 : 8;
    in.aux2 = (at == Ty::BF16 ? 1 : 0) | (dt == Ty::F16 ? 2 : 0);
    size_t na = k16 ? 4 : 2, nb = k16 ? 2 : 1, nc = dt == Ty::F16 ? 2 : 4;
    if (s.ops.size() != 4 || !vectorOf(d, s.ops[0], nc, true, in.op[0], err, "mma's D") ||
        !vectorOf(d, s.ops[1], na, false, in.op[1], err, "mma's A") ||
        !vectorOf(d, s.ops[2], nb, false, in.op[2], err, "mma's B") ||
        !vectorOf(d, s.ops[3], nc, false, in.op[3], err, "mma's C")) {
      if (err.empty())
        err = "mma takes d, a, b, c";
      return true;
    }
    in.fn = mmaFor(int(in.aux), in.aux2 & 1, in.aux2 & 2);
    return true;
  }
  return false;
}

} // namespace attnc::emu
