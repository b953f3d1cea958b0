"""The emulator's TMA loads and mbarriers on hand-written PTX: every probe
case of tma_probe.py (ranks 1-5, swizzles, out-of-bounds fill, maps by
value or in global memory) against the layout the documentation
describes, and the misuses a device would not report (each must fault
with a message naming it): too many arrivals, a state token two phases
old, an ordinary load of an mbarrier, an mbarrier invalidated under a
load, a CTA that exits with a load in flight. Named barriers over thread
subsets and test_wait polling must make progress.

ctest `emucuda-sm90a-conformance` runs this with ATTNC_EMUCUDA set."""
import ctypes

import numpy as np
import pytest

import tma_probe  # noqa: E402
from emudriver import LIB, Driver, DriverError  # noqa: E402

emulator_only = pytest.mark.emulator_only


@pytest.fixture(scope="module")
def drv():
    return Driver(LIB)


@pytest.mark.parametrize("case", tma_probe.cases(), ids=repr)
def test_tma_probe_matches_the_documented_layout(drv, case):
    np.testing.assert_array_equal(tma_probe.run(drv, case), tma_probe.expected(case))


def kernel(body, threads_note=""):
    return """.version 8.0
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry k(.param .u64 out)
{
  .reg .pred %%p<8>;
  .reg .b32 %%r<40>;
  .reg .b64 %%rd<8>;
  mov.u32 %%r1, %%tid.x;
  mov.u32 %%r2, smem;
  setp.eq.u32 %%p1, %%r1, 0;
  ld.param.u64 %%rd1, [out];
%s
  ret;
}
""" % body


def launch(drv, body, threads=32, smem=1024):
    fn = drv.load(kernel(body), "k")
    out = drv.alloc(4 * threads)
    try:
        drv.launch(fn, (1,), (threads,), smem, [ctypes.c_uint64(out)])
        return drv.to_host(out, (threads,), np.uint32)
    finally:
        drv.free(out)


def expect_fault(drv, body, words, threads=32):
    with pytest.raises(DriverError) as e:
        launch(drv, body, threads)
    for w in words:
        assert w in str(e.value), str(e.value)


INIT2 = """  @%p1 mbarrier.init.shared::cta.b64 [%r2], 2;
  bar.sync 0;
"""


@emulator_only
def test_more_arrivals_than_the_phase_expects_fault(drv):
    expect_fault(drv, INIT2 + "  @%p1 mbarrier.arrive.shared::cta.b64 _, [%r2], 3;\n",
                 ["3 arrival(s)", "more than its phase expects"])


@emulator_only
def test_a_state_token_two_phases_old_faults(drv):
    body = INIT2 + """  @%p1 mbarrier.arrive.shared::cta.b64 %rd2, [%r2], 2;
  @%p1 mbarrier.arrive.shared::cta.b64 _, [%r2], 2;
  @%p1 mbarrier.arrive.shared::cta.b64 _, [%r2], 2;
  @%p1 mbarrier.test_wait.shared::cta.b64 %p2, [%r2], %rd2;
"""
    expect_fault(drv, body, ["taken in phase 0", "current or the previous phase"])


def test_a_state_token_completes_with_its_phase(drv):
    # Two arrivals complete phase 0: a token taken in phase 0 tests true.
    body = INIT2 + """  @%p1 mbarrier.arrive.shared::cta.b64 %rd2, [%r2];
  @%p1 mbarrier.test_wait.shared::cta.b64 %p2, [%r2], %rd2;
  @%p1 mbarrier.arrive.shared::cta.b64 _, [%r2];
  @%p1 mbarrier.test_wait.shared::cta.b64 %p3, [%r2], %rd2;
  selp.u32 %r3, 1, 0, %p2;
  selp.u32 %r4, 2, 0, %p3;
  or.b32 %r5, %r3, %r4;
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.b32 [%rd4], %r5;
"""
    out = launch(drv, body)
    assert out[0] == 2  # not complete before the second arrival, complete after


@emulator_only
def test_an_ordinary_load_of_an_mbarrier_faults(drv):
    expect_fault(drv, INIT2 + "  ld.shared.b32 %r3, [%r2+4];\n",
                 ["mbarrier", "only mbarrier instructions may access"])


@emulator_only
def test_use_before_init_faults(drv):
    expect_fault(drv, "  @%p1 mbarrier.arrive.shared::cta.b64 _, [%r2];\n",
                 ["no mbarrier is initialized"])


def test_named_barrier_producer_consumer(drv):
    # Warp 1 (the producer) writes, then bar.arrive 1, 64; warp 0 waits at
    # bar.sync 1, 64 and reads; warps 2-3 never take part.
    body = """  setp.lt.u32 %p2, %r1, 32;
  setp.ge.u32 %p3, %r1, 64;
  @%p3 bra.uni OUT;
  @%p2 bra.uni CONSUME;
  shl.b32 %r3, %r1, 2;
  add.s32 %r4, %r2, %r3;
  add.u32 %r5, %r1, 1000;
  st.shared.b32 [%r4+-128], %r5;
  bar.arrive 1, 64;
  bra.uni OUT;
CONSUME:
  bar.sync 1, 64;
  shl.b32 %r3, %r1, 2;
  add.s32 %r4, %r2, %r3;
  ld.shared.b32 %r5, [%r4];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.b32 [%rd4], %r5;
OUT:
"""
    out = launch(drv, body, threads=128)
    np.testing.assert_array_equal(out[:32], np.arange(32) + 1032)


@emulator_only
def test_a_named_barrier_short_of_its_count_is_a_deadlock(drv):
    body = """  setp.lt.u32 %p2, %r1, 32;
  @!%p2 bra.uni OUT;
  bar.sync 1, 64;
OUT:
"""
    expect_fault(drv, body, ["deadlock", "barrier 1: 32 of 64 threads arrived"], threads=64)


def test_polling_with_test_wait_makes_progress(drv):
    # Warp 0 polls phase 0 with test_wait; warp 1 completes it later.
    body = """  @%p1 mbarrier.init.shared::cta.b64 [%r2], 1;
  bar.sync 0;
  setp.lt.u32 %p2, %r1, 32;
  @!%p2 bra.uni PRODUCE;
POLL:
  mbarrier.test_wait.parity.shared::cta.b64 %p3, [%r2], 0;
  @!%p3 bra.uni POLL;
  ld.shared.b32 %r5, [%r2+64];
  mul.wide.u32 %rd3, %r1, 4;
  add.s64 %rd4, %rd1, %rd3;
  st.global.b32 [%rd4], %r5;
  bra.uni OUT;
PRODUCE:
  setp.eq.u32 %p4, %r1, 32;
  mov.u32 %r6, 77;
  @%p4 st.shared.b32 [%r2+64], %r6;
  @%p4 mbarrier.arrive.shared::cta.b64 _, [%r2];
OUT:
"""
    out = launch(drv, body, threads=64)
    np.testing.assert_array_equal(out[:32], 77)


TMA_PARAMS = ".param .u64 out, .param .align 64 .b8 map[128]"


def tma_kernel(tail):
    return """.version 8.0
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry k(%s)
{
  .reg .pred %%p<4>;
  .reg .b32 %%r<40>;
  .reg .b64 %%rd<8>;
  mov.u32 %%r1, %%tid.x;
  mov.u32 %%r2, smem;
  add.s32 %%r3, %%r2, 4096;
  setp.eq.u32 %%p1, %%r1, 0;
  @%%p1 mbarrier.init.shared::cta.b64 [%%r3], 1;
  bar.sync 0;
  mov.b64 %%rd3, map;
  cvta.param.u64 %%rd2, %%rd3;
  mov.b32 %%r20, 0;
  @%%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r3], 2048;
  @%%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%%r2], [%%rd2, {%%r20, %%r20}], [%%r3];
%s
  ret;
}
""" % (TMA_PARAMS, tail)


def tma_fault(drv, tail, words):
    fn = drv.load(tma_kernel(tail), "k")
    src = drv.to_device(np.arange(64 * 16, dtype=np.uint16))
    tmap = drv.tensor_map(src, 9, [64, 16], [128], [64, 16], 3)
    with pytest.raises(DriverError) as e:
        drv.launch(fn, (1,), (32,), 8192, [ctypes.c_uint64(0), tmap])
    drv.free(src)
    for w in words:
        assert w in str(e.value), str(e.value)


@emulator_only
def test_an_mbarrier_invalidated_under_a_load_faults(drv):
    tma_fault(drv, "  @%p1 mbarrier.inval.shared::cta.b64 [%r3];\n",
              ["mbarrier.inval", "while a TMA load"])


@emulator_only
def test_exiting_with_a_load_in_flight_faults(drv):
    tma_fault(drv, "", ["exited with a TMA load in flight"])


@emulator_only
def test_a_load_into_a_load_in_flight_faults(drv):
    tma_fault(drv, "  @%p1 cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::"
                   "complete_tx::bytes [%r2], [%rd2, {%r20, %r20}], [%r3];\n",
              ["which an asynchronous copy in flight already writes"])
