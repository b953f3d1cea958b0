"""attnc: attention variants compiled from .attn closures, run on torch
tensors or NumPy arrays.

    import attnc
    kernel = attnc.compile("examples/synaptic.attn", variant="synaptic")
    out, lse = kernel(q, k, v, qamp=qamp, key_factor=kf, barrier=0.05,
                      return_lse=True)

q, k, v are [B, H, S, D] (FlexAttention's layout), any strides, float32,
float16 or bfloat16; the output is allocated like the query (or written
into `out=`). Captured tensors and scalars are keyword arguments named as
in the variant's signature; new values never recompile. CPU tensors run on
the host JIT today; CUDA tensors are not yet accepted (docs/python.md).
"""
import os as _os

from . import _attnc
from ._attnc import Error

__all__ = ["compile", "Kernel", "Error", "flex_attention", "create_block_mask",
           "BlockMask", "TraceError"]


def compile(source, variant=None, *, name=None):
    """Compiles a .attn file (a path) or .attn source text.

    `variant` picks one of the file's variants (required when it has
    several). Language errors raise attnc.Error with every
    `file:line:col: error:` message and its caret."""
    if isinstance(source, _os.PathLike) or (
            isinstance(source, str) and "\n" not in source and source.endswith(".attn")):
        program = _attnc.Program.load(_os.fspath(source))
    else:
        program = _attnc.Program.load(name or "<source>", source)
    names = program.variants
    if variant is None:
        if len(names) != 1:
            raise Error("the source has variants %s: pass variant=..." % ", ".join(names))
        variant = names[0]
    elif variant not in names:
        raise Error("no variant '%s' (the source has %s)" % (variant, ", ".join(names)))
    return Kernel(program, variant)


def _is_scalar(x):
    return isinstance(x, (bool, int, float))


def _empty(like, shape, float32=False):
    """An uninitialized array shaped `shape`, on `like`'s device, with its
    dtype (or float32)."""
    if hasattr(like, "new_empty"):  # torch
        import torch
        return like.new_empty(shape, dtype=torch.float32 if float32 else like.dtype)
    import numpy as np
    return np.empty(shape, dtype=np.float32 if float32 else like.dtype)


class Kernel:
    """A variant of a compiled program; specialized per (dtype, head dims)
    on first use and cached."""

    def __init__(self, program, variant):
        self.program = program
        self.variant = variant
        self.signature = program.signature(variant)
        self._cpu = {}

    def _args(self, scale, kv_lens, q_offsets, params):
        a = _attnc.CallArgs()
        a.scale = scale
        a.kv_lens = None if kv_lens is None else [int(x) for x in kv_lens]
        a.q_offsets = None if q_offsets is None else [int(x) for x in q_offsets]
        tensors, scalars = {}, {}
        for key, value in params.items():
            if _is_scalar(value):
                scalars[key] = float(value)
            else:
                tensors[key] = value
        a.tensors = tensors
        a.scalars = scalars
        return a

    def __call__(self, q, k, v, *, scale=None, kv_lens=None, q_offsets=None,
                 out=None, return_lse=False, num_threads=0, **params):
        """Attention over q [B, H, Lq, D], k [B, Hkv, Lkv, D], v [B, Hkv,
        Lkv, Dv]; returns out [B, H, Lq, Dv] (and lse [B, H, Lq], float32,
        natural log, with return_lse=True). kv_lens: per-sequence key
        counts; q_offsets: per-sequence absolute position of the first
        query (default: the queries end at the last key; 0 is
        FlexAttention's convention)."""
        dtype = _attnc.dtype_of(q, "q")
        d, dv = int(q.shape[3]), int(v.shape[3])
        key = (dtype, d, dv)
        if key not in self._cpu:
            self._cpu[key] = self.program.compile_cpu(self.variant, dtype, d, dv)
        shape = (int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), dv)
        if out is None:
            out = _empty(q, shape)
        lse = _empty(q, shape[:3], float32=True) if return_lse else None
        self._cpu[key].run(q, k, v, out, lse,
                           self._args(scale, kv_lens, q_offsets, params),
                           num_threads)
        return (out, lse) if return_lse else out

    def reference(self, q, k, v, *, scale=None, kv_lens=None, q_offsets=None,
                  **params):
        """The fp64 oracle on the same arguments: (out, lse) as float64
        NumPy arrays. Slow (naive attention); for tests and debugging."""
        return self.program.reference(
            self.variant, q, k, v, self._args(scale, kv_lens, q_offsets, params))


from .flex import BlockMask, TraceError, create_block_mask, flex_attention  # noqa: E402
