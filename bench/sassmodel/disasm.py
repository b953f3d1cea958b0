"""SASS as data: nvdisasm's listing parsed into functions of instructions,
each with the registers it reads and writes (widths included).

The listing is nvdisasm's plain text (`nvdisasm -c`): one instruction per
line with its byte offset, labels on lines of their own. Operand roles
follow the SASS conventions of sm_80..sm_90: the destination comes first,
a predicate destination may follow it (carry-out, comparison results),
stores and control instructions write no register.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_INSTR = re.compile(
    r"^\s*/\*([0-9a-f]+)\*/\s+(?:(@!?U?P[0-9T])\s+)?([A-Za-z0-9_.]+)\s*(.*?)\s*;\s*$"
)
_LABEL = re.compile(r"^([.$A-Za-z_][\w.$]*):\s*$")
_SECTION = re.compile(r"^\.text\.([\w.$]+):\s*$")

# Opcodes (first dot-separated part) that write no register: stores,
# barriers, control flow, memory ordering.
_NO_DEST = {
    "ST", "STG", "STS", "STL", "STAS", "RED", "REDG", "REDS", "LDGSTS",
    "BAR", "BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC",
    "BREAK", "BPT", "KILL", "NOP", "WARPSYNC", "DEPBAR", "LDGDEPBAR",
    "MEMBAR", "FENCE", "ERRBAR", "CCTL", "CCTLL", "ENDCOLLECTIVE", "YIELD",
    "UTMALDG", "UTMASTG", "UBLKCP", "SYNCS", "ARRIVES", "WARPGROUP",
    "STSM", "ACQBULK", "UTMAPF", "UTMACCTL", "UCGABAR_ARV", "UCGABAR_WAIT",
    "CGAERRBAR", "ELECT",
}
# Opcodes whose leading predicate operands after the first are also
# destinations (carry-out of an add, the second result of a comparison).
_PRED_OUT_AFTER_FIRST = {
    "IADD3", "LEA", "SHFL", "ISETP", "FSETP", "DSETP", "HSETP2", "PLOP3",
    "LOP3", "VOTE", "IADD", "UIADD3", "ULEA", "UISETP", "UPLOP3", "ULOP3",
    "R2P", "FCHK", "IMNMX", "VIMNMX", "ATOM", "ATOMS", "ATOMG",
}

# Instruction classes by opcode stem.
MMA_OPS = {"HMMA", "IMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA", "BGMMA"}
INT_OPS = {
    "IMAD", "IADD3", "IADD", "LEA", "LOP3", "LOP", "SHF", "SHL", "SHR",
    "ISETP", "SEL", "MOV", "PRMT", "VIADD", "VIMNMX", "IMNMX", "IABS",
    "FLO", "POPC", "BREV", "BMSK", "SGXT", "IDP", "IMUL", "UIADD3", "UMOV",
    "ULEA", "ULOP3", "USHF", "UISETP", "UIMAD", "USEL", "UPRMT", "R2UR",
    "S2UR", "S2R", "CS2R", "PLOP3", "P2R", "R2P", "UPLOP3", "VOTEU", "VOTE",
    "IMNMX", "LEPC", "UFLO", "UPOPC", "UBMSK", "USGXT", "UBREV",
}
FP_OPS = {
    "FFMA", "FMUL", "FADD", "FMNMX", "FSEL", "FSETP", "FSET", "HFMA2",
    "HADD2", "HMUL2", "HMNMX2", "FCHK", "FSWZADD", "FRND", "DFMA", "DADD",
    "DMUL", "DSETP",
}
CONVERT_OPS = {"F2FP", "F2F", "I2F", "F2I", "I2FP", "F2IP", "I2I"}
SFU_OPS = {"MUFU"}
CONTROL_OPS = {
    "BRA", "BRX", "JMP", "JMX", "CALL", "RET", "EXIT", "BSSY", "BSYNC",
    "BREAK", "WARPSYNC", "BAR", "DEPBAR", "LDGDEPBAR", "NOP", "YIELD",
    "ENDCOLLECTIVE", "MEMBAR", "SYNCS", "WARPGROUP",
}


def split_operands(text: str) -> list[str]:
    """Top-level comma split (commas inside [] or () stay)."""
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur and "".join(cur).strip():
        out.append("".join(cur).strip())
    return out


_REG = re.compile(r"(?<![\w$])(U?R)(\d+|Z)((?:\.[A-Z0-9_]+)*)")
_PRED = re.compile(r"(?<![\w$])!?(U?P)([0-9T])(?![\w])")


def _is_pred(op: str) -> bool:
    return bool(re.fullmatch(r"!?U?P[0-9T]", op))


def _regs_in(op: str, width: int = 1) -> list[str]:
    """The general and uniform registers an operand names; `R4.64` and a
    width of 2 or 4 name consecutive registers. RZ/URZ are no register."""
    regs = []
    for kind, num, suffix in _REG.findall(op):
        if num == "Z":
            continue
        w = width
        if ".64" in suffix:
            w = max(w, 2)
        if ".128" in suffix:
            w = max(w, 4)
        base = int(num)
        regs.extend(f"{kind}{base + i}" for i in range(w))
    return regs


def _preds_in(op: str) -> list[str]:
    return [f"{k}{n}" for k, n in _PRED.findall(op) if n != "T"]


def _mem_width(opcode: str) -> int:
    parts = opcode.split(".")
    if "128" in parts:
        return 4
    if "64" in parts:
        return 2
    return 1


def _widths(opcode: str, n_ops: int) -> list[int]:
    """Registers each operand spans (by operand index; the destination is
    operand 0), for opcodes whose operands cover several registers without
    a `.64` suffix: MMA fragments, ldmatrix, wide loads and stores."""
    parts = opcode.split(".")
    stem = parts[0]
    w = [1] * max(n_ops, 1)
    def put(i, x):
        if i < len(w):
            w[i] = x
    if stem == "HMMA":
        shape = parts[1] if len(parts) > 1 else ""
        acc = 4 if len(parts) > 2 and parts[2] == "F32" else 2
        a, b = (2, 1) if shape == "1688" else (4, 2)
        for i, x in enumerate((acc, a, b, acc)):
            put(i, x)
    elif stem == "HGMMA":
        # HGMMA.64xNx16.F32.*: N / 2 f32 accumulators per thread (operands
        # 0 and 3), A from 4 registers when not a descriptor.
        try:
            n = int(parts[1].split("x")[1])
        except (IndexError, ValueError):
            n = 8
        acc = n // 2 if len(parts) > 2 and parts[2] == "F32" else n // 4
        for i, x in enumerate((acc, 4, 1, acc)):
            put(i, x)
    elif stem == "LDSM":
        put(0, 4 if parts[-1] == "4" else 2 if parts[-1] == "2" else 1)
    elif stem in ("LDG", "LDS", "LD", "LDL", "LDC", "ULDC", "ATOM", "ATOMG",
                  "ATOMS"):
        put(0, _mem_width(opcode))
    elif stem in ("STG", "STS", "ST", "STL"):
        put(1, _mem_width(opcode))
    elif stem == "IMAD" and "WIDE" in parts:
        put(0, 2)
        put(3, 2)  # the 64-bit addend
    elif stem == "CS2R":
        put(0, 2)
    elif stem in ("DADD", "DMUL", "DFMA"):
        w = [2] * max(n_ops, 1)
    return w


@dataclass
class Instruction:
    offset: int
    predicate: str  # "" or "@P0", "@!P1", ...
    opcode: str
    operands: list[str]
    target: str | None = None  # branch or call target label
    defs: list[str] = field(default_factory=list)
    uses: list[str] = field(default_factory=list)

    @property
    def stem(self) -> str:
        return self.opcode.split(".")[0]

    def text(self) -> str:
        pred = self.predicate + " " if self.predicate else ""
        return f"/*{self.offset:04x}*/ {pred}{self.opcode} {', '.join(self.operands)}"


@dataclass
class Function:
    name: str
    instructions: list[Instruction]
    labels: dict[str, int]  # label -> index into instructions

    def index_of_label(self, label: str) -> int:
        return self.labels[label]


def _roles(ins: Instruction) -> None:
    ops = ins.operands
    stem = ins.stem
    w = _widths(ins.opcode, len(ops))
    defs: list[str] = []
    uses: list[str] = []
    first_src = 0
    if stem not in _NO_DEST and ops and not ops[0].startswith("["):
        first = ops[0]
        if _is_pred(first):
            defs += _preds_in(first)
            first_src = 1
            # ISETP P0, PT, ...: further leading predicates are results too.
            while first_src < len(ops) and _is_pred(ops[first_src]):
                defs += _preds_in(ops[first_src])
                first_src += 1
            if stem in ("LOP3", "ULOP3") and first_src < len(ops):
                defs += _regs_in(ops[first_src], w[first_src])
                first_src += 1
        else:
            defs += _regs_in(first, w[0])
            first_src = 1
            if stem in _PRED_OUT_AFTER_FIRST:
                while first_src < len(ops) and _is_pred(ops[first_src]):
                    defs += _preds_in(ops[first_src])
                    first_src += 1
    for i in range(first_src, len(ops)):
        uses += _regs_in(ops[i], w[i])
        uses += _preds_in(ops[i])
    if ins.predicate:
        uses += _preds_in(ins.predicate)
    ins.defs, ins.uses = defs, uses


def parse(text: str, only: set[str] | None = None) -> dict[str, Function]:
    """The function sections of an nvdisasm listing, by name (those named
    in `only`, when given)."""
    funcs: dict[str, Function] = {}
    cur: Function | None = None
    pending: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith(".text."):
            m = _SECTION.match(line.strip())
            if m:
                skipping = only is not None and m.group(1) not in only
                cur = None if skipping else Function(m.group(1), [], {})
                if cur:
                    funcs[cur.name] = cur
                pending = []
                continue
        if cur is None:
            continue
        m = _LABEL.match(line.strip())
        if m:
            pending.append(m.group(1))
            continue
        m = _INSTR.match(line)
        if not m:
            continue
        off, pred, opcode, rest = m.groups()
        ops = split_operands(rest) if rest else []
        target = None
        for i, op in enumerate(ops):
            t = re.fullmatch(r"`\(([^)]+)\)", op)
            if t:
                target = t.group(1)
                ops[i] = t.group(1)
        ins = Instruction(int(off, 16), pred or "", opcode, ops, target)
        _roles(ins)
        for lab in pending:
            cur.labels[lab] = len(cur.instructions)
        pending = []
        cur.instructions.append(ins)
    # Subroutines (`$__internal_*`) sit in their callers' sections with a
    # label of their own; labels at the end of a section point past it.
    return funcs


def is_conditional(ins: Instruction) -> bool:
    """A branch that may fall through: predicated, or with a predicate or
    divergence operand (`BRA P4, L`, `BRA.DIV UR5, L`)."""
    if ins.predicate and ins.predicate not in ("@PT",):
        return True
    if ins.stem in ("BRA", "CALL") and len(ins.operands) > 1:
        return True
    return False
