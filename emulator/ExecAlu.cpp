//===- ExecAlu.cpp - Integer, floating-point, logic, compare and move ----===//
//
// add sub mul mad fma div rem abs neg min max and or xor not cnot shl shr
// shf bfe bfi popc clz brev prmt selp setp testp copysign rcp sqrt rsqrt
// ex2 lg2 sin cos tanh mov cvta. Integer arithmetic wraps; floating point
// is IEEE round-to-nearest (the only rounding mode accepted), with .ftz and
// .sat; approximate instructions compute the exact function.
//
//===----------------------------------------------------------------------===//
#include "Decode.h"
#include "Values.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

namespace attnc::emu {

namespace {

// ---- integer binary operations ----
struct Add { template <class T> static T f(T a, T b) { return T(Unsigned<T>(a) + Unsigned<T>(b)); } };
struct Sub { template <class T> static T f(T a, T b) { return T(Unsigned<T>(a) - Unsigned<T>(b)); } };
struct MulLo { template <class T> static T f(T a, T b) {
  using U = std::conditional_t<sizeof(T) < 4, uint32_t, Unsigned<T>>;
  return T(U(Unsigned<T>(a)) * U(Unsigned<T>(b))); } };
struct MulHi { template <class T> static T f(T a, T b) {
  if constexpr (sizeof(T) == 8) {
    using W = std::conditional_t<std::is_signed_v<T>, __int128, unsigned __int128>;
    return T(static_cast<unsigned __int128>(W(a) * W(b)) >> 64);
  } else {
    using W = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    return T(uint64_t(W(a) * W(b)) >> (8 * sizeof(T)));
  } } };
struct Min { template <class T> static T f(T a, T b) { return a < b ? a : b; } };
struct Max { template <class T> static T f(T a, T b) { return a > b ? a : b; } };
struct And { template <class T> static T f(T a, T b) { return a & b; } };
struct Or { template <class T> static T f(T a, T b) { return a | b; } };
struct Xor { template <class T> static T f(T a, T b) { return a ^ b; } };
struct Div { template <class T> static T f(T a, T b) {
  if (b == 0)
    return T(-1); // the hardware does not trap: all ones
  if constexpr (std::is_signed_v<T>)
    if (a == std::numeric_limits<T>::min() && b == T(-1))
      return a;
  return T(a / b); } };
struct Rem { template <class T> static T f(T a, T b) {
  if (b == 0)
    return a;
  if constexpr (std::is_signed_v<T>)
    if (b == T(-1))
      return 0;
  return T(a % b); } };
struct AddSat { template <class T> static T f(T a, T b) {
  int64_t r = int64_t(a) + int64_t(b);
  return T(std::clamp<int64_t>(r, INT32_MIN, INT32_MAX)); } };
struct SubSat { template <class T> static T f(T a, T b) {
  int64_t r = int64_t(a) - int64_t(b);
  return T(std::clamp<int64_t>(r, INT32_MIN, INT32_MAX)); } };

template <class T, class F> void intBin(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0];
  forLanes(m, [&](int l) { put<T>(w, d, l, F::template f<T>(get<T>(w, a, l), get<T>(w, b, l))); });
}

template <class F> Handler intBinFor(Ty t) {
  switch (t) {
  case Ty::S16: return intBin<int16_t, F>;
  case Ty::U16: case Ty::B16: return intBin<uint16_t, F>;
  case Ty::S32: return intBin<int32_t, F>;
  case Ty::U32: case Ty::B32: return intBin<uint32_t, F>;
  case Ty::S64: return intBin<int64_t, F>;
  case Ty::U64: case Ty::B64: return intBin<uint64_t, F>;
  case Ty::Pred: return intBin<uint8_t, F>;
  default: return nullptr;
  }
}

/// mul.wide / mad.wide: T sources, twice-as-wide result.
template <class T, bool Mad> void intWide(Cta &, Warp &w, const Instr &in, uint32_t m) {
  using W = std::conditional_t<sizeof(T) == 2, std::conditional_t<std::is_signed_v<T>, int32_t, uint32_t>,
                               std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>>;
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0], c = in.op[3].r[0];
  forLanes(m, [&](int l) {
    W r = W(Unsigned<W>(W(get<T>(w, a, l))) * Unsigned<W>(W(get<T>(w, b, l))));
    if constexpr (Mad)
      r = W(Unsigned<W>(r) + Unsigned<W>(get<W>(w, c, l)));
    put<W>(w, d, l, r);
  });
}

template <class T, class F> void intMad(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0], c = in.op[3].r[0];
  forLanes(m, [&](int l) {
    T r = F::template f<T>(get<T>(w, a, l), get<T>(w, b, l));
    put<T>(w, d, l, Add::f<T>(r, get<T>(w, c, l)));
  });
}

template <class F> Handler intMadFor(Ty t) {
  switch (t) {
  case Ty::S16: return intMad<int16_t, F>;
  case Ty::U16: return intMad<uint16_t, F>;
  case Ty::S32: return intMad<int32_t, F>;
  case Ty::U32: return intMad<uint32_t, F>;
  case Ty::S64: return intMad<int64_t, F>;
  case Ty::U64: return intMad<uint64_t, F>;
  default: return nullptr;
  }
}

// ---- integer unary ----
template <class T> void intAbs(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) { T x = get<T>(w, a, l); put<T>(w, d, l, x < 0 ? T(Unsigned<T>(0) - Unsigned<T>(x)) : x); });
}
template <class T> void intNeg(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) { put<T>(w, d, l, T(Unsigned<T>(0) - Unsigned<T>(get<T>(w, a, l)))); });
}
template <class T> void intNot(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) { put<T>(w, d, l, T(~get<T>(w, a, l))); });
}
void predNot(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) { slot(w, d, l) = slot(w, a, l) ? 0 : 1; });
}
template <class T> void intCnot(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) { put<T>(w, d, l, T(get<T>(w, a, l) == 0)); });
}
template <class T> void intPopc(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) { put<uint32_t>(w, d, l, uint32_t(__builtin_popcountll(uint64_t(get<T>(w, a, l))))); });
}
template <class T> void intClz(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) {
    uint64_t x = get<T>(w, a, l);
    put<uint32_t>(w, d, l, x ? uint32_t(__builtin_clzll(x) - (64 - 8 * sizeof(T))) : uint32_t(8 * sizeof(T)));
  });
}
template <class T> void intBrev(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) {
    T x = get<T>(w, a, l), r = 0;
    for (unsigned i = 0; i < 8 * sizeof(T); ++i)
      r = T(r | (((x >> i) & 1) << (8 * sizeof(T) - 1 - i)));
    put<T>(w, d, l, r);
  });
}

// ---- shifts ----
template <class T> void shl(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0];
  forLanes(m, [&](int l) {
    uint32_t n = get<uint32_t>(w, b, l);
    put<T>(w, d, l, n >= 8 * sizeof(T) ? T(0) : T(get<T>(w, a, l) << n));
  });
}
template <class T> void shr(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0];
  forLanes(m, [&](int l) {
    uint32_t n = std::min<uint32_t>(get<uint32_t>(w, b, l), 8 * sizeof(T) - 1 + !std::is_signed_v<T>);
    T x = get<T>(w, a, l);
    put<T>(w, d, l, n >= 8 * sizeof(T) ? T(0) : T(x >> n));
  });
}
template <bool Left, bool Clamp> void shf(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0], c = in.op[3].r[0];
  forLanes(m, [&](int l) {
    uint64_t v = (uint64_t(get<uint32_t>(w, b, l)) << 32) | get<uint32_t>(w, a, l);
    uint32_t n = get<uint32_t>(w, c, l);
    n = Clamp ? std::min<uint32_t>(n, 32) : (n & 31);
    put<uint32_t>(w, d, l, Left ? uint32_t((v << n) >> 32) : uint32_t(v >> n));
  });
}

// ---- bit fields ----
template <class T> void bfe(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0], c = in.op[3].r[0];
  constexpr int W = 8 * sizeof(T);
  forLanes(m, [&](int l) {
    using U = Unsigned<T>;
    U x = U(get<T>(w, a, l));
    int pos = int(get<uint32_t>(w, b, l) & 0xff), len = int(get<uint32_t>(w, c, l) & 0xff);
    U sbit = 0;
    if (std::is_signed_v<T> && len > 0)
      sbit = (x >> std::min(pos + len - 1, W - 1)) & 1;
    U r = 0;
    for (int i = 0; i < W; ++i) {
      U bit = (i < len && pos + i < W) ? U((x >> (pos + i)) & 1) : sbit;
      r = U(r | (bit << i));
    }
    put<T>(w, d, l, T(r));
  });
}
template <class T> void bfi(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0], c = in.op[3].r[0], e = in.op[4].r[0];
  constexpr int W = 8 * sizeof(T);
  forLanes(m, [&](int l) {
    T x = get<T>(w, a, l), r = get<T>(w, b, l);
    int pos = int(get<uint32_t>(w, c, l) & 0xff), len = int(get<uint32_t>(w, e, l) & 0xff);
    for (int i = 0; i < len && pos + i < W; ++i)
      r = T((r & ~(T(1) << (pos + i))) | (((x >> i) & 1) << (pos + i)));
    put<T>(w, d, l, r);
  });
}
void prmt(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0], c = in.op[3].r[0];
  forLanes(m, [&](int l) {
    uint64_t src = (uint64_t(get<uint32_t>(w, b, l)) << 32) | get<uint32_t>(w, a, l);
    uint32_t sel = get<uint32_t>(w, c, l), r = 0;
    for (int i = 0; i < 4; ++i) {
      uint32_t s = (sel >> (4 * i)) & 0xf;
      uint32_t byte = (src >> (8 * (s & 7))) & 0xff;
      if (s & 8) // replicate the sign bit
        byte = (byte & 0x80) ? 0xff : 0;
      r |= byte << (8 * i);
    }
    put<uint32_t>(w, d, l, r);
  });
}

// ---- floating point ----
struct FAdd { template <class T> static T f(T a, T b) { return a + b; } };
struct FSub { template <class T> static T f(T a, T b) { return a - b; } };
struct FMul { template <class T> static T f(T a, T b) { return a * b; } };
struct FDiv { template <class T> static T f(T a, T b) { return a / b; } };
struct FMin { template <class T> static T f(T a, T b) {
  if (a != a) return b;
  if (b != b) return a;
  if (a == 0 && b == 0) return std::signbit(a) ? a : b;
  return a < b ? a : b; } };
struct FMax { template <class T> static T f(T a, T b) {
  if (a != a) return b;
  if (b != b) return a;
  if (a == 0 && b == 0) return std::signbit(a) ? b : a;
  return a > b ? a : b; } };
struct FMinNaN { template <class T> static T f(T a, T b) {
  return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : FMin::f(a, b); } };
struct FMaxNaN { template <class T> static T f(T a, T b) {
  return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : FMax::f(a, b); } };
struct FCopysign { template <class T> static T f(T a, T b) { return std::copysign(b, a); } };

template <class T> inline T fin(T x, bool ftz) { return ftz ? flushF(x) : x; }

template <class T, class F, bool Ftz, bool Sat>
void fltBinT(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0];
  forLanes(m, [&](int l) {
    T r = F::template f<T>(fin(get<T>(w, a, l), Ftz), fin(get<T>(w, b, l), Ftz));
    r = fin(r, Ftz);
    if (Sat)
      r = saturate(r);
    put<T>(w, d, l, canon(r));
  });
}
/// The handler for the flags in aux (chosen once, at load).
template <class T, class F> void fltBin(Cta &c, Warp &w, const Instr &in, uint32_t m) {
  switch (in.aux & (kFtz | kSat)) {
  case 0: return fltBinT<T, F, false, false>(c, w, in, m);
  case kFtz: return fltBinT<T, F, true, false>(c, w, in, m);
  case kSat: return fltBinT<T, F, false, true>(c, w, in, m);
  default: return fltBinT<T, F, true, true>(c, w, in, m);
  }
}
template <class F> Handler fltBinFor(Ty t, uint32_t flags = 0) {
  flags &= kFtz | kSat;
  if (t == Ty::F32)
    return flags == 0 ? fltBinT<float, F, false, false> : fltBin<float, F>;
  return t == Ty::F64 ? fltBin<double, F> : nullptr;
}

template <class T> void fltFma(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0], c = in.op[3].r[0];
  bool ftz = in.aux & kFtz, sat = in.aux & kSat;
  forLanes(m, [&](int l) {
    T r = std::fma(fin(get<T>(w, a, l), ftz), fin(get<T>(w, b, l), ftz), fin(get<T>(w, c, l), ftz));
    r = fin(r, ftz);
    if (sat)
      r = saturate(r);
    put<T>(w, d, l, canon(r));
  });
}

struct FAbs { template <class T> static T f(T a) { return std::fabs(a); } };
struct FNeg { template <class T> static T f(T a) { return -a; } };
struct FRcp { template <class T> static T f(T a) { return T(1) / a; } };
struct FSqrt { template <class T> static T f(T a) { return std::sqrt(a); } };
struct FRsqrt { template <class T> static T f(T a) { return T(1) / std::sqrt(a); } };
struct FEx2 { template <class T> static T f(T a) { return std::exp2(a); } };
struct FLg2 { template <class T> static T f(T a) { return std::log2(a); } };
struct FSin { template <class T> static T f(T a) { return std::sin(a); } };
struct FCos { template <class T> static T f(T a) { return std::cos(a); } };
struct FTanh { template <class T> static T f(T a) { return std::tanh(a); } };

template <class T, class F, bool Canon = true>
void fltUn(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  bool ftz = in.aux & kFtz, sat = in.aux & kSat;
  forLanes(m, [&](int l) {
    T r = fin(F::template f<T>(fin(get<T>(w, a, l), ftz)), ftz);
    if (sat)
      r = saturate(r);
    put<T>(w, d, l, Canon ? canon(r) : r);
  });
}
template <class F, bool Canon = true> Handler fltUnFor(Ty t) {
  return t == Ty::F32 ? fltUn<float, F, Canon> : t == Ty::F64 ? fltUn<double, F, Canon> : nullptr;
}

// ---- compare and select ----
enum Cmp : uint32_t { Eq, Ne, Lt, Le, Gt, Ge, Equ, Neu, Ltu, Leu, Gtu, Geu, Num, Nan, Lo, Ls, Hi, Hs };
bool parseCmp(const std::string &s, uint32_t &c) {
  static const char *names[] = {"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu",
                                "leu", "gtu", "geu", "num", "nan", "lo", "ls", "hi", "hs"};
  for (uint32_t i = 0; i < sizeof names / sizeof *names; ++i)
    if (s == names[i]) {
      c = i;
      return true;
    }
  return false;
}
enum BoolOp : uint32_t { BNone, BAnd, BOr, BXor };

template <class T> inline bool compare(uint32_t c, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    bool un = a != a || b != b;
    switch (c) {
    case Eq: return !un && a == b;
    case Ne: return !un && a != b;
    case Lt: return !un && a < b;
    case Le: return !un && a <= b;
    case Gt: return !un && a > b;
    case Ge: return !un && a >= b;
    case Equ: return un || a == b;
    case Neu: return un || a != b;
    case Ltu: return un || a < b;
    case Leu: return un || a <= b;
    case Gtu: return un || a > b;
    case Geu: return un || a >= b;
    case Num: return !un;
    case Nan: return un;
    }
    return false;
  } else {
    using U = Unsigned<T>;
    switch (c) {
    case Eq: return a == b;
    case Ne: return a != b;
    case Lt: return a < b;
    case Le: return a <= b;
    case Gt: return a > b;
    case Ge: return a >= b;
    case Lo: return U(a) < U(b);
    case Ls: return U(a) <= U(b);
    case Hi: return U(a) > U(b);
    case Hs: return U(a) >= U(b);
    }
    return false;
  }
}

/// setp.cmp{.bool}.T p[|q], a, b{, {!}c}: aux = cmp, aux2 = bool op,
/// op[0] = p, op[1] = q or Sink, op[2..3] = a, b, op[4] = c (negated when
/// Instr::vec == 2).
template <class T> void setp(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t p = in.op[0].r[0], q = in.op[1].kind == Operand::Reg ? in.op[1].r[0] : -1;
  int32_t a = in.op[2].r[0], b = in.op[3].r[0], c = in.op[4].r[0];
  bool ftz = in.aux & (1u << 8);
  uint32_t cmp = in.aux & 0xff;
  forLanes(m, [&](int l) {
    T x = get<T>(w, a, l), y = get<T>(w, b, l);
    if constexpr (std::is_same_v<T, float>)
      if (ftz) {
        x = flushF(x);
        y = flushF(y);
      }
    bool t = compare<T>(cmp, x, y);
    bool cv = true;
    if (in.aux2 != BNone)
      cv = (slot(w, c, l) != 0) != (in.vec == 2);
    auto comb = [&](bool v) {
      switch (in.aux2) {
      case BAnd: return v && cv;
      case BOr: return v || cv;
      case BXor: return v != cv;
      }
      return v;
    };
    slot(w, p, l) = comb(t);
    if (q >= 0)
      slot(w, q, l) = comb(!t);
  });
}
/// setp on f16/bf16 values: compared as the floats they are.
template <bool Bf> void setpHalf(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t p = in.op[0].r[0], q = in.op[1].kind == Operand::Reg ? in.op[1].r[0] : -1;
  int32_t a = in.op[2].r[0], b = in.op[3].r[0], c = in.op[4].r[0];
  uint32_t cmp = in.aux & 0xff;
  auto f = [](uint16_t h) { return Bf ? bf16ToFloat(h) : f16ToFloat(h); };
  forLanes(m, [&](int l) {
    bool t = compare<float>(cmp, f(get<uint16_t>(w, a, l)), f(get<uint16_t>(w, b, l)));
    bool cv = in.aux2 == BNone || ((slot(w, c, l) != 0) != (in.vec == 2));
    auto comb = [&](bool v) {
      switch (in.aux2) {
      case BAnd: return v && cv;
      case BOr: return v || cv;
      case BXor: return v != cv;
      }
      return v;
    };
    slot(w, p, l) = comb(t);
    if (q >= 0)
      slot(w, q, l) = comb(!t);
  });
}

/// min/max/neg/abs on f16/bf16: computed as floats, rounded back (exact
/// for these operations).
template <bool Bf, class F> void halfBin(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0];
  auto f = [](uint16_t h) { return Bf ? bf16ToFloat(h) : f16ToFloat(h); };
  forLanes(m, [&](int l) {
    float r = F::template f<float>(f(get<uint16_t>(w, a, l)), f(get<uint16_t>(w, b, l)));
    put<uint16_t>(w, d, l, Bf ? floatToBf16(r) : floatToF16(r));
  });
}
template <bool Bf, bool Neg> void halfSign(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) {
    uint16_t x = get<uint16_t>(w, a, l);
    put<uint16_t>(w, d, l, Neg ? uint16_t(x ^ 0x8000u) : uint16_t(x & 0x7fffu));
  });
}

Handler setpFor(Ty t) {
  switch (t) {
  case Ty::S16: return setp<int16_t>;
  case Ty::U16: case Ty::B16: return setp<uint16_t>;
  case Ty::S32: return setp<int32_t>;
  case Ty::U32: case Ty::B32: return setp<uint32_t>;
  case Ty::S64: return setp<int64_t>;
  case Ty::U64: case Ty::B64: return setp<uint64_t>;
  case Ty::F32: return setp<float>;
  case Ty::F64: return setp<double>;
  case Ty::F16: return setpHalf<false>;
  case Ty::BF16: return setpHalf<true>;
  default: return nullptr;
  }
}

template <class T> void testp(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t p = in.op[0].r[0], a = in.op[1].r[0];
  forLanes(m, [&](int l) {
    T x = get<T>(w, a, l);
    int c = std::fpclassify(x);
    bool r = false;
    switch (in.aux) {
    case 0: r = std::isfinite(x); break;
    case 1: r = std::isinf(x); break;
    case 2: r = x == x; break;
    case 3: r = x != x; break;
    case 4: r = c == FP_NORMAL; break;
    case 5: r = c == FP_SUBNORMAL; break;
    }
    slot(w, p, l) = r;
  });
}

void selp(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0], b = in.op[2].r[0], c = in.op[3].r[0];
  forLanes(m, [&](int l) { slot(w, d, l) = slot(w, c, l) ? slot(w, a, l) : slot(w, b, l); });
}

// ---- moves ----
void mov(Cta &, Warp &w, const Instr &in, uint32_t m) {
  int32_t d = in.op[0].r[0], a = in.op[1].r[0];
  uint64_t mask = in.aux >= 64 ? ~uint64_t(0) : ((uint64_t(1) << in.aux) - 1);
  forLanes(m, [&](int l) { slot(w, d, l) = slot(w, a, l) & mask; });
}
/// mov.b32 d, {a, b}: elements from the least significant end.
/// cvta.param: a parameter's offset to its generic address (aux 1: the
/// reverse, cvta.to.param).
void cvtaParam(Cta &, Warp &w, const Instr &in, uint32_t m) {
  forLanes(m, [&](int l) {
    uint64_t v = slot(w, in.op[1].r[0], l);
    slot(w, in.op[0].r[0], l) = in.aux ? v - kParamWindow : v + kParamWindow;
  });
}

void movPack(Cta &, Warp &w, const Instr &in, uint32_t m) {
  const Operand &v = in.op[1];
  int32_t d = in.op[0].r[0];
  unsigned bits = in.aux;
  uint64_t emask = bits >= 64 ? ~uint64_t(0) : ((uint64_t(1) << bits) - 1);
  forLanes(m, [&](int l) {
    uint64_t r = 0;
    for (int i = 0; i < v.n; ++i)
      r |= (slot(w, v.r[i], l) & emask) << (bits * i);
    slot(w, d, l) = r;
  });
}
void movUnpack(Cta &, Warp &w, const Instr &in, uint32_t m) {
  const Operand &v = in.op[0];
  int32_t a = in.op[1].r[0];
  unsigned bits = in.aux;
  uint64_t emask = bits >= 64 ? ~uint64_t(0) : ((uint64_t(1) << bits) - 1);
  forLanes(m, [&](int l) {
    uint64_t x = slot(w, a, l);
    for (int i = 0; i < v.n; ++i)
      if (v.r[i] >= 0)
        slot(w, v.r[i], l) = (x >> (bits * i)) & emask;
  });
}

Handler intTyped(Ty t, Handler s16, Handler u16, Handler s32, Handler u32,
                 Handler s64, Handler u64) {
  switch (t) {
  case Ty::S16: return s16;
  case Ty::U16: case Ty::B16: return u16;
  case Ty::S32: return s32;
  case Ty::U32: case Ty::B32: return u32;
  case Ty::S64: return s64;
  case Ty::U64: case Ty::B64: return u64;
  default: return nullptr;
  }
}
#define INT_HANDLERS(H) intTyped(t, H<int16_t>, H<uint16_t>, H<int32_t>, H<uint32_t>, H<int64_t>, H<uint64_t>)

/// Accepts only round-to-nearest (or no rounding modifier) and records
/// .ftz/.sat/.NaN in aux.
bool floatModifiers(const std::vector<std::string> &p, Instr &in, std::string &err) {
  for (size_t i = 1; i < p.size(); ++i) {
    const std::string &s = p[i];
    if (s == "rz" || s == "rm" || s == "rp") {
      err = "rounding mode ." + s + " is not supported by the emulator (only .rn)";
      return false;
    }
    if (s == "ftz") in.aux |= kFtz;
    if (s == "sat") in.aux |= kSat;
    if (s == "NaN") in.aux |= kNaN;
    if (s == "xorsign" || s == "relu" || s == "oob") {
      err = "." + s + " is not supported by the emulator";
      return false;
    }
  }
  return true;
}

/// Binds the operands: op[0] a destination, then `nsrc` sources of type t
/// (or of the given per-source types).
bool operands(Decoder &d, const SynInstr &s, Instr &in, std::string &err,
              std::initializer_list<Ty> srcTypes) {
  if (s.ops.size() != srcTypes.size() + 1) {
    err = "'" + s.opcode + "' takes " + std::to_string(srcTypes.size() + 1) + " operands";
    return false;
  }
  if (!d.dest(s.ops[0], in.op[0], err))
    return false;
  size_t i = 1;
  for (Ty t : srcTypes) {
    if (!d.value(s.ops[i], t, in.op[i], err))
      return false;
    ++i;
  }
  in.nops = static_cast<uint8_t>(s.ops.size());
  return true;
}

} // namespace

bool bindAlu(Decoder &d, const SynInstr &s, Instr &in, std::string &err) {
  std::vector<std::string> p = splitOpcode(s.opcode);
  const std::string &op = p[0];
  Ty t = lastType(p);
  in.t = t;
  bool isFloat = t == Ty::F32 || t == Ty::F64;
  auto need = [&](Handler h) {
    if (!h && err.empty())
      err = "'" + s.opcode + "' (type ." + tyName(t) + ") is not supported by the emulator";
    in.fn = h;
    return true;
  };
  auto bin = [&](Handler h) { return operands(d, s, in, err, {t, t}) && need(h); };
  auto un = [&](Handler h) { return operands(d, s, in, err, {t}) && need(h); };

  if (isFloat && (op == "add" || op == "sub" || op == "mul" || op == "div" ||
                  op == "min" || op == "max" || op == "fma" || op == "mad" ||
                  op == "abs" || op == "neg" || op == "rcp" || op == "sqrt" ||
                  op == "rsqrt" || op == "ex2" || op == "lg2" || op == "sin" ||
                  op == "cos" || op == "tanh" || op == "copysign")) {
    if (!floatModifiers(p, in, err))
      return true;
    if (op == "add") return bin(fltBinFor<FAdd>(t, in.aux));
    if (op == "sub") return bin(fltBinFor<FSub>(t, in.aux));
    if (op == "mul") return bin(fltBinFor<FMul>(t, in.aux));
    if (op == "div") return bin(fltBinFor<FDiv>(t, in.aux));
    if (op == "copysign") return bin(fltBinFor<FCopysign>(t, in.aux));
    if (op == "min") return bin(in.aux & kNaN ? fltBinFor<FMinNaN>(t, in.aux) : fltBinFor<FMin>(t, in.aux));
    if (op == "max") return bin(in.aux & kNaN ? fltBinFor<FMaxNaN>(t, in.aux) : fltBinFor<FMax>(t, in.aux));
    if (op == "fma" || op == "mad")
      return operands(d, s, in, err, {t, t, t}) &&
             need(t == Ty::F32 ? fltFma<float> : fltFma<double>);
    if (op == "abs") return un(fltUnFor<FAbs, false>(t));
    if (op == "neg") return un(fltUnFor<FNeg, false>(t));
    if (op == "rcp") return un(fltUnFor<FRcp>(t));
    if (op == "sqrt") return un(fltUnFor<FSqrt>(t));
    if (op == "rsqrt") return un(fltUnFor<FRsqrt>(t));
    if (op == "ex2") return un(fltUnFor<FEx2>(t));
    if (op == "lg2") return un(fltUnFor<FLg2>(t));
    if (op == "sin") return un(fltUnFor<FSin>(t));
    if (op == "cos") return un(fltUnFor<FCos>(t));
    if (op == "tanh") return un(fltUnFor<FTanh>(t));
  }
  if ((t == Ty::F16 || t == Ty::BF16) &&
      (op == "min" || op == "max" || op == "neg" || op == "abs")) {
    bool bf = t == Ty::BF16, nan = hasPart(p, "NaN");
    if (op == "neg" || op == "abs")
      return un(op == "neg" ? (bf ? halfSign<true, true> : halfSign<false, true>)
                            : (bf ? halfSign<true, false> : halfSign<false, false>));
    if (op == "min")
      return bin(nan ? (bf ? halfBin<true, FMinNaN> : halfBin<false, FMinNaN>)
                     : (bf ? halfBin<true, FMin> : halfBin<false, FMin>));
    return bin(nan ? (bf ? halfBin<true, FMaxNaN> : halfBin<false, FMaxNaN>)
                   : (bf ? halfBin<true, FMax> : halfBin<false, FMax>));
  }
  if (tyFloat(t) && !isFloat &&
      (op == "add" || op == "sub" || op == "mul" || op == "fma" || op == "min" ||
       op == "max" || op == "neg" || op == "abs" || op == "ex2" || op == "tanh")) {
    err = "half-precision arithmetic ('" + s.opcode + "') is not supported by the emulator";
    return true;
  }

  if (op == "add" || op == "sub") {
    if (hasPart(p, "sat")) {
      if (t != Ty::S32) {
        err = ".sat needs .s32";
        return true;
      }
      return bin(op == "add" ? intBin<int32_t, AddSat> : intBin<int32_t, SubSat>);
    }
    if (hasPart(p, "cc")) {
      err = "carry chains (.cc) are not supported by the emulator";
      return true;
    }
    return bin(op == "add" ? intBinFor<Add>(t) : intBinFor<Sub>(t));
  }
  if (op == "mul" || op == "mad") {
    bool mad = op == "mad";
    if (hasPart(p, "wide")) {
      Handler h = nullptr;
      Ty wide = Ty::None;
      switch (t) {
      case Ty::S16: h = mad ? intWide<int16_t, true> : intWide<int16_t, false>; wide = Ty::S32; break;
      case Ty::U16: h = mad ? intWide<uint16_t, true> : intWide<uint16_t, false>; wide = Ty::U32; break;
      case Ty::S32: h = mad ? intWide<int32_t, true> : intWide<int32_t, false>; wide = Ty::S64; break;
      case Ty::U32: h = mad ? intWide<uint32_t, true> : intWide<uint32_t, false>; wide = Ty::U64; break;
      default: break;
      }
      if (mad)
        return operands(d, s, in, err, {t, t, wide}) && need(h);
      return bin(h);
    }
    bool hi = hasPart(p, "hi");
    if (!hi && !hasPart(p, "lo")) {
      err = "integer '" + op + "' needs .lo, .hi or .wide";
      return true;
    }
    if (mad)
      return operands(d, s, in, err, {t, t, t}) &&
             need(hi ? intMadFor<MulHi>(t) : intMadFor<MulLo>(t));
    return bin(hi ? intBinFor<MulHi>(t) : intBinFor<MulLo>(t));
  }
  if (op == "div") return bin(intBinFor<Div>(t));
  if (op == "rem") return bin(intBinFor<Rem>(t));
  if (op == "min") return bin(intBinFor<Min>(t));
  if (op == "max") return bin(intBinFor<Max>(t));
  if (op == "and" || op == "or" || op == "xor") {
    if (t == Ty::Pred || tySigned(t) || t == Ty::B16 || t == Ty::B32 || t == Ty::B64 ||
        t == Ty::U16 || t == Ty::U32 || t == Ty::U64)
      return bin(op == "and" ? intBinFor<And>(t) : op == "or" ? intBinFor<Or>(t) : intBinFor<Xor>(t));
  }
  if (op == "not") return un(t == Ty::Pred ? predNot : INT_HANDLERS(intNot));
  if (op == "cnot") return un(INT_HANDLERS(intCnot));
  if (op == "abs") return un(INT_HANDLERS(intAbs));
  if (op == "neg") return un(INT_HANDLERS(intNeg));
  if (op == "popc") return operands(d, s, in, err, {t}) && need(t == Ty::B32 ? intPopc<uint32_t> : t == Ty::B64 ? intPopc<uint64_t> : nullptr);
  if (op == "clz") return operands(d, s, in, err, {t}) && need(t == Ty::B32 ? intClz<uint32_t> : t == Ty::B64 ? intClz<uint64_t> : nullptr);
  if (op == "brev") return un(t == Ty::B32 ? intBrev<uint32_t> : t == Ty::B64 ? intBrev<uint64_t> : nullptr);
  if (op == "shl") return operands(d, s, in, err, {t, Ty::U32}) && need(INT_HANDLERS(shl));
  if (op == "shr") return operands(d, s, in, err, {t, Ty::U32}) && need(INT_HANDLERS(shr));
  if (op == "shf") {
    bool left = hasPart(p, "l"), clamp = hasPart(p, "clamp");
    Handler h = left ? (clamp ? shf<true, true> : shf<true, false>)
                     : (clamp ? shf<false, true> : shf<false, false>);
    return operands(d, s, in, err, {Ty::B32, Ty::B32, Ty::U32}) && need(h);
  }
  if (op == "bfe")
    return operands(d, s, in, err, {t, Ty::U32, Ty::U32}) &&
           need(t == Ty::U32 ? bfe<uint32_t> : t == Ty::S32 ? bfe<int32_t>
                : t == Ty::U64 ? bfe<uint64_t> : t == Ty::S64 ? bfe<int64_t> : nullptr);
  if (op == "bfi")
    return operands(d, s, in, err, {t, t, Ty::U32, Ty::U32}) &&
           need(t == Ty::B32 ? bfi<uint32_t> : t == Ty::B64 ? bfi<uint64_t> : nullptr);
  if (op == "prmt") {
    if (p.size() != 2) {
      err = "only the default mode of prmt is supported by the emulator";
      return true;
    }
    return operands(d, s, in, err, {Ty::B32, Ty::B32, Ty::B32}) && need(prmt);
  }
  if (op == "selp") return operands(d, s, in, err, {t, t, Ty::Pred}) && need(tyBits(t) > 1 ? selp : nullptr);
  if (op == "setp") {
    if (p.size() < 3 || !parseCmp(p[1], in.aux)) {
      err = "setp needs a comparison";
      return true;
    }
    if (hasPart(p, "ftz"))
      in.aux |= 1u << 8;
    in.aux2 = hasPart(p, "and") ? BAnd : hasPart(p, "or") ? BOr : hasPart(p, "xor") ? BXor : BNone;
    size_t want = in.aux2 == BNone ? 3 : 4;
    if (s.ops.size() != want) {
      err = "setp takes " + std::to_string(want) + " operands";
      return true;
    }
    const SynOperand &dst = s.ops[0];
    if (dst.kind == SynOperand::Pair) {
      if (!d.dest(dst.elems[0], in.op[0], err) || !d.dest(dst.elems[1], in.op[1], err))
        return true;
    } else if (!d.dest(dst, in.op[0], err)) {
      return true;
    } else {
      in.op[1].kind = Operand::Sink;
    }
    if (!d.value(s.ops[1], t, in.op[2], err) || !d.value(s.ops[2], t, in.op[3], err))
      return true;
    in.op[4].r[0] = 0;
    if (in.aux2 != BNone) {
      SynOperand c = s.ops[3];
      if (c.kind == SynOperand::NotReg) {
        c.kind = SynOperand::Reg;
        in.vec = 2;
      }
      if (!d.value(c, Ty::Pred, in.op[4], err))
        return true;
    }
    if ((!tyFloat(t) && in.aux >= Equ && in.aux <= Nan) || (tyFloat(t) && in.aux >= Lo)) {
      err = "comparison ." + p[1] + " does not apply to ." + tyName(t);
      return true;
    }
    return need(setpFor(t));
  }
  if (op == "testp") {
    static const char *kinds[] = {"finite", "infinite", "number", "notanumber", "normal", "subnormal"};
    in.aux = 99;
    for (uint32_t i = 0; i < 6; ++i)
      if (hasPart(p, kinds[i]))
        in.aux = i;
    if (in.aux == 99) {
      err = "testp needs a test";
      return true;
    }
    return operands(d, s, in, err, {t}) && need(t == Ty::F32 ? testp<float> : t == Ty::F64 ? testp<double> : nullptr);
  }
  if (op == "mov") {
    if (s.ops.size() != 2) {
      err = "mov takes 2 operands";
      return true;
    }
    int bits = tyBits(t);
    if (s.ops[1].kind == SynOperand::Vec) { // pack
      if (!d.dest(s.ops[0], in.op[0], err))
        return true;
      int n = static_cast<int>(s.ops[1].elems.size());
      if (n < 2 || bits % n) {
        err = "bad vector in mov";
        return true;
      }
      in.aux = static_cast<uint32_t>(bits / n);
      Ty et = in.aux == 8 ? Ty::B8 : in.aux == 16 ? Ty::B16 : Ty::B32;
      if (!d.value(s.ops[1], et, in.op[1], err, true))
        return true;
      in.fn = movPack;
      return true;
    }
    if (s.ops[0].kind == SynOperand::Vec) { // unpack
      int n = static_cast<int>(s.ops[0].elems.size());
      if (n < 2 || bits % n) {
        err = "bad vector in mov";
        return true;
      }
      if (!d.dest(s.ops[0], in.op[0], err, true) || !d.value(s.ops[1], t, in.op[1], err))
        return true;
      in.aux = static_cast<uint32_t>(bits / n);
      in.fn = movUnpack;
      return true;
    }
    if (!operands(d, s, in, err, {t}))
      return true;
    in.aux = static_cast<uint32_t>(std::max(bits, 1));
    in.fn = mov;
    return true;
  }
  if (op == "cvta") {
    // Global addresses are the same in the generic space here; parameters
    // sit in a window of their own (kParamWindow: what tensor-map operands
    // name); shared and local memory are not reachable through generic
    // addresses in the emulator.
    if (hasPart(p, "param")) {
      if (!operands(d, s, in, err, {t}))
        return true;
      in.aux = hasPart(p, "to") ? 1 : 0;
      in.fn = cvtaParam;
      return true;
    }
    if (!hasPart(p, "global")) {
      err = "cvta for ." + (p.size() > 2 ? p[p.size() - 2] : std::string("?")) +
            " is not supported by the emulator (generic addressing of shared/local)";
      return true;
    }
    if (!operands(d, s, in, err, {t}))
      return true;
    in.aux = 64;
    in.fn = mov;
    return true;
  }
  return false;
}

} // namespace attnc::emu
