#!/usr/bin/env python3
"""Differential fuzzing of the whole attnc pipeline, in the manner of Csmith
and YARPGen: random *type-correct* variants (affine and non-affine masks over
q, kv, b, h, scalars (i32, f32, bool) and gathers (rank-0 tensors too);
the problem sizes B, H, HKV, Q, KV; sums over an index; score_mods with
every builtin, ternaries, lets, fn helpers, i32/f32 mixes, constants near
the i32 limits) run with
random shapes (odd lengths, GQA, decode/chunk, ragged lengths, dtypes,
layouts) through `attnc check` on the CPU and on the emulated GPU, against
the fp64 reference. A crash, a hang, an internal error or a mismatch is
minimized automatically into a small reproducer under --findings.

Values that backends may compute differently by an ulp (anything derived
from `score`, whose dot product is summed in another order, and from
approximate builtins such as exp or tanh) never reach a discontinuous
operation (floor, ceil, i32(), float comparisons), and stay within a bounded
range; everything else, integers above all, must agree exactly.

  scripts/difffuzz.py --build build --seconds 60 --seed 1
  scripts/difffuzz.py --build build --seconds 1800           # a long run
"""
import argparse
import copy
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

# ---- programs ---------------------------------------------------------------


class N:
    """An expression node: `op` names the form, `t` the type (i32, f32,
    bool), `exact` whether every backend computes it bit for bit alike,
    `bound` a bound on |value| for inexact floats."""

    def __init__(self, op, t, kids=(), val=None, exact=True, bound=0.0):
        self.op, self.t, self.kids, self.val = op, t, list(kids), val
        self.exact, self.bound = exact, bound

    def render(self):
        o, k = self.op, [c.render() for c in self.kids]
        if o == "lit":
            return self.val
        if o == "name":
            return self.val
        if o == "neg":
            return "(-%s)" % k[0]
        if o == "not":
            return "(!%s)" % k[0]
        if o == "bnot":
            return "(~%s)" % k[0]
        if o == "bin":
            return "(%s %s %s)" % (k[0], self.val, k[1])
        if o == "tern":
            return "(%s ? %s : %s)" % (k[0], k[1], k[2])
        if o == "call":
            return "%s(%s)" % (self.val, ", ".join(k))
        if o == "gather":
            return "%s[%s]" % (self.val, ", ".join(k)) if k else self.val
        if o == "sum":  # val: the index's name; kids: count, term
            return "sum(%s < %s: %s)" % (self.val, k[0], k[1])
        raise ValueError(o)

    def size(self):
        return 1 + sum(c.size() for c in self.kids)


def lit_i(v):
    return N("lit", "i32", val=str(v) if v >= 0 else "(%d)" % v)


def lit_f(v):
    s = repr(float(v))
    return N("lit", "f32", val=s if v >= 0 else "(%s)" % s)


class Program:
    """A file with fn helpers and one variant."""

    def __init__(self):
        self.fns = []      # (text) -- helpers are fixed texts
        self.params = []   # (name, decl, kind): kind in tensor/scalar
        self.score_lets = []  # (name, node)
        self.score = None  # node or None (identity)
        self.mask_lets = []
        self.mask = None   # node or None (keep all)
        self.sets = {}     # scalar values

    def render(self):
        out = list(self.fns)
        ps = ", ".join("%s: %s" % (n, d) for n, d, _ in self.params)
        out.append("variant fz(%s) {" % ps)
        if self.score is not None:
            out.append("  score_mod(score, b, h, q, kv) {")
            for n, e in self.score_lets:
                out.append("    let %s = %s" % (n, e.render()))
            out.append("    return %s" % self.score.render())
            out.append("  }")
        if self.mask is not None:
            out.append("  mask_mod(b, h, q, kv) {")
            for n, e in self.mask_lets:
                out.append("    let %s = %s" % (n, e.render()))
            out.append("    return %s" % self.mask.render())
            out.append("  }")
        out.append("}")
        return "\n".join(out) + "\n"


# Helpers over exact values (integers, bools), and one bounded float helper.
FNS = {
    "band": ("fn band(x: i32, lo: i32, hi: i32) -> bool = x >= lo && x < hi",
             "bool", ["i32", "i32", "i32"], True),
    "imix": ("fn imix(a: i32, b: i32) -> i32 { let s = a * 3 - b\n  return s % 7 + a / 5 }",
             "i32", ["i32", "i32"], True),
    "squash": ("fn squash(x: f32) -> f32 = 2.0 * tanh(x * 0.5)",
               "f32", ["f32"], False),
}

EXTREME = [2147483647, -2147483648, 2147483600, -2147483600, 1 << 30,
           2000000000, 65536, 46341]


class Gen:
    def __init__(self, rng, gpu):
        self.r = rng
        self.gpu = gpu

    # Names usable in the current modifier: (name, type, exact, bound).
    def leaf_names(self, t):
        return [x for x in self.names if x[1] == t]

    def i32(self, d):
        r = self.r
        if d <= 0 or r.random() < 0.25:
            c = r.random()
            names = self.leaf_names("i32")
            if c < 0.55 and names:
                return N("name", "i32", val=r.choice(names)[0])
            if c < 0.65 and self.int_caps:
                cap, dims = r.choice(self.int_caps)
                return N("gather", "i32", [self.index(d - 1) for _ in dims], val=cap)
            if c < 0.72:
                return lit_i(r.choice(EXTREME))
            return lit_i(r.randint(-40, 130))
        c = r.random()
        if c < 0.45:
            op = r.choice(["+", "-", "+", "-", "*"])
            a = self.i32(d - 1)
            b = lit_i(r.choice([1, 2, 3, 7, 16, -5])) if op == "*" and r.random() < 0.7 else self.i32(d - 1)
            return N("bin", "i32", [a, b], val=op)
        if c < 0.55:
            # Divisors that are often 0 (b, h, q - kv, ...) exercise the
            # language's total division (x / 0 = 0, x % 0 = x).
            op = r.choice(["/", "%"])
            k = r.random()
            if k < 0.4:
                b = lit_i(r.choice([2, 3, 16, 64, -7, -1]))
            elif k < 0.75:
                b = r.choice([N("name", "i32", val="b"), N("name", "i32", val="h"),
                              N("bin", "i32", [N("name", "i32", val="q"), N("name", "i32", val="kv")], val="-"),
                              N("bin", "i32", [N("name", "i32", val="kv"), lit_i(3)], val="%")])
            else:
                b = self.i32(d - 1)
            return N("bin", "i32", [self.i32(d - 1), b], val=op)
        if c < 0.58:
            return N("neg", "i32", [self.i32(d - 1)])
        if c < 0.62:
            # Bitwise operators, shifts by counts that are often 32 or more
            # (0, or the sign, by definition), Python's floor division and
            # modulo with zero and negative divisors, sign and ~.
            k = r.random()
            if k < 0.35:
                return N("bin", "i32", [self.i32(d - 1), self.i32(d - 1)], val=r.choice(["&", "|", "^"]))
            if k < 0.6:
                n = lit_i(r.choice([0, 1, 3, 31, 32, 40])) if r.random() < 0.5 else self.i32(d - 1)
                return N("bin", "i32", [self.i32(d - 1), n], val=r.choice(["<<", ">>"]))
            if k < 0.8:
                b = lit_i(r.choice([3, -4, 0, -1])) if r.random() < 0.5 else self.i32(d - 1)
                return N("call", "i32", [self.i32(d - 1), b], val=r.choice(["floordiv", "floormod"]))
            if k < 0.9:
                return N("call", "i32", [self.i32(d - 1)], val="sign")
            return N("bnot", "i32", [self.i32(d - 1)])
        if c < 0.72:
            f = r.choice(["min", "max", "abs", "clamp"])
            n = {"min": 2, "max": 2, "abs": 1, "clamp": 3}[f]
            return N("call", "i32", [self.i32(d - 1) for _ in range(n)], val=f)
        if c < 0.8:
            return N("tern", "i32", [self.bool(d - 1), self.i32(d - 1), self.i32(d - 1)])
        if c < 0.88:
            return N("call", "i32", [self.exact_f32(d - 1)], val="i32")
        if c < 0.94 and "imix" in self.fn_used:
            return N("call", "i32", [self.i32(d - 1), self.i32(d - 1)], val="imix")
        if c < 0.97:
            return self.sum("i32", d)
        return N("call", "i32", [self.bool(d - 1)], val="i32")

    def sum(self, t, d):
        """sum(i < count: term): counts often small, zero, negative or
        varying per key; an i32 term wraps exactly, an f32 term is kept
        bounded and the sum clamped."""
        r = self.r
        idx = "i%d" % self.sums
        self.sums += 1
        k = r.random()
        if k < 0.5:
            count = lit_i(r.choice([0, 1, 2, 3, 5, -2]))
        elif k < 0.8:
            count = N("call", "i32", [N("bin", "i32", [N("name", "i32", val="q"), N("name", "i32", val="kv")], val="-"),
                                      lit_i(r.choice([3, 5]))], val="floormod")
        else:
            count = N("call", "i32", [self.i32(d - 1), lit_i(0), lit_i(6)], val="clamp")
        self.names.append((idx, "i32", True, 0))
        term = self.i32(d - 1) if t == "i32" else self.approx(d - 1)
        self.names.pop()
        if t == "i32":
            return N("sum", "i32", [count, term], val=idx)
        return self.clamped(N("sum", "f32", [count, term], val=idx, exact=False))

    def index(self, d):
        r = self.r
        pick = r.random()
        if pick < 0.6:
            return N("name", "i32", val=r.choice(["q", "kv", "b", "h"]))
        return self.i32(d)

    def bool(self, d):
        r = self.r
        if d <= 0 or r.random() < 0.15:
            names = self.leaf_names("bool")
            if names and r.random() < 0.5:
                return N("name", "bool", val=r.choice(names)[0])
            if self.bool_caps and r.random() < 0.5:
                cap, dims = r.choice(self.bool_caps)
                return N("gather", "bool", [self.index(d - 1) for _ in dims], val=cap)
            return N("lit", "bool", val=r.choice(["true", "false"]))
        c = r.random()
        if c < 0.5:
            # Mostly a position against a function of the other position, so
            # that the mask cuts through the tiles rather than keeping or
            # dropping everything.
            op = r.choice(["<", "<=", ">", ">=", "==", "!="])
            if r.random() < 0.75:
                pos, other = r.sample(["q", "kv"], 2)
                return N("bin", "bool", [N("name", "i32", val=pos), self.pos_expr(other, d - 1)], val=op)
            return N("bin", "bool", [self.i32(d - 1), self.i32(d - 1)], val=op)
        if c < 0.7:
            return N("bin", "bool", [self.bool(d - 1), self.bool(d - 1)],
                     val=r.choice(["&&", "||"]))
        if c < 0.74:
            return N("not", "bool", [self.bool(d - 1)])
        if c < 0.78:
            # torch-style logical & | ^ ~ on bools.
            if r.random() < 0.3:
                return N("bnot", "bool", [self.bool(d - 1)])
            return N("bin", "bool", [self.bool(d - 1), self.bool(d - 1)], val=r.choice(["&", "|", "^"]))
        if c < 0.85:
            op = r.choice(["<", ">=", "==", "!="])
            return N("bin", "bool", [self.exact_f32(d - 1), self.exact_f32(d - 1)], val=op)
        if c < 0.9 and "band" in self.fn_used:
            return N("call", "bool", [self.i32(d - 1) for _ in range(3)], val="band")
        if c < 0.95:
            return N("bin", "bool", [self.bool(d - 1), self.bool(d - 1)], val=r.choice(["==", "!="]))
        return N("tern", "bool", [self.bool(d - 1), self.bool(d - 1), self.bool(d - 1)])

    def pos_expr(self, pos, d):
        """An i32 function of position `pos` in the range of the lengths
        used: affine, or through min, max, clamp, abs, / and %."""
        r = self.r
        x = N("name", "i32", val=pos)
        c = lit_i(r.choice([0, 1, 3, 7, 16, 33, 50, 64, 100]))
        k = r.random()
        if k < 0.25:
            return N("bin", "i32", [x, self.i32(min(d, 1)) if r.random() < 0.5 else c], val=r.choice(["+", "-"]))
        if k < 0.4:
            return N("call", "i32", [x, c], val=r.choice(["min", "max"]))
        if k < 0.5:
            return N("call", "i32", [x, lit_i(r.choice([0, 5, 20])), lit_i(r.choice([30, 60, 90]))], val="clamp")
        if k < 0.6:
            return N("call", "i32", [N("bin", "i32", [x, c], val="-")], val="abs")
        if k < 0.72:
            return N("bin", "i32", [x, lit_i(r.choice([2, 3, 16, 32]))], val=r.choice(["/", "%"]))
        if k < 0.8:
            return N("bin", "i32", [x, lit_i(r.choice([2, -1, 3]))], val="*")
        if k < 0.9:
            return N("tern", "i32", [self.bool(d), x, c])
        return N("bin", "i32", [x, self.i32(d)], val=r.choice(["+", "-"]))

    def exact_f32(self, d):
        """A float every backend computes alike: small integers and quarters
        under + - *, or a captured value / scalar read as is."""
        r = self.r
        c = r.random()
        if d <= 0 or c < 0.3:
            if self.float_caps and r.random() < 0.3:
                cap, dims = r.choice(self.float_caps)
                return N("gather", "f32", [self.index(d - 1) for _ in dims], val=cap)
            names = [x for x in self.names if x[1] == "f32" and x[2]]
            if names and r.random() < 0.4:
                return N("name", "f32", val=r.choice(names)[0])
            return lit_f(r.choice([0.0, 0.25, 0.5, 1.0, -1.5, 3.0, 100.0, -0.75]))
        small = N("call", "i32", [N("name", "i32", val=r.choice(["q", "kv", "b", "h"]))], val="min")
        small.kids.append(lit_i(1000))
        conv = N("call", "f32", [small], val="f32")
        if c < 0.6:
            return conv
        a = conv if r.random() < 0.5 else lit_f(r.choice([0.25, 0.5, 2.0, -1.0]))
        b = N("call", "f32", [N("name", "i32", val=r.choice(["q", "kv"]))], val="f32")
        b = N("call", "f32", [N("call", "i32", [b.kids[0], lit_i(1000)], val="min")], val="f32")
        return N("bin", "f32", [a, b], val=r.choice(["+", "-", "*"]))

    def approx(self, d):
        """A float within [-16, 16] that may differ between backends by a
        few ulp: only continuous operations apply to it."""
        r = self.r
        if d <= 0 or r.random() < 0.2:
            names = [x for x in self.names if x[1] == "f32"]
            if names and r.random() < 0.5:
                return N("name", "f32", val=r.choice(names)[0], exact=False, bound=16)
            # Often a function of the positions (scaled into range).
            if r.random() < 0.5:
                pos = N("call", "f32", [self.pos_expr(r.choice(["q", "kv"]), 0)], val="f32")
                return self.clamped(N("bin", "f32", [pos, lit_f(r.choice([0.1, 0.03, -0.05]))], val="*"))
            return self.clamped(self.exact_f32(1))
        c = r.random()
        x = self.approx(d - 1)
        if c < 0.12:
            return N("call", "f32", [x], val="tanh", exact=False)
        if c < 0.22:
            return N("call", "f32", [x], val="sigmoid", exact=False)
        if c < 0.3:  # exp of [-2, 2]
            return N("call", "f32", [N("bin", "f32", [N("call", "f32", [x], val="tanh"), lit_f(2.0)], val="*")],
                     val=r.choice(["exp", "exp2"]), exact=False)
        if c < 0.38:  # log of [1, 17]
            return N("call", "f32", [N("bin", "f32", [lit_f(1.0), N("call", "f32", [x], val="abs")], val="+")],
                     val=r.choice(["log", "log2"]), exact=False)
        if c < 0.41:
            return N("call", "f32", [N("call", "f32", [x], val="abs")], val="sqrt", exact=False)
        if c < 0.44:
            # sin, cos, erf of [-16, 16]; log1p of [0, 16]; expm1 of [-2, 2].
            k = r.random()
            if k < 0.6:
                return N("call", "f32", [x], val=r.choice(["sin", "cos", "erf"]), exact=False)
            if k < 0.8:
                return N("call", "f32", [N("call", "f32", [x], val="abs")], val="log1p", exact=False)
            return N("call", "f32", [N("bin", "f32", [N("call", "f32", [x], val="tanh"), lit_f(2.0)], val="*")],
                     val="expm1", exact=False)
        if c < 0.5:
            return N("call", "f32", [N("bin", "f32", [lit_f(1.0), N("call", "f32", [x], val="abs")], val="+")],
                     val="rsqrt", exact=False)
        if c < 0.62:
            y = self.approx(d - 1)
            op = r.choice(["+", "-", "*"])
            n = N("bin", "f32", [x, y], val=op, exact=False)
            return self.clamped(n)
        if c < 0.7:
            return N("bin", "f32", [x, N("bin", "f32", [lit_f(1.0), N("call", "f32", [self.approx(d - 1)], val="abs")], val="+")],
                     val="/", exact=False)
        if c < 0.78:
            f = r.choice(["min", "max"])
            return N("call", "f32", [x, self.approx(d - 1)], val=f, exact=False)
        if c < 0.86:
            return N("tern", "f32", [self.bool(d - 1), x, self.approx(d - 1)], exact=False)
        if c < 0.9 and "squash" in self.fn_used:
            return N("call", "f32", [x], val="squash", exact=False)
        if c < 0.92:
            return self.sum("f32", d)
        if c < 0.95:
            return N("neg", "f32", [x], exact=False)
        return self.clamped(N("bin", "f32", [x, N("call", "f32", [self.i32(d - 1)], val="f32")],
                              val="+", exact=False))

    def clamped(self, n):
        return N("call", "f32", [n, lit_f(-16.0), lit_f(16.0)], val="clamp", exact=False)

    def program(self):
        r = self.r
        p = Program()
        self.fn_used = set(k for k in FNS if r.random() < 0.3)
        self.sums = 0
        for k in sorted(self.fn_used):
            p.fns.append(FNS[k][0])
        # Captures and scalars.
        self.float_caps, self.int_caps, self.bool_caps = [], [], []
        for i in range(r.randint(0, 3)):
            kind = r.choice(["f32", "f16", "bf16", "i32", "i64", "bool", "si32", "sf32", "sbool"])
            name = "p%d" % i
            if kind == "sbool":
                p.params.append((name, "bool", "scalar"))
                p.sets[name] = r.choice(["true", "false"])
            elif kind == "si32":
                p.params.append((name, "i32", "scalar"))
                p.sets[name] = r.choice([0, 1, 7, 50, -3, 2147483647, -2147483648, 1000])
            elif kind == "sf32":
                p.params.append((name, "f32", "scalar"))
                p.sets[name] = r.choice([0.0, 0.5, -2.0, 3.25])
            else:
                dims = r.choice([["H"], ["B", "KV"], ["B", "Q"], ["HKV"], ["N"], ["B", "H", "Q"], ["KV", "4"], []])
                p.params.append((name, "%s[%s]" % (kind, ", ".join(dims)), "tensor"))
                (self.float_caps if kind in ("f32", "f16", "bf16") else
                 self.bool_caps if kind == "bool" else self.int_caps).append((name, dims))
        scal_i = [(n, "i32", True, 0) for n, d, k in p.params if k == "scalar" and d == "i32"]
        scal_f = [(n, "f32", True, 0) for n, d, k in p.params if k == "scalar" and d == "f32"]
        # Bool scalars, and the problem sizes (plus free dims) as i32 values.
        scal_i += [(n, "bool", True, 0) for n, d, k in p.params if k == "scalar" and d == "bool"]
        sizes = ["B", "H", "HKV", "Q", "KV"] + (["N"] if any("[N]" in d for _, d, _ in p.params) else [])
        scal_i += [(z, "i32", True, 0) for z in sizes if r.random() < 0.3]
        depth = r.randint(1, 4)
        if r.random() < 0.8:
            self.names = [("score", "f32", False, 16), ("b", "i32", True, 0), ("h", "i32", True, 0),
                          ("q", "i32", True, 0), ("kv", "i32", True, 0)] + scal_i + scal_f
            for i in range(r.randint(0, 3)):
                t = r.choice(["i32", "f32", "bool"])
                e = self.i32(depth) if t == "i32" else self.approx(depth) if t == "f32" else self.bool(depth)
                n = "s%d" % i
                p.score_lets.append((n, e))
                self.names.append((n, t, e.exact, 16))
            # score + a bounded term, or score scaled by a factor in [0, 2]:
            # kept small so that an ulp of difference stays far below the
            # tolerances.
            s = self.approx(depth)
            sc = N("name", "f32", val="score")
            c = r.random()
            if c < 0.55:
                p.score = N("bin", "f32", [sc, s], val=r.choice(["+", "-"]), exact=False)
            elif c < 0.8:
                factor = N("bin", "f32", [lit_f(2.0), N("call", "f32", [s], val="sigmoid")], val="*")
                p.score = N("bin", "f32", [sc, factor], val="*", exact=False)
            else:
                p.score = s
        if r.random() < 0.85:
            self.names = [("b", "i32", True, 0), ("h", "i32", True, 0), ("q", "i32", True, 0),
                          ("kv", "i32", True, 0)] + scal_i + scal_f
            for i in range(r.randint(0, 2)):
                t = r.choice(["i32", "bool"])
                e = self.i32(depth) if t == "i32" else self.bool(depth)
                n = "m%d" % i
                p.mask_lets.append((n, e))
                self.names.append((n, t, True, 0))
            p.mask = self.bool(depth)
        return p


# ---- shapes and runs ---------------------------------------------------------


def random_shape(r, gpu):
    mode = r.choice(["prefill", "decode", "chunk"])
    heads = r.choice([(2, 2), (4, 2), (4, 1), (3, 3), (6, 2)])
    d = r.choice([(64, 64), (128, 128), (64, 32), (80, 80)])
    dtype = r.choice(["f32", "bf16", "f16"] if gpu else ["f32", "bf16"])
    batch = r.randint(1, 3)
    if mode == "prefill":
        lq = lk = r.choice([1, 7, 33, 64, 77, 100])
    elif mode == "decode":
        lq, lk = 1, r.choice([1, 9, 64, 77, 130])
    else:
        lk = r.choice([9, 64, 77, 130])
        lq = r.randint(2, lk)
    shape = {"mode": mode, "batch": batch, "heads": heads[0], "kv-heads": heads[1],
             "q-len": lq, "kv-len": lk, "head-dim": d[0], "v-head-dim": d[1],
             "dtype": dtype,
             "layout": r.choice(["bhsd", "bshd", "bshd", "sbhd", "bhds", "hsdb"]),
             "seed": r.randint(0, 1000)}
    if r.random() < 0.2:
        shape["pad"] = r.choice([1, 3, 8])
    if mode != "prefill" and r.random() < 0.3:
        shape["kv-lens"] = ",".join(str(r.randint(lq, lk)) for _ in range(batch))
    return shape


class Runner:
    def __init__(self, build, work):
        self.attnc = os.path.join(build, "bin", "attnc")
        self.emu = os.path.join(build, "lib", "libattnc-emucuda.so")
        self.work = work
        self.count = 0

    def command(self, path, shape, sets, gpu):
        cmd = [self.attnc, "check", path]
        for k, v in shape.items():
            cmd += ["--" + k, str(v)]
        for k, v in sets.items():
            cmd += ["--set", "%s=%s" % (k, v)]
        if gpu:
            cmd += ["--backend", "cuda"]
        return cmd

    def run(self, prog, shape, gpu):
        """'pass', or (kind, detail) for a failure: crash, hang, internal,
        invalid (a generator bug: the program does not compile), mismatch."""
        self.count += 1
        path = os.path.join(self.work, "p%d.attn" % self.count)
        with open(path, "w") as f:
            f.write(prog.render())
        env = dict(os.environ)
        if gpu:
            env["ATTNC_LIBCUDA"] = self.emu
            env["ATTNC_EMU_QUIET"] = "1"
        cmd = self.command(path, shape, prog.sets, gpu)
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        except subprocess.TimeoutExpired:
            return ("hang", " ".join(cmd))
        out = r.stdout + r.stderr
        if r.returncode == 0:
            return "pass"
        if r.returncode < 0 or r.returncode > 2:
            return ("crash", "exit %d\n%s" % (r.returncode, out[-2000:]))
        if ".attn:" in out and "error:" in out:
            return ("invalid", out[-2000:])
        if "internal" in out or "JIT" in out or "does not verify" in out:
            return ("internal", out[-2000:])
        if "FAIL" in out:
            note = [l for l in out.splitlines() if "FAIL" in l or l.startswith("    ")]
            return ("mismatch", "\n".join(note[-4:]))
        return ("error", out[-2000:])


# ---- minimization --------------------------------------------------------------


def simpler(node):
    """Candidate replacements of `node`, simplest first."""
    out = []
    if node.t == "i32":
        out += [lit_i(0), lit_i(1), N("name", "i32", val="q"), N("name", "i32", val="kv")]
    elif node.t == "bool":
        out += [N("lit", "bool", val="true"), N("lit", "bool", val="false")]
    else:
        out += [lit_f(0.0), lit_f(1.0)]
    out += [k for k in node.kids if k.t == node.t]
    return [c for c in out if c.render() != node.render()]


def nodes_of(prog):
    """(getter, setter) pairs for every node of the program, roots first."""
    slots = []

    def walk(get, put):
        slots.append((get, put))
        n = get()
        for i in range(len(n.kids)):
            walk(lambda n=n, i=i: n.kids[i], lambda v, n=n, i=i: n.kids.__setitem__(i, v))

    for lets in (prog.score_lets, prog.mask_lets):
        for i in range(len(lets)):
            walk(lambda lets=lets, i=i: lets[i][1],
                 lambda v, lets=lets, i=i: lets.__setitem__(i, (lets[i][0], v)))
    for attr in ("score", "mask"):
        if getattr(prog, attr) is not None:
            walk(lambda attr=attr: getattr(prog, attr),
                 lambda v, attr=attr: setattr(prog, attr, v))
    return slots


def minimize(runner, prog, shape, gpu, kind, budget):
    """Greedy reduction that keeps the failure's kind; at most `budget`
    seconds."""
    end = time.monotonic() + budget

    def fails(p, s, g):
        r = runner.run(p, s, g)
        return r != "pass" and r[0] == kind

    changed = True
    while changed and time.monotonic() < end:
        changed = False
        # Drop whole modifiers, lets, and the GPU.
        for attr, lets in (("score", "score_lets"), ("mask", "mask_lets")):
            if getattr(prog, attr) is not None:
                q = copy.deepcopy(prog)
                setattr(q, attr, None)
                setattr(q, lets, [])
                if fails(q, shape, gpu):
                    prog, changed = q, True
        if gpu and fails(prog, shape, False):
            gpu, changed = False, True
        # Drop lets, helpers and parameters nothing uses any more.
        import re

        def used(name, p):
            text = p.render()
            return len(re.findall(r"\b%s\b" % re.escape(name), text)) > 1

        for lets in ("score_lets", "mask_lets"):
            for i in reversed(range(len(getattr(prog, lets)))):
                if not used(getattr(prog, lets)[i][0], prog):
                    q = copy.deepcopy(prog)
                    del getattr(q, lets)[i]
                    prog, changed = q, True
        for i in reversed(range(len(prog.fns))):
            name = prog.fns[i].split()[1].split("(")[0]
            if not used(name, prog):
                q = copy.deepcopy(prog)
                del q.fns[i]
                prog, changed = q, True
        for i in reversed(range(len(prog.params))):
            name = prog.params[i][0]
            if not used(name, prog):
                q = copy.deepcopy(prog)
                del q.params[i]
                q.sets.pop(name, None)
                if fails(q, shape, gpu):
                    prog, changed = q, True
        for i in range(len(nodes_of(prog))):
            if time.monotonic() > end:
                break
            slots = nodes_of(prog)
            if i >= len(slots):
                break
            for cand in simpler(slots[i][0]()):
                q = copy.deepcopy(prog)
                nodes_of(q)[i][1](copy.deepcopy(cand))
                if fails(q, shape, gpu):
                    prog, changed = q, True
                    break
        # Smaller shapes.
        for k, v in (("batch", 1), ("heads", shape["kv-heads"]), ("dtype", "f32"),
                     ("layout", "bhsd"), ("q-len", min(shape["q-len"], 3))):
            if shape.get(k) != v and time.monotonic() < end:
                s = dict(shape)
                s[k] = v
                if k == "q-len" and s["mode"] == "prefill":
                    s["kv-len"] = v
                if k == "batch":
                    s.pop("kv-lens", None)
                if k == "layout":
                    s.pop("pad", None)
                if fails(prog, s, gpu):
                    shape, changed = s, True
    return prog, shape, gpu


# ---- driver ------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--gpu-share", type=float, default=0.35,
                    help="share of programs also run on the emulated GPU")
    ap.add_argument("--findings", default=None,
                    help="folder for minimized reproducers (default BUILD/fuzz-findings)")
    ap.add_argument("--minimize-seconds", type=float, default=120)
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = random.Random(seed)
    findings = args.findings or os.path.join(args.build, "fuzz-findings")
    work = tempfile.mkdtemp(prefix="attnc-difffuzz-")
    runner = Runner(args.build, work)
    print("difffuzz: seed %d, %.0f s" % (seed, args.seconds), flush=True)
    start = time.monotonic()
    stats = {"programs": 0, "cpu": 0, "gpu": 0}
    found = []
    try:
        while time.monotonic() - start < args.seconds:
            gpu = rng.random() < args.gpu_share
            prog = Gen(rng, gpu).program()
            shape = random_shape(rng, gpu)
            stats["programs"] += 1
            for g in ([False, True] if gpu else [False]):
                stats["gpu" if g else "cpu"] += 1
                r = runner.run(prog, shape, g)
                if r == "pass":
                    continue
                kind, detail = r
                print("difffuzz: %s on the %s (program %d); minimizing" %
                      (kind, "emulated GPU" if g else "CPU", stats["programs"]), flush=True)
                small, s, gg = minimize(runner, copy.deepcopy(prog), shape, g, kind,
                                        args.minimize_seconds)
                text = small.render()
                h = hashlib.sha256(text.encode()).hexdigest()[:12]
                os.makedirs(findings, exist_ok=True)
                path = os.path.join(findings, "%s-%s.attn" % (kind, h))
                cmd = runner.command(path, s, small.sets, gg)
                with open(path, "w") as f:
                    f.write("// difffuzz %s (seed %d): %s\n" % (kind, seed, detail.splitlines()[0] if detail else ""))
                    f.write("// reproduce: %s%s\n" % ("ATTNC_LIBCUDA=%s " % runner.emu if gg else "",
                                                     " ".join(cmd)))
                    f.write(text)
                found.append(path)
                print("difffuzz: reproducer %s\n%s" % (path, text), flush=True)
                break
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("difffuzz: %d programs (%d CPU runs, %d emulated GPU runs) in %.0f s, "
          "%d finding(s)" % (stats["programs"], stats["cpu"], stats["gpu"],
                             time.monotonic() - start, len(found)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
