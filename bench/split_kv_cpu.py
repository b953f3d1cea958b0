#!/usr/bin/env python3
"""Split-KV decode on the CPU: one pass (--splits 1) against the planner's
choice, in interleaved rounds so that both see the same machine.

Each round runs `attnc bench --json` once per configuration (warmup 3,
iters 20, every core); the figure is the median over rounds of each
round's median, and the ratio is taken per round. GB/s counts the K and V
bytes read once (4 * 2 * Lkv * Hkv * D for f32).

  bench/split_kv_cpu.py [--attnc build/bin/attnc] [--rounds 5]
                        [--out bench/results]
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from run_suite import git_commit, machine_info  # noqa: E402

# (label, heads, kv heads): MQA packs its 8 query heads into one work item
# (one item for two cores: the case split-KV is for); GQA 32/8 has 8.
SHAPES = [("MQA 8/1", 8, 1), ("GQA 32/8", 32, 8)]
KVS = [4096, 16384, 32768]


def bench(attnc, heads, kv_heads, kv, splits):
    cmd = [attnc, "bench", os.path.join(ROOT, "examples", "causal.attn"),
           "--mode", "decode", "--batch", "1", "--heads", str(heads),
           "--kv-heads", str(kv_heads), "--head-dim", "128", "--kv-len",
           str(kv), "--no-baseline", "--warmup", "3", "--iters", "20",
           "--json"]
    if splits:
        cmd += ["--splits", str(splits)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit("attnc bench failed:\n" + out.stderr)
    return json.loads(out.stdout.splitlines()[-1])["ms_median"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attnc", default=os.path.join(ROOT, "build", "bin",
                                                    "attnc"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = ap.parse_args()
    rows = []
    for label, h, hk in SHAPES:
        for kv in KVS:
            one, planned, ratio = [], [], []
            for _ in range(args.rounds):
                a = bench(args.attnc, h, hk, kv, 1)
                b = bench(args.attnc, h, hk, kv, 0)
                one.append(a)
                planned.append(b)
                ratio.append(a / b)
            gb = 4 * 2 * kv * hk * 128 / 1e9
            row = {"shape": label, "kv_len": kv,
                   "unsplit_ms": statistics.median(one),
                   "planned_ms": statistics.median(planned),
                   "speedup": statistics.median(ratio),
                   "unsplit_gbs": gb / (statistics.median(one) * 1e-3),
                   "planned_gbs": gb / (statistics.median(planned) * 1e-3)}
            rows.append(row)
            print("| %s | %d | %.2f | %.2f | %.2fx | %.1f | %.1f |" % (
                label, kv, row["unsplit_ms"], row["planned_ms"],
                row["speedup"], row["unsplit_gbs"], row["planned_gbs"]),
                flush=True)
    date = datetime.date.today().isoformat()
    rec = {"suite": "cpu-split-kv", "date": date, "commit": git_commit(),
           "machine": machine_info(), "rows": rows,
           "method": "attnc bench --json, causal decode B=1 D=128 f32, "
                     "every core, warmup 3 iters 20; %d interleaved rounds, "
                     "median of round medians" % args.rounds}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "%s-%s-cpu-split-kv.json" % (
        date, platform.node() or "cpu"))
    with open(path, "w") as f:
        json.dump(rec, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
