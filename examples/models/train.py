"""Trains the tiny GPT (or the synaptic GPT) on a text the project ships —
its own documentation, as bytes — with each attention backend from the
same seed and the same batches, then generates from a prompt with the KV
cache. Writes the loss curves as JSON and as one SVG plot.

    PYTHONPATH=build/python .venv/bin/python examples/models/train.py \
        --backends sdpa attnc --steps 300 --out docs/models

The curves of two backends differ only by floating-point rounding, so
they must overlap (tests/test_models.py runs a short version).
"""
import argparse
import glob
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT, GPTConfig, generate  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def corpus():
    """The project's Markdown (README and docs/), as a byte tensor."""
    paths = [os.path.join(ROOT, "README.md")] + sorted(
        glob.glob(os.path.join(ROOT, "docs", "*.md")))
    data = b"\n\n".join(open(p, "rb").read() for p in paths)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batches(data, steps, batch, seq, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        start = torch.randint(0, len(data) - seq - 1, (batch,), generator=g)
        rows = torch.stack([data[s:s + seq + 1] for s in start.tolist()])
        yield rows[:, :-1], rows[:, 1:]


def train(backend, steps=300, batch=16, seq=64, synaptic=False, seed=0, lr=3e-3,
          log=None, attn_dropout=0.0):
    """Losses per step of a run; the model at the end."""
    torch.manual_seed(seed)
    config = GPTConfig(synaptic=synaptic, n_kv_head=2, backend=backend,
                       max_seq_len=max(256, seq), attn_dropout=attn_dropout)
    model = GPT(config).train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    for i, (x, y) in enumerate(batches(corpus(), steps, batch, seq, seed + 1)):
        loss = model(x, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if log and (i % 50 == 0 or i == steps - 1):
            log("%-10s step %4d  loss %.4f" % (backend, i, losses[-1]))
    return losses, model.eval()


def svg_plot(curves, title):
    """A line plot of {label: [y...]} as SVG text (no plotting library)."""
    w, h, m = 640, 360, 48
    ys = [y for c in curves.values() for y in c]
    lo, hi = min(ys), max(ys)
    n = max(len(c) for c in curves.values())
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    px = lambda i: m + (w - 2 * m) * i / max(n - 1, 1)  # noqa: E731
    py = lambda y: h - m - (h - 2 * m) * (y - lo) / max(hi - lo, 1e-9)  # noqa: E731
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="%d" y="20">%s</text>' % (m, title),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (m, h - m, w - m, h - m),
           '<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (m, m, m, h - m),
           '<text x="%d" y="%d">step</text>' % (w // 2, h - 12),
           '<text x="4" y="%d">%.2f</text>' % (py(hi) + 4, hi),
           '<text x="4" y="%d">%.2f</text>' % (py(lo) + 4, lo),
           '<text x="%d" y="%d">%d</text>' % (w - m - 10, h - m + 16, n - 1)]
    for j, (label, c) in enumerate(curves.items()):
        color = colors[j % len(colors)]
        pts = " ".join("%.1f,%.1f" % (px(i), py(y)) for i, y in enumerate(c))
        dash = ' stroke-dasharray="6,4"' if j else ""
        out.append('<polyline fill="none" stroke="%s" stroke-width="1.5"%s points="%s"/>'
                   % (color, dash, pts))
        out.append('<text x="%d" y="%d" fill="%s">%s</text>' % (w - m - 120, m + 16 * j,
                                                               color, label))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", nargs="+", default=["sdpa", "attnc"])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--synaptic", action="store_true")
    ap.add_argument("--attn-dropout", type=float, default=0.0,
                    help="attention dropout while training (not the flex backend)")
    ap.add_argument("--out", default=None, help="folder for losses.json and the SVG")
    args = ap.parse_args()
    curves, times = {}, {}
    for backend in args.backends:
        t = time.perf_counter()
        curves[backend], model = train(backend, args.steps, synaptic=args.synaptic,
                                       log=print, attn_dropout=args.attn_dropout)
        times[backend] = time.perf_counter() - t
        prompt = corpus()[:32][None]
        text = generate(model, prompt, 48)[0, 32:].tolist()
        print("%-10s %.1f s; generates %r" % (backend, times[backend],
                                               bytes(text).decode("utf-8", "replace")))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        kind = "synaptic" if args.synaptic else "gpt"
        with open(os.path.join(args.out, "losses-%s.json" % kind), "w") as f:
            json.dump({"steps": args.steps, "losses": curves, "seconds": times}, f)
        with open(os.path.join(args.out, "losses-%s.svg" % kind), "w") as f:
            f.write(svg_plot(curves, "%s: training loss per step, by attention "
                             "backend" % kind))


if __name__ == "__main__":
    main()
