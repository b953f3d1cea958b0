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


def constant_for(target: str, cal: dict | None = None) -> tuple[float | None, str]:
    """(k, where it comes from) for a target. An architecture-specific
    target (sm_90a: wgmma, whose tensor-pipe cycles per instruction are not
    mma.sync's) borrows nothing: (None, "none") until a GPU run measures it."""
    cal = cal or load_calibration()
    if target in cal["targets"]:
        return cal["targets"][target]["k"], target
    if target.endswith("a"):
        return None, "none"
    num = int(target.removeprefix("sm_"))
    nearest = min(cal["targets"], key=lambda t: abs(int(t.removeprefix("sm_")) - num))
    return cal["targets"][nearest]["k"], nearest


def predict(m: PathMetrics, target: str, cal: dict | None = None) -> dict:
    k, source = constant_for(target, cal)
    if k is None:
        busy = None
    else:
        busy = min(1.0, k / m.instructions_per_mma) if m.instructions_per_mma else 0.0
    return {
        "predicted_tensor_busy": None if busy is None else round(busy, 3),
        "calibrated_on": source,
        "sfu_per_mma": round(m.sfu / m.mma, 3) if m.mma else 0.0,
    }


def calibrate(busy: float, instructions_per_mma: float) -> float:
    """k from an ncu measurement of a kernel and the model's figure for it."""
    return round(busy * instructions_per_mma, 4)
