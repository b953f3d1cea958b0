#!/usr/bin/env python3
"""CPU, one command, same run and same inputs: attnc's CPU kernels (driven
through the Python package's FlexAttention route, with the very closures
compare_torch.py gives flex_attention) next to torch's CPU
scaled_dot_product_attention (full and causal) and flex_attention compiled
with torch.compile. attnc's output is cross-checked against flex's before a
time is reported. Prints a Markdown table with ratios and writes
bench/results/<date>-<cpu>-cpu-torch.json.

  PYTHONPATH=build/python .venv/bin/python bench/compare_torch_cpu.py
  ... --variants causal,synaptic --lengths 1024 --threads 2

Protocol: float32, B=1, H=8, D=64, prefill; wall clock (time.perf_counter),
--warmup 2 and --iters 7 rounds, each calling every implementation once
(interleaved, 50 ms pause before each call), median per implementation; flex's block mask is built once per
case outside the timed region (attnc's block mask is built inside its call:
attnc's time includes it). flex_attention is compiled afresh for each case
(torch._dynamo.reset(): one compiled function shared by every case would
hit Dynamo's recompile limit and fall back to the unfused eager path), and
Inductor compiles in this process (TORCHINDUCTOR_COMPILE_THREADS=1), so no
compile workers share the cores with the timed runs.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_torch import GYM, modifiers  # noqa: E402  the same closures


def wall_ms(fns, warmup, iters):
    """Median wall time (ms) of each function, timed in interleaved rounds
    (one call of each per round, after `warmup` rounds) so that drift of
    the machine's speed hits all alike; a short pause before each call
    lets the other library's worker threads stop spinning."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times = [[] for _ in fns]
    for _ in range(iters):
        for i, fn in enumerate(fns):
            time.sleep(0.05)
            t = time.perf_counter()
            fn()
            times[i].append((time.perf_counter() - t) * 1e3)
    return [statistics.median(t) for t in times]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default=",".join(GYM))
    ap.add_argument("--lengths", default="1024,2048")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--threads", type=int, default=0, help="0: every core")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    import torch
    from torch.nn.attention import flex_attention as tfa
    import attnc

    if args.threads:
        torch.set_num_threads(args.threads)
    rows = []
    for T in [int(x) for x in args.lengths.split(",")]:
        for variant in args.variants.split(","):
            c = dict(variant=variant, B=1, H=args.heads, HKV=args.heads, Lq=T, Lkv=T,
                     D=args.head_dim)
            torch._dynamo.reset()
            flex = torch.compile(tfa.flex_attention, dynamic=False)
            g = torch.Generator().manual_seed(42)
            q, k, v = (torch.randn(1, args.heads, T, args.head_dim, generator=g)
                       for _ in range(3))
            score_mod, mask_mod, _, _ = modifiers(torch, variant, c, "cpu")
            ours_bm = attnc.create_block_mask(mask_mod, 1, args.heads, T, T) if mask_mod else None
            theirs_bm = (tfa.create_block_mask(mask_mod, 1, args.heads, T, T, device="cpu")
                         if mask_mod else None)
            run_ours = lambda: attnc.flex_attention(q, k, v, score_mod=score_mod,  # noqa: E731
                                                    block_mask=ours_bm)
            run_flex = lambda: flex(q, k, v, score_mod=score_mod,  # noqa: E731
                                    block_mask=theirs_bm)
            ours, theirs = run_ours(), run_flex()
            err = (ours - theirs).abs().max().item()
            row = dict(variant=variant, T=T, max_abs_vs_flex=err)
            if not err < 1e-3:
                row["note"] = "attnc differs from flex: not timed"
                rows.append(row)
                print(row, file=sys.stderr)
                continue
            fns = [run_ours, run_flex]
            if variant in ("full", "causal"):
                causal = variant == "causal"
                sdpa = lambda: torch.nn.functional.scaled_dot_product_attention(  # noqa: E731
                    q, k, v, is_causal=causal)
                row["sdpa_max_abs_vs_flex"] = (sdpa() - theirs).abs().max().item()
                fns.append(sdpa)
            ms = wall_ms(fns, args.warmup, args.iters)
            row["attnc_ms"], row["flex_ms"] = ms[0], ms[1]
            if len(ms) > 2:
                row["sdpa_ms"] = ms[2]
            rows.append(row)
            print("%-15s T=%-5d attnc %8.2f ms  flex %8.2f ms%s" % (
                variant, T, row["attnc_ms"], row["flex_ms"],
                "  sdpa %8.2f ms" % row["sdpa_ms"] if "sdpa_ms" in row else ""),
                file=sys.stderr)

    meta = dict(date=datetime.date.today().isoformat(), cpu=cpu_name(),
                cores=os.cpu_count(), threads=torch.get_num_threads(),
                torch=torch.__version__, python=platform.python_version(),
                dtype="float32", B=1, H=args.heads, D=args.head_dim,
                warmup=args.warmup, iters=args.iters,
                commit=os.popen("git -C %s describe --always --dirty 2>/dev/null"
                                % os.path.dirname(HERE)).read().strip())
    out = args.out or os.path.join(HERE, "results", "%s-%s-cpu-torch.json" % (
        meta["date"], "".join(ch if ch.isalnum() else "-" for ch in meta["cpu"])[:40]))
    with open(out, "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)
    print("| variant | T | attnc ms | flex (compiled) ms | attnc/flex speed | SDPA ms | attnc/SDPA speed | max_abs vs flex |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "attnc_ms" not in r:
            print("| %s | %d | — | — | — | — | — | %.2e (not timed) |" % (r["variant"], r["T"], r["max_abs_vs_flex"]))
            continue
        sd = r.get("sdpa_ms")
        print("| %s | %d | %.2f | %.2f | %.2f× | %s | %s | %.1e |" % (
            r["variant"], r["T"], r["attnc_ms"], r["flex_ms"], r["flex_ms"] / r["attnc_ms"],
            "%.2f" % sd if sd else "—", "%.2f×" % (sd / r["attnc_ms"]) if sd else "—",
            r["max_abs_vs_flex"]))
    print("\n%s; %s" % (out, json.dumps(meta)))


if __name__ == "__main__":
    main()
