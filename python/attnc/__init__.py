"""attnc: attention variants compiled from .attn closures, run on torch
tensors, NumPy arrays or CUDA device arrays.

    import attnc
    kernel = attnc.compile("examples/synaptic.attn", variant="synaptic")
    out, lse = kernel(q, k, v, qamp=qamp, key_factor=kf, barrier=0.05,
                      return_lse=True)

q, k, v are [B, H, S, D] (FlexAttention's layout), any strides, float32,
float16 or bfloat16; the output is allocated like the query (or written
into `out=`). Captured tensors and scalars are keyword arguments named as
in the variant's signature; new values never recompile. CPU arrays run on
the host JIT, CUDA arrays (torch CUDA tensors, any DLPack device array) on
the device, on torch's current stream. Kernel packages compiled ahead of
time (`attnc.compile_package`, `attnc compile --emit=package`) run on CUDA
devices with the runtime alone (`attnc.load_package`).
"""
import operator as _operator
import os as _os
import sys as _sys
import threading as _threading

from . import _attnc, cuda
from ._attnc import Error

__all__ = ["compile", "compile_package", "load_package", "Kernel", "Package",
           "Error", "flex_attention", "create_block_mask", "BlockMask",
           "TraceError", "has_compiler", "cuda", "set_checked", "Plan"]

#: Whether this build of attnc compiles .attn (False: the runtime-only
#: package, which runs kernel packages on CUDA devices).
has_compiler = _attnc.has_compiler

_CPU, _CUDA = 1, 2  # DLPack device types


def _needs_compiler(what):
    if not has_compiler:
        raise Error("%s needs the compiler, and this attnc is the runtime-only "
                    "package: compile ahead of time where the compiler is "
                    "(attnc.compile_package) and use attnc.load_package here" % what)


def _load_program(source, name=None):
    _needs_compiler("compiling .attn")
    if isinstance(source, _os.PathLike) or (
            isinstance(source, str) and "\n" not in source and source.endswith(".attn")):
        return _attnc.Program.load(_os.fspath(source))
    return _attnc.Program.load(name or "<source>", source)


def _pick_variant(names, variant):
    if not names:
        raise Error("the source defines no variant (expected at least one "
                    "`variant name(...) { ... }`)")
    if variant is None:
        if len(names) != 1:
            raise Error("the source has variants %s: pass variant=..." % ", ".join(names))
        return names[0]
    if variant not in names:
        raise Error("no variant '%s' (the source has %s)" % (variant, ", ".join(names)))
    return variant


def compile(source, variant=None, *, name=None):
    """Compiles a .attn file (a path) or .attn source text.

    `variant` picks one of the file's variants (required when it has
    several). Language errors raise attnc.Error with every
    `file:line:col: error:` message and its caret."""
    program = _load_program(source, name)
    return Kernel(program, _pick_variant(program.variants, variant))


def compile_package(source, path, *, targets=("sm_80", "sm_90", "sm_90a"),
                    dtypes=("bf16", "f16", "f32"), head_dims=(64, 128), name=None,
                    backward=False, key_offsets=False):
    """Compiles every variant of a .attn file (or source text) ahead of time
    into a kernel package at `path`: PTX per target, dtype and head dims
    (an int D, or a (D, Dv) pair), with each variant's signature and fp64
    reference program; with `backward`, the backward's kernels too (so that
    loss.backward() on CUDA tensors needs no compiler). `key_offsets`:
    False (kernels without key offsets), True (kernels with them only) or
    "both" (each kind; a call gets the one it needs: calls with kv_offsets
    the kernel that reads them). The runtime-only package runs it with no
    LLVM."""
    program = _load_program(source, name)
    dims = [(d, d) if isinstance(d, int) else (int(d[0]), int(d[1])) for d in head_dims]
    if key_offsets not in (False, True, "both"):
        raise Error("'key_offsets' is %r, expected False, True or \"both\""
                    % (key_offsets,))
    kinds = [False, True] if key_offsets == "both" else [bool(key_offsets)]
    program.write_package(_os.fspath(path), list(targets), list(dtypes), dims,
                          backward, kinds)


class Package:
    """A kernel package: `package.kernel(variant)` runs on CUDA devices."""

    def __init__(self, path):
        self.path = _os.fspath(path)
        self._package = _attnc.Package.load(self.path)
        self.variants = self._package.variants

    def kernel(self, variant=None):
        return Kernel(self._package, _pick_variant(self.variants, variant))


_packages = []  # loaded with attnc.load_package: where flex_attention looks


def load_package(path):
    """Reads a kernel package (attnc.compile_package, or `attnc compile
    --emit=package`). attnc.flex_attention also finds the traced modifiers
    exported into it (attnc.flex.export_package)."""
    p = Package(path)
    _packages.append(p)
    return p


_I32_MIN, _I32_MAX = -2 ** 31, 2 ** 31 - 1
#: The longest sequence a call takes (the runtime's i32 positions).
_MAX_SEQ = _I32_MAX // 2


def _ints(xs, name="argument"):
    """A list of Python ints in int32's range (from a list, a NumPy array,
    a torch tensor or a device array), or a TypeError/ValueError naming the
    argument and the entry."""
    if xs is None:
        return None
    if not isinstance(xs, (list, tuple)):
        if not hasattr(xs, "tolist") and hasattr(xs, "__dlpack_device__") \
                and _device_of(xs)[0] == _CUDA:
            xs = cuda.to_host(xs)  # a device array: read back
        kind = getattr(getattr(xs, "dtype", None), "kind", None)
        if kind in ("i", "u") and getattr(xs, "ndim", None) == 1:
            # A NumPy integer array (a page table): checked whole.
            if xs.size and (xs.min() < _I32_MIN or xs.max() > _I32_MAX):
                bad = int(((xs < _I32_MIN) | (xs > _I32_MAX)).argmax())
                raise ValueError("'%s[%d]' is %d, expected %d..%d" % (
                    name, bad, int(xs[bad]), _I32_MIN, _I32_MAX))
            return xs.tolist()
        if hasattr(xs, "tolist"):
            xs = xs.tolist()
    if isinstance(xs, (int, float, str, bytes)) or not hasattr(xs, "__iter__"):
        raise TypeError("'%s' must be a sequence of integers (a list, NumPy "
                        "array or tensor), got %s" % (name, type(xs).__name__))
    out = []
    for i, x in enumerate(xs):
        out.append(_int(x, "%s[%d]" % (name, i), _I32_MIN, _I32_MAX))
    return out


def _int(x, name, lo, hi):
    """x as an int in [lo, hi], or a TypeError/ValueError naming it."""
    if isinstance(x, bool) or isinstance(x, float):
        raise TypeError("'%s' must be an integer, got %r" % (name, x))
    try:
        n = _operator.index(x)
    except TypeError:
        raise TypeError("'%s' must be an integer, got %s" % (name, type(x).__name__)) from None
    if not lo <= n <= hi:
        raise ValueError("'%s' is %d, expected %d..%d" % (name, n, lo, hi))
    return n


_U64_MAX = 2 ** 64 - 1


def _dropout_p(p):
    """dropout_p as a float in [0, 1), or an error naming it."""
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        try:
            p = float(p)  # a NumPy scalar; a tensor is refused below
        except (TypeError, ValueError):
            raise TypeError("'dropout_p' must be a float in [0, 1), got %s"
                            % type(p).__name__) from None
    p = float(p)
    if not 0.0 <= p < 1.0:
        raise ValueError("'dropout_p' must be in [0, 1), got %r" % (p,))
    return p


def _draw_seed(q):
    """A dropout seed: from torch's default generator for torch tensors
    (torch.manual_seed governs it), else from Python's `random`."""
    if _is_torch_tensor(q):
        import torch
        return int(torch.randint(0, 2 ** 62, (1,)).item())
    import random
    return random.getrandbits(64)


def _array(x, name):
    """x when it is an array attnc reads (a NumPy array, a torch tensor, a
    DLPack array), else a TypeError naming the argument."""
    if x is None or _is_scalar(x) or not (hasattr(x, "__dlpack__") or
                                          hasattr(x, "__array_interface__")):
        raise TypeError("'%s' must be an array (a NumPy array, a torch tensor "
                        "or a DLPack array), got %s" % (name, type(x).__name__))
    kind = getattr(getattr(x, "dtype", None), "kind", None)
    if kind in ("O", "U", "S", "V"):
        raise TypeError("'%s' has dtype %s; expected float32, float16 or "
                        "bfloat16" % (name, x.dtype))
    return x


def _dtype_of(x, name):
    try:
        return _attnc.dtype_of(x, name)
    except TypeError:
        raise TypeError("'%s' is not an array attnc can read (%s)" %
                        (name, type(x).__name__)) from None


def _check_qkv(q, k, v, out):
    """The arrays of a call: rank 4, sequence lengths in range, a writable
    `out`; errors name the argument."""
    for x, name in ((q, "q"), (k, "k"), (v, "v")):
        _array(x, name)
        if len(x.shape) != 4:
            raise ValueError("'%s' must be 4-d [B, H, S, D], got shape %s" %
                             (name, tuple(int(s) for s in x.shape)))
    for x, name in ((q, "q"), (k, "k")):
        if int(x.shape[2]) > _MAX_SEQ:
            raise ValueError("'%s' has %d positions; sequence lengths must fit "
                             "in i32 (at most %d)" % (name, int(x.shape[2]), _MAX_SEQ))
    if out is not None:
        _array(out, "out")
        flags = getattr(out, "flags", None)
        if flags is not None and not flags.writeable:
            raise ValueError("'out' is read-only (a broadcast or read-only "
                             "view); pass a writable array")


def _is_scalar(x):
    return isinstance(x, (bool, int, float))


def _is_torch_tensor(x):
    """A torch tensor (without importing torch where no one has)."""
    torch = _sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def _needs_operator(arrays, params):
    """Whether a call on torch tensors goes through the operator
    torch.ops.attnc.attention: under torch.compile (Dynamo keeps it in its
    graph) and when autograd needs it. Otherwise (inference, eager) the
    kernel runs directly: the same code the operator runs, without its
    dispatch, and a process that never trains or compiles never imports
    torch._dynamo (1.4 s on first use)."""
    import torch
    if torch.compiler.is_compiling():
        return True
    if not torch.is_grad_enabled():
        return False
    return any(getattr(x, "requires_grad", False)
               for x in (*arrays, *params.values()))


def _device_of(x):
    """(DLPack device type, ordinal) of an array."""
    try:
        t, i = x.__dlpack_device__()
        return int(t), int(i)
    except AttributeError:
        return _CPU, 0


def _empty(like, where, shape, float32=False):
    """An uninitialized array shaped `shape` where `like` is, with its dtype
    (or float32): a torch tensor for torch, else NumPy or a device array."""
    if hasattr(like, "new_empty"):  # torch
        import torch
        return like.new_empty(shape, dtype=torch.float32 if float32 else like.dtype)
    if where[0] == _CUDA:
        return cuda.empty(shape, "f32" if float32 else _attnc.dtype_of(like, "q"),
                          where[1])
    import numpy as np
    return np.empty(shape, dtype=np.float32 if float32 else like.dtype)


def _stream_of(q, where, stream):
    """The CUstream (an int) to run on: `stream` when given (an int, or an
    object with .cuda_stream or .ptr), else torch's current stream for a
    torch tensor, else the null stream."""
    if stream is not None:
        for attr in ("cuda_stream", "ptr"):
            if hasattr(stream, attr):
                return int(getattr(stream, attr))
        return int(stream)
    if hasattr(q, "new_empty"):
        import torch
        return int(torch.cuda.current_stream(q.device).cuda_stream)
    return 0


def _host(x):
    """A host copy of a CUDA array (the reference reads host memory)."""
    if _is_scalar(x) or _device_of(x)[0] != _CUDA:
        return x
    if hasattr(x, "new_empty"):
        return x.detach().cpu()
    return cuda.to_host(x)


_PAGE_ARGS = ("kv_indptr", "kv_indices", "kv_last_page_len")

_checked = _os.environ.get("ATTNC_CHECKED", "0") not in ("", "0")


def set_checked(enabled=True):
    """The checked mode (also ATTNC_CHECKED=1): before each call runs, its
    modifiers are evaluated by the fp64 oracle and the first index into a
    captured tensor outside that tensor raises IndexError, naming the
    capture, the index and the shape. The kernels clamp such an index (so
    they never read out of bounds); this mode finds where a modifier relies
    on it. Slow (naive attention per call): for debugging. Returns the
    previous setting."""
    global _checked
    was, _checked = _checked, bool(enabled)
    return was


def _check_gathers(kernel, q, k, v, args):
    """The checked mode's test of one call (set_checked)."""
    hit = kernel.program.out_of_range_gather(kernel.variant, _host(q), _host(k),
                                             _host(v), args)
    if hit is not None:
        capture, index, shape = hit
        if kernel.variant.startswith("flex_"):  # a traced capture: its name
            capture = capture.rsplit("_", 1)[0]
        raise IndexError("index %s is out of bounds for '%s' of shape %s "
                         "(the first such gather of the call; the kernels "
                         "clamp it; ATTNC_CHECKED)" % (
                             list(index), capture, list(shape)))

def _offsets_given(kv_offsets):
    """Whether a call places its keys anywhere but from position 0 (it
    then needs a kernel compiled with key offsets)."""
    xs = _ints(kv_offsets, "kv_offsets")
    return xs is not None and any(xs)


def _kernel_options(dropout, key_offsets):
    """The options of a kernel with dropout or key offsets: the compiler
    compiles it, a package picks it (one built with --dropout or
    --key-offsets[=both]; otherwise the package's error names what it
    holds)."""
    more = {}
    if dropout:
        more["dropout"] = True
    if key_offsets:
        more["key_offsets"] = True
    return more


def _page_table(kv_indptr, kv_indices, kv_last_page_len):
    """A call's page table (kv_indptr, kv_indices, kv_last_page_len), or
    None when it gives none of the three."""
    if kv_indptr is None and kv_indices is None and kv_last_page_len is None:
        return None
    return (kv_indptr, kv_indices, kv_last_page_len)


_registry = []  # every Kernel, by the number torch.ops.attnc.attention names


class Kernel:
    """A variant of a compiled program (or a package); specialized per
    (device, dtype, head dims) on first use and cached."""

    def __init__(self, program, variant):
        self.program = program
        self.variant = variant
        self.signature = program.signature(variant)
        self._kernels = {}
        # Threads making a first call at once compile it once: the others
        # wait here (the compile itself runs without the GIL).
        self._compile_lock = _threading.Lock()
        self._op_id = len(_registry)
        _registry.append(self)

    def _args(self, scale, kv_lens, q_offsets, params, pages=None, num_splits=0,
              dropout=None, kv_offsets=None, heads=(0, 0)):
        a = _attnc.CallArgs()
        a.scale = scale
        if dropout is not None:
            a.dropout_p, a.dropout_seed, a.dropout_offset = dropout
        a.num_splits = _int(num_splits, "num_splits", 0, _I32_MAX)
        a.kv_lens = _ints(kv_lens, "kv_lens")
        a.q_offsets = _ints(q_offsets, "q_offsets")
        a.kv_offsets = _ints(kv_offsets, "kv_offsets")
        a.head_offset = _int(heads[0], "head_offset", 0, 1 << 24)
        a.head_count = _int(heads[1], "head_count", 0, 1 << 24)
        if pages is not None:
            a.kv_indptr, a.kv_indices, a.kv_last_page_len = (
                _ints(x, n) for x, n in zip(pages, _PAGE_ARGS))
        tensors, scalars = {}, {}
        for key, value in params.items():
            if _is_scalar(value):
                scalars[key] = float(value)
            else:
                tensors[key] = value
        a.tensors = tensors
        a.scalars = scalars
        return a

    def _cached(self, key, build):
        """The kernel under `key`, built once (threads that ask at once wait
        for the one building it)."""
        k = self._kernels.get(key)
        if k is not None:
            return k
        with self._compile_lock:
            k = self._kernels.get(key)
            if k is None:
                k = build()
                self._kernels[key] = k
        return k

    def _kernel(self, where, dtype, d, dv, dropout=False, key_offsets=False):
        key = ((where, dtype, d, dv) + (("dropout",) if dropout else ())
               + (("key_offsets",) if key_offsets else ()))
        return self._cached(key, lambda: self._compile(where, dtype, d, dv,
                                                       dropout, key_offsets))

    def _compile(self, where, dtype, d, dv, dropout=False, key_offsets=False):
        # A kernel with dropout or key offsets is its own compile (kernels
        # without them pay nothing for them), or a package's kernel built
        # with the option.
        more = _kernel_options(dropout, key_offsets)
        if where[0] == _CUDA:
            k = self.program.gpu_kernel(self.variant, dtype, d, dv, where[1], **more)
        elif where[0] == _CPU:
            if not hasattr(self.program, "cpu_kernel"):
                raise Error("a kernel package holds GPU kernels only: CPU arrays "
                            "need attnc.compile (the compiler's host JIT)")
            k = self.program.cpu_kernel(self.variant, dtype, d, dv, **more)
        else:
            raise Error("'q' is on DLPack device type %d; attnc runs CPU and "
                        "CUDA arrays" % where[0])
        return k

    _DTYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16",
               "f32": "f32", "f16": "f16", "bf16": "bf16"}

    def precompile(self, dtypes=("f32",), head_dims=(64,), *, device="cpu",
                   backward=False):
        """Compiles ahead of the first call (which then pays nothing): for
        each dtype ("f32", "bf16", "f16" or torch/NumPy dtypes) and head dim
        (D, or a (D, Dv) pair), on `device` ("cpu", or "cuda"/"cuda:N"),
        the forward and with `backward` its backward. Returns self."""
        if device == "cpu":
            where = (_CPU, 0)
        elif str(device).startswith("cuda"):
            where = (_CUDA, int(str(device).partition(":")[2] or 0))
        else:
            raise ValueError("'device' must be 'cpu' or 'cuda[:N]', got %r" % (device,))
        for dt in dtypes:
            name = self._DTYPES.get(str(dt).split(".")[-1])
            if name is None:
                raise ValueError("'dtypes' entry %r: expected float32, float16 or "
                                 "bfloat16" % (dt,))
            for hd in head_dims:
                d, dv = (hd, hd) if isinstance(hd, int) else (int(hd[0]), int(hd[1]))
                self._kernel(where, name, d, dv)
                if backward:
                    self._backward_kernel(where, name, d, dv)
        return self

    def __call__(self, q, k, v, *, scale=None, kv_lens=None, q_offsets=None,
                 kv_offsets=None, head_offset=0, head_count=0, out=None, return_lse=False, num_threads=0, stream=None,
                 kv_indptr=None, kv_indices=None, kv_last_page_len=None,
                 num_splits=0, dropout_p=0.0, dropout_seed=None,
                 dropout_offset=0, **params):
        """Attention over q [B, H, Lq, D], k [B, Hkv, Lkv, D], v [B, Hkv,
        Lkv, Dv]; returns out [B, H, Lq, Dv] (and lse [B, H, Lq], float32,
        natural log, with return_lse=True). kv_lens: per-sequence key
        counts; q_offsets: per-sequence absolute position of the first
        query (default: the queries end at the last key; 0 is
        FlexAttention's convention); kv_offsets: per-sequence absolute
        position of the first key (default 0): k and v are then a block of
        a longer sequence (a context-parallel shard, a cache whose prefix
        was evicted), the modifiers see each key's true position, and a
        capture indexed by kv spans the positions (docs/runtime.md);
        head_offset, head_count: the query heads are heads head_offset..
        of a model with head_count of them (0: head_offset + H), as the
        modifiers see them (a head-parallel shard). On CUDA the call is enqueued on
        `stream` (default: torch's current stream, or the null stream) and
        returns without waiting. torch tensors go through the operator
        torch.ops.attnc.attention (torch.compile keeps it in its graph),
        except with out=, num_threads= or stream=.

        Paged K/V: with kv_indptr [B+1], kv_indices and kv_last_page_len
        [B] (FlashInfer's page table, host ints), k and v are page pools
        [pages, Hkv, page_size, D] (any strides: an NHD pool is a permuted
        view) and the lengths come from the table (docs/runtime.md).

        num_splits: split-KV (docs/runtime.md): 0 lets the planner split
        small decode batches across cores or SMs, 1 never splits, N forces
        N splits (at most 256).

        dropout_p: attention dropout (docs/dropout.md): each probability is
        kept (times 1 / (1 - dropout_p)) or dropped, by a Philox stream
        keyed by dropout_seed and dropout_offset and the pair's (b, h, q,
        kv), so every device, tile and split draws the same mask and the
        backward regenerates it. dropout_seed None draws one from torch's
        generator (torch.manual_seed governs it) or Python's `random`."""
        _check_qkv(q, k, v, out)
        num_threads = _int(num_threads, "num_threads", 0, _I32_MAX)
        pages = _page_table(kv_indptr, kv_indices, kv_last_page_len)
        dropout_p = _dropout_p(dropout_p)
        dropout_offset = _int(dropout_offset, "dropout_offset", 0, _U64_MAX)
        if dropout_seed is not None and not _is_torch_tensor(dropout_seed):
            dropout_seed = _int(dropout_seed, "dropout_seed", 0, _U64_MAX)
        if (out is None and not num_threads and stream is None
                and _is_torch_tensor(q) and _needs_operator((q, k, v), params)):
            # The operator's schema takes int lists: checked here (on the
            # other route, _args checks them).
            from . import torch_op
            num_splits = _int(num_splits, "num_splits", 0, _I32_MAX)
            # A torch tensor of lengths stays a tensor (a graph input under
            # torch.compile; its values are checked when the kernel runs).
            kv_lens = (torch_op.check_lengths(kv_lens, "kv_lens")
                       if _is_torch_tensor(kv_lens) else _ints(kv_lens, "kv_lens"))
            q_offsets = (torch_op.check_lengths(q_offsets, "q_offsets")
                         if _is_torch_tensor(q_offsets) else _ints(q_offsets, "q_offsets"))
            if pages is not None:
                pages = tuple(_ints(x, n) for x, n in zip(pages, _PAGE_ARGS))
            return torch_op.call(self._op_id, q, k, v, scale, kv_lens,
                                 q_offsets, return_lse, params, pages,
                                 num_splits, dropout_p, dropout_seed,
                                 dropout_offset,
                                 _ints(kv_offsets, "kv_offsets"),
                                 (_int(head_offset, "head_offset", 0, 1 << 24),
                                  _int(head_count, "head_count", 0, 1 << 24)))
        dropout = None
        if dropout_p:
            if dropout_seed is None:
                dropout_seed = _draw_seed(q)
            elif _is_torch_tensor(dropout_seed):
                dropout_seed = int(dropout_seed.item()) % (_U64_MAX + 1)
            dropout = (dropout_p, dropout_seed, dropout_offset)
        return self._run(q, k, v, scale=scale, kv_lens=kv_lens, q_offsets=q_offsets,
                         kv_offsets=kv_offsets, heads=(head_offset, head_count),
                         out=out, return_lse=return_lse, num_threads=num_threads,
                         stream=stream, params=params, pages=pages,
                         num_splits=num_splits, dropout=dropout)

    def plan(self, q, k, v, *, scale=None, kv_lens=None, q_offsets=None,
             kv_offsets=None, return_lse=False, num_threads=0, stream=None, kv_indptr=None,
             kv_indices=None, kv_last_page_len=None, num_splits=0, **params):
        """Plan/run (docs/runtime.md): validates a call (the arguments of
        __call__) and plans it once: lengths, the page table, the scalars,
        a data-dependent mask's block mask, the split plan (on a GPU all of
        it resident on the device). The returned Plan is then called per
        layer with that layer's q, k, v and captured tensors, which must
        have the planned arrays' dtypes, shapes and strides; it validates
        only that. Inference only: outside autograd and torch.compile."""
        _check_qkv(q, k, v, None)
        if _is_torch_tensor(q) and _needs_operator((q, k, v), params):
            raise Error("a plan runs outside autograd and torch.compile: call "
                        "the kernel itself (or use torch.no_grad())")
        num_threads = _int(num_threads, "num_threads", 0, _I32_MAX)
        pages = _page_table(kv_indptr, kv_indices, kv_last_page_len)
        where = _device_of(q)
        d, dv = int(q.shape[3]), int(v.shape[3])
        kernel = self._kernel(where, _dtype_of(q, "q"), d, dv,
                              key_offsets=_offsets_given(kv_offsets))
        shape = (int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), dv)
        out = _empty(q, where, shape)
        lse = _empty(q, where, shape[:3], float32=True) if return_lse else None
        args = self._args(scale, kv_lens, q_offsets, params, pages, num_splits,
                          kv_offsets=kv_offsets)
        if where[0] == _CUDA:
            native = kernel.plan(q, k, v, out, lse, args, _stream_of(q, where, stream))
        else:
            native = kernel.plan(q, k, v, out, lse, args, num_threads)
        scalars = {n: x for n, x in params.items() if _is_scalar(x)}
        return Plan(self, kernel, native, where, args, scalars, return_lse,
                    num_threads)

    def _run(self, q, k, v, *, scale, kv_lens, q_offsets, out, return_lse,
             num_threads, stream, params, pages=None, num_splits=0,
             dropout=None, kv_offsets=None, heads=(0, 0)):
        """dropout: None, or (p, seed, offset) with p > 0."""
        where = _device_of(q)
        dtype = _dtype_of(q, "q")
        d, dv = int(q.shape[3]), int(v.shape[3])
        kernel = self._kernel(where, dtype, d, dv, dropout is not None,
                              _offsets_given(kv_offsets))
        shape = (int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), dv)
        if out is None:
            out = _empty(q, where, shape)
        lse = _empty(q, where, shape[:3], float32=True) if return_lse else None
        args = self._args(scale, kv_lens, q_offsets, params, pages, num_splits,
                          dropout, kv_offsets, heads)
        if _checked:
            host = args if where[0] != _CUDA else self._args(
                scale, kv_lens, q_offsets, {n: _host(x) for n, x in params.items()},
                pages, num_splits, dropout, kv_offsets, heads)
            _check_gathers(self, q, k, v, host)
        if where[0] == _CUDA:
            kernel.run(q, k, v, out, lse, args, _stream_of(q, where, stream))
        else:
            kernel.run(q, k, v, out, lse, args, num_threads)
        return (out, lse) if return_lse else out

    def _backward_kernel(self, where, dtype, d, dv, dropout=False,
                         key_offsets=False):
        def build():
            more = _kernel_options(dropout, key_offsets)
            if where[0] == _CUDA:
                return self.program.gpu_backward_kernel(self.variant, dtype, d, dv,
                                                        where[1], **more)
            return self.program.cpu_backward_kernel(self.variant, dtype, d, dv,
                                                    **more)
        key = (("backward", where, dtype, d, dv)
               + (("dropout",) if dropout else ())
               + (("key_offsets",) if key_offsets else ()))
        return self._cached(key, build)

    def _backward(self, q, k, v, out, lse, grad_out, grad_lse, *, scale,
                  kv_lens, q_offsets, params, dropout=None, kv_offsets=None,
                  heads=(0, 0)):
        """The backward pass on torch tensors, CPU or CUDA
        (attnc::attention_backward): (dq, dk, dv, [the gradient of each
        captured tensor, in params' order])."""
        import torch
        where = _device_of(q)
        if where[0] not in (_CPU, _CUDA):
            raise Error("'q' is on DLPack device type %d; attnc runs CPU and "
                        "CUDA arrays" % where[0])
        if where[0] == _CPU and not hasattr(self.program, "cpu_backward_kernel"):
            raise Error("a kernel package holds GPU kernels only: the CPU "
                        "backward needs attnc.compile (the compiler)")
        dtype = _attnc.dtype_of(q, "q")
        d, dv = int(q.shape[3]), int(v.shape[3])
        kernel = self._backward_kernel(where, dtype, d, dv, dropout is not None,
                                       _offsets_given(kv_offsets))
        dq, dk, dvv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        if grad_lse is not None:
            grad_lse = grad_lse.to(torch.float32).contiguous()
        args = self._args(scale, kv_lens, q_offsets, params, dropout=dropout,
                          kv_offsets=kv_offsets, heads=heads)
        grad_out = grad_out.to(q.dtype)
        if where[0] == _CUDA:
            grads = kernel.run(q, k, v, out, lse, grad_out, grad_lse, dq, dk, dvv,
                               args, _stream_of(q, where, None))
        else:
            grads = kernel.run(q, k, v, out, lse, grad_out, grad_lse, dq, dk, dvv,
                               args, 0)
        tensor_grads = []
        for name, value in params.items():
            if _is_scalar(value):
                continue
            g = grads.get(name)
            # empty_like/zeros_like: the strides the fake kernel promises
            # (the capture's own, for a dense view such as a permutation).
            grad = torch.zeros_like(value)
            if g is not None:
                grad.copy_(torch.from_numpy(g).reshape(value.shape))
            tensor_grads.append(grad)
        return dq, dk, dvv, tensor_grads

    def reference(self, q, k, v, *, scale=None, kv_lens=None, q_offsets=None,
                  kv_offsets=None, head_offset=0, head_count=0, kv_indptr=None, kv_indices=None, kv_last_page_len=None,
                  dropout_p=0.0, dropout_seed=0, dropout_offset=0, **params):
        """The fp64 oracle on the same arguments (copied to the host when
        on a device): (out, lse) as float64 NumPy arrays. Slow (naive
        attention); for tests and debugging. With dropout_p it draws the
        kernels' mask (the seed must be given)."""
        params = {key: _host(x) for key, x in params.items()}
        pages = _page_table(kv_indptr, kv_indices, kv_last_page_len)
        dropout = (_dropout_p(dropout_p),
                   _int(dropout_seed, "dropout_seed", 0, _U64_MAX),
                   _int(dropout_offset, "dropout_offset", 0, _U64_MAX))
        return self.program.reference(
            self.variant, _host(q), _host(k), _host(v),
            self._args(scale, kv_lens, q_offsets, params, pages, dropout=dropout,
                       kv_offsets=kv_offsets, heads=(head_offset, head_count)))


class Plan:
    """A call planned once (Kernel.plan); call it per layer:
    `plan(q, k, v, out=None, stream=None, **captured_tensors)` returns out
    (and lse when planned with return_lse). Its runs share the plan's
    buffers, so they run one at a time (a lock); on a GPU keep them on one
    stream."""

    def __init__(self, owner, kernel, native, where, args, scalars, return_lse,
                 num_threads):
        self._owner, self._runner, self._native = owner, kernel, native
        self._where = where
        self._args, self._scalars = args, scalars
        self._return_lse, self._num_threads = return_lse, num_threads
        self._lock = _threading.Lock()
        self.splits = native.splits

    def __call__(self, q, k, v, *, out=None, stream=None, **params):
        _check_qkv(q, k, v, out)
        if _is_torch_tensor(q) and _needs_operator((q, k, v), params):
            raise Error("a plan runs outside autograd and torch.compile: call "
                        "the kernel itself (or use torch.no_grad())")
        if _device_of(q) != self._where:
            raise Error("the plan was made for arrays on DLPack device %s; 'q' is "
                        "on %s" % (self._where, _device_of(q)))
        tensors = {}
        for name, value in params.items():
            if _is_scalar(value):
                # Scalars are planned values: a new one needs a new plan.
                if name not in self._scalars or float(value) != float(self._scalars[name]):
                    raise ValueError("'%s' is %r, but the plan was made with %r: "
                                     "scalars are fixed by the plan" % (
                                         name, value, self._scalars.get(name)))
            else:
                tensors[name] = value
        shape = (int(q.shape[0]), int(q.shape[1]), int(q.shape[2]), int(v.shape[3]))
        if out is None:
            out = _empty(q, self._where, shape)
        lse = _empty(q, self._where, shape[:3], float32=True) if self._return_lse else None
        with self._lock:
            if _checked:  # as a call does (set_checked), on host copies
                self._args.tensors = {n: _host(x) for n, x in tensors.items()}
                _check_gathers(self._owner, q, k, v, self._args)
            self._args.tensors = tensors
            if self._where[0] == _CUDA:
                self._runner.run_planned(self._native, q, k, v, out, lse, self._args,
                                         _stream_of(q, self._where, stream))
            else:
                self._runner.run_planned(self._native, q, k, v, out, lse, self._args,
                                         self._num_threads)
        return (out, lse) if self._return_lse else out


from .flex import BlockMask, TraceError, create_block_mask, flex_attention  # noqa: E402
