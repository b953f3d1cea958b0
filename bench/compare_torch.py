#!/usr/bin/env python3
"""Side by side on a CUDA machine, in one run and on identical inputs:
PyTorch SDPA with each available backend (flash, cuDNN, efficient) and
flex_attention compiled with torch.compile (its BlockMask built by
create_block_mask and timed separately), and attnc's kernel from a package
run by the runtime-only `attnc-run --bench` on the same inputs (q, k, v and
captures handed over as .npy). Outputs are cross-checked (max_abs against
flex; SDPA against flex where the variant is expressible there) so that no
speed is reported for a wrong result. Writes
bench/results/<date>-<gpu>-gpu-<suite>.json and, through run_suite.py's
report, a Markdown table and plots (TFLOP/s vs length, one line per system).

  python3 bench/compare_torch.py --suite gym --dtype bf16 \
      --attnc-run .device/bin/attnc-run --packages .device/packages
  python3 bench/compare_torch.py --suite protocol --dry-run   # list cases
  PYTHONPATH=/tmp/attnc-python python3 bench/compare_torch.py --suite gym \
      --packages .device/packages --attnc-python     # through the Python package

With --backward, the backward pass instead: flex_attention's and SDPA's
(torch.autograd.grad of the forward's output, dO random, q, k, v and the
float captures requiring grad) against attnc's backward kernels from
packages built with `attnc compile --emit=package --backward` (default
folder .device/backward), timed by `attnc-run --backward --bench`; attnc's
gradients are checked against the fp64 backward by attnc-run --backward
(run-gpu-validation.sh), and here only for being finite. TFLOP/s then count
2 (3 Dqk + 2 Dv) per unmasked pair.

  python3 bench/compare_torch.py --suite gym --backward \
      --attnc-run .device/bin/attnc-run --packages .device/backward

Protocol: CUDA events, --warmup 200 and --iters 500 (median and spread),
seed 42. attnc's forward is timed without the LSE (`attnc-run --no-lse`:
inference's call, as flex_attention's output alone is timed; --with-lse
times a training forward's call). First run on an H100 on 2026-11-23 (docs/performance.md); the CPU
counterpart, through the Python package, is compare_torch_cpu.py.
"""
import argparse
import datetime
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

GYM = ["causal", "alibi", "sliding_window", "prefix_lm", "document_mask",
       "softcap", "synaptic", "full"]


def cases(suite):
    out = []
    if suite == "gym":
        for d in (64, 128):
            for t in (1024, 2048, 4096, 8192, 16384):
                for v in GYM:
                    out.append(dict(variant=v, B=max(1, 16384 // t), H=16,
                                    HKV=16, Lq=t, Lkv=t, D=d))
    elif suite == "protocol":
        for b, h, s, d in [(1, 1, 128, 64), (8, 4, 128, 64), (32, 8, 128, 64),
                           (32, 8, 256, 64)] + [(b, 8, s, 64) for b in (1, 4)
                                                for s in (512, 1024, 2048, 4096)]:
            for v in ("full", "causal"):
                out.append(dict(variant=v, B=b, H=h, HKV=h, Lq=s, Lkv=s, D=d))
    elif suite == "decode":
        for kv in (1024, 2048, 4096, 8192, 16384, 32768):
            out.append(dict(variant="causal", B=8, H=32, HKV=8, Lq=1, Lkv=kv,
                            D=128))
    else:
        raise SystemExit("unknown suite '%s' (gym, protocol, decode)" % suite)
    return out


def selected(args):
    """The suite's cases, narrowed by --variants, --lengths and --head-dims."""
    def keep(values, x):
        return not values or str(x) in values.split(",")
    return [c for c in cases(args.suite)
            if keep(args.variants, c["variant"]) and keep(args.lengths, c["Lkv"])
            and keep(args.head_dims, c["D"])]


def modifiers(torch, variant, c, device):
    """(score_mod, mask_mod, captures, sets): FlexAttention closures matching
    examples/<variant>.attn, the tensors they capture (by the .attn
    parameter's name, for attnc) and attnc's scalar parameters."""
    B, H, T = c["B"], c["H"], c["Lkv"]
    off = c["Lkv"] - c["Lq"]  # absolute query positions, as attnc uses
    g = torch.Generator(device=device).manual_seed(7)
    if variant == "alibi":
        slope = torch.exp2(-(torch.arange(H, device=device) + 1) * 8.0 / H)
        return (lambda s, b, h, q, kv: s + slope[h] * (kv - (q + off)),
                lambda b, h, q, kv: q + off >= kv, {"slope": slope}, {})
    if variant == "sliding_window":
        return (None, lambda b, h, q, kv: (q + off >= kv) & (q + off - kv < 1024),
                {}, {"window": 1024})
    if variant == "prefix_lm":
        return (None, lambda b, h, q, kv: (kv < 1024) | (q + off >= kv),
                {}, {"prefix": 1024})
    if variant == "document_mask":
        doc = (torch.arange(T, device=device) * 12 // T).repeat(B, 1)
        return (None, lambda b, h, q, kv: (doc[b, q + off] == doc[b, kv]) &
                (q + off >= kv), {"doc": doc.to(torch.int32)}, {})
    if variant == "softcap":
        return (lambda s, b, h, q, kv: 30.0 * torch.tanh(s / 30.0),
                lambda b, h, q, kv: q + off >= kv, {}, {"cap": 30})
    if variant == "synaptic":
        qamp = torch.rand(B, H, T, device=device, generator=g) + 0.5
        kf = torch.rand(B, H, T, device=device, generator=g) + 0.5
        return (lambda s, b, h, q, kv: s + torch.log(qamp[b, h, q + off] * kf[b, h, kv])
                - 0.01 * torch.abs(q + off - kv),
                lambda b, h, q, kv: q + off >= kv,
                {"qamp": qamp, "key_factor": kf}, {"barrier": 0.01})
    if variant == "causal":
        return (None, lambda b, h, q, kv: q + off >= kv, {}, {})
    return (None, None, {}, {})


def attnc_case(args, c, tensors, sets, tmp):
    """Runs attnc-run --bench (--backward with args.backward) on this case's
    inputs; returns (its JSON row, its output as a float32 numpy array, or
    None for the backward) or raises RuntimeError."""
    import numpy as np
    pkg = os.path.join(args.packages, c["variant"] + ".json")
    cmd = [args.attnc_run, pkg, "--bench", "--json",
           "--batch", str(c["B"]), "--heads", str(c["H"]),
           "--kv-heads", str(c["HKV"]), "--q-len", str(c["Lq"]),
           "--kv-len", str(c["Lkv"]), "--head-dim", str(c["D"]),
           "--dtype", args.dtype, "--warmup", str(args.warmup),
           "--iters", str(args.iters)]
    if c["Lq"] == 1:
        cmd += ["--mode", "decode"]
    for name, t in tensors.items():
        path = os.path.join(tmp, name + ".npy")
        np.save(path, t.detach().float().cpu().numpy() if t.is_floating_point()
                else t.detach().cpu().numpy())
        cmd += ["--input", "%s=%s" % (name, path)]
    for name, v in sets.items():
        cmd += ["--set", "%s=%s" % (name, v)]
    out = os.path.join(tmp, "out.npy")
    cmd += ["--backward"] if args.backward else ["--output", out]
    if not args.backward and not args.with_lse:
        cmd += ["--no-lse"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True,
                           timeout=args.attnc_timeout)
    except subprocess.TimeoutExpired:
        # A hung kernel (the first H200 run of the warp-specialized form,
        # 2026-11-27) costs this case, not the rest of the run.
        raise RuntimeError("attnc-run did not finish in %d s (a hung kernel?)"
                           % args.attnc_timeout)
    if r.returncode != 0:
        raise RuntimeError((r.stderr or r.stdout).strip().splitlines()[-1])
    row = json.loads(r.stdout.strip().splitlines()[-1])
    return row, None if args.backward else np.load(out)


def attnc_python_case(torch, args, c, q, k, v, captures, sets, ref, row):
    """attnc's kernel from the same package through the Python package
    (attnc.load_package; the runtime-only build on the GPU machine), on the
    torch CUDA tensors themselves, enqueued on torch's current stream and
    timed with the same events. Data-dependent masks build their block mask
    on the device inside each call (attnc-run times it apart)."""
    try:
        import attnc
        kernel = attnc.load_package(os.path.join(
            args.packages, c["variant"] + ".json")).kernel(c["variant"])
        params = dict(captures, **{n: float(x) for n, x in sets.items()})
        run = lambda: kernel(q, k, v, **params)  # noqa: E731
        err = (run().float() - ref.float()).abs().max().item()
        row["attnc_py_max_abs_vs_flex"] = err
        if err > 2e-2:
            row["attnc_py_error"] = "max_abs %.3g vs flex" % err
        else:
            row["attnc_py_ms"] = time_ms(torch, run, args.warmup, args.iters)
    except (ImportError, RuntimeError, ValueError) as e:
        row["attnc_py_error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0])


def time_ms(torch, fn, warmup, iters):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def run(args):
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    dev = "cuda"
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
    # Every case is a new shape or closure, so flex recompiles each time;
    # past dynamo's recompile limit (8) it silently falls back to the
    # unfused implementation, which would be timed as flex.
    torch._dynamo.config.recompile_limit = 1 << 20
    torch._dynamo.config.accumulated_recompile_limit = 1 << 20
    # The backward is timed by replaying autograd.grad on one forward's
    # graph (retain_graph=True), which a compiled backward with donated
    # buffers refuses (flex's did on the H100, 2026-11-26).
    import torch._functorch.config
    torch._functorch.config.donated_buffer = False
    flex = torch.compile(flex_attention)
    rows = []
    progress = os.path.join(args.out, "progress-%s.jsonl" % args.suite)
    os.makedirs(args.out, exist_ok=True)
    for c in selected(args):
        torch.manual_seed(args.seed)
        q = torch.randn(c["B"], c["H"], c["Lq"], c["D"], device=dev, dtype=dtype)
        k = torch.randn(c["B"], c["HKV"], c["Lkv"], c["D"], device=dev, dtype=dtype)
        v = torch.randn_like(k)
        score_mod, mask_mod, captures, sets = modifiers(torch, c["variant"], c, dev)
        row = dict(c, dtype=args.dtype, torch=torch.__version__,
                   gpu=torch.cuda.get_device_name())
        grads = ()
        if args.backward:
            # Gradients of q, k, v and of every float capture, as attnc's
            # backward computes them all.
            grads = (q, k, v) + tuple(t for t in captures.values()
                                      if t.is_floating_point())
            for t in grads:
                t.requires_grad_(True)
            row["pass"] = "backward"
        # The mask's density (fraction of unmasked pairs) on a sampled grid:
        # TFLOP/s count only the useful work.
        row["density"] = 1.0
        if mask_mod is not None:
            qi = torch.linspace(0, c["Lq"] - 1, min(c["Lq"], 256),
                                device=dev).long()[:, None]
            ki = torch.linspace(0, c["Lkv"] - 1, min(c["Lkv"], 256),
                                device=dev).long()[None, :]
            zero = torch.zeros((), dtype=torch.long, device=dev)
            row["density"] = mask_mod(zero, zero, qi, ki).float().mean().item()
        t0 = torch.cuda.Event(enable_timing=True)
        t1 = torch.cuda.Event(enable_timing=True)
        bm = None
        if mask_mod is not None:
            t0.record()
            bm = create_block_mask(mask_mod, c["B"], c["H"], c["Lq"], c["Lkv"],
                                   device=dev)
            t1.record()
            t1.synchronize()
            row["flex_block_mask_ms"] = t0.elapsed_time(t1)
        gqa = c["H"] != c["HKV"]
        ref = flex(q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=gqa)
        dout = torch.randn_like(ref) if args.backward else None

        def timed(fwd):
            """The forward, or with --backward the backward of one forward."""
            if not args.backward:
                return fwd
            out = fwd()
            return lambda: torch.autograd.grad(out, grads, dout,
                                               retain_graph=True)
        row["flex_ms"] = time_ms(torch, timed(lambda: flex(
            q, k, v, score_mod=score_mod, block_mask=bm, enable_gqa=gqa)),
            args.warmup, args.iters)
        # SDPA covers what it can express: no mask, or causal (bottom-right
        # aligned queries only when Lq == Lkv).
        if c["variant"] in ("full", "causal") and (c["variant"] == "full" or
                                                   c["Lq"] == c["Lkv"]):
            causal = c["variant"] == "causal"
            for name, backend in [("flash", SDPBackend.FLASH_ATTENTION),
                                  ("cudnn", SDPBackend.CUDNN_ATTENTION),
                                  ("efficient", SDPBackend.EFFICIENT_ATTENTION)]:
                try:
                    with sdpa_kernel(backend):
                        f = lambda: torch.nn.functional.scaled_dot_product_attention(
                            q, k, v, is_causal=causal, enable_gqa=gqa)
                        out = f()
                        err = (out.float() - ref.float()).abs().max().item()
                        if err > 2e-2:
                            row["sdpa_%s_error" % name] = "max_abs %.3g vs flex" % err
                            continue
                        row["sdpa_%s_ms" % name] = time_ms(torch, timed(f),
                                                           args.warmup,
                                                           args.iters)
                except RuntimeError as e:
                    row["sdpa_%s_error" % name] = str(e).splitlines()[0]
        if args.attnc_run:
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    a, out = attnc_case(args, c, dict(captures, q=q, k=k, v=v),
                                        sets, tmp)
                    err = 0.0 if out is None else float(
                        abs(out - ref.detach().float().cpu().numpy()).max())
                    if out is not None:
                        row["attnc_max_abs_vs_flex"] = err
                    if err > 2e-2:
                        row["attnc_error"] = "max_abs %.3g vs flex" % err
                    else:
                        row["attnc_ms"] = (a["ms_median"], a["ms_min"],
                                           a["ms_max"])
                        row["attnc_kernel"] = a["kernel"]
                        if a.get("block_mask_ms"):
                            row["attnc_block_mask_ms"] = a["block_mask_ms"]
                except RuntimeError as e:
                    row["attnc_error"] = str(e)
        if args.attnc_python:
            attnc_python_case(torch, args, c, q, k, v, captures, sets, ref, row)
        rows.append(row)
        print(json.dumps(row), flush=True)
        # Each row is kept as it comes, so a run cut short still has them.
        with open(progress, "a") as f:
            f.write(json.dumps(row) + "\n")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--suite", default="gym", help="gym, protocol or decode")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16"])
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--iters", type=int, default=500)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--attnc-python", action="store_true",
                   help="also time attnc through its Python package (import "
                   "attnc: PYTHONPATH at the runtime-only build, see "
                   ".device/build-python.sh) on the torch tensors, from --packages")
    p.add_argument("--attnc-timeout", type=int, default=120,
                   help="seconds one attnc-run case may take (default 120)")
    p.add_argument("--attnc-run", help="attnc-run (runtime only) to time "
                   "attnc's kernels with, e.g. .device/bin/attnc-run")
    p.add_argument("--packages", default=os.path.join(ROOT, ".device",
                                                      "packages"),
                   help="folder of <variant>.json kernel packages")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"),
                   help="folder for the recording, table and plots")
    p.add_argument("--variants", help="comma-separated subset of the suite's variants")
    p.add_argument("--lengths", help="comma-separated subset of its KV lengths")
    p.add_argument("--head-dims", help="comma-separated subset of its head dims")
    p.add_argument("--backward", action="store_true",
                   help="time the backward pass (packages from attnc compile "
                   "--emit=package --backward; default .device/backward)")
    p.add_argument("--with-lse", action="store_true",
                   help="time attnc's forward with the LSE written (a training "
                   "forward's call; default: without, as inference calls it "
                   "and as flex_attention is timed)")
    p.add_argument("--dry-run", action="store_true",
                   help="list the cases; needs neither torch nor a GPU")
    args = p.parse_args()
    if args.warmup < 0 or args.iters < 1:
        p.error("--warmup must be >= 0 and --iters >= 1")
    if args.backward and args.attnc_python:
        p.error("--attnc-python times the forward only")
    if args.backward and args.packages == os.path.join(ROOT, ".device",
                                                       "packages"):
        args.packages = os.path.join(ROOT, ".device", "backward")
    if args.dry_run:
        for c in selected(args):
            print("%(variant)s B=%(B)d H=%(H)d/%(HKV)d Lq=%(Lq)d Lkv=%(Lkv)d "
                  "D=%(D)d" % c)
        return 0
    rows = run(args)
    import torch
    gpu = torch.cuda.get_device_name().replace(" ", "-")
    date = datetime.date.today().isoformat()
    # The packages' commit (device-bundle.sh writes it beside them; the
    # device's copy of the repository may not carry an up-to-date .git).
    stamp = os.path.join(os.path.dirname(os.path.abspath(args.packages)), "COMMIT")
    commit = "unknown"
    if os.path.exists(stamp):
        commit = open(stamp).read().strip()
    else:
        try:
            commit = subprocess.check_output(["git", "-C", ROOT, "rev-parse",
                                              "--short", "HEAD"], text=True).strip()
        except (OSError, subprocess.CalledProcessError):
            pass
    suite = args.suite + ("-backward" if args.backward else "")
    record = {"suite": "gpu-" + suite, "date": date, "commit": commit,
              "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
              "cuda": torch.version.cuda, "dtype": args.dtype,
              "method": "CUDA events, warmup %d, iters %d, seed %d" % (
                  args.warmup, args.iters, args.seed),
              "rows": rows}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "%s-%s-gpu-%s.json" % (date, gpu, suite))
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    print("wrote", path)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import run_suite
    return run_suite.report(path, args.out)


if __name__ == "__main__":
    sys.exit(main())
