"""The static SASS model on small hand-written listings in nvdisasm's format:
operand roles, the control-flow graph, the steady-state walk, the metrics,
and the baseline gate."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sassmodel import baseline, disasm, model  # noqa: E402
from sassmodel.cfg import Cfg, UnsupportedCode  # noqa: E402
from sassmodel.metrics import path_metrics, tile_metrics, warps_of  # noqa: E402
from sassmodel.steady_state import TileWork, steady_state  # noqa: E402


def listing(body: str, name: str = "k") -> str:
    """Instructions one per line (`LABEL:` lines kept), offsets added."""
    out, off = [f".text.{name}:"], 0
    for line in body.strip().splitlines():
        line = line.strip()
        if line.endswith(":"):
            out.append(line)
            continue
        out.append(f"        /*{off:04x}*/                   {line} ;")
        off += 16
    return "\n".join(out) + "\n"


def func(body: str):
    return disasm.parse(listing(body))["k"]


def test_operand_roles():
    f = func("""
        IADD3 R4, P0, R2, R6, RZ
        IMAD.X R5, RZ, RZ, R3, P0
        ISETP.GE.U32.AND P1, PT, R6, 0x1, PT
        HMMA.16816.F32.BF16 R8, R12, R16, R8
        LDSM.16.M88.4 R20, [R24+UR4]
        LDGSTS.E.BYPASS.128 [R30+0x100], desc[UR8][R2.64], !P1
        STG.E.64 desc[UR8][R2.64], R40
        IMAD.WIDE.U32 R50, R51, R52, R54
        @P1 FADD R60, R61, -R62
        EXIT
    """)
    ins = f.instructions
    assert ins[0].defs == ["R4", "P0"] and ins[0].uses == ["R2", "R6"]
    assert ins[1].defs == ["R5"] and "P0" in ins[1].uses
    assert ins[2].defs == ["P1"] and ins[2].uses == ["R6"]
    assert ins[3].defs == ["R8", "R9", "R10", "R11"]
    assert ins[3].uses == ["R12", "R13", "R14", "R15", "R16", "R17",
                           "R8", "R9", "R10", "R11"]
    assert ins[4].defs == ["R20", "R21", "R22", "R23"]
    assert ins[5].defs == [] and set(ins[5].uses) == {"R30", "UR8", "R2", "R3", "P1"}
    assert ins[6].defs == [] and set(ins[6].uses) == {"UR8", "R2", "R3", "R40", "R41"}
    assert ins[7].defs == ["R50", "R51"] and ins[7].uses == ["R51", "R52", "R54", "R55"]
    assert ins[8].defs == ["R60"] and set(ins[8].uses) == {"R61", "R62", "P1"}


# A kernel shaped like attnc's: a tile loop whose body waits, branches to
# a paged or a contiguous copy (a rolled inner loop of one LDGSTS), then
# computes (2 MMAs), with a mask branch only partial tiles take and a
# divergent-warp fallback around a shuffle.
KERNEL = """
    MOV R1, RZ
    MOV R40, RZ
.L_head:
    ISETP.GE.AND P0, PT, R40, R41, PT
    @P0 BRA `(.L_exit)
    DEPBAR.LE SB0, 0x0
    BAR.SYNC.DEFER_BLOCKING 0x0
    ISETP.NE.AND P2, PT, R42, RZ, PT
    @P2 BRA `(.L_paged)
    MOV R10, RZ
.L_copy:
    LEA R12, P3, R10, R43, 0x4
    LEA.HI.X R13, R10, R44, RZ, 0x4, P3
    LDGSTS.E.BYPASS.128 [R45], desc[UR8][R12.64]
    IADD3 R10, R10, 0x1, RZ
    ISETP.LT.AND P4, PT, R10, 0x2, PT
    @P4 BRA `(.L_copy)
    BRA `(.L_compute)
.L_paged:
    LDG.E R20, desc[UR8][R46.64]
    IMAD R21, R20, R47, RZ
    IMAD R21, R21, R48, RZ
    IMAD R21, R21, R49, RZ
    IMAD R21, R21, R49, RZ
    IMAD R21, R21, R49, RZ
    IMAD R21, R21, R49, RZ
    IMAD R21, R21, R49, RZ
    IMAD R21, R21, R49, RZ
    IMAD R21, R21, R49, RZ
    IMAD R21, R21, R49, RZ
    IMAD R21, R21, R49, RZ
    CALL.REL.NOINC `($__internal_1_div)
    LDGSTS.E.BYPASS.128 [R45], desc[UR8][R20.64]
    LDGSTS.E.BYPASS.128 [R45+0x10], desc[UR8][R20.64+0x10]
.L_compute:
    LDGDEPBAR
    HMMA.16816.F32.BF16 R24, R28, R32, R24
    ISETP.NE.AND P5, PT, R50, RZ, PT
    @P5 BRA `(.L_mask)
.L_softmax:
    BRA.DIV UR5, `(.L_div)
    SHFL.BFLY PT, R60, R24, 0x1, 0x1f
.L_back:
    FMNMX R61, R60, R24, !PT
    MUFU.EX2 R62, R61
    HMMA.16816.F32.BF16 R24, R28, R34, R24
    IADD3 R40, R40, 0x1, RZ
    BRA `(.L_head)
.L_mask:
    FSEL R24, R24, -INF, P6
    FSEL R25, R25, -INF, P6
    BRA `(.L_softmax)
.L_div:
    WARPSYNC.COLLECTIVE R63, `(.L_back)
    CALL.REL.NOINC `($__internal_0_shfl)
    BRA `(.L_back)
.L_exit:
    EXIT
$__internal_1_div:
    IADD3 R2, R2, 0x1, RZ
    IADD3 R2, R2, 0x1, RZ
    IADD3 R2, R2, 0x1, RZ
    RET.REL.NODEC R4 `(k)
$__internal_0_shfl:
    WARPSYNC R3
    SHFL.BFLY P0, R60, R24, 0x1, 0x1f
    RET.REL.NODEC R4 `(k)
"""


def test_cfg_loops():
    g = Cfg(func(KERNEL))
    loops = g.natural_loops()
    assert len(loops) == 2  # the copy loop inside the tile loop
    inner, outer = loops
    assert inner.body < outer.body
    # The divergent edge is marked and not a way into the subroutine.
    assert any(b.divergent for b in g.blocks)


def test_steady_state_takes_the_full_tile_path():
    g = Cfg(func(KERNEL))
    walk = steady_state(g, TileWork(mma=2, async_copies=2))
    ops = [x.opcode for x in walk.instructions]
    # The copy loop twice, never the paged copy, the mask or the fallback.
    assert ops.count("LDGSTS.E.BYPASS.128") == 2
    assert "LDG.E" not in ops and "FSEL" not in ops and "WARPSYNC.COLLECTIVE" not in ops
    assert ops.count("HMMA.16816.F32.BF16") == 2
    m = path_metrics(g, walk)
    assert m.mma == 2 and m.async_copies == 2
    # 6 (header, wait) + 1 + 2 x 6 (copy loop) + 1 + 4 (MMA, mask test) + 2 + 5
    assert m.instructions == len(walk.instructions) == 31
    assert m.mma_flop_per_instruction == round(2 * 4096 / 31, 1)
    # The copy loop's address math, counter (its initial MOV too) and
    # branch serve the copies: 13 instructions for 2.
    assert m.instructions_per_async_copy == 6.5
    assert m.int64_ops == 4  # LEA + LEA.HI.X, twice
    assert m.global_loads == 0 and m.sfu == 1 and m.shuffles == 1
    # Read in the tile loop and never written there.
    assert m.loop_invariant_registers >= 8


def test_work_that_no_iteration_issues_is_an_error():
    g = Cfg(func(KERNEL))
    with pytest.raises(UnsupportedCode,
                       match="no loop iteration issues exactly 2 MMA, 2 LDGSTS, 0 UTMALDG, "
                             "0 mbarrier waits and 1 atomics"):
        steady_state(g, TileWork(mma=2, async_copies=2, atomics=1))
    with pytest.raises(UnsupportedCode, match="fewer than"):
        steady_state(g, TileWork(mma=8, async_copies=0))


def test_the_stated_work_picks_the_branch():
    # A branch with the atomics costs more than the one without; a full
    # tile keeps every pair, so the work the generator states (2 atomics)
    # sends the walk through them.
    body = """
    .L_head:
        HMMA.16816.F32.BF16 R24, R28, R32, R24
        @P0 BRA `(.L_skip1)
        FMUL R3, R24, R5
        RED.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR8][R6.64], R3
    .L_skip1:
        @P1 BRA `(.L_skip2)
        FMUL R3, R25, R5
        RED.E.ADD.F32.FTZ.RN.STRONG.GPU desc[UR8][R6.64], R3
    .L_skip2:
        BRA `(.L_head)
    """
    g = Cfg(func(body))
    assert path_metrics(g, steady_state(g, TileWork(1, 0))).atomics == 0
    m = path_metrics(g, steady_state(g, TileWork(1, 0, atomics=2)))
    assert m.atomics == 2 and m.instructions == 8


def test_versions_of_the_tile_loop_take_the_cheapest():
    # Two versions of the tile loop chosen once before them (synaptic's:
    # a key's gathered factor once per column, or per element): each
    # issues the stated work; the cheaper is the steady state, whichever
    # comes first in the code.
    hoisted = """
    .L_hoisted:
        HMMA.16816.F32.BF16 R24, R28, R32, R24
        LDG.E R2, desc[UR8][R6.64]
        FADD R24, R24, R2
        FADD R25, R25, R2
        @P1 BRA `(.L_hoisted)
        EXIT
    """
    packed = """
    .L_packed:
        HMMA.16816.F32.BF16 R24, R28, R32, R24
        LDG.E R2, desc[UR8][R6.64]
        LDG.E R3, desc[UR8][R8.64]
        FADD R24, R24, R2
        FADD R25, R25, R3
        @P1 BRA `(.L_packed)
        EXIT
    """
    # The cheaper version first, then last (where the first loop found
    # would be the per-element one).
    for first, second, other in ((hoisted, packed, "packed"),
                                 (packed, hoisted, "hoisted")):
        g = Cfg(func(f"@P0 BRA `(.L_{other})\n" + first + second))
        assert len(g.natural_loops()) == 2
        m = path_metrics(g, steady_state(g, TileWork(1, 0)))
        assert m.instructions == 5 and m.global_loads == 1


def test_subroutine_and_local_jump():
    f = func("""
    .L_head:
        HMMA.16816.F32.BF16 R24, R28, R32, R24
        @P1 CALL.REL.NOINC `(.L_out)
        CALL.REL.NOINC `($__internal_1_div)
        BRA `(.L_head)
    .L_out:
        EXIT
    $__internal_1_div:
        IADD3 R2, R2, 0x1, RZ
        IADD3 R2, R2, 0x1, RZ
        RET.REL.NODEC R4 `(k)
    """)
    g = Cfg(f)
    walk = steady_state(g, TileWork(mma=1, async_copies=0))
    m = path_metrics(g, walk)
    # 4 in the loop, 3 in the callee.
    assert m.instructions == 7 and m.calls == 1


def test_prediction_uses_the_calibrated_constant():
    cal = {"targets": {"sm_90": {"k": 2.0}}}
    g = Cfg(func(KERNEL))
    m = path_metrics(g, steady_state(g, TileWork(2, 2)))
    p = model.predict(m, "sm_90", cal)
    assert p["predicted_tensor_busy"] == round(2.0 / m.instructions_per_mma, 3)
    assert model.predict(m, "sm_89", cal)["calibrated_on"] == "sm_90"


def _rec(kid, flop, spills=0, instructions=100, loop_spills=None):
    r = {"id": kid, "entry": "e", "mma_flop_per_instruction": flop,
         "instructions": instructions, "spill_store_bytes": spills,
         "spill_load_bytes": 0}
    if loop_spills is not None:
        r["loop_local_memory"] = loop_spills
    return r


def test_baseline_gate():
    base = {"kernels": {"a": _rec("a", 500.0), "b": _rec("b", 400.0)}}
    ok, _ = baseline.compare([_rec("a", 495.0), _rec("b", 400.0)], base)
    assert ok == []
    bad, _ = baseline.compare([_rec("a", 489.0), _rec("b", 400.0)], base)
    assert len(bad) == 1 and "below the baseline" in bad[0]
    bad, _ = baseline.compare([_rec("a", 500.0), _rec("b", 400.0, spills=8)], base)
    assert len(bad) == 1 and "spills" in bad[0]
    bad, _ = baseline.compare([_rec("a", 500.0)], base)
    assert len(bad) == 1 and "not in this run" in bad[0]
    assert baseline.compare([_rec("a", 500.0)], base, subset=True)[0] == []
    err = dict(_rec("a", 0.0), error="structure not recognized: x")
    bad, _ = baseline.compare([err, _rec("b", 400.0)], base)
    assert len(bad) == 1 and "not recognized" in bad[0]
    _, notes = baseline.compare([_rec("a", 600.0), _rec("b", 400.0)], base)
    assert any("update the baseline" in n for n in notes)


def test_baseline_gate_spills_in_and_outside_the_loop():
    # A baseline that counts the loop's local memory: spills outside the
    # tile loop are a note, spill traffic inside it fails.
    base = {"kernels": {"a": _rec("a", 500.0, spills=0, loop_spills=0)}}
    bad, notes = baseline.compare([_rec("a", 500.0, spills=16, loop_spills=0)], base)
    assert bad == [] and any("none in the tile loop" in n for n in notes)
    bad, _ = baseline.compare([_rec("a", 500.0, spills=16, loop_spills=2)], base)
    assert len(bad) == 1 and "in its tile loop" in bad[0]
    bad, _ = baseline.compare([_rec("a", 500.0, spills=0, loop_spills=1)], base)
    assert len(bad) == 1


# KERNEL with a spill before the loop (not counted) and a spill and refill
# on the mask branch, inside the loop but off the full tile's path.
KERNEL_WITH_LOOP_SPILL = KERNEL.replace(
    "    MOV R40, RZ\n", "    MOV R40, RZ\n    STL [R1], R40\n").replace(
    "    FSEL R25, R25, -INF, P6\n",
    "    FSEL R25, R25, -INF, P6\n    STL [R1+0x4], R25\n    LDL R25, [R1+0x4]\n")


def test_loop_local_memory_counts_spills_off_the_path():
    # A spill on the loop's tail branch is in the loop, not on the path.
    g = Cfg(func(KERNEL_WITH_LOOP_SPILL))
    w = steady_state(g, TileWork(2, 2))
    m = path_metrics(g, w)
    assert m.local_memory == 0 and m.loop_local_memory == 2


WGMMA_LOOP = """
.L_head:
    LDGSTS.E.BYPASS.128 [R45], desc[UR8][R20.64]
    WARPGROUP.ARRIVE
    HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT
    HGMMA.64x128x16.F32.BF16 R24, gdesc[UR16], R24, gsb0
    WARPGROUP.DEPBAR.LE gsb0, 0x0
    FMNMX R200, R24, R25, !PT
    MUFU.EX2 R201, R200
    F2FP.BF16.F32.PACK_AB R202, R25, R24
    WARPGROUP.ARRIVE
    HGMMA.64x64x16.F32.BF16 R88, R202, gdesc[UR20], R88, gsb0
    WARPGROUP.DEPBAR.LE gsb0, 0x0
    IADD3 R40, R40, 0x1, RZ
    ISETP.NE.AND P0, PT, R40, R41, PT
    @P0 BRA `(.L_head)
    EXIT
"""


def test_wgmma_operands_and_flop():
    f = func(WGMMA_LOOP)
    hg = [x for x in f.instructions if x.stem == "HGMMA"]
    # m64n128: 64 f32 accumulators per thread; the register-A form reads 4.
    assert hg[0].defs == [f"R{24 + i}" for i in range(64)]
    assert "UR12" in hg[0].uses and "R24" not in hg[0].uses  # RZ: no C
    assert set(f"R{202 + i}" for i in range(4)) <= set(hg[2].uses)
    g = Cfg(f)
    walk = steady_state(g, TileWork(mma=3, async_copies=1))
    m = path_metrics(g, walk)
    assert m.mma == 3
    # Per warp: a quarter of each warpgroup product 2 * 64 * N * 16.
    flop = 2 * (2 * 64 * 128 * 16 // 4) + 2 * 64 * 64 * 16 // 4
    assert m.mma_flop_per_instruction == round(flop / m.instructions, 1)


def test_groups_left_in_flight():
    # Without the overlap every wait drains; with it the softmax runs after
    # a wait that leaves the newer group (the previous tile's P V) in flight.
    g = Cfg(func(WGMMA_LOOP))
    assert path_metrics(g, steady_state(g, TileWork(3, 1))).mma_in_flight == 0
    overlapped = WGMMA_LOOP.replace("WARPGROUP.DEPBAR.LE gsb0, 0x0\n    FMNMX",
                                    "WARPGROUP.DEPBAR.LE gsb0, 0x1\n    FMNMX")
    g = Cfg(func(overlapped))
    assert path_metrics(g, steady_state(g, TileWork(3, 1))).mma_in_flight == 1


def test_baseline_gate_fails_a_lost_overlap():
    base = {"kernels": {"a": dict(_rec("a", 500.0), mma_in_flight=1)}}
    assert baseline.compare([dict(_rec("a", 500.0), mma_in_flight=1)], base)[0] == []
    bad, _ = baseline.compare([dict(_rec("a", 500.0), mma_in_flight=0)], base)
    assert len(bad) == 1 and "no longer overlap" in bad[0]


def test_sm90a_has_no_borrowed_constant():
    cal = {"targets": {"sm_90": {"k": 2.0}}}
    g = Cfg(func(WGMMA_LOOP))
    m = path_metrics(g, steady_state(g, TileWork(3, 1)))
    p = model.predict(m, "sm_90a", cal)
    assert p["predicted_tensor_busy"] is None and p["calibrated_on"] == "none"


def test_sm90a_predicts_per_flop():
    # A wgmma's cycles grow with its N: sm_90a's record is MMA-FLOP per
    # instruction at full busy, not a constant per instruction.
    cal = {"targets": {"sm_90": {"k": 2.0},
                       "sm_90a": {"flop_per_instruction_at_full_busy": 3000.0}}}
    g = Cfg(func(WGMMA_LOOP))
    m = path_metrics(g, steady_state(g, TileWork(3, 1)))
    p = model.predict(m, "sm_90a", cal)
    assert p["calibrated_on"] == "sm_90a"
    assert p["predicted_tensor_busy"] == round(min(1.0, m.mma_flop_per_instruction / 3000.0), 3)
    assert model.calibrate_flop(0.5, 1500.0) == 3000.0
    # sm_80 and sm_89 borrow sm_90's constant, never sm_90a's.
    assert model.predict(m, "sm_80", cal)["calibrated_on"] == "sm_90"


def test_serialized_wgmma_is_refused():
    from sassmodel import toolchain
    ok = "ptxas info    : Used 255 registers, used 1 barriers\n"
    toolchain.refuse_serialized_wgmma(ok, "k.ptx")
    warned = ok + ("ptxas warning : (C7510) Potential Performance Loss: "
                   "wgmma.mma_async instructions are serialized due to the "
                   "presence of Extern calls in the function 'k'\n")
    with pytest.raises(RuntimeError, match="serialized"):
        toolchain.refuse_serialized_wgmma(warned, "k.ptx")


TMA_LOOP = """
.L_head:
    SYNCS.PHASECHK.TRANS64.TRYWAIT P5, [R27+URZ], R24
    @!P5 BRA `(.L_retry)
.L_ready:
    @P6 BRA `(.L_noload)
    ELECT P4, URZ, PT
    R2UR UR8, R10
    R2UR UR9, R11
    UTMALDG.3D [UR8], [UR18]
    UTMALDG.3D [UR8], [UR20]
.L_noload:
    HGMMA.64x128x16.F32.BF16 R24, gdesc[UR12], RZ, !UPT
    IADD3 R40, R40, 0x1, RZ
    ISETP.NE.AND P0, PT, R40, R41, PT
    @P0 BRA `(.L_head)
    EXIT
.L_retry:
    NANOSLEEP 0x20
    SYNCS.PHASECHK.TRANS64.TRYWAIT P5, [R27+URZ], R24
    @!P5 BRA `(.L_retry)
    BRA `(.L_ready)
"""


def test_tma_tiles_average_the_issuing_warp_with_the_others():
    # One thread issues the tile's loads: its warp's path has them (and
    # its uniform-register set-up), the other warps' does not; every warp
    # waits once (the first probe, not the retry loop).
    g = Cfg(func(TMA_LOOP))
    work = TileWork(mma=1, async_copies=0, tma_loads=2, waits=1)
    issuing = path_metrics(g, steady_state(g, work))
    assert issuing.tma_loads == 2 and issuing.instructions == 12
    m, walk = tile_metrics(g, work, warps=4)
    assert "UTMALDG.3D" not in [x.opcode for x in walk.instructions]
    assert "NANOSLEEP" not in [x.opcode for x in walk.instructions]
    assert m.issuing_warp_instructions == 12 and m.tma_loads == 2
    assert m.instructions == round((12 + 3 * 7) / 4)  # 8
    assert m.mma_flop_per_instruction == round(2 * 64 * 128 * 16 / 4 / ((12 + 3 * 7) / 4), 1)
    assert warps_of("m128n128w8s2") == 8
    # A kernel without TMA: one path, as before.
    plain, _ = tile_metrics(Cfg(func(WGMMA_LOOP)), TileWork(3, 1), warps=8)
    assert plain.issuing_warp_instructions == 0


PTX_ADD = """
.version 8.0
.target sm_80
.address_size 64
.visible .entry add_one(.param .u64 p) {
  .reg .b64 %rd<2>;
  .reg .b32 %r<3>;
  ld.param.u64 %rd1, [p];
  ld.global.u32 %r1, [%rd1];
  add.s32 %r2, %r1, 1;
  st.global.u32 [%rd1], %r2;
  ret;
}
"""


def test_assembled_images_are_cached(tmp_path, monkeypatch):
    """scripts/ptxas-cached.sh: the second assembly of the same PTX is the
    first's cubin and report, read from $ATTNC_PTXAS_CACHE; other PTX or
    another arch is another entry; a failed assembly is not stored."""
    from sassmodel import toolchain
    try:
        ptxas = toolchain.find_tool("ptxas")
    except toolchain.ToolMissing as e:
        pytest.skip(str(e))
    cache = tmp_path / "cache"
    monkeypatch.setenv("ATTNC_PTXAS_CACHE", str(cache))
    ptx = tmp_path / "k.ptx"
    ptx.write_text(PTX_ADD)
    first, second = tmp_path / "1.cubin", tmp_path / "2.cubin"
    r1 = toolchain.assemble(ptxas, ptx, "sm_80", first)
    assert r1["add_one"].registers > 0
    entries = sorted(p.name for p in cache.iterdir())
    assert len(entries) == 2 and entries[0].endswith(".cubin") and entries[1].endswith(".log")
    # A stand-in ptxas that fails proves the second result is the cache's.
    fake = tmp_path / "ptxas"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exec " + ptxas + " --version\nexit 3\n")
    fake.chmod(0o755)
    r2 = toolchain.assemble(str(fake), ptx, "sm_80", second)
    assert second.read_bytes() == first.read_bytes()
    assert r2 == r1
    with pytest.raises(RuntimeError, match="ptxas failed"):
        toolchain.assemble(str(fake), ptx, "sm_86", second)
    ptx.write_text(PTX_ADD.replace("add.s32 %r2, %r1, 1", "add.s32 %r2, %r1, 2"))
    with pytest.raises(RuntimeError, match="ptxas failed"):
        toolchain.assemble(str(fake), ptx, "sm_80", second)
    assert len(list(cache.iterdir())) == 2
    monkeypatch.delenv("ATTNC_PTXAS_CACHE")
    with pytest.raises(RuntimeError, match="ptxas failed"):
        toolchain.assemble(str(fake), ptx, "sm_80", second)
