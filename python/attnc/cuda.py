"""CUDA devices and device arrays without torch: what NumPy users (and the
tests, on the emulated driver) use where torch users have CUDA tensors.

    x = attnc.cuda.to_device(numpy_array)      # a DeviceArray
    out = kernel(x, k, v)                      # a DeviceArray, enqueued
    attnc.cuda.to_host(out)                    # NumPy, after the device's work

A DeviceArray speaks DLPack (torch.from_dlpack, cupy.from_dlpack take it
without a copy). attnc opens each device's primary context (the one torch
and the CUDA runtime use) through the driver library it finds at run time:
libcuda.so.1, or $ATTNC_LIBCUDA.
"""
import operator

from . import _attnc

__all__ = ["DeviceArray", "device", "empty", "to_device", "to_host", "synchronize"]


class DeviceArray:
    """A C-contiguous array in CUDA device memory allocated by attnc; freed
    when the last reference (this object or a DLPack consumer's) goes."""

    def __init__(self, raw, shape, dtype):
        self._raw = raw
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype  # attnc's name: f32, f16, bf16, i32, i64, bool
        self.device = raw.__dlpack_device__()[1]

    def __dlpack__(self, **kwargs):
        return self._raw.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._raw.__dlpack_device__()

    def __repr__(self):
        return "DeviceArray(shape=%s, dtype=%s, device=cuda:%d)" % (
            self.shape, self.dtype, self.device)


def device(ordinal=0):
    """(name, compute capability) of CUDA device `ordinal`, e.g.
    ('NVIDIA H100 80GB HBM3', 90). attnc.Error when there is none."""
    return _attnc.cuda_device(ordinal)


def empty(shape, dtype, device=0):
    """An uninitialized device array (dtype: f32, f16, bf16, i32, i64, bool)."""
    dims = _shape(shape)
    return DeviceArray(_attnc.cuda_empty(dims, dtype, device), dims, dtype)


def _shape(shape):
    """The shape as non-negative ints, or a TypeError/ValueError naming it."""
    if isinstance(shape, int):
        shape = (shape,)
    try:
        dims = [operator.index(s) for s in shape]
    except TypeError:
        raise TypeError("'shape' must be a sequence of ints, got %r" % (shape,)) from None
    if any(s < 0 for s in dims):
        raise ValueError("'shape' must not have negative sizes, got %r" % (tuple(dims),))
    return dims


def to_device(array, device=0):
    """A device copy of a C-contiguous host array (NumPy, or a CPU torch
    tensor for bfloat16)."""
    return DeviceArray(_attnc.to_device(array, device), array.shape,
                       _attnc.dtype_of(array, "array"))


def to_host(array):
    """A host copy of a C-contiguous device array once the device's work so
    far is done: NumPy, or a torch tensor for bfloat16 (NumPy has none)."""
    raw = _attnc.to_host(array)
    if _attnc.dtype_of(array, "array") == "bf16":
        import torch
        return torch.from_dlpack(raw)
    import numpy
    return numpy.from_dlpack(raw)


def synchronize(device=0):
    """Waits for all work on CUDA device `device`."""
    _attnc.cuda_synchronize(device)
