#!/usr/bin/env python3
"""The CPU backward pass against the CPU forward, and torch's SDPA forward
and backward as a peer (causal only: SDPA has no score_mod), through the
Python package on torch tensors, in interleaved rounds so that every
configuration sees the same machine.

Per round and configuration: 2 warm-up calls, then the median of `--iters`
timed calls. The figure is the median over rounds; ratios are taken per
round. The backward is attnc::attention_backward alone (dQ, dK, dV and the
captures' gradients; D = rowsum(dO * O) included), not the forward again.
torch's flex_attention is not compared: it refuses backward on the CPU.

  PYTHONPATH=build/python bench/backward_cpu.py [--rounds 3] [--iters 5]
      [--lengths 1024,2048,4096] [--out bench/results]
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch

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
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def configs(T):
    g = torch.Generator().manual_seed(T)
    q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    dout = torch.randn(B, H, T, D, generator=g)
    qamp = torch.rand(B, H, T, generator=g) + 0.5
    kf = torch.rand(B, H, T, generator=g) + 0.5
    out = {}
    for name, params in (("causal", {}),
                         ("synaptic", {"qamp": qamp, "key_factor": kf,
                                       "barrier": 0.05})):
        kernel = attnc.compile(os.path.join(ROOT, "examples", name + ".attn"),
                               variant=name)
        with torch.no_grad():
            o, lse = kernel(q, k, v, return_lse=True, **params)
        fwd = (lambda kernel=kernel, params=params:
               kernel(q, k, v, return_lse=True, **params))
        bwd = (lambda kernel=kernel, params=params, o=o, lse=lse:
               kernel._backward(q, k, v, o, lse, dout, None, scale=None,
                                kv_lens=None, q_offsets=None, params=params))
        out[name] = (fwd, bwd)
    qs, ks, vs = (x.clone().requires_grad_() for x in (q, k, v))

    def sdpa_fwd():
        with torch.no_grad():
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def sdpa_bwd():  # forward with autograd, then backward: the training step
        y = torch.nn.functional.scaled_dot_product_attention(qs, ks, vs, is_causal=True)
        y.backward(dout)
    out["sdpa"] = (sdpa_fwd, sdpa_bwd)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--lengths", default="1024,2048,4096")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    a = ap.parse_args()
    torch.set_grad_enabled(True)
    rows = []
    for T in [int(x) for x in a.lengths.split(",")]:
        cfg = configs(T)
        samples = {n: {"fwd": [], "bwd": []} for n in cfg}
        for _ in range(a.rounds):
            for n, (fwd, bwd) in cfg.items():
                with torch.no_grad():
                    samples[n]["fwd"].append(timed(fwd, a.iters))
                samples[n]["bwd"].append(timed(bwd, a.iters))
        for n, s in samples.items():
            ratios = [b / f for f, b in zip(s["fwd"], s["bwd"])]
            rows.append({"variant": n, "T": T,
                         "fwd_ms": statistics.median(s["fwd"]),
                         "bwd_ms": statistics.median(s["bwd"]),
                         "bwd_over_fwd": statistics.median(ratios)})
            print("%-9s T=%5d  fwd %9.2f ms  bwd %9.2f ms  bwd/fwd %5.2f" % (
                n, T, rows[-1]["fwd_ms"], rows[-1]["bwd_ms"],
                rows[-1]["bwd_over_fwd"]), flush=True)
    result = {"date": datetime.date.today().isoformat(), "commit": git_commit(),
              "machine": machine_info(), "torch": torch.__version__,
              "shape": {"B": B, "H": H, "D": D, "dtype": "f32"},
              "method": "interleaved rounds, median of per-round medians",
              "rows": rows}
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "%s-cpu-backward.json" % result["date"])
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
