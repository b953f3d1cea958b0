"""ptxas and nvdisasm: finding them, assembling PTX, reading ptxas's
resource report, disassembling a cubin.

ptxas comes with the CUDA toolkit (/usr/local/cuda on every machine of
ours); nvdisasm from the PyPI package nvidia-cuda-nvdisasm that the set-up
installs into .venv (or a CUDA toolkit that has it). $PTXAS and $NVDISASM
override both.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


class ToolMissing(Exception):
    pass


def _venv_bin(name: str) -> list[Path]:
    out = []
    for base in {Path(sys.prefix), Path(__file__).resolve().parents[2] / ".venv"}:
        out += sorted(base.glob(f"lib/python3*/site-packages/nvidia/cu*/bin/{name}"))
    return out


def find_tool(name: str) -> str:
    env = os.environ.get(name.upper())
    if env:
        return env
    cands = [shutil.which(name)] if shutil.which(name) else []
    cands += [str(p) for p in _venv_bin(name)]
    cands.append(f"/usr/local/cuda/bin/{name}")
    for c in cands:
        if c and os.access(c, os.X_OK):
            return c
    hint = ("install the CUDA toolkit (ptxas)" if name == "ptxas" else
            "pip install nvidia-cuda-nvdisasm (scripts/setup.sh does)")
    raise ToolMissing(f"{name} not found: {hint}")


def version(tool: str) -> str:
    """'13.0.88' from `--version` (the release and build of the tool)."""
    out = subprocess.run([tool, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else "unknown"


@dataclass
class EntryResources:
    registers: int = 0
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0


def parse_ptxas_report(text: str) -> dict[str, EntryResources]:
    """ptxas -v's per-entry registers, stack frame and spills."""
    out: dict[str, EntryResources] = {}
    cur = None
    for line in text.splitlines():
        m = re.search(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?", line)
        if m:
            cur = out.setdefault(m.group(1), EntryResources())
            continue
        if cur is None:
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m:
            cur.stack_bytes, cur.spill_store_bytes, cur.spill_load_bytes = map(int, m.groups())
        m = re.search(r"Used (\d+) registers", line)
        if m:
            cur.registers = int(m.group(1))
    return out


def refuse_serialized_wgmma(text: str, what: str) -> None:
    """ptxas serializes wgmma.mma_async (waits for each before the next)
    when it cannot prove the asynchronous use safe, and says so in a
    warning: a kernel built so has lost what makes wgmma fast, so the
    model refuses it (issue #30)."""
    lines = [l.strip() for l in text.splitlines()
             if "wgmma.mma_async instructions are serialized" in l]
    if lines:
        raise RuntimeError(f"ptxas serialized wgmma in {what}:\n" + "\n".join(lines))


# `ptxas -arch=ARCH -v`, through the cache of assembled images that
# $ATTNC_PTXAS_CACHE names (plain ptxas without it): the ptxas table
# assembles many of the model's kernels, and ctest gives both one folder.
PTXAS_CACHED = Path(__file__).resolve().parents[2] / "scripts" / "ptxas-cached.sh"


def assemble(ptxas: str, ptx_path: Path, arch: str, cubin_path: Path) -> dict[str, EntryResources]:
    r = subprocess.run(["bash", str(PTXAS_CACHED), ptxas, arch, str(ptx_path), str(cubin_path)],
                       capture_output=True, text=True)
    report = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError(f"ptxas failed on {ptx_path} ({arch}):\n{report}")
    refuse_serialized_wgmma(report, f"{ptx_path} ({arch})")
    return parse_ptxas_report(report)


def disassemble(nvdisasm: str, cubin_path: Path) -> str:
    r = subprocess.run([nvdisasm, "-c", str(cubin_path)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"nvdisasm failed on {cubin_path}:\n{r.stderr}")
    return r.stdout
