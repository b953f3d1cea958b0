//===- ExecConvert.cpp - cvt: integers, floats, halves, packed halves ----===//
//
// Integer <-> integer conversions truncate or extend (saturating with .sat);
// integer -> float rounds to nearest; float -> integer rounds as .rni/.rzi/
// .rmi/.rpi say and saturates (NaN -> 0), as PTX specifies; f32 -> f16/bf16
// rounds to nearest even; .f16x2/.bf16x2 pack `a` in the upper half.
//
//===----------------------------------------------------------------------===//
#include "Decode.h"
#include "Values.h"

#include <algorithm>
#include <cfenv>
#include <cmath>
#include <limits>

namespace attnc::emu {

namespace {

enum Round : uint32_t { RNone, RN, RZ, RM, RP, RNI, RZI, RMI, RPI };

bool isInt(Ty t) { return t >= Ty::B8 && t <= Ty::S64; }

/// The source as a signed or unsigned 64-bit integer (by its type).
inline int64_t readInt(const Warp &w, int32_t s, int l, Ty t) {
  uint64_t v = slot(w, s, l);
  int bits = tyBits(t);
  if (bits < 64)
    v &= (uint64_t(1) << bits) - 1;
  if (tySigned(t) && bits < 64 && (v >> (bits - 1)) & 1)
    v |= ~uint64_t(0) << bits;
  return static_cast<int64_t>(v);
}

inline double readFloat(const Warp &w, int32_t s, int l, Ty t, bool ftz) {
  switch (t) {
  case Ty::F16: return f16ToFloat(get<uint16_t>(w, s, l));
  case Ty::BF16: return bf16ToFloat(get<uint16_t>(w, s, l));
  case Ty::F32: {
    float f = get<float>(w, s, l);
    return ftz ? flushF(f) : f;
  }
  default: return get<double>(w, s, l);
  }
}

inline void writeFloat(Warp &w, int32_t d, int l, Ty t, double v, bool ftz, bool sat) {
  if (sat)
    v = saturate(v);
  switch (t) {
  case Ty::F16: put<uint16_t>(w, d, l, floatToF16(static_cast<float>(v))); break;
  case Ty::BF16: put<uint16_t>(w, d, l, floatToBf16(static_cast<float>(v))); break;
  case Ty::F32: {
    float f = static_cast<float>(v);
    put<float>(w, d, l, canon(ftz ? flushF(f) : f));
    break;
  }
  default: put<double>(w, d, l, canon(v)); break;
  }
}

inline double roundInt(double v, uint32_t r) {
  switch (r) {
  case RZI: case RZ: return std::trunc(v);
  case RMI: case RM: return std::floor(v);
  case RPI: case RP: return std::ceil(v);
  default: return std::nearbyint(v); // ties to even in the default mode
  }
}

/// Saturating float -> integer of type t, as PTX's cvt does.
inline uint64_t floatToInt(double v, Ty t) {
  int bits = tyBits(t);
  if (v != v)
    return 0;
  if (tySigned(t)) {
    double lo = -std::ldexp(1.0, bits - 1), hi = std::ldexp(1.0, bits - 1);
    int64_t r = v <= lo ? static_cast<int64_t>(-(uint64_t(1) << (bits - 1)))
                : v >= hi ? static_cast<int64_t>((uint64_t(1) << (bits - 1)) - 1)
                          : static_cast<int64_t>(v);
    return bits == 64 ? static_cast<uint64_t>(r) : static_cast<uint64_t>(r) & ((uint64_t(1) << bits) - 1);
  }
  double hi = std::ldexp(1.0, bits);
  if (v <= 0)
    return 0;
  if (v >= hi)
    return bits == 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1;
  return static_cast<uint64_t>(v);
}

/// The general conversion: aux = rounding, aux2 = flags (ftz, sat).
void cvtGeneral(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  Ty dt = in.t, st = in.t2;
  bool ftz = in.aux2 & kFtz, sat = in.aux2 & kSat;
  int dbits = tyBits(dt);
  forLanes(m, [&](int l) {
    if (isInt(st) && isInt(dt)) {
      int64_t v = readInt(w, a, l, st);
      uint64_t r;
      if (sat) {
        // Clamp the (signed or unsigned) source value into the destination range.
        bool srcNeg = tySigned(st) && v < 0;
        if (tySigned(dt)) {
          int64_t lo = dbits == 64 ? INT64_MIN : -(int64_t(1) << (dbits - 1));
          int64_t hi = dbits == 64 ? INT64_MAX : (int64_t(1) << (dbits - 1)) - 1;
          if (!tySigned(st) && static_cast<uint64_t>(v) > static_cast<uint64_t>(hi))
            r = static_cast<uint64_t>(hi);
          else
            r = static_cast<uint64_t>(std::clamp(v, lo, hi));
        } else {
          uint64_t hi = dbits == 64 ? ~uint64_t(0) : (uint64_t(1) << dbits) - 1;
          r = srcNeg ? 0 : std::min<uint64_t>(static_cast<uint64_t>(v), hi);
        }
      } else {
        r = static_cast<uint64_t>(v);
      }
      slot(w, d, l) = dbits == 64 ? r : r & ((uint64_t(1) << dbits) - 1);
    } else if (isInt(st)) {
      int64_t v = readInt(w, a, l, st);
      double x;
      if (dt == Ty::F32) {
        float f = tySigned(st) ? static_cast<float>(v) : static_cast<float>(static_cast<uint64_t>(v));
        x = f;
      } else {
        x = tySigned(st) ? static_cast<double>(v) : static_cast<double>(static_cast<uint64_t>(v));
      }
      writeFloat(w, d, l, dt, x, ftz, sat);
    } else if (isInt(dt)) {
      double v = roundInt(readFloat(w, a, l, st, ftz), in.aux);
      slot(w, d, l) = floatToInt(v, dt);
    } else {
      double v = readFloat(w, a, l, st, ftz);
      if (in.aux >= RNI)
        v = roundInt(v, in.aux);
      writeFloat(w, d, l, dt, v, ftz, sat);
    }
  });
}

// Fast forms of the frequent conversions.
template <class D, class S> void cvtInt(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) { put<D>(w, d, l, static_cast<D>(get<S>(w, a, l))); });
}
void cvtS32F32(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) { put<float>(w, d, l, static_cast<float>(get<int32_t>(w, a, l))); });
}
template <bool Bf> void cvtToHalf(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) {
    float f = get<float>(w, a, l);
    put<uint16_t>(w, d, l, Bf ? floatToBf16(f) : floatToF16(f));
  });
}
template <bool Bf> void cvtToHalf2(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0];
  forLanes(m, [&](int l) {
    float hi = get<float>(w, a, l), lo = get<float>(w, b, l);
    uint32_t r = Bf ? (uint32_t(floatToBf16(hi)) << 16) | floatToBf16(lo)
                    : (uint32_t(floatToF16(hi)) << 16) | floatToF16(lo);
    put<uint32_t>(w, d, l, r);
  });
}

Handler fastIntCvt(Ty dt, Ty st) {
  auto u = [](Ty t) {
    return t == Ty::U16 ? 16 : t == Ty::U32 ? 32 : t == Ty::U64 ? 64 : 0;
  };
  if (dt == Ty::U32 && st == Ty::U64) return cvtInt<uint32_t, uint64_t>;
  if (dt == Ty::U64 && st == Ty::U32) return cvtInt<uint64_t, uint32_t>;
  if (dt == Ty::S64 && st == Ty::S32) return cvtInt<int64_t, int32_t>;
  if (dt == Ty::U32 && st == Ty::U16) return cvtInt<uint32_t, uint16_t>;
  if (dt == Ty::U64 && st == Ty::U16) return cvtInt<uint64_t, uint16_t>;
  if (dt == Ty::U16 && st == Ty::U64) return cvtInt<uint16_t, uint64_t>;
  if (dt == Ty::U16 && st == Ty::U32) return cvtInt<uint16_t, uint32_t>;
  (void)u;
  return nullptr;
}

} // namespace

bool bindConvert(Decoder &d, const SynInstr &s, Instr &in, std::string &err) {
  std::vector<std::string> p = splitOpcode(s.opcode);
  if (p[0] != "cvt")
    return false;
  std::vector<Ty> types;
  for (size_t i = 1; i < p.size(); ++i)
    if (Ty t = parseTy(p[i]); t != Ty::None)
      types.push_back(t);
  if (types.size() != 2) {
    err = "cvt needs a destination and a source type";
    return true;
  }
  Ty dt = types[0], st = types[1];
  in.t = dt;
  in.t2 = st;
  for (size_t i = 1; i < p.size(); ++i) {
    const std::string &m = p[i];
    if (m == "rn") in.aux = RN;
    else if (m == "rz") in.aux = RZ;
    else if (m == "rm") in.aux = RM;
    else if (m == "rp") in.aux = RP;
    else if (m == "rni") in.aux = RNI;
    else if (m == "rzi") in.aux = RZI;
    else if (m == "rmi") in.aux = RMI;
    else if (m == "rpi") in.aux = RPI;
    else if (m == "ftz") in.aux2 |= kFtz;
    else if (m == "sat") in.aux2 |= kSat;
    else if (parseTy(m) == Ty::None) {
      err = "cvt modifier ." + m + " is not supported by the emulator";
      return true;
    }
  }
  bool floatDst = tyFloat(dt), floatSrc = tyFloat(st);
  // Float results other than exact widenings must round to nearest here.
  if (floatDst && (in.aux == RZ || in.aux == RM || in.aux == RP)) {
    err = "cvt rounding ." + std::string(in.aux == RZ ? "rz" : in.aux == RM ? "rm" : "rp") +
          " to a float is not supported by the emulator (only .rn)";
    return true;
  }
  if (dt == Ty::F16x2 || dt == Ty::BF16x2) {
    if (st != Ty::F32 || s.ops.size() != 3 || in.aux != RN || in.aux2) {
      err = "only cvt.rn.f16x2.f32 / cvt.rn.bf16x2.f32 d, a, b are supported";
      return true;
    }
    if (!d.dest(s.ops[0], in.op[0], err) || !d.value(s.ops[1], st, in.op[1], err) ||
        !d.value(s.ops[2], st, in.op[2], err))
      return true;
    in.fn = dt == Ty::BF16x2 ? cvtToHalf2<true> : cvtToHalf2<false>;
    return true;
  }
  if (st == Ty::F16x2 || st == Ty::BF16x2 || st == Ty::Pred || dt == Ty::Pred) {
    err = "cvt." + std::string(tyName(dt)) + "." + tyName(st) + " is not supported by the emulator";
    return true;
  }
  if (s.ops.size() != 2) {
    err = "cvt takes 2 operands";
    return true;
  }
  if (!d.dest(s.ops[0], in.op[0], err) || !d.value(s.ops[1], st, in.op[1], err))
    return true;
  in.nops = 2;
  if (floatSrc && !floatDst && in.aux != RNI && in.aux != RZI && in.aux != RMI && in.aux != RPI) {
    err = "cvt from a float to an integer needs .rni, .rzi, .rmi or .rpi";
    return true;
  }
  if (!floatSrc && floatDst && in.aux == RNone) {
    err = "cvt from an integer to a float needs a rounding modifier";
    return true;
  }
  in.fn = cvtGeneral;
  if (!in.aux2) {
    if (!floatSrc && !floatDst)
      if (Handler h = fastIntCvt(dt, st))
        in.fn = h;
    if (st == Ty::S32 && dt == Ty::F32 && in.aux == RN)
      in.fn = cvtS32F32;
    if (st == Ty::F32 && dt == Ty::BF16 && in.aux == RN)
      in.fn = cvtToHalf<true>;
    if (st == Ty::F32 && dt == Ty::F16 && in.aux == RN)
      in.fn = cvtToHalf<false>;
  }
  return true;
}

} // namespace attnc::emu
