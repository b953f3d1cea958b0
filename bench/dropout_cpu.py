#!/usr/bin/env python3
"""What attention dropout costs on the CPU: attnc's causal kernel with and
without dropout_p, beside torch's SDPA with and without it, forward and
forward + backward, on torch tensors (f32), in interleaved rounds so that
every configuration sees the same machine.

Per round and configuration: 2 warm-up calls, then the median of `--iters`
timed calls; the figure is the median over rounds, ratios per round.

  PYTHONPATH=build/python bench/dropout_cpu.py [--rounds 3] [--iters 5]
      [--lengths 1024,2048] [--p 0.1] [--out bench/results]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from run_suite import git_commit, machine_info  # noqa: E402

import attnc  # noqa: E402

B, H, D = 1, 8, 64


def timed(fn, iters):
    fn()
    fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def configurations(kernel, L, p):
    g = torch.Generator().manual_seed(L)
    q, k, v = (torch.randn(B, H, L, D, generator=g) for _ in range(3))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]

    def attnc_call(x, drop):
        return kernel(*x, dropout_p=p, dropout_seed=1) if drop else kernel(*x)

    def sdpa_call(x, drop):
        return F.scaled_dot_product_attention(*x, is_causal=True,
                                              dropout_p=p if drop else 0.0)

    def forward(call, drop):
        def run():
            with torch.no_grad():
                call((q, k, v), drop)
        return run

    def both(call, drop):
        def run():
            call(leaves, drop).sum().backward()
        return run
    out = {}
    for name, call in (("attnc", attnc_call), ("sdpa", sdpa_call)):
        for drop in (False, True):
            tag = name + ("+dropout" if drop else "")
            out[("forward", tag)] = forward(call, drop)
            out[("forward+backward", tag)] = both(call, drop)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--lengths", default="1024,2048")
    ap.add_argument("--p", type=float, default=0.1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    kernel = attnc.compile(os.path.join(ROOT, "examples", "causal.attn"), "causal")
    rows = []
    for L in (int(x) for x in args.lengths.split(",")):
        confs = configurations(kernel, L, args.p)
        times = {key: [] for key in confs}
        for _ in range(args.rounds):
            for key, fn in confs.items():
                times[key].append(timed(fn, args.iters))
        for what in ("forward", "forward+backward"):
            med = {tag: statistics.median(times[(w, tag)])
                   for (w, tag) in times if w == what}
            ratio = lambda a, b: statistics.median(  # noqa: E731
                [x / y for x, y in zip(times[(what, a)], times[(what, b)])])
            row = {"L": L, "what": what, "ms": med,
                   "attnc_dropout_over_attnc": ratio("attnc+dropout", "attnc"),
                   "sdpa_dropout_over_attnc_dropout": ratio("sdpa+dropout",
                                                            "attnc+dropout")}
            rows.append(row)
            print("L=%5d %-17s attnc %7.1f  +dropout %7.1f (%.2fx)  sdpa %7.1f  "
                  "+dropout %7.1f  (sdpa+dropout / attnc+dropout %.2fx)" % (
                      L, what, med["attnc"], med["attnc+dropout"],
                      row["attnc_dropout_over_attnc"], med["sdpa"],
                      med["sdpa+dropout"], row["sdpa_dropout_over_attnc_dropout"]))
    result = {"date": datetime.date.today().isoformat(), "commit": git_commit(),
              "machine": machine_info(), "torch": torch.__version__,
              "shape": {"B": B, "H": H, "D": D, "dtype": "f32", "mask": "causal"},
              "dropout_p": args.p, "rounds": args.rounds, "iters": args.iters,
              "method": "median of iters per round, median over rounds",
              "rows": rows}
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        path = os.path.join(args.out, "%s-cpu-dropout.json" % result["date"])
        with open(path, "w") as f:
            json.dump(result, f, indent=1)
        print("wrote", path)


if __name__ == "__main__":
    main()
