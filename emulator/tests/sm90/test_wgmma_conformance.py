"""The emulator's sm_90a warpgroup instructions against semantics it did not
invent: kernels written in Triton and compiled by Triton for sm_90a on this
machine (triton_kernels.py), loaded into libattnc-emucuda.so and run on
seeded data against NumPy. Triton chooses the shared layouts, swizzles and
matrix descriptors; the emulator must decode them as a device does.
Mutations of the same PTX (a fence or a wait removed) must fault.

ctest `emucuda-sm90a-conformance` runs this with ATTNC_EMUCUDA set to the
built library; compiling needs no GPU."""
import ctypes
import re

import numpy as np
import pytest

from emudriver import LIB, ON_DEVICE, Driver, DriverError, require_triton  # noqa: E402

require_triton()

import triton_kernels as tk  # noqa: E402

emulator_only = pytest.mark.emulator_only


# attnc_emu_wgmma_layouts bits: operand (0 A, 8 B) + 4 if MN-major + swizzle
# (0 none, 1 32B, 2 64B, 3 128B); bit 16: A from registers.
SWIZZLE = {0: "none", 1: "32B", 2: "64B", 3: "128B"}


def layout_names(bits):
    out = set()
    for b in range(16):
        if bits >> b & 1:
            out.add(("A" if b < 8 else "B", "MN" if b & 4 else "K", SWIZZLE[b & 3]))
    if bits >> 16 & 1:
        out.add(("A", "registers", "-"))
    return out


@pytest.fixture(scope="module")
def drv():
    d = Driver(LIB)
    if ON_DEVICE:  # a device reports no layouts: every test sees none
        d.layouts = lambda clear: 0
        return d
    d.layouts = d.lib.attnc_emu_wgmma_layouts
    d.layouts.restype = ctypes.c_uint
    d.layouts.argtypes = [ctypes.c_int]
    return d


def bf16(rng, shape, scale=1.0, small_ints=False):
    """(bits as uint16, the values as float32): values exact in bf16."""
    if small_ints:
        x = (rng.integers(-8, 8, shape) / 8.0).astype(np.float32)
    else:
        x = (rng.standard_normal(shape) * scale).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def run_matmul(drv, ptx, shared, M, N, K, a_k_major, b_k_major, BM, BN, seed=0):
    fn = drv.load(ptx, "matmul")
    rng = np.random.default_rng(seed)
    ab, a = bf16(rng, (M, K), small_ints=True)
    bb, b = bf16(rng, (K, N), small_ints=True)
    pa = drv.to_device(ab if a_k_major else np.ascontiguousarray(ab.T))
    pb = drv.to_device(np.ascontiguousarray(bb.T) if b_k_major else bb)
    pc = drv.alloc(M * N * 4)
    # Triton's two trailing scratch pointers (global and profile), unused.
    drv.launch(fn, (M // BM, N // BN), (128,), shared,
               [ctypes.c_uint64(pa), ctypes.c_uint64(pb), ctypes.c_uint64(pc),
                ctypes.c_uint64(0), ctypes.c_uint64(0)])
    c = drv.to_host(pc, (M, N), np.float32)
    for p in (pa, pb, pc):
        drv.free(p)
    return c, a @ b


# (A K-major, B K-major, BM, BN, BK): each makes Triton pick other layouts.
MATMULS = [
    (True, False, 64, 64, 64), (True, False, 64, 64, 32), (True, False, 64, 64, 16),
    (True, False, 64, 32, 64), (True, False, 64, 16, 64),
    (False, True, 64, 64, 64), (False, False, 64, 128, 64),
    (True, True, 64, 32, 32), (False, True, 64, 64, 16),
]


def test_triton_matmuls_match_numpy_in_every_layout_triton_emits(drv):
    seen = set()
    M = N = K = 128
    for ak, bk, BM, BN, BK in MATMULS:
        ptx, shared = tk.matmul_ptx(M, N, K, ak, bk, BM, BN, BK)
        assert "wgmma.mma_async" in ptx, "Triton did not use wgmma for %s" % ((ak, bk, BM, BN, BK),)
        drv.layouts(1)
        c, ref = run_matmul(drv, ptx, shared, M, N, K, ak, bk, BM, BN)
        seen |= layout_names(drv.layouts(1))
        # Products of eighths summed exactly: the result is exact.
        np.testing.assert_array_equal(c, ref, err_msg=str((ak, bk, BM, BN, BK)))
    # What these kernels covered (asserted, so that a Triton that stops
    # emitting a layout shows here rather than silently shrinking the test).
    if ON_DEVICE:
        return
    for swz in ("32B", "64B", "128B"):
        assert ("A", "K", swz) in seen, seen
        assert ("B", "K", swz) in seen, seen
        assert ("B", "MN", swz) in seen, seen
    assert ("A", "MN", "128B") in seen, seen


@pytest.mark.parametrize("L,D,BM,BN", [(256, 64, 64, 64), (192, 128, 64, 32)])
def test_triton_flash_attention_matches_numpy(drv, L, D, BM, BN):
    ptx, shared = tk.attention_ptx(L, D, BM, BN)
    fn = drv.load(ptx, "attention")
    rng = np.random.default_rng(1)
    (qb, q), (kb, k), (vb, v) = (bf16(rng, (L, D)) for _ in range(3))
    ptrs = [drv.to_device(x) for x in (qb, kb, vb)]
    po = drv.alloc(L * D * 4)
    scale = 1 / np.sqrt(D)
    drv.layouts(1)
    drv.launch(fn, (L // BM,), (128,), shared,
               [ctypes.c_uint64(p) for p in ptrs] + [ctypes.c_uint64(po), ctypes.c_float(scale),
                                                      ctypes.c_uint64(0), ctypes.c_uint64(0)])
    assert ON_DEVICE or ("A", "registers", "-") in layout_names(drv.layouts(1))
    o = drv.to_host(po, (L, D), np.float32)
    s = q.astype(np.float64) @ k.T.astype(np.float64) * scale
    p = np.exp(s - s.max(1, keepdims=True))
    ref = p / p.sum(1, keepdims=True) @ v
    # P is rounded to bf16 for the second product, as on a device.
    assert np.abs(o - ref).max() < 4e-3


def mutate(ptx, pattern, repl, count=0):
    out, n = re.subn(pattern, repl, ptx, count=count, flags=re.M)
    assert n > 0, "the PTX has no %r to mutate" % pattern
    return out


@pytest.fixture(scope="module")
def matmul_ptx():
    return tk.matmul_ptx(128, 128, 128, True, False, 64, 64, 64)


def expect_fault(drv, ptx, shared, words, K=128):
    with pytest.raises(DriverError) as e:
        run_matmul(drv, ptx, shared, 128, 128, K, True, False, 64, 64)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_the_unmutated_kernel_runs(drv, matmul_ptx):
    c, ref = run_matmul(drv, *matmul_ptx, 128, 128, 128, True, False, 64, 64)
    np.testing.assert_array_equal(c, ref)


@emulator_only
def test_a_missing_proxy_fence_faults(drv, matmul_ptx):
    ptx = mutate(matmul_ptx[0], r"^\s*fence\.proxy\.async[^;]*;", "")
    expect_fault(drv, ptx, matmul_ptx[1], ["no fence.proxy.async"])


@emulator_only
def test_a_missing_wgmma_fence_faults(drv, matmul_ptx):
    ptx = mutate(matmul_ptx[0], r"^\s*wgmma\.fence\.sync\.aligned;", "")
    expect_fault(drv, ptx, matmul_ptx[1], ["without a wgmma.fence"])


@emulator_only
def test_results_read_before_their_wait_fault(drv):
    # One K tile; wait_group 1 leaves its group in flight: the epilogue
    # (which stages C through the operands' shared memory) overwrites them,
    # or would exit with the group unretired.
    ptx, shared = tk.matmul_ptx(128, 128, 64, True, False, 64, 64, 64)
    ptx = mutate(ptx, r"wgmma\.wait_group\.sync\.aligned 0;",
                 "wgmma.wait_group.sync.aligned 1;")
    expect_fault(drv, ptx, shared, ["wgmma.wait_group"], K=64)


@emulator_only
def test_operands_overwritten_in_flight_fault(drv, matmul_ptx):
    # Without the wait in the loop, the next tile's stores overwrite the
    # shared operands of the wgmma still in flight.
    ptx = mutate(matmul_ptx[0], r"^\s*wgmma\.wait_group\.sync\.aligned 0;", "", count=1)
    expect_fault(drv, ptx, matmul_ptx[1], ["reads it", "not retired"])


@emulator_only
def test_wgmma_needs_sm90a(drv, matmul_ptx):
    ptx = matmul_ptx[0].replace(".target sm_90a", ".target sm_90")
    with pytest.raises(DriverError) as e:
        drv.load(ptx, "matmul")
    assert "wgmma needs .target sm_90a" in str(e.value)
