#!/usr/bin/env python3
"""The seeds' model-level benchmark: the example GPTs (examples/models) with
their attention on each backend, in one run, on the CPU or a CUDA device.

  PYTHONPATH=build/python .venv/bin/python bench/models.py
  ... --model synaptic --backends manual,flex,attnc --device cuda

Two measurements per backend, each backend in its own process (so that
the peak memory is its own):
  forward   GPT forward (eval, no grad) at batch B × T tokens: ms/iter
            (median of --iters after --warmup), tokens/s;
  training  a fixed-FLOPs run (--train-tokens tokens of AdamW steps at
            B × T): tokens/s, the estimated TFLOP/s (6·params + the
            attention's 6·L·T·d_model per token, forward and backward, causal
            halving it) and the step's loss at the end (the runs share seed
            and batches, so the losses agree).
Peak memory: torch.cuda.max_memory_allocated on CUDA; on the CPU the
process's peak resident set (ru_maxrss), which includes the Python, torch
and (for attnc) LLVM baseline of the process.

`--compile` (the default) runs every backend's model under torch.compile
(Inductor); flex_attention is compiled in any case (eager flex
materializes the scores). Times are wall clock (time.perf_counter, with
torch.cuda.synchronize on CUDA). Prints a Markdown table with ratios to
the first backend and writes bench/results/<date>-<device>-models-<model>.json.
"""
import argparse
import datetime
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples", "models"))


def child(args):
    """One backend's measurements, as JSON on stdout."""
    import torch
    from gpt import GPT, GPTConfig
    torch.manual_seed(42)
    dev = torch.device(args.device)
    cfg = GPTConfig(vocab_size=256, n_layer=args.layers, n_head=args.heads,
                    n_kv_head=args.kv_heads, n_embd=args.heads * args.head_dim,
                    max_seq_len=args.seq, synaptic=args.model == "synaptic",
                    backend=args.backend)
    model = GPT(cfg).to(dev)
    run = torch.compile(model) if args.compile else model
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    g = torch.Generator().manual_seed(42)
    B, T = args.batch, args.seq
    idx = torch.randint(0, 256, (B, T), generator=g).to(dev)

    model.eval()
    times = []
    with torch.no_grad():
        for i in range(args.warmup + args.iters):
            sync()
            t = time.perf_counter()
            run(idx)
            sync()
            if i >= args.warmup:
                times.append(time.perf_counter() - t)
    fwd_ms = statistics.median(times) * 1e3

    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    steps = max(1, args.train_tokens // (B * T))
    batches = [torch.randint(0, 256, (B, T + 1), generator=g).to(dev)
               for _ in range(steps + 1)]

    def step(rows):
        loss = run(rows[:, :-1], rows[:, 1:])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    params = sum(p.numel() for p in model.parameters())
    flop_per_token = 6 * params + 6 * cfg.n_layer * T * cfg.n_embd  # causal
    tokens = steps * B * T
    try:
        step(batches[0])  # compiles (not timed)
    except NotImplementedError as e:  # torch's flex: no backward on the CPU
        untrained = str(e).splitlines()[0]
    else:
        untrained = None
        sync()
        t = time.perf_counter()
        for rows in batches[1:]:
            loss = step(rows)
        sync()
        train_s = time.perf_counter() - t
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2 ** 20
    else:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    train = {} if untrained else dict(
        train_tokens_s=tokens / train_s, train_tflops=flop_per_token * tokens / train_s / 1e12,
        final_loss=loss.item())
    print(json.dumps(dict(
        backend=args.backend, forward_ms=fwd_ms, forward_tokens_s=B * T / fwd_ms * 1e3,
        train_steps=steps, untrained=untrained, peak_mb=peak, params=params, **train)))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="gpt", choices=["gpt", "synaptic"])
    p.add_argument("--backends", help="comma-separated (default: sdpa,flex,attnc "
                   "for gpt; manual,flex,attnc for synaptic)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--train-tokens", type=int, default=8 * 256 * 20)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--backend", help=argparse.SUPPRESS)  # the child's
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = p.parse_args()
    if args.backend:
        return child(args)
    backends = (args.backends or ("sdpa,flex,attnc" if args.model == "gpt"
                                  else "manual,flex,attnc")).split(",")
    rows = []
    for b in backends:
        cmd = [sys.executable, "-W", "ignore", __file__] + [
            a for a in sys.argv[1:]] + ["--backend", b]
        t = time.perf_counter()
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode:  # recorded: a peer failing is a result too
            errors = [l for l in res.stderr.splitlines() if "Error" in l]
            why = (errors or res.stderr.strip().splitlines() or ["?"])[-1].strip()
            print("%s failed:\n%s" % (b, res.stderr[-3000:]), file=sys.stderr)
            rows.append(dict(backend=b, failed=why[:300]))
            continue
        rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
        print("%s: done in %.0f s" % (b, time.perf_counter() - t), file=sys.stderr)
    base = next(r for r in rows if "failed" not in r and not r["untrained"])
    head = ("| backend | forward ms/iter | forward tokens/s | train tokens/s | "
            "train TFLOP/s | peak MB | final loss | vs %s (train) |" % base["backend"])
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        if "failed" in r:
            lines.append("| %s | failed | | | | | | |" % r["backend"])
            continue
        if r["untrained"]:
            train = "n/a | n/a | %.0f | n/a | n/a" % r["peak_mb"]
        else:
            train = "%.0f | %.4f | %.0f | %.4f | %.2f×" % (
                r["train_tokens_s"], r["train_tflops"], r["peak_mb"], r["final_loss"],
                r["train_tokens_s"] / base["train_tokens_s"])
        lines.append("| %s | %.2f | %.0f | %s |" % (
            r["backend"], r["forward_ms"], r["forward_tokens_s"], train))
    for r in rows:
        if "failed" in r:
            lines.append("\n%s failed: %s" % (r["backend"], r["failed"]))
        elif r["untrained"]:
            lines.append("\n%s: no training run: %s" % (r["backend"], r["untrained"]))
    print("\n".join(lines))
    import torch
    where = (torch.cuda.get_device_name(0) if args.device.startswith("cuda")
             else platform.processor() or platform.machine())
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    meta = dict(date=datetime.date.today().isoformat(), device=where,
                cores=os.cpu_count(), torch=torch.__version__, commit=commit,
                argv=sys.argv[1:], threads=torch.get_num_threads())
    os.makedirs(args.out, exist_ok=True)
    name = "%s-%s-models-%s.json" % (meta["date"], args.device.split(":")[0], args.model)
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(dict(meta=meta, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
