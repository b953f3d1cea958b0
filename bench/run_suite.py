#!/usr/bin/python3
"""Runs a named benchmark suite with `attnc bench --json` and writes
bench/results/<date>-<machine>.json, a Markdown table (.md) and plots (.svg,
GFLOP/s against sequence length per variant, one line per system).

  bench/run_suite.py cpu-gym                 # run, then report
  bench/run_suite.py cpu-protocol --quick    # fewer iterations and lengths
  bench/run_suite.py --report FILE.json      # table + plots from a recording

GPU suites run on a machine with a GPU through bench/compare_torch.py
(attnc next to SDPA and flex_attention); --report FILE.json renders their
recordings too.

Suites (CPU):
  cpu-gym       the attention-gym set (causal, ALiBi, sliding window 1024,
                prefix-LM 1024, document mask with 12 documents, tanh softcap
                30) plus synaptic and non-causal, B*T = 8k tokens, H = 8,
                D = 64, T = 1k..8k, f32
  cpu-protocol  (B,H,S,d) = (1,1,128,64), (8,4,128,64), (32,8,128,64),
                (32,8,256,64), and S = 512..4096 at B = 1 and 4 (H = 8, d = 64)
  cpu-decode    Lq = 1, KV = 1k..16k, GQA 32/8, D = 128: achieved GB/s
"""
import argparse
import datetime
import json
import math
import os
import platform
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ex(name):
    return os.path.join(ROOT, "examples", name + ".attn")


def write_doc_ids(path, batch, length, docs):
    """int32 .npy [batch, length]: `docs` equal documents per row."""
    n = batch * length
    ids = [min(docs - 1, (i % length) * docs // length) for i in range(n)]
    shape = "(%d, %d)" % (batch, length)
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': %s, }" % shape
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)))
        f.write(header.encode())
        f.write(struct.pack("<%di" % n, *ids))


def suite_cases(name, quick, tmp):
    """Yields (label, attnc bench arguments) per case."""
    cases = []
    if name == "cpu-gym":
        lengths = [1024, 2048] if quick else [1024, 2048, 4096, 8192]
        tokens = 8192
        gym = [("causal", "causal", []), ("alibi", "alibi", []),
               ("sliding_window", "sliding_window", ["--set", "window=1024"]),
               ("prefix_lm", "prefix_lm", ["--set", "prefix=1024"]),
               ("document_mask", "document_mask", None),
               ("softcap", "softcap", ["--set", "cap=30"]),
               ("synaptic", "synaptic", ["--set", "barrier=0.01"]),
               ("full", "full", [])]
        for label, example, extra in gym:
            for t in lengths:
                b = max(1, tokens // t)
                args = [ex(example), "--batch", str(b), "--heads", "8",
                        "--head-dim", "64", "--sweep", str(t)]
                if extra is None:
                    npy = os.path.join(tmp, "doc-%d-%d.npy" % (b, t))
                    write_doc_ids(npy, b, t, 12)
                    extra = []
                    args += ["--input", "doc=" + npy]
                cases.append((label, args + extra))
                if label == "document_mask":
                    extra = None
    elif name == "cpu-protocol":
        configs = [(1, 1, 128, 64), (8, 4, 128, 64), (32, 8, 128, 64),
                   (32, 8, 256, 64)]
        sweep = [512, 1024] if quick else [512, 1024, 2048, 4096]
        for b in (1, 4):
            for s in sweep:
                configs.append((b, 8, s, 64))
        for b, h, s, d in configs:
            for v in ("full", "causal"):
                cases.append((v, [ex(v), "--batch", str(b), "--heads", str(h),
                                  "--head-dim", str(d), "--sweep", str(s)]))
    elif name == "cpu-decode":
        kvs = [1024, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
        for kv in kvs:
            cases.append(("causal", [ex("causal"), "--mode", "decode",
                                     "--batch", "4", "--heads", "32",
                                     "--kv-heads", "8", "--head-dim", "128",
                                     "--sweep", str(kv)]))
    else:
        raise SystemExit("unknown suite '%s' (cpu-gym, cpu-protocol, "
                         "cpu-decode)" % name)
    return cases


def machine_info():
    model = platform.processor() or "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "os": platform.platform()}


def git_commit():
    try:
        return subprocess.check_output(["git", "-C", ROOT, "rev-parse",
                                        "--short", "HEAD"], text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def run(args):
    attnc = args.attnc or os.path.join(ROOT, "build", "bin", "attnc")
    if not os.access(attnc, os.X_OK):
        raise SystemExit("attnc not found at %s (build it, or pass --attnc)"
                         % attnc)
    iters = ["--warmup", "1", "--iters", "3" if args.quick else "5"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, case in suite_cases(args.suite, args.quick, tmp):
            cmd = [attnc, "bench"] + case + iters + ["--json"]
            print("+", " ".join(cmd), file=sys.stderr, flush=True)
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit("attnc bench failed:\n" + out.stderr)
            for line in out.stdout.splitlines():
                row = json.loads(line)
                row["label"] = label
                rows.append(row)
    date = datetime.date.today().isoformat()
    name = args.machine or platform.node() or "cpu"
    record = {"suite": args.suite, "date": date, "commit": git_commit(),
              "machine": machine_info(), "rows": rows,
              "method": "attnc bench --json; " + " ".join(iters)}
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "%s-%s-%s.json" % (date, name, args.suite))
    with open(path, "w") as f:
        json.dump(record, f, indent=1)
    print("wrote", path)
    return path


def gflops(row):
    return row["gflops_visited"]


def write_table(base, lines):
    with open(base + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("wrote", base + ".md")


def plot_panels(base, panels, draw):
    """One subplot per panel (4 a row), draw(ax, panel) fills each; saves
    base.svg and base.png. Returns 1 (no plots) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (apt-get install python3-matplotlib): no "
              "plots", file=sys.stderr)
        return 1
    cols = min(4, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4 * cols, 3 * nrows),
                             squeeze=False)
    for ax, panel in zip(axes.flat, panels):
        draw(ax, panel)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sequence length")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(base + ".svg")
    fig.savefig(base + ".png", dpi=80)
    print("wrote", base + ".svg")
    return 0


def tflops(row, ms):
    """Useful TFLOP/s of a GPU row: unmasked pairs only (the row's sampled
    mask density), as FlexAttention users count it; 2.5x the forward's
    work for a backward row."""
    useful = row.get("density", 1.0)
    # Forward: QK^T and PV; backward: S, dP, dV, dK and dQ (2.5x).
    per = 10.0 if row.get("pass") == "backward" else 4.0
    flops = per * row["B"] * row["H"] * row["Lq"] * row["Lkv"] * row["D"]
    return flops * useful / (ms * 1e-3) / 1e12


def report_gpu(rec, path, out):
    """Table and plots of a GPU recording (bench/compare_torch.py): attnc,
    FlexAttention and the best SDPA backend side by side."""
    rows = rec["rows"]
    base = os.path.join(out, os.path.splitext(os.path.basename(path))[0])
    def sdpa_best(r):
        ms = [r[k][0] for k in r if k.startswith("sdpa_") and k.endswith("_ms")]
        return min(ms) if ms else None
    lines = ["# %s on %s (%s; torch %s, CUDA %s, %s)" % (
                 rec["suite"], rec["date"], rec["gpu"], rec["torch"],
                 rec.get("cuda"), rec["dtype"]),
             "",
             "Commit `%s`; %s." % (rec["commit"], rec["method"]),
             "ms are medians; TFLOP/s count unmasked (query, key) pairs; "
             "x > 1 means attnc is faster.", "",
             "| variant | T | B | H/Hkv | D | attnc ms | flex ms | SDPA best ms "
             "| attnc TF/s | attnc vs flex | attnc vs SDPA | max_abs vs flex "
             "| attnc via Python ms |",
             "|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        a = r.get("attnc_ms", [None])[0]
        f = r["flex_ms"][0]
        s = sdpa_best(r)
        fmt = lambda x: "%.3f" % x if x else "–"
        py = r.get("attnc_py_ms", [None])[0]
        lines.append("| %s | %d | %d | %d/%d | %d | %s | %.3f | %s | %s | %s | %s "
                     "| %s | %s |" % (
                         r["variant"], r["Lkv"], r["B"], r["H"], r["HKV"],
                         r["D"], fmt(a) if a else r.get("attnc_error", "–"), f,
                         fmt(s), "%.1f" % tflops(r, a) if a else "–",
                         "%.2fx" % (f / a) if a else "–",
                         "%.2fx" % (s / a) if a and s else "–",
                         "%.2g" % r["attnc_max_abs_vs_flex"]
                         if "attnc_max_abs_vs_flex" in r else "–",
                         fmt(py) if py else r.get("attnc_py_error", "–")))
    write_table(base, lines)

    def draw(ax, key):
        variant, d = key
        mine = sorted((r for r in rows if r["variant"] == variant and r["D"] == d),
                      key=lambda r: r["Lkv"])
        for label, get in (("attnc", lambda r: r.get("attnc_ms", [None])[0]),
                           ("flex_attention", lambda r: r["flex_ms"][0]),
                           ("SDPA (best)", sdpa_best)):
            pts = [(r["Lkv"], tflops(r, get(r))) for r in mine if get(r)]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-",
                        label=label)
        ax.set_ylabel("TFLOP/s (unmasked)")
        ax.set_title("%s, D=%d" % (variant, d))
    return plot_panels(base, sorted({(r["variant"], r["D"]) for r in rows}),
                       draw)


def report(path, out):
    with open(path) as f:
        rec = json.load(f)
    if rec["suite"].startswith("gpu-"):
        return report_gpu(rec, path, out)
    rows = rec["rows"]
    base = os.path.join(out, os.path.splitext(os.path.basename(path))[0])
    decode = all(r["mode"] == "decode" for r in rows)
    lines = ["# %s on %s (%s, %d cores)" % (rec["suite"], rec["date"],
                                            rec["machine"]["cpu"],
                                            rec["machine"]["cores"]),
             "",
             "Commit `%s`; %s." % (rec["commit"], rec["method"]), ""]
    if decode:
        lines += ["| variant | KV | B | Hq/Hkv | D | ms | GB/s (K+V read) |",
                  "|---|---:|---:|---|---:|---:|---:|"]
    else:
        lines += ["| variant | T | B | H | D | attnc ms | GF/s visited | "
                  "GF/s dense | unfused ms | attnc/unfused |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if decode:
            kv_bytes = (2 * r["batch"] * r["kv_heads"] * r["kv_len"] *
                        r["head_dim"] * (2 if r["dtype"] != "f32" else 4))
            gbs = kv_bytes / (r["ms_median"] * 1e-3) / 1e9
            lines.append("| %s | %d | %d | %d/%d | %d | %.3f | %.1f |" % (
                r["label"], r["kv_len"], r["batch"], r["heads"],
                r["kv_heads"], r["head_dim"], r["ms_median"], gbs))
        else:
            b = r.get("baseline_ms_median")
            lines.append("| %s | %d | %d | %d | %d | %.3f | %.1f | %.1f | %s "
                         "| %s |" % (
                             r["label"], r["kv_len"], r["batch"], r["heads"],
                             r["head_dim"], r["ms_median"], gflops(r),
                             r["gflops_dense"],
                             "%.3f" % b if b else "–",
                             "%.2fx" % (b / r["ms_median"]) if b else "–"))
    write_table(base, lines)

    def draw(ax, label):
        mine = sorted((r for r in rows if r["label"] == label),
                      key=lambda r: r["kv_len"])
        xs = [r["kv_len"] for r in mine]
        if decode:
            ax.plot(xs, [r["ms_median"] for r in mine], "o-", label="attnc cpu")
            ax.set_ylabel("ms")
        else:
            ax.plot(xs, [gflops(r) for r in mine], "o-", label="attnc cpu")
            # The baseline in the same units: the same useful (visited)
            # work divided by its time.
            pts = [(r["kv_len"],
                    r["gflops_visited"] * r["ms_median"] / r["baseline_ms_median"])
                   for r in mine if r.get("baseline_ms_median")]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], "s--",
                        label="unfused (OpenBLAS)")
            ax.set_ylabel("GFLOP/s (visited tiles)")
        ax.set_title(label)
    return plot_panels(base, sorted({r["label"] for r in rows}), draw)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("suite", nargs="?", help="cpu-gym, cpu-protocol or cpu-decode")
    p.add_argument("--report", metavar="FILE.json",
                   help="only write the table and plots of a recording")
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    p.add_argument("--attnc", help="path to attnc (default build/bin/attnc)")
    p.add_argument("--machine", help="machine name in the file name")
    p.add_argument("--quick", action="store_true",
                   help="fewer lengths and iterations")
    p.add_argument("--list", action="store_true",
                   help="print the suite's attnc bench commands and exit")
    args = p.parse_args()
    if args.report:
        return report(args.report, args.out)
    if not args.suite:
        p.error("name a suite, or --report FILE.json")
    if args.list:
        with tempfile.TemporaryDirectory() as tmp:
            for label, case in suite_cases(args.suite, args.quick, tmp):
                print(label, " ".join(os.path.relpath(a, ROOT)
                                      if a.startswith(ROOT) else a
                                      for a in case))
        return 0
    return report(run(args), args.out)


if __name__ == "__main__":
    sys.exit(main())
