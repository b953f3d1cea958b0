"""The prediction: how busy a kernel keeps the tensor pipe, from what its
steady-state path issues.

An issue-bound kernel (attnc's, by ncu: an eligible warp in 44% of cycles,
DRAM 5.5%) spends a tile's time issuing its instructions. Per scheduler,
a tile of N instructions with H MMAs then takes N / IPC cycles, of which
the tensor pipe is busy H * t_mma: busy = t_mma * IPC / (N / H). The
product k = t_mma * IPC is the model's one constant per architecture,
calibrated from ncu (k = measured busy x the same kernel's instructions
per MMA, calibration.json) and recalibrated on every GPU run
(`sass_model.py calibrate`). Targets without a measurement borrow the
nearest calibrated architecture's constant and say so.

It predicts; a GPU measures. What it leaves out: latency a kernel cannot
hide (few warps, dependent MMAs), memory bandwidth (decode), the special
function unit's own limit (reported as MUFU per MMA, not folded in).
"""

from __future__ import annotations

import json
from pathlib import Path

from .metrics import PathMetrics

CALIBRATION_FILE = Path(__file__).with_name("calibration.json")


def load_calibration() -> dict:
    return json.loads(CALIBRATION_FILE.read_text())


def constant_for(target: str, cal: dict | None = None) -> tuple[dict | None, str]:
    """(the calibration record, the target it comes from) for a target. An
    architecture-specific target (sm_90a: wgmma, whose tensor-pipe cycles
    per instruction are not mma.sync's) borrows nothing: (None, "none")
    until a GPU run measures it."""
    cal = cal or load_calibration()
    if target in cal["targets"]:
        return cal["targets"][target], target
    if target.endswith("a"):
        return None, "none"
    num = int(target.removeprefix("sm_"))
    # Only a family target's constant is borrowed (sm_90a's is wgmma's).
    family = [t for t in cal["targets"] if not t.endswith("a")]
    nearest = min(family, key=lambda t: abs(int(t.removeprefix("sm_")) - num))
    return cal["targets"][nearest], nearest


def predict(m: PathMetrics, target: str, cal: dict | None = None) -> dict:
    """The tensor pipe's busy fraction of an issue-bound kernel. mma.sync
    instructions all have one shape, so a record's `k` (tensor-pipe cycles
    per MMA x issue rate) divides instructions per MMA; a wgmma's cycles
    grow with its N (a D=64 kernel's P V instructions are half a D=128
    one's), so sm_90a's record states `flop_per_instruction_at_full_busy`
    instead: the MMA-FLOP per issued instruction at which the pipe would
    never idle."""
    rec, source = constant_for(target, cal)
    if rec is None:
        busy = None
    elif "flop_per_instruction_at_full_busy" in rec:
        busy = min(1.0, m.mma_flop_per_instruction / rec["flop_per_instruction_at_full_busy"])
    else:
        busy = min(1.0, rec["k"] / m.instructions_per_mma) if m.instructions_per_mma else 0.0
    return {
        "predicted_tensor_busy": None if busy is None else round(busy, 3),
        "calibrated_on": source,
        "sfu_per_mma": round(m.sfu / m.mma, 3) if m.mma else 0.0,
    }


def calibrate(busy: float, instructions_per_mma: float) -> float:
    """k from an ncu measurement of a kernel and the model's figure for it."""
    return round(busy * instructions_per_mma, 4)


def calibrate_flop(busy: float, flop_per_instruction: float) -> float:
    """The MMA-FLOP per instruction at full busy from an ncu measurement of a
    kernel and the model's MMA-FLOP per instruction for it."""
    return round(flop_per_instruction / busy, 1)
