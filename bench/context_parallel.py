"""Context parallelism on CPUs (attnc.distributed over gloo on localhost):
time per training step (forward + backward) of one attention layer per
scheme, against the same layer on the whole sequence in one process, and
the bytes each rank receives per step.

  .venv/bin/python bench/context_parallel.py [--world 2] [--seq 4096]
      [--heads 8] [--dim 64] [--steps 5] [--variant causal] [--json F]

Each world size is one launch of its ranks (this script re-runs itself per
rank). attnc's CPU kernels use every core of the machine in each process
(torch's own ops one thread), so the ranks share the machine's cores with
each other, and the single-process run has them all: the ratio is the
schemes' cost over one process on the same cores (communication, merges,
reordering), not a multi-device speed-up. Bytes are
counted from the shapes the scheme moves, per rank and step (float32):
  all_gather: forward K and V from the N-1 other ranks; backward dK and dV
              reduce-scattered (N-1 shards sent and received);
  ring:       forward N-1 K/V blocks; backward N-1 K/V blocks again and N
              dK/dV blocks (the last one home);
  ulysses:    (N-1)/N of this rank's Q, K, V and output shards, forward
              and backward (H = HKV here).
The model beside the table: a step of ring attention hides each block's
transfer under a block's compute when bytes_block / bandwidth < the block's
compute time; all-gather pays its transfer before the compute.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(__file__), "..")


def worker(rank, world, port, a):
    import torch
    import torch.distributed as dist
    import attnc
    import attnc.distributed as cp
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=world)
    kernel = attnc.compile(os.path.join(ROOT, "examples", a.variant + ".attn"),
                           variant=a.variant)
    g = torch.Generator().manual_seed(0)
    B, H, S, D = 1, a.heads, a.seq, a.dim
    q, k, v, dout = (torch.randn(B, H, S, D, generator=g) for _ in range(4))
    rows = []

    def timed(fn):
        fn()  # compiles, warms
        times = []
        for _ in range(a.steps):
            dist.barrier()
            t = time.perf_counter()
            fn()
            dist.barrier()
            times.append(time.perf_counter() - t)
        return statistics.median(times)

    if rank == 0:
        # The whole sequence in one process, one thread (a step of one device).
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]

        def whole():
            out = kernel(*leaves)
            out.backward(dout)
        whole()
        times = []
        for _ in range(a.steps):
            t = time.perf_counter()
            whole()
            times.append(time.perf_counter() - t)
        single = statistics.median(times)
    for scheme in cp.SCHEMES:
        for balance in (True, False):
            sh = [cp.shard(t, load_balance=balance).clone().requires_grad_()
                  for t in (q, k, v)]
            g_out = cp.shard(dout, load_balance=balance)

            def step():
                out = cp.attention(kernel, *sh, scheme=scheme, load_balance=balance)
                out.backward(g_out)
            sec = timed(step)
            n = dict(cp.last_launches)
            kv_shard = 2 * B * H * (S // world) * D * 4  # K and V, float32
            if scheme == "all_gather":
                recv = (world - 1) * kv_shard * 2  # forward K/V, backward dK/dV
            elif scheme == "ring":
                recv = (world - 1) * kv_shard * 2 + world * kv_shard
            else:  # q, k, v and out each way, (N-1)/N of a shard each
                recv = 2 * (world - 1) * (kv_shard * 2) // world
            rows.append({"scheme": scheme, "load_balance": balance,
                         "rank": rank, "seconds": sec, "bytes_received": recv,
                         "launches": n})
    gathered = [None] * world
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        out = {"world": world, "seq": S, "heads": H, "dim": D,
               "variant": a.variant, "single_process_seconds": single,
               "rows": [r for rs in gathered for r in rs]}
        print(json.dumps(out), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def write_svg(path, results):
    """A plain SVG bar chart (no plotting library): per world size and
    scheme, the slowest rank's time per step over one process's, balanced
    and not."""
    bars = []
    for r in results:
        single = r["single_process_seconds"]
        for scheme in ("all_gather", "ring", "ulysses"):
            for balance in (True, False):
                rs = [x for x in r["rows"] if x["scheme"] == scheme
                      and x["load_balance"] == balance]
                if rs:
                    bars.append(("%d ranks %s%s" % (r["world"], scheme,
                                                    "" if balance else " (unbal.)"),
                                 max(x["seconds"] for x in rs) / single))
    width, row, left = 640, 22, 210
    top = max(v for _, v in bars) * 1.1
    scale = (width - left - 60) / top
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (width, 40 + row * len(bars))]
    out.append('<text x="10" y="16">time per step / one process (same cores; '
               'lower is better)</text>')
    x1 = left + scale
    out.append('<line x1="%.1f" y1="24" x2="%.1f" y2="%d" stroke="#888" '
               'stroke-dasharray="4"/>' % (x1, x1, 30 + row * len(bars)))
    for i, (label, v) in enumerate(bars):
        y = 28 + i * row
        out.append('<text x="%d" y="%d" text-anchor="end">%s</text>'
                   % (left - 6, y + 14, label))
        out.append('<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>'
                   % (left, y + 2, v * scale, row - 6,
                      {"all_gather": "#4c78a8", "ring": "#f58518"}.get(
                          label.split()[2], "#54a24b")))
        out.append('<text x="%.1f" y="%d">%.2f</text>' % (left + v * scale + 4,
                                                          y + 14, v))
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--variant", default="causal")
    p.add_argument("--json")
    p.add_argument("--svg", nargs="+", metavar=("OUT.svg", "RESULT.json"),
                   help="no run: a bar chart of RESULT.json files (time per "
                        "step relative to one process, per scheme)")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.svg:
        if len(a.svg) < 2:
            sys.exit("--svg OUT.svg RESULT.json [RESULT.json ...]")
        write_svg(a.svg[0], [json.load(open(f)) for f in a.svg[1:]])
        return
    if a.rank is not None:
        worker(a.rank, a.world, a.port, a)
        os._exit(0)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = [sys.executable, __file__] + sys.argv[1:]
    procs = [subprocess.Popen(args + ["--rank", str(r), "--port", str(port)],
                              stdout=subprocess.PIPE, text=True, env=env)
             for r in range(a.world)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        sys.exit("a rank failed: exit codes %s" % [p.returncode for p in procs])
    result = json.loads([l for l in outs[0].splitlines() if l.startswith("{")][0])
    single = result["single_process_seconds"]
    print("%s, S=%d, H=%d, D=%d, %d ranks (gloo, sharing the cores); one "
          "process: %.3f s per step" % (result["variant"], result["seq"], result["heads"],
                               result["dim"], result["world"], single))
    print("| scheme | balanced | slowest rank, s/step | vs 1 process, same cores "
          "| MB received per rank | launches fwd/bwd (rank 0) |")
    print("|---|---|---|---|---|---|")
    for scheme in ("all_gather", "ring", "ulysses"):
        for balance in (True, False):
            rs = [r for r in result["rows"]
                  if r["scheme"] == scheme and r["load_balance"] == balance]
            slow = max(r["seconds"] for r in rs)
            r0 = [r for r in rs if r["rank"] == 0][0]
            print("| %s | %s | %.3f | %.2fx | %.1f | %s/%s |" % (
                scheme, "yes" if balance else "no", slow, single / slow,
                r0["bytes_received"] / 1e6, r0["launches"].get("forward"),
                r0["launches"].get("backward", "-")))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
