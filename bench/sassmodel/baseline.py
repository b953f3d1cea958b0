"""Committed baselines, one file per ptxas version, and the gate: a kernel
whose MMA-FLOP per instruction falls more than the tolerance below its
baseline, that has more spill traffic in its tile loop than it had, or
whose structure is no longer recognized fails, as does a wgmma kernel that
loses the overlap its baseline had (fewer groups left in flight by its
wgmma.wait_group); a kernel the baseline has
and the run lacks fails too (coverage is never dropped silently). Spills
outside the tile loop (values that live across it, stored once before it
and loaded once after, per work item) are noted, not failed: the model
measures the cost per tile, and ptxas trades them for registers in the
loop."""

from __future__ import annotations

import json
from pathlib import Path

BASELINE_DIR = Path(__file__).with_name("baselines")
TOLERANCE = 0.02  # 2% of MMA-FLOP per instruction

# What a baseline keeps of each kernel's record.
KEPT = ("entry", "config", "instructions", "mma", "mma_flop_per_instruction",
        "instructions_per_mma", "async_copies", "instructions_per_async_copy",
        "int64_ops", "global_loads", "constant_loads", "loop_invariant_registers",
        "registers", "spill_store_bytes", "spill_load_bytes",
        "loop_local_memory", "predicted_tensor_busy", "mma_in_flight")


def path_for(ptxas_version: str) -> Path:
    return BASELINE_DIR / f"ptxas-{ptxas_version}.json"


def write(records: list[dict], ptxas_version: str, nvdisasm_version: str,
          commit: str) -> Path:
    p = path_for(ptxas_version)
    p.parent.mkdir(parents=True, exist_ok=True)
    kernels = {r["id"]: {k: r[k] for k in KEPT if k in r}
               for r in sorted(records, key=lambda r: r["id"]) if "error" not in r}
    # One line per kernel: a change to the baseline reads as a diff of the
    # kernels it moved.
    head = json.dumps({"ptxas": ptxas_version, "nvdisasm": nvdisasm_version,
                       "commit": commit}, sort_keys=True)[:-1]
    lines = [f" {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in kernels.items()]
    p.write_text(head + ', "kernels": {\n' + ",\n".join(lines) + "\n}}\n")
    return p


def load(ptxas_version: str) -> dict | None:
    p = path_for(ptxas_version)
    return json.loads(p.read_text()) if p.exists() else None


def spills(r: dict) -> int:
    return r.get("spill_store_bytes", 0) + r.get("spill_load_bytes", 0)


def compare(records: list[dict], base: dict, tolerance: float = TOLERANCE,
            subset: bool = False) -> tuple[list[str], list[str]]:
    """(failures, notes). With `subset`, kernels the run did not ask for
    are not failures."""
    failures, notes = [], []
    by_id = {r["id"]: r for r in records}
    for r in records:
        if "error" in r:
            failures.append(f"{r['id']}: {r['error']}")
    for kid, b in sorted(base["kernels"].items()):
        r = by_id.get(kid)
        if r is None:
            if not subset:
                failures.append(f"{kid}: in the baseline, not in this run")
            continue
        if "error" in r:
            continue
        now, was = r["mma_flop_per_instruction"], b["mma_flop_per_instruction"]
        if now < was * (1 - tolerance):
            failures.append(
                f"{kid}: {now} MMA-FLOP per instruction, {100 * (1 - now / was):.1f}% below "
                f"the baseline's {was} ({r['instructions']} instructions per tile, were "
                f"{b['instructions']})")
        elif now > was * (1 + tolerance):
            notes.append(f"{kid}: {now} MMA-FLOP per instruction, up from {was} "
                         f"(update the baseline)")
        loop_was = b.get("loop_local_memory")
        if loop_was is None:
            # A baseline from before the loop's own count: every spill counts.
            if spills(r) > spills(b):
                failures.append(f"{kid}: spills {spills(r)} bytes, the baseline {spills(b)}")
        elif r.get("loop_local_memory", 0) > loop_was:
            failures.append(
                f"{kid}: {r['loop_local_memory']} local-memory instructions (spills) in "
                f"its tile loop, the baseline {loop_was} ({spills(r)} spill bytes, "
                f"were {spills(b)})")
        elif spills(r) > spills(b):
            notes.append(f"{kid}: spills {spills(r)} bytes, the baseline {spills(b)}; "
                         f"none in the tile loop (once per work item)")
        if r.get("mma_in_flight", 0) < b.get("mma_in_flight", 0):
            failures.append(
                f"{kid}: its wgmma.wait_group leaves {r.get('mma_in_flight', 0)} groups in "
                f"flight, the baseline {b['mma_in_flight']}: the products no longer overlap "
                f"the softmax")
        if r.get("entry") != b.get("entry"):
            notes.append(f"{kid}: entry {r.get('entry')} (baseline {b.get('entry')})")
    for kid in sorted(set(by_id) - set(base["kernels"])):
        if "error" not in by_id[kid]:
            notes.append(f"{kid}: new, no baseline yet")
    return failures, notes
