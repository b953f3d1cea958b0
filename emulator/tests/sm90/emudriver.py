"""A small ctypes binding of the CUDA driver API, enough to load a PTX
module into libattnc-emucuda.so (or any libcuda), move arrays, encode a
tensor map and launch a kernel: what the conformance tests and the device
probes use to run PTX that another compiler (Triton) wrote."""
import ctypes
import os

import numpy as np

#: The conformance tests run against a real driver (a device machine:
#: .device/run-gpu-session.sh): what only the emulator reports is skipped.
ON_DEVICE = os.environ.get("ATTNC_CONFORMANCE_ON_DEVICE") == "1"

#: The driver the tests load: $ATTNC_EMUCUDA, else the build tree's emulator.
LIB = os.environ.get("ATTNC_EMUCUDA", os.path.join(
    os.path.dirname(__file__), "..", "..", "..", "build", "lib", "libattnc-emucuda.so"))


def require_triton():
    """Triton, which the tests compile kernels with: the set-up installs it
    (with ATTNC_TEST_REQUIRE_TRITON=1 a missing one fails the test), else
    the calling module is skipped."""
    import pytest
    if os.environ.get("ATTNC_TEST_REQUIRE_TRITON") == "1":
        import triton  # noqa: F401
    else:
        pytest.importorskip("triton")


class DriverError(RuntimeError):
    pass


class Driver:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self._check(self.lib.cuInit(0), "cuInit")
        dev = ctypes.c_int()
        self._check(self.lib.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
        ctx = ctypes.c_void_p()
        self._check(self.lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev),
                    "cuDevicePrimaryCtxRetain")
        self._check(self.lib.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        self.lib.cuMemAlloc_v2.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t]
        self.lib.cuMemcpyHtoD_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t]
        self.lib.cuMemcpyDtoH_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t]
        self.lib.cuMemFree_v2.argtypes = [ctypes.c_uint64]

    def _check(self, rc, what, log=None):
        if rc != 0:
            msg = "%s failed with CUDA error %d" % (what, rc)
            report = getattr(self.lib, "attnc_emu_last_report", None)
            if report is not None:
                report.restype = ctypes.c_char_p
                text = report()
                if text:
                    msg += "\n" + text.decode()
            if log:
                msg += "\n" + log
            raise DriverError(msg)

    def load(self, ptx, name):
        """The kernel `name` of a PTX module; a load error carries the JIT log."""
        mod = ctypes.c_void_p()
        buf = ctypes.create_string_buffer(1 << 16)
        opts = (ctypes.c_int * 2)(5, 6)  # CU_JIT_ERROR_LOG_BUFFER(_SIZE_BYTES)
        vals = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), ctypes.c_void_p(1 << 16))
        rc = self.lib.cuModuleLoadDataEx(ctypes.byref(mod), ptx.encode() + b"\0", 2, opts, vals)
        self._check(rc, "cuModuleLoadDataEx", buf.value.decode())
        fn = ctypes.c_void_p()
        self._check(self.lib.cuModuleGetFunction(ctypes.byref(fn), mod, name.encode()),
                    "cuModuleGetFunction")
        return fn

    def to_device(self, array):
        array = np.ascontiguousarray(array)
        ptr = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), max(array.nbytes, 1)), "cuMemAlloc")
        self._check(self.lib.cuMemcpyHtoD_v2(ptr.value, array.ctypes.data, array.nbytes),
                    "cuMemcpyHtoD")
        return ptr.value

    def alloc(self, nbytes):
        ptr = ctypes.c_uint64()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), max(nbytes, 1)), "cuMemAlloc")
        return ptr.value

    def tensor_map(self, ptr, dtype, dims, strides, box, swizzle, oob_nan=False,
                   element_strides=None):
        """A CUtensorMap (128 bytes, as a ctypes array to pass by value) from
        cuTensorMapEncodeTiled. dims, box, element_strides: innermost first;
        strides: bytes of dims 1.. (len(dims) - 1 of them)."""
        rank = len(dims)
        raw = (ctypes.c_ubyte * 192)()
        at = ctypes.addressof(raw) + (-ctypes.addressof(raw)) % 64
        f = self.lib.cuTensorMapEncodeTiled
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p,
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        es = element_strides or [1] * rank
        self._check(f(at, dtype, rank, ctypes.c_void_p(ptr),
                      (ctypes.c_uint64 * rank)(*dims),
                      (ctypes.c_uint64 * max(rank - 1, 1))(*(list(strides) or [0])),
                      (ctypes.c_uint32 * rank)(*box), (ctypes.c_uint32 * rank)(*es),
                      0, swizzle, 2, 1 if oob_nan else 0), "cuTensorMapEncodeTiled")
        out = (ctypes.c_ubyte * 128)()
        ctypes.memmove(out, at, 128)
        return out

    def to_host(self, ptr, shape, dtype):
        out = np.empty(shape, dtype)
        self._check(self.lib.cuMemcpyDtoH_v2(out.ctypes.data, ptr, out.nbytes), "cuMemcpyDtoH")
        return out

    def free(self, ptr):
        self.lib.cuMemFree_v2(ptr)

    def launch(self, fn, grid, block, shared, params):
        """params: a list of ctypes values (c_uint64 for pointers, c_int32...)."""
        if shared > 48 * 1024:
            self._check(self.lib.cuFuncSetAttribute(fn, 8, ctypes.c_int(shared)),
                        "cuFuncSetAttribute")
        holders = [ctypes.pointer(p) for p in params]
        args = (ctypes.c_void_p * len(params))(*[ctypes.cast(h, ctypes.c_void_p) for h in holders])
        g = list(grid) + [1] * (3 - len(grid))
        b = list(block) + [1] * (3 - len(block))
        rc = self.lib.cuLaunchKernel(fn, *[ctypes.c_uint(x) for x in g],
                                     *[ctypes.c_uint(x) for x in b],
                                     ctypes.c_uint(shared), ctypes.c_void_p(0), args,
                                     ctypes.c_void_p(0))
        self._check(rc, "cuLaunchKernel")
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")
