"""Which kernels the model measures: every example x dtype x head dim x
target, forward and (tensor-core) backward, compiled by attnc into
packages whose manifests carry each kernel's PTX and its tile work.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from .steady_state import TileWork

DEFAULT_TARGETS = ("sm_80", "sm_89", "sm_90", "sm_90a")
DEFAULT_DTYPES = ("f16", "bf16")
DEFAULT_HEAD_DIMS = ("64", "128")


@dataclass
class Entry:
    """One kernel entry the model analyzes."""

    id: str  # example/dtype/dQKvDV/target/role
    example: str
    dtype: str
    dims: str  # "64:64"
    target: str
    role: str  # forward, bwd_q, bwd_kv
    entry: str  # the PTX entry name
    work: TileWork
    config: str  # the tile configuration, e.g. m128n32w8s2


@dataclass
class Image:
    """One PTX module (a package image) and the entries to analyze in it."""

    target: str
    ptx: str
    entries: list[Entry] = field(default_factory=list)


def _config(name: str) -> str:
    stem = name
    for suffix in ("_bwd_q", "_bwd_kv"):
        stem = stem.removesuffix(suffix)
    return stem.rsplit("_", 1)[-1]


def images_of_package(example: str, package: dict, backward: bool) -> list[Image]:
    out: list[Image] = []
    for variant in package["variants"]:
        for k in variant["kernels"]:
            tw = k.get("tile_work")
            if not tw or not tw.get("mma"):
                continue  # the SIMT form: no MMA, nothing to model
            dims = f"{k['head_dim']}:{k['v_head_dim']}"
            e = Entry(f"{example}/{k['dtype']}/d{dims}/{k['target']}/forward", example,
                      k["dtype"], dims, k["target"], "forward", k["kernel"],
                      TileWork(tw["mma"], tw["async_copies"], tw.get("atomics", 0), "KV tile",
                               tw.get("tma_loads", 0),
                               tw.get("mbarrier_waits", 1 if tw.get("tma_loads") else 0),
                               tw.get("sum_mma", 0)),
                      _config(k["kernel"]))
            out.append(Image(k["target"], k["ptx"], [e]))
        if not backward:
            continue
        for k in variant.get("backward", []):
            if k["target"].endswith("a"):
                continue  # the backward's forms are sm_90's on sm_90a
            dims = f"{k['head_dim']}:{k['v_head_dim']}"
            img = Image(k["target"], k["ptx"])
            for role, entry, key, what in (("bwd_q", k["query"], "query_tile_work", "KV tile"),
                                           ("bwd_kv", k["key_value"], "key_value_tile_work",
                                            "Q tile")):
                tw = k.get(key)
                if not tw or not tw.get("mma"):
                    continue
                img.entries.append(Entry(
                    f"{example}/{k['dtype']}/d{dims}/{k['target']}/{role}", example, k["dtype"],
                    dims, k["target"], role, entry,
                    TileWork(tw["mma"], tw["async_copies"], tw.get("atomics", 0), what), _config(entry)))
            if img.entries:
                out.append(img)
    return out


def compile_examples(attnc: Path, examples_dir: Path, out_dir: Path,
                     examples: list[str] | None, targets, dtypes, head_dims,
                     backward: bool, form: str = "") -> list[Image]:
    """One package per example (all targets, dtypes and head dims), then its
    images. `tour` is skipped: its variants are the other examples'."""
    images: list[Image] = []
    files = sorted(examples_dir.glob("*.attn"))
    for f in files:
        name = f.stem
        if name == "tour" or (examples and name not in examples):
            continue
        pkg = out_dir / f"{name}.json"
        cmd = [str(attnc), "compile", str(f), "--emit=package",
               "--target=" + ",".join(targets), "--dtypes=" + ",".join(dtypes),
               "--head-dims=" + ",".join(head_dims), "-o", str(pkg)]
        if backward:
            cmd.append("--backward")
        if form:
            cmd.append("--form=" + form)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"attnc compile {f.name} failed:\n{r.stderr}")
        images += images_of_package(name, json.loads(pkg.read_text()), backward)
    if examples:
        missing = set(examples) - {e.example for i in images for e in i.entries}
        if missing:
            raise RuntimeError(f"no such example (or no tensor-core kernel): {sorted(missing)}")
    return images
