"""The control-flow graph of a SASS function: basic blocks, dominators and
natural loops.

Edges follow the branches nvdisasm prints. A `BRA.DIV` edge (taken when
the warp has diverged) is marked, so that a path model of a converged warp
can leave it out. Subroutines (`CALL` to a `$__internal_*` label) are not
inlined: a call stays one instruction of its block and names its callee.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from .disasm import Function, Instruction, is_conditional

_ENDS_BLOCK = {"BRA", "BRX", "JMP", "JMX", "EXIT", "RET", "KILL"}


def is_local_jump(x: Instruction) -> bool:
    """`CALL.REL.NOINC .L_x_N`: ptxas's jump out of a warp-synchronous
    loop (no return address kept), a branch to a label of the function
    itself; calls of subroutines name `$__internal_*` labels."""
    return x.stem == "CALL" and "NOINC" in x.opcode and bool(x.target) \
        and x.target.startswith(".L")


class UnsupportedCode(Exception):
    """The listing holds control flow the model does not follow."""


@dataclass
class Block:
    index: int
    first: int  # instruction indices [first, last)
    last: int
    succs: list[int] = field(default_factory=list)
    divergent: set[int] = field(default_factory=set)  # succs via BRA.DIV
    preds: list[int] = field(default_factory=list)


class Cfg:
    def __init__(self, func: Function, entry: int = 0):
        self.func = func
        ins = func.instructions
        leaders = {entry}
        for idx in func.labels.values():
            if idx < len(ins):
                leaders.add(idx)
        for i, x in enumerate(ins):
            if (x.stem in _ENDS_BLOCK or is_local_jump(x)) and i + 1 < len(ins):
                leaders.add(i + 1)
        starts = sorted(leaders)
        self.blocks: list[Block] = []
        self.block_at: dict[int, int] = {}
        for k, s in enumerate(starts):
            e = starts[k + 1] if k + 1 < len(starts) else len(ins)
            self.blocks.append(Block(k, s, e))
            self.block_at[s] = k
        for b in self.blocks:
            last = ins[b.last - 1]
            fall = self.block_at.get(b.last)
            stem = last.stem
            if stem in ("BRX", "JMX", "JMP"):
                raise UnsupportedCode(f"indirect branch: {last.text()}")
            if stem == "BRA" or is_local_jump(last):
                tgt = self._target(last)
                b.succs.append(tgt)
                if last.opcode.startswith("BRA.DIV"):
                    b.divergent.add(tgt)
                if is_conditional(last) and fall is not None:
                    b.succs.append(fall)
            elif stem in ("EXIT", "KILL"):
                if last.predicate and fall is not None:
                    b.succs.append(fall)
            elif stem == "RET":
                pass
            elif fall is not None:
                b.succs.append(fall)
        for b in self.blocks:
            for s in b.succs:
                self.blocks[s].preds.append(b.index)
        self.entry = self.block_at[entry]

    def _target(self, x: Instruction) -> int:
        if x.target is None or x.target not in self.func.labels:
            raise UnsupportedCode(f"branch without a known target: {x.text()}")
        return self.block_at[self.func.labels[x.target]]

    def instructions(self, b: int) -> list[Instruction]:
        blk = self.blocks[b]
        return self.func.instructions[blk.first:blk.last]

    def reachable(self) -> list[int]:
        seen, stack = {self.entry}, [self.entry]
        while stack:
            b = stack.pop()
            for s in self.blocks[b].succs:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return sorted(seen)

    def dominators(self) -> dict[int, set[int]]:
        nodes = self.reachable()
        all_nodes = set(nodes)
        dom = {n: set(all_nodes) for n in nodes}
        dom[self.entry] = {self.entry}
        changed = True
        while changed:
            changed = False
            for n in nodes:
                if n == self.entry:
                    continue
                preds = [p for p in self.blocks[n].preds if p in all_nodes]
                new = set.intersection(*(dom[p] for p in preds)) if preds else set()
                new = new | {n}
                if new != dom[n]:
                    dom[n] = new
                    changed = True
        return dom

    def natural_loops(self) -> list["Loop"]:
        """One loop per header (back edges to it merged), innermost first."""
        dom = self.dominators()
        bodies: dict[int, set[int]] = {}
        latches: dict[int, set[int]] = {}
        for n in dom:
            for s in self.blocks[n].succs:
                if s in dom and s in dom[n]:  # n -> s is a back edge
                    body = bodies.setdefault(s, {s})
                    latches.setdefault(s, set()).add(n)
                    stack = [n]
                    while stack:
                        x = stack.pop()
                        if x in body:
                            continue
                        body.add(x)
                        stack.extend(p for p in self.blocks[x].preds if p in dom)
        loops = [Loop(h, bodies[h], latches[h]) for h in bodies]
        loops.sort(key=lambda l: len(l.body))
        return loops


@dataclass
class Loop:
    header: int
    body: set[int]
    latches: set[int]


def shortest_to_return(cfg: Cfg, entry_instr: int) -> int:
    """Instructions issued on the cheapest path from a subroutine's first
    instruction to its RET (a callee's cost at a call site)."""
    start = cfg.block_at.get(entry_instr)
    if start is None:
        raise UnsupportedCode(f"call into the middle of a block at {entry_instr}")
    best = {start: 0}
    heap = [(0, start)]
    while heap:
        d, b = heapq.heappop(heap)
        if d > best.get(b, 1 << 60):
            continue
        blk = cfg.blocks[b]
        d2 = d + (blk.last - blk.first)
        if cfg.func.instructions[blk.last - 1].stem == "RET":
            return d2
        for s in blk.succs:
            if s in blk.divergent:
                continue
            if d2 < best.get(s, 1 << 60):
                best[s] = d2
                heapq.heappush(heap, (d2, s))
    raise UnsupportedCode("subroutine with no path to RET")
