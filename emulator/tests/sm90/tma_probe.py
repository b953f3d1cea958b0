"""TMA probes: one PTX kernel per case loads a box of iota data through a
tensor map into shared memory (an mbarrier completes it) and copies the
shared bytes out unchanged, so the result is the box exactly as the TMA
unit laid it out: element order, out-of-bounds fill, swizzle. Cases cover
ranks 1-5, 2- and 4-byte elements, every swizzle, boxes inside, straddling
and outside the tensor, zero and NaN fill, and a map passed by value or
through global memory.

`expected(case)` is the layout the PTX ISA and the CUDA documentation
describe (TensorMap.h's swizzle on the shared address). The emulator's
conformance test checks every case against it; on a GPU,

    python tma_probe.py --lib /usr/lib/x86_64-linux-gnu/libcuda.so.1

runs every case on the device and reports each that differs from the
model, byte for byte, so a disagreement is found in one call (and then
`--lib build/lib/libattnc-emucuda.so` on the same case shows the
emulator's side)."""
import argparse
import ctypes
import itertools
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from emudriver import Driver, DriverError  # noqa: E402

DTYPES = {"u16": (1, np.uint16), "bf16": (9, np.uint16), "f32": (7, np.uint32)}
SPAN = {0: 0, 1: 32, 2: 64, 3: 128}


class Case:
    def __init__(self, dims, box, coords, dtype="bf16", swizzle=0, nan=False,
                 in_global=False, strides=None, elements=None):
        self.dims, self.box, self.coords = list(dims), list(box), list(coords)
        self.dtype, self.swizzle, self.nan, self.in_global = dtype, swizzle, nan, in_global
        # Byte strides of dims 1.. (default: packed); the source's elements.
        esize = np.dtype(DTYPES[dtype][1]).itemsize
        if strides is None:
            strides, st = [], esize
            for d in self.dims[:-1]:
                st *= d
                strides.append(st)
        self.strides = list(strides)
        self.elements = elements or int(np.prod(self.dims))

    @property
    def rank(self):
        return len(self.dims)

    @property
    def esize(self):
        return np.dtype(DTYPES[self.dtype][1]).itemsize

    @property
    def box_bytes(self):
        return int(np.prod(self.box)) * self.esize

    def __repr__(self):
        return "%s dims=%s box=%s at=%s sw=%d%s%s%s" % (
            self.dtype, self.dims, self.box, self.coords, self.swizzle,
            " nan" if self.nan else "", " global-map" if self.in_global else "",
            " strides=%s" % self.strides if self.strides != Case(
                self.dims, self.box, self.coords, self.dtype).strides else "")


def cases():
    out = []
    # Every rank, inside and straddling each edge.
    shapes = {1: ([200], [64]), 2: ([72, 40], [64, 16]), 3: ([64, 10, 6], [32, 4, 4]),
              4: ([32, 5, 4, 3], [16, 4, 2, 2]), 5: ([16, 3, 3, 2, 4], [16, 2, 2, 2, 2])}
    for rank, (dims, box) in shapes.items():
        out.append(Case(dims, box, [0] * rank))
        out.append(Case(dims, box, [d - b // 2 for d, b in zip(dims, box)]))
        out.append(Case(dims, box, [-(b // 2) for b in box]))
    # Every swizzle at its span, 2- and 4-byte elements, straddling.
    for sw, dt in itertools.product((1, 2, 3), ("bf16", "f32")):
        esize = 2 if dt == "bf16" else 4
        inner = SPAN[sw] // esize
        dims = [inner * 3, 37]
        out.append(Case(dims, [inner, 24], [inner, 0], dt, sw))
        out.append(Case(dims, [inner, 24], [inner * 2 + inner // 2, 20], dt, sw))
    # NaN fill of floats, a box wholly outside, u16 (integers fill zero),
    # the map in global memory.
    out.append(Case([64, 8], [32, 8], [48, 4], "f32", 0, nan=True))
    out.append(Case([64, 8], [64, 8], [-8, 2], "bf16", 3, nan=True))
    out.append(Case([64, 8], [32, 4], [64, 8], "bf16"))
    out.append(Case([64, 8], [32, 4], [40, 6], "u16"))
    out.append(Case([72, 40], [64, 16], [8, 30], "bf16", 3, in_global=True))
    # The attnc wgmma form's K/V maps (runtime/src/cuda/KvTensorMaps.cpp):
    # a row-major [rows, P] matrix as [P / 64 chunks][rows][64], the chunk
    # stride (128 bytes) below the row stride; a box of every chunk of a
    # head x a tile of rows, straddling the last row.
    P, rows = 320, 40
    out.append(Case([64, rows, P // 64], [64, 16, 2], [0, 30, 3], "bf16", 3,
                    strides=[P * 2, 128], elements=rows * P))
    return out


def ptx(case):
    """The probe kernel for `case`: 128 threads; thread 0 initializes the
    mbarrier, expects the box's bytes and issues the load; everyone waits
    on phase 0, then copies the box out 4 bytes at a time."""
    n = case.box_bytes
    coords = ", ".join("%%r%d" % (20 + i) for i in range(case.rank))
    movs = "\n".join("  mov.b32 %%r%d, %d;" % (20 + i, c) for i, c in enumerate(case.coords))
    if case.in_global:
        params = ".param .u64 out, .param .u64 map"
        mapaddr = "  ld.param.u64 %rd2, [map];"
    else:
        params = ".param .u64 out, .param .align 64 .b8 map[128]"
        mapaddr = "  mov.b64 %rd3, map;\n  cvta.param.u64 %rd2, %rd3;"
    return """.version 8.0
.target sm_90a
.address_size 64
.extern .shared .align 1024 .b8 smem[];
.visible .entry probe(%s)
{
  .reg .pred %%p<4>;
  .reg .b32 %%r<40>;
  .reg .b64 %%rd<8>;
  mov.u32 %%r1, %%tid.x;
  mov.u32 %%r2, smem;
  add.s32 %%r3, %%r2, %d;
  setp.eq.u32 %%p1, %%r1, 0;
  @%%p1 mbarrier.init.shared::cta.b64 [%%r3], 1;
  fence.mbarrier_init.release.cluster;
  bar.sync 0;
%s
%s
  @%%p1 mbarrier.arrive.expect_tx.shared::cta.b64 _, [%%r3], %d;
  @%%p1 cp.async.bulk.tensor.%dd.shared::cluster.global.mbarrier::complete_tx::bytes [%%r2], [%%rd2, {%s}], [%%r3];
WAIT:
  mbarrier.try_wait.parity.shared::cta.b64 %%p2, [%%r3], 0;
  @!%%p2 bra.uni WAIT;
  ld.param.u64 %%rd1, [out];
  mov.u32 %%r4, %%r1;
COPY:
  setp.ge.u32 %%p3, %%r4, %d;
  @%%p3 bra.uni DONE;
  shl.b32 %%r5, %%r4, 2;
  add.s32 %%r6, %%r2, %%r5;
  ld.shared.b32 %%r7, [%%r6];
  mul.wide.u32 %%rd4, %%r4, 4;
  add.s64 %%rd5, %%rd1, %%rd4;
  st.global.b32 [%%rd5], %%r7;
  add.u32 %%r4, %%r4, 128;
  bra.uni COPY;
DONE:
  bar.sync 0;
  @%%p1 mbarrier.inval.shared::cta.b64 [%%r3];
  ret;
}
""" % (params, (n + 7) // 8 * 8, mapaddr, movs, n, case.rank, coords, n // 4)


def source(case):
    """The tensor: element i holds i + 1 (so that zero fill shows)."""
    count = case.elements
    dt = DTYPES[case.dtype][1]
    if case.dtype == "f32":
        return (np.arange(count, dtype=np.float32) + 1).view(np.uint32)
    if case.dtype == "bf16":
        vals = (np.arange(count, dtype=np.float32) % 256 + 1)
        return (vals.view(np.uint32) >> 16).astype(np.uint16)
    return (np.arange(count) % 65535 + 1).astype(dt)


def expected(case):
    """The shared bytes of the box, as documented: box elements in order
    (innermost dimension fastest), out-of-range ones zero (or, with NaN
    fill, the device's NaN), 16-byte chunks swizzled by the address bits."""
    src = source(case)
    dt = src.dtype
    box = np.zeros(list(reversed(case.box)), dt)
    fill = 0
    if case.nan:
        # The device's NaN: 0x7ff7 in every 2 bytes (an H200, driver
        # 580.159.04, 2026-11-27; the canonical 0x7fffffff / 0x7fff that
        # was expected here differed from it).
        fill = 0x7ff77ff7 if case.esize == 4 else 0x7ff7
    steps = [1] + [s // case.esize for s in case.strides]  # elements, innermost first
    for idx in itertools.product(*[range(b) for b in reversed(case.box)]):
        g = [c + i for c, i in zip(case.coords, reversed(idx))]  # innermost first
        inside = all(0 <= x < d for x, d in zip(g, case.dims))
        box[idx] = src[sum(x * st for x, st in zip(g, steps))] if inside else fill
    raw = box.reshape(-1).view(np.uint8)
    span = SPAN[case.swizzle]
    if not span:
        return raw.copy()
    out = np.zeros_like(raw)
    for off in range(0, raw.size, 16):
        sw = off ^ (((off >> 7) & (span // 16 - 1)) << 4)
        out[sw:sw + 16] = raw[off:off + 16]
    return out


def run(drv, case):
    """The shared bytes the probe copied out, from the driver `drv`."""
    fn = drv.load(ptx(case), "probe")
    src = source(case)
    p = drv.to_device(src)
    out = drv.alloc(case.box_bytes)
    tmap = drv.tensor_map(p, DTYPES[case.dtype][0], case.dims, case.strides, case.box,
                          case.swizzle, oob_nan=case.nan)
    held = []
    if case.in_global:
        mp = drv.to_device(np.frombuffer(bytes(tmap), np.uint8))
        held.append(mp)
        args = [ctypes.c_uint64(out), ctypes.c_uint64(mp)]
    else:
        args = [ctypes.c_uint64(out), tmap]
    try:
        drv.launch(fn, (1,), (128,), (case.box_bytes + 8 + 15) // 16 * 16 + 1024, args)
        return drv.to_host(out, (case.box_bytes,), np.uint8)
    finally:
        for q in [p, out] + held:
            drv.free(q)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", required=True, help="libcuda.so.1 or libattnc-emucuda.so")
    args = ap.parse_args()
    drv = Driver(args.lib)
    bad = 0
    for c in cases():
        try:
            got = run(drv, c)
        except DriverError as e:
            print("FAULT %r: %s" % (c, str(e).splitlines()[0]))
            bad += 1
            continue
        want = expected(c)
        diff = np.nonzero(got != want)[0]
        if diff.size:
            bad += 1
            print("DIFF  %r: %d bytes, first at %d: got %s want %s" % (
                c, diff.size, diff[0], got[diff[0]:diff[0] + 16].tolist(),
                want[diff[0]:diff[0] + 16].tolist()))
        else:
            print("ok    %r" % c)
    print("%d of %d cases differ from the documented layout" % (bad, len(cases())))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
