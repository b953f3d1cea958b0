"""The emulator's TMA loads, mbarriers, named barriers and setmaxnreg
against semantics it did not invent: a matmul through tensor descriptors,
written in Triton and compiled by Triton for sm_90a on this machine
(triton_kernels.tma_matmul), run on libattnc-emucuda.so against NumPy.
Triton chooses the boxes, swizzles, mbarrier protocol (expect_tx, phase
parities, try_wait loops) and, with warp_specialize, a producer warpgroup
at 40 registers feeding two consumer warpgroups at 232 through named
barriers; the emulator must run them as a device does. Mutations of the
same PTX (a transaction count off by 16 bytes, a wrong phase parity, a
missing wait or init, a register budget that never fits) must fault, and
cuTensorMapEncodeTiled must refuse what the driver refuses.

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


# Triton numbers TMA element types on the device side; the driver's
# CUtensorMapDataType for bf16 is 9.
CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9


@pytest.fixture(scope="module")
def drv():
    return Driver(LIB)


def small_bf16(rng, shape):
    """(bits as uint16, values as float32): multiples of 1/8 in [-1, 1), so
    that every sum the matmul forms is exact in float32."""
    x = (rng.integers(-8, 8, shape) / 8.0).astype(np.float32)
    bits = (x.view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


def descriptor_args(drv, ptr, rows, cols, meta):
    """The arguments Triton's launcher passes for a row-major [rows, cols]
    bf16 tensor descriptor: the tensor map, its shape, its strides."""
    assert meta["elem_size"] == 2
    block = meta["block_size"]  # outermost first
    tmap = drv.tensor_map(ptr, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, [cols, rows],
                          [cols * 2], [block[1], block[0]], meta["swizzle"])
    return [tmap, ctypes.c_int32(rows), ctypes.c_int32(cols),
            ctypes.c_int64(cols), ctypes.c_int64(1)]


def run_tma_matmul(drv, compiled, M, N, K, BM, BN, seed=0, a_map=None):
    ptx, shared, warps, meta = compiled
    fn = drv.load(ptx, "tma_matmul")
    rng = np.random.default_rng(seed)
    ab, a = small_bf16(rng, (M, K))
    bb, b = small_bf16(rng, (N, K))
    pa, pb = drv.to_device(ab), drv.to_device(bb)
    pc = drv.alloc(M * N * 4)
    params = (descriptor_args(drv, pa, M, K, meta[0]) if a_map is None else a_map) + \
        descriptor_args(drv, pb, N, K, meta[1]) + \
        [ctypes.c_uint64(pc), ctypes.c_uint64(0), ctypes.c_uint64(0)]
    try:
        drv.launch(fn, (-(-M // BM), -(-N // BN)), (32 * warps,), shared, params)
        c = drv.to_host(pc, (M, N), np.float32)
    finally:
        for p in (pa, pb, pc):
            drv.free(p)
    return c, a @ b.T


# (M, N, K, BM, BN, BK, warp_specialize): the second and fourth leave boxes
# partly outside A and B (rows, columns and K), read as zeros.
MATMULS = [
    (256, 256, 256, 128, 128, 64, False),
    (200, 136, 200, 128, 128, 64, False),
    (256, 256, 256, 64, 128, 64, True),
    (192, 200, 136, 64, 128, 64, True),
]


@pytest.mark.parametrize("M,N,K,BM,BN,BK,ws", MATMULS)
def test_triton_tma_matmuls_match_numpy(drv, M, N, K, BM, BN, BK, ws):
    compiled = tk.tma_matmul_ptx(M, N, K, BM, BN, BK, ws)
    ptx = compiled[0]
    assert "cp.async.bulk.tensor.2d" in ptx and "mbarrier.try_wait.parity" in ptx
    if ws:  # what makes it warp-specialized
        assert "setmaxnreg.dec" in ptx and "setmaxnreg.inc" in ptx
        assert re.search(r"bar\.sync\s+[1-9]\d*, 128;", ptx)
        assert compiled[2] == 12
    c, ref = run_tma_matmul(drv, compiled, M, N, K, BM, BN)
    np.testing.assert_array_equal(c, ref)


def mutate(ptx, pattern, repl, count=0):
    out, n = re.subn(pattern, repl, ptx, count=count, flags=re.M)
    assert n > 0, "the PTX has no %r to mutate" % pattern
    return out


@pytest.fixture(scope="module")
def plain():
    return tk.tma_matmul_ptx(256, 256, 256, 128, 128, 64, False)


@pytest.fixture(scope="module")
def specialized():
    return tk.tma_matmul_ptx(256, 256, 256, 64, 128, 64, True)


def expect_fault(drv, compiled, words, BM=128, BN=128, **kw):
    with pytest.raises(DriverError) as e:
        run_tma_matmul(drv, compiled, 256, 256, 256, BM, BN, **kw)
    for w in words:
        assert w in str(e.value), str(e.value)


def with_ptx(compiled, ptx):
    return (ptx,) + tuple(compiled[1:])


@emulator_only
def test_expect_tx_16_bytes_short_faults(drv, plain):
    ptx = mutate(plain[0], r"(mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\]), 32768;",
                 r"\1, 32752;")
    expect_fault(drv, with_ptx(plain, ptx), ["more transaction bytes completed"])


@emulator_only
def test_expect_tx_16_bytes_over_is_a_deadlock(drv, plain):
    ptx = mutate(plain[0], r"(mbarrier\.arrive\.expect_tx\.shared::cta\.b64 _, \[%r\d+\]), 32768;",
                 r"\1, 32784;")
    expect_fault(drv, with_ptx(plain, ptx),
                 ["deadlock", "16 transaction bytes outstanding", "wait at the mbarrier"])


@emulator_only
def test_a_wrong_phase_parity_reads_a_load_in_flight(drv, plain):
    # Waiting for the other parity passes at once: the consumer reads the
    # stage before its TMA load has landed.
    ptx = mutate(plain[0], r"(mbarrier\.try_wait\.parity\.shared::cta\.b64 \w+, \[%r\d+\]), (%r\d+);",
                 r"\1, 1;")
    expect_fault(drv, with_ptx(plain, ptx), ["TMA load in flight"])


@emulator_only
def test_a_missing_wait_reads_a_load_in_flight(drv, plain):
    ptx = mutate(plain[0], r"^\s*mbarrier\.try_wait\.parity[^;]*;\s*\n\s*@!\w+ bra\.uni \w+;", "")
    expect_fault(drv, with_ptx(plain, ptx), ["TMA load in flight"])


@emulator_only
def test_a_missing_init_faults(drv, plain):
    ptx = mutate(plain[0], r"^\s*@%p\d+ mbarrier\.init\.shared::cta\.b64[^;]*;", "", count=1)
    expect_fault(drv, with_ptx(plain, ptx), ["no mbarrier is initialized"])


@emulator_only
def test_a_register_budget_that_never_fits_is_a_deadlock(drv, specialized):
    # Without the producer's setmaxnreg.dec, the consumers' .inc to 232
    # never finds room next to the producer's 256 registers.
    ptx = mutate(specialized[0], r"^\s*setmaxnreg\.dec\.sync\.aligned\.u32\s+40;", "")
    expect_fault(drv, with_ptx(specialized, ptx), ["deadlock", "setmaxnreg.inc"],
                 BM=64, BN=128)


@emulator_only
def test_a_parameter_that_is_no_tensor_map_faults(drv, plain):
    meta = plain[3][0]
    junk = (ctypes.c_ubyte * 128)()
    args = [junk, ctypes.c_int32(256), ctypes.c_int32(256), ctypes.c_int64(256),
            ctypes.c_int64(1)]
    assert meta["block_size"] == [128, 64]
    expect_fault(drv, plain, ["holds no tensor map"], a_map=args)


@pytest.mark.parametrize("change,words", [
    (dict(strides=[200]), "globalStrides[0] = 200 is not a multiple of 16"),
    (dict(box=[64, 512]), "boxDim[1] = 512 is not in 1..256"),
    (dict(box=[128, 64]), "exceeds the swizzle span of 128 bytes"),
    (dict(ptr_offset=8), "is not 16-byte aligned"),
    (dict(box=[4, 64], swizzle=0), "is not a multiple of 16"),
])
def test_encode_refuses_what_the_driver_refuses(drv, change, words):
    p = drv.alloc(1 << 16)
    args = dict(dims=[256, 64], strides=[512], box=[64, 64], swizzle=3, ptr_offset=0)
    args.update(change)
    with pytest.raises(DriverError) as e:
        drv.tensor_map(p + args["ptr_offset"], CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, args["dims"],
                       args["strides"], args["box"], args["swizzle"])
    drv.free(p)
    # A device's driver refuses them too (CUDA_ERROR_INVALID_VALUE); only
    # the emulator says why.
    assert "CUDA error 1" in str(e.value), str(e.value)
    assert ON_DEVICE or words in str(e.value), str(e.value)
