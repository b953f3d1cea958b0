"""One image through the toolchain and the model: assemble, disassemble,
and for each of its entries the steady-state path and its metrics."""

from __future__ import annotations

import tempfile
from pathlib import Path

from . import disasm, toolchain
from .catalog import Image
from .cfg import Cfg, UnsupportedCode
from .metrics import tile_metrics, warps_of
from .model import predict


def analyze_image(image: Image, ptxas: str, nvdisasm: str) -> list[dict]:
    with tempfile.TemporaryDirectory(prefix="sassmodel-") as tmp:
        ptx = Path(tmp) / "k.ptx"
        cubin = Path(tmp) / "k.cubin"
        ptx.write_text(image.ptx)
        try:
            resources = toolchain.assemble(ptxas, ptx, image.target, cubin)
        except RuntimeError as err:  # ptxas failed, or serialized wgmma
            return [{"id": e.id, "example": e.example, "dtype": e.dtype,
                     "dims": e.dims, "target": e.target, "role": e.role,
                     "entry": e.entry, "config": e.config, "error": str(err)}
                    for e in image.entries]
        funcs = disasm.parse(toolchain.disassemble(nvdisasm, cubin),
                             only={e.entry for e in image.entries})
    out = []
    for e in image.entries:
        rec = {
            "id": e.id, "example": e.example, "dtype": e.dtype, "dims": e.dims,
            "target": e.target, "role": e.role, "entry": e.entry, "config": e.config,
            "tile_work": {"mma": e.work.mma, "async_copies": e.work.async_copies,
                          "atomics": e.work.atomics, "tma_loads": e.work.tma_loads,
                          "per": e.work.what},
        }
        res = resources.get(e.entry)
        if res is None or e.entry not in funcs:
            rec["error"] = f"entry {e.entry} not in the assembled image"
            out.append(rec)
            continue
        rec.update(registers=res.registers, stack_bytes=res.stack_bytes,
                   spill_store_bytes=res.spill_store_bytes,
                   spill_load_bytes=res.spill_load_bytes)
        try:
            g = Cfg(funcs[e.entry])
            m, _ = tile_metrics(g, e.work, warps_of(e.config))
        except UnsupportedCode as err:
            rec["error"] = f"structure not recognized: {err}"
            out.append(rec)
            continue
        rec.update(m.as_dict())
        rec.update(predict(m, e.target))
        out.append(rec)
    return out
