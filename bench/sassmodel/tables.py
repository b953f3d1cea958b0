"""The model's records as Markdown (docs/kernels.md) and as a terminal
summary."""

from __future__ import annotations

COLUMNS = (
    ("example", "example"), ("dtype", "dtype"), ("dims", "Dqk:Dv"), ("target", "arch"),
    ("role", "kernel"), ("config", "tiles"), ("registers", "regs"),
    ("spills", "spill B"), ("instructions", "instr/tile"), ("mma", "MMA"),
    ("instructions_per_mma", "instr/MMA"), ("mma_flop_per_instruction", "MMA-FLOP/instr"),
    ("async_copies", "LDGSTS"), ("instructions_per_async_copy", "instr/LDGSTS"),
    ("tma_loads", "TMA"), ("mma_in_flight", "wgmma in flight"),
    ("int64_ops", "64-bit int"), ("global_loads", "LDG"), ("constant_loads", "LDC"),
    ("loop_invariant_registers", "invariant regs"), ("sfu_per_mma", "MUFU/MMA"),
    ("predicted_tensor_busy", "tensor busy (pred.)"),
)


def _cell(r: dict, key: str) -> str:
    if key == "spills":
        return str(r.get("spill_store_bytes", 0) + r.get("spill_load_bytes", 0))
    if key == "predicted_tensor_busy":
        return "–" if r.get(key) is None else f"{100 * r[key]:.0f}%"
    v = r.get(key, "")
    if key == "instructions_per_async_copy" and not r.get("async_copies"):
        return "–"
    if key in ("tma_loads", "mma_in_flight") and not v:
        return "–"
    if key == "instructions" and r.get("issuing_warp_instructions"):
        # the CTA's average warp (the issuing warp's count after it)
        return f"{v} ({r['issuing_warp_instructions']})"
    return str(v)


def markdown(records: list[dict]) -> str:
    head = "| " + " | ".join(h for _, h in COLUMNS) + " |"
    sep = "|" + "|".join("---" if i < 6 else "---:" for i in range(len(COLUMNS))) + "|"
    lines = [head, sep]
    for r in sorted(records, key=_order):
        if "error" in r:
            lines.append(f"| {r['example']} | {r['dtype']} | {r['dims']} | {r['target']} | "
                         f"{r['role']} | {r['config']} | not recognized: {r['error']} |")
            continue
        lines.append("| " + " | ".join(_cell(r, k) for k, _ in COLUMNS) + " |")
    return "\n".join(lines)


def _order(r: dict):
    return (r["role"] != "forward", r["role"], r["example"], r["target"], r["dtype"],
            int(r["dims"].split(":")[0]))


def summary(records: list[dict]) -> str:
    """Per (role, target, head dim): the range of MMA-FLOP per instruction."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        if "error" not in r:
            groups.setdefault((r["role"], r["target"], r["dims"]), []).append(r)
    lines = []
    for (role, target, dims), rs in sorted(groups.items()):
        fl = [r["mma_flop_per_instruction"] for r in rs]
        worst = min(rs, key=lambda r: r["mma_flop_per_instruction"])
        lines.append(f"{role:7s} {target} D={dims:8s} {len(rs):3d} kernels: MMA-FLOP/instr "
                     f"{min(fl):7.1f} .. {max(fl):7.1f} (lowest: {worst['example']} "
                     f"{worst['dtype']})")
    return "\n".join(lines)
