"""The steady state of a kernel: its tile loop, and the path one full tile
takes through it.

The generator says what a full tile does (`TileWork`: MMAs per warp,
16-byte async copies and atomic adds per thread). The tile loop is the innermost natural loop
holding at least that many MMAs through which one iteration can issue
exactly that work; the steady-state path is the cheapest such iteration,
from the loop header back to it: the walk may go around inner loops (a
rolled copy loop runs as many times as the copies need), takes no
divergent-warp edge and never leaves the loop. The cheapest iteration is
the full tile's: the mask is skipped, the prefetch of the next tile is
issued, contiguous K/V is copied without page arithmetic, the next visited
tile is the following one. A kernel may hold versions of its tile loop,
chosen once per work item (synaptic's for one query head per item and for
GQA heads sharing a tile): the cheapest version's iteration is the one.
When no iteration matches, the kernel's structure is not what the
generator said, and that is an error.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from .cfg import Cfg, Loop, UnsupportedCode, is_local_jump, shortest_to_return
from .disasm import Instruction


@dataclass(frozen=True)
class TileWork:
    """One full tile's work as the generator emits it, per warp (MMAs:
    HMMA for the mma.sync forms, HGMMA for the wgmma form) and per thread
    (16-byte cp.async, atomic adds)."""

    mma: int
    async_copies: int
    atomics: int = 0
    what: str = "KV tile"  # what one iteration of the tile loop covers
    tma_loads: int = 0  # UTMALDG, issued by one thread: the path is its warp's
    #: mbarrier waits (try_wait) per tile and thread: a kernel fed by TMA
    #: waits once per tile in every warp.
    waits: int = 0
    #: Of `mma`, those that add the softmax's row sums (P [V | 1]'s ones
    #: column, the smallest products): issued, not the attention's FLOP.
    sum_mma: int = 0

    def goal(self) -> tuple[int, int, int, int, int]:
        return (self.mma, self.async_copies, self.atomics, self.tma_loads, self.waits)

    def without_tma(self) -> "TileWork":
        """The same tile as a warp that issues no TMA load sees it."""
        return TileWork(self.mma, self.async_copies, self.atomics, self.what, 0, self.waits,
                        self.sum_mma)


@dataclass
class Walk:
    loop: Loop
    blocks: list[int]  # in order, header first
    instructions: list[Instruction]
    call_cost: int  # instructions issued inside subroutines on the path
    calls: list[str]


ATOMIC_OPS = {"RED", "REDG", "ATOM", "ATOMG"}


#: The tensor-core instructions a tile's work counts: mma.sync (HMMA) and
#: wgmma (HGMMA, issued by every warp of its warpgroup).
TILE_MMA_OPS = ("HMMA", "HGMMA")


#: A TMA load (cp.async.bulk.tensor into shared memory).
TMA_LOAD_OPS = ("UTMALDG",)


#: An mbarrier wait (mbarrier.try_wait's first probe).
MBARRIER_WAIT_OPS = ("SYNCS.PHASECHK.TRANS64.TRYWAIT",)


def _counts(ins: list[Instruction]) -> tuple[int, int, int, int, int]:
    mma = sum(1 for x in ins if x.stem in TILE_MMA_OPS)
    cp = sum(1 for x in ins if x.stem == "LDGSTS")
    at = sum(1 for x in ins if x.stem in ATOMIC_OPS)
    tma = sum(1 for x in ins if x.stem in TMA_LOAD_OPS)
    waits = sum(1 for x in ins if x.opcode in MBARRIER_WAIT_OPS)
    return mma, cp, at, tma, waits


def _block_costs(cfg: Cfg) -> dict[int, tuple[int, int, int, list[str]]]:
    """Per block: (issued instructions with callees, (MMAs, copies,
    atomics), callees)."""
    callee_cost: dict[str, int] = {}
    out = {}
    for b in cfg.reachable():
        ins = cfg.instructions(b)
        cost = len(ins)
        calls = []
        for x in ins:
            if x.stem == "CALL" and not is_local_jump(x):
                if x.target not in callee_cost:
                    if x.target not in cfg.func.labels:
                        raise UnsupportedCode(f"call to an unknown label: {x.text()}")
                    callee_cost[x.target] = shortest_to_return(
                        cfg, cfg.func.labels[x.target])
                cost += callee_cost[x.target]
                calls.append(x.target)
        out[b] = (cost, _counts(ins), calls)
    return out


def _walk_loop(cfg: Cfg, loop: Loop, work: TileWork, costs) -> Walk | None:
    h = loop.header
    goal = work.goal()
    zero = (0, 0, 0, 0, 0)
    start = (h, zero)
    best = {start: 0}
    parent: dict[tuple, tuple | None] = {start: None}
    heap = [(0, start)]
    limit = 2_000_000
    done = None
    while heap and limit:
        limit -= 1
        d, state = heapq.heappop(heap)
        if d > best.get(state, 1 << 60):
            continue
        b, done_so_far = state
        if b == h and state != start:
            if done_so_far == goal:
                done = state
                break
            continue  # came back to the header with the wrong work
        cost, work_b, _ = costs[b]
        after = tuple(x + y for x, y in zip(done_so_far, work_b))
        if any(x > g for x, g in zip(after, goal)):
            continue
        d2 = d + cost
        blk = cfg.blocks[b]
        for s in blk.succs:
            if s in blk.divergent or s not in loop.body:
                continue
            nxt = (s, after)
            if d2 < best.get(nxt, 1 << 60):
                best[nxt] = d2
                parent[nxt] = state
                heapq.heappush(heap, (d2, nxt))
    if done is None:
        return None
    path = []
    st = parent[done]
    while st is not None:
        path.append(st[0])
        st = parent[st]
    path.reverse()
    ins: list[Instruction] = []
    call_cost, calls = 0, []
    for b in path:
        ins += cfg.instructions(b)
        cost, _, cl = costs[b]
        call_cost += cost - len(cfg.instructions(b))
        calls += cl
    return Walk(loop, path, ins, call_cost, calls)


def steady_state(cfg: Cfg, work: TileWork) -> Walk:
    costs = _block_costs(cfg)
    total_mma = sum(v[1][0] for v in costs.values())
    if work.mma <= 0:
        raise UnsupportedCode("the generator reports no MMA per tile")
    if total_mma < work.mma:
        raise UnsupportedCode(
            f"the kernel issues {total_mma} MMA instructions in all, fewer than "
            f"the {work.mma} per {work.what} the generator reports")
    tried = []
    found: list[Walk] = []
    for loop in cfg.natural_loops():  # innermost first
        if any(w.loop.body <= loop.body for w in found):
            continue  # around a tile loop already found
        static_mma = sum(costs[b][1][0] for b in loop.body if b in costs)
        if static_mma < work.mma:
            continue
        walk = _walk_loop(cfg, loop, work, costs)
        if walk is not None:
            found.append(walk)
            continue
        tried.append(f"loop at block {loop.header} ({len(loop.body)} blocks, "
                     f"{static_mma} MMA)")
    if found:
        # Versions of the tile loop (chosen once per work item): the
        # cheapest is the full tile's.
        return min(found, key=lambda w: (len(w.instructions) + w.call_cost,
                                         w.loop.header))
    raise UnsupportedCode(
        f"no loop iteration issues exactly {work.mma} MMA, "
        f"{work.async_copies} LDGSTS, {work.tma_loads} UTMALDG, {work.waits} mbarrier "
        f"waits and {work.atomics} atomics per {work.what}; "
        f"tried: "
        + ("; ".join(tried) or "no loop holds that many MMAs"))
