#!/usr/bin/env python3
"""Writes what the compiler generates for every example into a folder, one
file per kernel image, so that a refactoring can show it changes nothing:

  scripts/codegen-snapshot.py --build build --out /tmp/before
  ... change the compiler, rebuild ...
  scripts/codegen-snapshot.py --build build --out /tmp/after
  diff -r /tmp/before /tmp/after

GPU: the PTX of every forward and backward image of a package per example
(sm_80, sm_89, sm_90; f32, f16, bf16; Dqk:Dv 64, 128, 192:128, 256) and of
every tile candidate (bf16, D 64 and 128). CPU: the host LLVM IR (-O3) of
the forward (f32 and bf16, D 64 and 128) and of the backward (f32, D 64).
The CPU's IR depends on the host (its vector width): compare snapshots
taken on one machine.
"""

import argparse
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{r.stderr}")
    return r.stdout


def package(attnc, f, out, name, extra):
    p = out / f"{name}.package.json"
    run([attnc, "compile", f, "--emit=package", "-o", p] + extra)
    pkg = json.loads(p.read_text())
    p.unlink()
    for v in pkg["variants"]:
        for k in v["kernels"]:
            (out / f"{name}.{k['target']}.{k['kernel']}.ptx").write_text(k["ptx"])
            meta = {x: k[x] for x in k if x != "ptx"}
            (out / f"{name}.{k['target']}.{k['kernel']}.json").write_text(
                json.dumps(meta, indent=1, sort_keys=True))
        for k in v.get("backward", []):
            (out / f"{name}.{k['target']}.{k['query']}.bwd.ptx").write_text(k["ptx"])
            meta = {x: k[x] for x in k if x != "ptx"}
            (out / f"{name}.{k['target']}.{k['query']}.bwd.json").write_text(
                json.dumps(meta, indent=1, sort_keys=True))


def example(attnc, f, out):
    name = f.stem
    package(attnc, f, out, name, ["--target=sm_80,sm_89,sm_90", "--dtypes=f32,f16,bf16",
                                  "--head-dims=64,128,192:128,256", "--backward"])
    package(attnc, f, out, name + ".candidates",
            ["--target=sm_80,sm_90", "--dtypes=bf16", "--head-dims=64,128",
             "--tile-candidates"])
    for dtype in ("f32", "bf16"):
        for d in ("64", "128"):
            ir = run([attnc, "compile", f, "--emit=llvm", "--dtype", dtype, "--head-dim", d])
            (out / f"{name}.cpu.{dtype}.d{d}.ll").write_text(ir)
    ir = run([attnc, "compile", f, "--emit=llvm", "--backward", "--dtype", "f32"])
    (out / f"{name}.cpu.backward.f32.d64.ll").write_text(ir)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=str(ROOT / "build"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--examples", default="", help="a comma list (default: all but tour)")
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    attnc = Path(a.build) / "bin" / "attnc"
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = [x for x in a.examples.split(",") if x]
    files = [f for f in sorted((ROOT / "examples").glob("*.attn"))
             if f.stem != "tour" and (not wanted or f.stem in wanted)]
    with ThreadPoolExecutor(a.jobs) as pool:
        list(pool.map(lambda f: example(attnc, f, out), files))
    print(f"{len(list(out.iterdir()))} files in {out}")


if __name__ == "__main__":
    main()
