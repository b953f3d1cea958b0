"""What a steady-state path issues, counted: instructions per MMA, MMA-FLOP
per instruction, copies and the instructions that serve them, 64-bit
integer work, global and constant loads, and the tile loop's invariant
registers.

Attribution to copies is by data flow over two consecutive iterations of
the path (so that a pointer bumped for the next tile counts): an
instruction serves the copies when every use of what it writes is a copy
or serves the copies; the loop control of a rolled copy loop does too.
"""

from __future__ import annotations

from dataclasses import dataclass, asdict

from .cfg import Cfg
from .disasm import CONTROL_OPS, CONVERT_OPS, FP_OPS, INT_OPS, MMA_OPS, SFU_OPS, Instruction
import re

from .steady_state import ATOMIC_OPS, TILE_MMA_OPS, TileWork, Walk, steady_state

# FLOP of one HMMA.16816 (m16n8k16: 2 * 16 * 8 * 16).
MMA_FLOP = {"16816": 4096, "1688": 2048}


def mma_flop(x: Instruction) -> int:
    """Per warp: an HMMA's FLOP; an HGMMA.64xNxK's warpgroup product
    2 * 64 * N * K, of which each of its 4 warps issues a quarter."""
    shape = x.opcode.split(".")[1] if "." in x.opcode else ""
    if x.stem == "HGMMA":
        m, n, k = (int(v) for v in shape.split("x"))
        return 2 * m * n * k // 4
    return MMA_FLOP.get(shape, 4096)

def product_flop(mma_ins: list[Instruction], sum_mma: int) -> int:
    """The MMA-FLOP of a path's products: every MMA's but those of the
    `sum_mma` that add the softmax's row sums (the smallest: an HMMA like
    the others, an HGMMA.64x8)."""
    flops = sorted(mma_flop(x) for x in mma_ins)
    return sum(flops[sum_mma:])


_WIDE_PARTS = {"WIDE", "X", "64", "U64", "S64", "EX"}


def _is_int64(x: Instruction) -> bool:
    if x.stem not in INT_OPS and x.stem not in ("IADD3", "LEA", "SHF", "ISETP", "IMAD"):
        return False
    parts = set(x.opcode.split(".")[1:])
    return bool(parts & _WIDE_PARTS)


def _users(seq: list[Instruction]) -> list[set[int]]:
    """For each instruction, the later instructions reading what it wrote."""
    last_def: dict[str, int] = {}
    users: list[set[int]] = [set() for _ in seq]
    for j, x in enumerate(seq):
        for r in x.uses:
            i = last_def.get(r)
            if i is not None:
                users[i].add(j)
        for r in x.defs:
            last_def[r] = j
    return users


def _copy_serving(seq: list[Instruction], seeds: set[int]) -> set[int]:
    users = _users(seq)
    serving = set(seeds)
    changed = True
    while changed:
        changed = False
        for i in range(len(seq) - 1, -1, -1):
            if i in serving or not users[i]:
                continue
            if seq[i].stem in MMA_OPS or seq[i].stem in ("LDSM", "LDS", "MUFU"):
                continue
            if users[i] <= serving:
                serving.add(i)
                changed = True
    return serving


def _classify(x: Instruction) -> str:
    s = x.stem
    if s in MMA_OPS:
        return "mma"
    if s in ("LDSM", "LDS", "STS", "LDSM"):
        return "shared"
    if s == "LDGSTS":
        return "async_copy"
    if s in ("LDG", "STG", "LD", "ST", "LDC", "ULDC", "LDL", "STL", "RED", "ATOM", "ATOMG"):
        return "memory"
    if s in SFU_OPS:
        return "sfu"
    if s in FP_OPS:
        return "fp32"
    if s in CONVERT_OPS:
        return "convert"
    if s == "SHFL":
        return "shuffle"
    if s in CONTROL_OPS:
        return "control"
    if s in INT_OPS:
        return "int"
    return "other"


@dataclass
class PathMetrics:
    instructions: int  # issued per tile per warp, subroutines included
    mma: int
    mma_flop_per_instruction: float
    instructions_per_mma: float
    async_copies: int
    instructions_per_async_copy: float  # the copy itself included
    tma_loads: int  # UTMALDG on the path (the issuing thread's warp)
    int64_ops: int
    global_loads: int
    constant_loads: int
    local_memory: int  # LDL/STL on the path (spill traffic)
    loop_local_memory: int  # LDL/STL anywhere in the tile loop, any path
    atomics: int
    sfu: int
    shuffles: int
    barriers: int
    branches: int
    calls: int
    loop_invariant_registers: int
    mix: dict
    #: wgmma: the most groups a WARPGROUP.DEPBAR on the path leaves in
    #: flight (wgmma.wait_group N): 1 where a tile's softmax overlaps the
    #: previous tile's P V; 0 without the overlap or without wgmma.
    mma_in_flight: int = 0
    #: A kernel fed by TMA: the issuing warp's instructions per tile (the
    #: figures above are the CTA's average warp); 0 otherwise.
    issuing_warp_instructions: int = 0

    def as_dict(self) -> dict:
        return asdict(self)


def _invariant_registers(cfg: Cfg, walk: Walk) -> int:
    read, written = set(), set()
    for b in walk.loop.body:
        for x in cfg.instructions(b):
            read.update(r for r in x.uses if r.startswith("R"))
            written.update(r for r in x.defs if r.startswith("R"))
    return len(read - written)


def path_metrics(cfg: Cfg, walk: Walk, sum_mma: int = 0) -> PathMetrics:
    """The path's counts; MMA-FLOP and instructions per MMA are the
    products' (the row sums' `sum_mma` MMAs issued, not counted as work)."""
    seq = walk.instructions
    n = len(seq)
    issued = n + walk.call_cost
    mma_ins = [x for x in seq if x.stem in TILE_MMA_OPS]
    flop = product_flop(mma_ins, sum_mma)
    products = len(mma_ins) - sum_mma
    copies = sum(1 for x in seq if x.stem == "LDGSTS")

    # Copy overhead: two iterations, seeds are the copies and the control
    # of inner loops that copy (a rolled copy loop).
    inner_copy_blocks: set[int] = set()
    for loop in cfg.natural_loops():
        if loop.header == walk.loop.header or not loop.body < walk.loop.body:
            continue
        if any(x.stem == "LDGSTS" for b in loop.body for x in cfg.instructions(b)):
            inner_copy_blocks |= loop.body
    twice = seq + seq
    owner: list[int] = []
    for b in walk.blocks:
        owner += [b] * len(cfg.instructions(b))
    owner = owner + owner
    seeds = {i for i, x in enumerate(twice)
             if x.stem == "LDGSTS"
             or (owner[i] in inner_copy_blocks and x.stem in ("BRA", "BSSY", "BSYNC"))}
    serving = _copy_serving(twice, seeds)
    copy_instr = sum(1 for i in serving if i < n)

    users = _users(twice)
    int64 = 0
    for i, x in enumerate(seq):
        if _is_int64(x):
            int64 += 1
        elif x.stem in ("IADD3", "LEA") and any(d.startswith("P") for d in x.defs):
            # the low half of a 64-bit add: its carry feeds an .X
            if any(_is_int64(twice[j]) and any(p in twice[j].uses for p in x.defs
                                               if p.startswith("P"))
                   for j in users[i]):
                int64 += 1

    mix: dict[str, int] = {}
    for x in seq:
        k = _classify(x)
        mix[k] = mix.get(k, 0) + 1
    if walk.call_cost:
        mix["subroutines"] = walk.call_cost

    return PathMetrics(
        instructions=issued,
        mma=len(mma_ins),
        mma_flop_per_instruction=round(flop / issued, 1) if issued else 0.0,
        instructions_per_mma=round(issued / products, 2) if products > 0 else 0.0,
        async_copies=copies,
        instructions_per_async_copy=round(copy_instr / copies, 1) if copies else 0.0,
        tma_loads=sum(1 for x in seq if x.stem == "UTMALDG"),
        int64_ops=int64,
        global_loads=sum(1 for x in seq if x.stem == "LDG"),
        constant_loads=sum(1 for x in seq if x.stem in ("LDC", "ULDC")),
        local_memory=sum(1 for x in seq if x.stem in ("LDL", "STL")),
        loop_local_memory=sum(1 for b in walk.loop.body for x in cfg.instructions(b)
                              if x.stem in ("LDL", "STL")),
        atomics=sum(1 for x in seq if x.stem in ATOMIC_OPS),
        sfu=sum(1 for x in seq if x.stem == "MUFU"),
        shuffles=sum(1 for x in seq if x.stem == "SHFL"),
        barriers=sum(1 for x in seq if x.stem == "BAR"),
        branches=sum(1 for x in seq if x.stem == "BRA"),
        calls=len(walk.calls),
        loop_invariant_registers=_invariant_registers(cfg, walk),
        mix=dict(sorted(mix.items())),
        mma_in_flight=max((_depbar_pending(x) for x in seq
                           if x.opcode.startswith("WARPGROUP.DEPBAR")), default=0),
    )


def _depbar_pending(x: Instruction) -> int:
    """N of `WARPGROUP.DEPBAR.LE gsb0, 0xN`."""
    for op in reversed(x.operands):
        try:
            return int(op, 0)
        except ValueError:
            continue
    raise ValueError(f"no group count in {x.text()}")


def warps_of(config: str) -> int:
    """The warps of a kernel configuration name ("m128n128w8s2": 8)."""
    m = re.search(r"w(\d+)", config)
    if not m:
        raise ValueError(f"no warp count in configuration {config!r}")
    return int(m.group(1))


def tile_metrics(cfg: Cfg, work: TileWork, warps: int) -> tuple[PathMetrics, Walk]:
    """The metrics of one full tile. Where one thread issues the tile's TMA
    loads, its warp's path carries them and the others' do not: the
    figures are the CTA's average warp, (issuing + (warps - 1) others) /
    warps, the rest of the record the path of a warp that does not issue
    (and its walk is the one returned), with the issuing warp's count
    beside them."""
    walk = steady_state(cfg, work)
    m = path_metrics(cfg, walk, work.sum_mma)
    if not work.tma_loads:
        return m, walk
    other_walk = steady_state(cfg, work.without_tma())
    other = path_metrics(cfg, other_walk, work.sum_mma)
    avg = (m.instructions + (warps - 1) * other.instructions) / warps
    flop = product_flop([x for x in walk.instructions if x.stem in TILE_MMA_OPS],
                        work.sum_mma)
    products = other.mma - work.sum_mma
    other.issuing_warp_instructions = m.instructions
    other.tma_loads = m.tma_loads
    other.instructions = int(round(avg))
    other.mma_flop_per_instruction = round(flop / avg, 1) if avg else 0.0
    other.instructions_per_mma = round(avg / products, 2) if products > 0 else 0.0
    return other, other_walk
