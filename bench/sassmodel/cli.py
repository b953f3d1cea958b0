"""The command line of the static SASS model (bench/sass_model.py).

  run       compile every example's kernels, model them, print a summary
            (--json FILE: every record; --markdown FILE: the docs table)
  check     run, then compare with the committed baseline of this ptxas
            version: exit 1 on a regression, 77 (skip) when there is none
  update    run, then write the baseline of this ptxas version
  analyze   one PTX or cubin entry, given its tile work (--path prints the
            steady-state path)
  calibrate k from an ncu measurement: --busy 0.35 and the kernel's
            instructions per MMA (or --record a record of this model)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from . import baseline, catalog, disasm, model, tables, toolchain
from .analysis import analyze_image
from .cfg import Cfg, UnsupportedCode
from .metrics import tile_metrics
from .steady_state import TileWork

ROOT = Path(__file__).resolve().parents[2]


def _csv(s: str) -> list[str]:
    return [x for x in s.split(",") if x]


def _commit() -> str:
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    return r.stdout.strip() or "unknown"


def _run(args) -> tuple[list[dict], str, str]:
    ptxas = toolchain.find_tool("ptxas")
    nvdisasm = toolchain.find_tool("nvdisasm")
    attnc = Path(args.build) / "bin" / "attnc"
    if not attnc.exists():
        raise SystemExit(f"sass_model: {attnc} not found (build attnc first)")
    with tempfile.TemporaryDirectory(prefix="sassmodel-pkg-") as tmp:
        images = catalog.compile_examples(
            attnc, ROOT / "examples", Path(tmp), _csv(args.examples) or None,
            _csv(args.targets), _csv(args.dtypes), _csv(args.head_dims),
            backward=not args.no_backward, form=getattr(args, "form", ""))
    jobs = args.jobs or os.cpu_count() or 1
    records: list[dict] = []
    if jobs == 1:
        for img in images:
            records += analyze_image(img, ptxas, nvdisasm)
    else:
        with ProcessPoolExecutor(jobs) as pool:
            for recs in pool.map(analyze_image, images, [ptxas] * len(images),
                                 [nvdisasm] * len(images)):
                records += recs
    records.sort(key=lambda r: r["id"])
    pv, nv = toolchain.version(ptxas), toolchain.version(nvdisasm)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"ptxas": pv, "nvdisasm": nv, "commit": _commit(), "kernels": records},
            indent=1) + "\n")
    if args.markdown:
        shown = [r for r in records
                 if not args.markdown_dtypes or r["dtype"] in _csv(args.markdown_dtypes)]
        Path(args.markdown).write_text(tables.markdown(shown) + "\n")
    print(f"ptxas {pv}, nvdisasm {nv}, commit {_commit()}: {len(records)} kernels")
    print(tables.summary(records))
    return records, pv, nv


def _subset(args) -> bool:
    return bool(args.examples) or args.no_backward or (
        _csv(args.targets) != list(catalog.DEFAULT_TARGETS)
        or _csv(args.dtypes) != list(catalog.DEFAULT_DTYPES)
        or _csv(args.head_dims) != list(catalog.DEFAULT_HEAD_DIMS))


def cmd_check(args) -> int:
    records, pv, _ = _run(args)
    errors = [r for r in records if "error" in r]
    base = baseline.load(pv)
    if base is None:
        for r in errors:
            print(f"FAIL: {r['id']}: {r['error']}")
        if errors:
            return 1
        print(f"SKIP: no baseline for ptxas {pv} ({baseline.path_for(pv)}); "
              f"`bench/sass_model.py update` writes one")
        return 77
    failures, notes = baseline.compare(records, base, args.tolerance, _subset(args))
    for n in notes:
        print(f"note: {n}")
    for f in failures:
        print(f"FAIL: {f}")
    print(f"{len(records)} kernels against the baseline of ptxas {pv} "
          f"(commit {base.get('commit')}): {len(failures)} failures")
    return 1 if failures else 0


def cmd_update(args) -> int:
    records, pv, nv = _run(args)
    errors = [r for r in records if "error" in r]
    for r in errors:
        print(f"FAIL: {r['id']}: {r['error']}")
    if errors:
        return 1
    if _subset(args):
        raise SystemExit("sass_model: a baseline covers every kernel (drop the subset options)")
    p = baseline.write(records, pv, nv, _commit())
    print(f"wrote {p.relative_to(ROOT)}")
    return 0


def cmd_analyze(args) -> int:
    path = Path(args.file)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = path
        res = {}
        if path.suffix == ".ptx":
            cubin = Path(tmp) / "k.cubin"
            res = toolchain.assemble(toolchain.find_tool("ptxas"), path, args.target, cubin)
        funcs = disasm.parse(toolchain.disassemble(toolchain.find_tool("nvdisasm"), cubin))
    if args.entry not in funcs:
        raise SystemExit(f"sass_model: no entry {args.entry}; the image has {sorted(funcs)}")
    g = Cfg(funcs[args.entry])
    try:
        m, walk = tile_metrics(g, TileWork(args.mma, args.copies, args.atomics,
                                           tma_loads=args.tma_loads,
                                           waits=(args.waits if args.waits is not None
                                                  else 1 if args.tma_loads else 0),
                                           sum_mma=args.sum_mma),
                               args.warps)
    except UnsupportedCode as e:
        print(f"FAIL: structure not recognized: {e}")
        return 1
    out = m.as_dict()
    out.update(model.predict(m, args.target))
    if args.entry in res:
        out["registers"] = res[args.entry].registers
    print(json.dumps(out, indent=1))
    if args.path:
        for x in walk.instructions:
            print(x.text())
    return 0


def cmd_calibrate(args) -> int:
    if not 0 < args.busy <= 1:
        raise SystemExit(f"sass_model calibrate: --busy is a fraction in (0, 1], got {args.busy}")
    ipm, fpi = args.instructions_per_mma, args.flop_per_instruction
    if args.record:
        rec = json.loads(Path(args.record).read_text())
        ipm, fpi = rec["instructions_per_mma"], rec["mma_flop_per_instruction"]
    if ipm is None and fpi is None:
        raise SystemExit("sass_model calibrate: give --instructions-per-mma, "
                         "--flop-per-instruction or --record")
    if ipm is not None:
        print(f"k = {args.busy} x {ipm} = {model.calibrate(args.busy, ipm)}")
    if fpi is not None:
        print(f"flop_per_instruction_at_full_busy = {fpi} / {args.busy} = "
              f"{model.calibrate_flop(args.busy, fpi)}")
    return 0


def _guarded(fn):
    def run(args) -> int:
        try:
            return fn(args)
        except toolchain.ToolMissing as e:
            if "ptxas" in str(e):
                print(f"SKIP: {e}")
                return 77
            print(f"FAIL: {e}")
            return 1
    return run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="sass_model.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)

    def selection(p):
        p.add_argument("--build", default=str(ROOT / "build"))
        p.add_argument("--examples", default="", help="a subset (comma-separated)")
        p.add_argument("--targets", default=",".join(catalog.DEFAULT_TARGETS))
        p.add_argument("--dtypes", default=",".join(catalog.DEFAULT_DTYPES))
        p.add_argument("--head-dims", default=",".join(catalog.DEFAULT_HEAD_DIMS))
        p.add_argument("--no-backward", action="store_true")
        p.add_argument("--jobs", type=int, default=0)
        p.add_argument("--json")
        p.add_argument("--markdown")
        p.add_argument("--markdown-dtypes", default="",
                       help="only these dtypes in the Markdown table")

    for name, fn in (("run", None), ("check", cmd_check), ("update", cmd_update)):
        p = sub.add_parser(name)
        selection(p)
        if name == "check":
            p.add_argument("--tolerance", type=float, default=baseline.TOLERANCE)
        if name == "run":
            p.add_argument("--form", default="",
                           help="the forward's kernel form (attnc compile --form, "
                           "e.g. wgmma-persistent with --targets sm_90a); "
                           "the baseline holds the default forms")
        p.set_defaults(fn=fn or (lambda a: (_run(a), 0)[1]))
    p = sub.add_parser("analyze")
    p.add_argument("file")
    p.add_argument("--entry", required=True)
    p.add_argument("--target", default="sm_90")
    p.add_argument("--mma", type=int, required=True)
    p.add_argument("--copies", type=int, default=0)
    p.add_argument("--atomics", type=int, default=0)
    p.add_argument("--tma-loads", type=int, default=0)
    p.add_argument("--sum-mma", type=int, default=0,
                   help="of --mma, those adding the softmax's row sums (not counted as FLOP)")
    p.add_argument("--waits", type=int, default=None,
                   help="mbarrier waits per tile and warp (default: 1 with --tma-loads)")
    p.add_argument("--warps", type=int, default=1,
                   help="warps per CTA (averages the TMA-issuing warp with the others)")
    p.add_argument("--path", action="store_true")
    p.set_defaults(fn=cmd_analyze)
    p = sub.add_parser("calibrate")
    p.add_argument("--busy", type=float, required=True, help="ncu's tensor-pipe busy, 0..1")
    p.add_argument("--instructions-per-mma", type=float,
                   help="the model's figure for the measured kernel (mma.sync: gives k)")
    p.add_argument("--flop-per-instruction", type=float,
                   help="the model's MMA-FLOP per instruction for it (wgmma: gives "
                        "flop_per_instruction_at_full_busy)")
    p.add_argument("--record", help="one kernel's record from `run --json` (gives both)")
    p.set_defaults(fn=cmd_calibrate)
    args = ap.parse_args(argv)
    return _guarded(args.fn)(args)


if __name__ == "__main__":
    sys.exit(main())
