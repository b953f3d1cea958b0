"""Reliability of the Python surface (docs/reliability.md): concurrent
first calls, outputs that alias inputs, sizes beyond memory or i32, scalars
beyond f32, and arguments of the wrong kind -- each refused with an error
that names the argument, on the CPU, through torch and on the emulated GPU."""
import os
import threading

import numpy as np
import pytest

import attnc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = os.path.join(ROOT, "examples")
CAUSAL = "variant causal() { mask_mod(b, h, q, kv) = q >= kv }\n"


def qkv(rng, B=1, H=2, L=24, D=64, dtype=np.float32):
    return tuple(rng.standard_normal((B, H, L, D)).astype(dtype) for _ in range(3))


class CountingProgram:
    """A Program that counts its compiles."""

    def __init__(self, program):
        self._program = program
        self.compiles = 0
        self._lock = threading.Lock()

    def __getattr__(self, name):
        attr = getattr(self._program, name)
        if not name.endswith("_kernel"):
            return attr

        def counted(*args, **kwargs):
            with self._lock:
                self.compiles += 1
            return attr(*args, **kwargs)
        return counted


def run_threads(n, fn):
    errors, results = [], [None] * n
    barrier = threading.Barrier(n)

    def body(i):
        barrier.wait()
        try:
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 -- reported below
            errors.append(e)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    return results


def test_concurrent_first_calls_compile_once_and_agree():
    """Twelve threads make the first call of a fresh kernel at once: one
    compile, every result equal to the reference (this crashed the process
    when one Session was compiled into from several threads)."""
    rng = np.random.default_rng(1)
    q, k, v = qkv(rng)
    for trial in range(3):
        kernel = attnc.compile(CAUSAL)
        kernel.program = CountingProgram(kernel.program)
        outs = run_threads(12, lambda i: kernel(q, k, v))
        assert kernel.program.compiles == 1, trial
        ref, _ = kernel.reference(q, k, v)
        for out in outs:
            assert np.array_equal(out, outs[0])
        assert np.abs(outs[0] - ref).max() < 2e-5


def test_concurrent_forward_and_backward_through_torch():
    torch = pytest.importorskip("torch")
    kernel = attnc.compile(os.path.join(EXAMPLES, "softcap.attn"))
    kernel.program = CountingProgram(kernel.program)
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 2, 20, 64, generator=g) for _ in range(3))

    def step(i):
        qi, ki, vi = (x.clone().requires_grad_() for x in (q, k, v))
        out = kernel(qi, ki, vi, cap=20.0)
        out.square().sum().backward()
        return out.detach(), qi.grad, ki.grad, vi.grad
    results = run_threads(8, step)
    assert kernel.program.compiles == 2  # the forward and the backward, once each
    for r in results[1:]:
        for a, b in zip(r, results[0]):
            assert torch.equal(a, b)


def test_concurrent_flex_attention_traces_compile_once():
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 16, 64, generator=g) for _ in range(3))
    bias = 0.0123 + float(np.random.default_rng().integers(1 << 20))  # a fresh trace

    def score_mod(score, b, h, qi, kv):
        return score + bias * 0

    outs = run_threads(8, lambda i: attnc.flex_attention(q, k, v, score_mod=score_mod))
    for o in outs[1:]:
        assert torch.equal(o, outs[0])


@pytest.mark.parametrize("where", ["numpy", "torch"])
def test_an_output_aliasing_an_input_is_refused(where):
    rng = np.random.default_rng(4)
    kernel = attnc.compile(CAUSAL)
    buf = rng.standard_normal((4, 2, 24, 64)).astype(np.float32)
    if where == "torch":
        torch = pytest.importorskip("torch")
        buf = torch.from_numpy(buf)
    q, k, v = buf[0:1], buf[1:2], buf[2:3]
    with pytest.raises(attnc.Error, match="'out' shares memory with the input 'k'"):
        kernel(q, k, v, out=k)
    with pytest.raises(attnc.Error, match="'out' shares memory with the input 'v'"):
        kernel(q, k, v, out=v)
    # A partial overlap: out starts half-way into q.
    flat = buf.reshape(-1)
    half = flat[24 * 64:24 * 64 + 2 * 24 * 64].reshape(1, 2, 24, 64)
    with pytest.raises(attnc.Error, match="'out' shares memory with the input 'q'"):
        kernel(q, k, v, out=half)
    # The packed slices of one buffer that do not overlap are fine.
    out = kernel(q, k, v, out=buf[3:4])
    ref, _ = kernel.reference(q, k, v)
    assert np.abs(np.asarray(out) - ref).max() < 2e-5


def test_a_broadcast_output_is_refused():
    torch = pytest.importorskip("torch")
    kernel = attnc.compile(CAUSAL)
    q, k, v = (torch.randn(1, 2, 24, 64) for _ in range(3))
    out = torch.zeros(1, 1, 24, 64).expand(1, 2, 24, 64)
    with pytest.raises(attnc.Error, match="'out' has elements that share memory"):
        kernel(q, k, v, out=out)


def test_an_output_aliasing_an_input_is_refused_on_the_device(cuda_device):
    rng = np.random.default_rng(5)
    kernel = attnc.compile(CAUSAL)
    q, k, v = (attnc.cuda.to_device(x) for x in qkv(rng, dtype=np.float32))
    with pytest.raises(attnc.Error, match="'out' shares memory with the input 'k'"):
        kernel(q, k, v, out=k)


def test_huge_device_arrays_are_refused(cuda_device):
    with pytest.raises(attnc.Error, match=r"more than 2\^63 bytes"):
        attnc.cuda.empty((1 << 62,), "f32")
    with pytest.raises(attnc.Error, match=r"more than 2\^63 bytes"):
        attnc.cuda.empty((1 << 40, 1 << 40), "bf16")
    with pytest.raises(ValueError, match="negative"):
        attnc.cuda.empty((4, -1), "f32")
    with pytest.raises(TypeError, match="'shape'"):
        attnc.cuda.empty((4, 2.5), "f32")
    assert attnc.cuda.empty((0, 1 << 62), "f32").shape == (0, 1 << 62)


def test_a_device_array_page_table_is_read_back(cuda_device):
    rng = np.random.default_rng(6)
    kernel = attnc.compile(CAUSAL)
    q = rng.standard_normal((1, 2, 4, 64)).astype(np.float32)
    pool = rng.standard_normal((3, 2, 16, 64)).astype(np.float32)
    table = dict(kv_indptr=[0, 2], kv_indices=[2, 0], kv_last_page_len=[5])
    dev_table = {n: attnc.cuda.to_device(np.asarray(x, np.int32)) for n, x in table.items()}
    dq, dpool = attnc.cuda.to_device(q), attnc.cuda.to_device(pool)
    got = attnc.cuda.to_host(kernel(dq, dpool, dpool, **dev_table))
    ref, _ = kernel.reference(q, pool, pool, **table)
    assert np.abs(got - ref).max() < 2e-5


def test_f32_scalars_beyond_f32_are_refused():
    rng = np.random.default_rng(7)
    kernel = attnc.compile(os.path.join(EXAMPLES, "softcap.attn"))
    q, k, v = qkv(rng)
    with pytest.raises(attnc.Error, match="scalar 'cap' is f32 but was given 1e\\+300"):
        kernel(q, k, v, cap=1e300)
    with pytest.raises(attnc.Error, match="scalar 'cap' is f32"):
        kernel(q, k, v, cap=-3.5e38)
    kernel(q, k, v, cap=3.4e38)  # the largest f32 values are taken


def test_sizes_beyond_i32_or_memory_are_refused_before_allocating():
    kernel = attnc.compile(CAUSAL)
    one = np.zeros((1, 2, 1, 64), np.float32)
    k = np.zeros((1, 2, 8, 64), np.float32)
    huge = np.broadcast_to(one, (1, 2, 1 << 31, 64))
    with pytest.raises(ValueError, match="sequence lengths must fit in i32"):
        kernel(huge, k, k, q_offsets=[0])
    with pytest.raises(attnc.Error, match="sequence lengths must fit in i32"):
        kernel.reference(huge, k, k, q_offsets=[0])
    big = np.broadcast_to(one, (1, 2, 1 << 28, 64))
    with pytest.raises(attnc.Error, match="beyond its limit of 2\\^28 elements"):
        kernel.reference(big, k, k, q_offsets=[0])


def bad_calls():
    """(description, call(kernel, q, k, v), exception, message)."""
    pool = np.zeros((4, 2, 16, 64), np.float32)
    ro = np.broadcast_to(np.zeros((1, 2, 24, 64), np.float32), (1, 2, 24, 64))
    return [
        ("rank-3 q", lambda K, q, k, v: K(q[0], k, v), ValueError,
         r"'q' must be 4-d \[B, H, S, D\], got shape \(2, 24, 64\)"),
        ("rank-5 v", lambda K, q, k, v: K(q, k, v[None]), ValueError, "'v' must be 4-d"),
        ("a list", lambda K, q, k, v: K([[1.0]], k, v), TypeError,
         "'q' must be an array .* got list"),
        ("None", lambda K, q, k, v: K(q, None, v), TypeError, "'k' must be an array"),
        ("objects", lambda K, q, k, v: K(q, k, np.array([[[[object()]]]])), TypeError,
         "'v' has dtype object"),
        ("read-only out", lambda K, q, k, v: K(q, k, v, out=ro), ValueError,
         "'out' is read-only"),
        ("kv_lens >= 2^31", lambda K, q, k, v: K(q, k, v, kv_lens=[1 << 31]), ValueError,
         r"'kv_lens\[0\]' is 2147483648"),
        ("q_offsets >= 2^31", lambda K, q, k, v: K(q, k, v, q_offsets=[1 << 31]), ValueError,
         r"'q_offsets\[0\]' is 2147483648"),
        ("kv_lens floats", lambda K, q, k, v: K(q, k, v, kv_lens=np.array([24.0])), TypeError,
         r"'kv_lens\[0\]' must be an integer"),
        ("kv_lens a scalar", lambda K, q, k, v: K(q, k, v, kv_lens=24), TypeError,
         "'kv_lens' must be a sequence of integers"),
        ("num_splits >= 2^31", lambda K, q, k, v: K(q, k, v, num_splits=1 << 31), ValueError,
         "'num_splits' is 2147483648"),
        ("num_splits 1.5", lambda K, q, k, v: K(q, k, v, num_splits=1.5), TypeError,
         "'num_splits' must be an integer"),
        ("num_splits True", lambda K, q, k, v: K(q, k, v, num_splits=True), TypeError,
         "'num_splits' must be an integer"),
        ("num_threads -1", lambda K, q, k, v: K(q, k, v, num_threads=-1), ValueError,
         "'num_threads' is -1"),
        ("float page indices", lambda K, q, k, v: K(
            q[:, :, :4], pool, pool, kv_indptr=[0, 1], kv_indices=[0.5],
            kv_last_page_len=[16]), TypeError, r"'kv_indices\[0\]' must be an integer"),
        ("page index >= 2^31", lambda K, q, k, v: K(
            q[:, :, :4], pool, pool, kv_indptr=[0, 1], kv_indices=[1 << 31],
            kv_last_page_len=[16]), ValueError, r"'kv_indices\[0\]' is 2147483648"),
    ]


@pytest.mark.parametrize("case", bad_calls(), ids=lambda c: c[0])
def test_bad_arguments_are_named(case):
    _, call, exc, message = case
    rng = np.random.default_rng(8)
    kernel = attnc.compile(CAUSAL)
    q, k, v = qkv(rng)
    with pytest.raises(exc, match=message):
        call(kernel, q, k, v)


def test_bad_arguments_are_named_through_torch():
    torch = pytest.importorskip("torch")
    kernel = attnc.compile(CAUSAL)
    q = torch.randn(1, 2, 24, 64)
    with pytest.raises(ValueError, match="'q' must be 4-d"):
        kernel(q[0], q, q)
    with pytest.raises(TypeError, match="'num_splits' must be an integer"):
        kernel(q, q, q, num_splits=2.0)
    with pytest.raises(ValueError, match=r"'kv_lens\[0\]' is 2147483648"):
        kernel(q, q, q, kv_lens=torch.tensor([1 << 31]))


def test_sources_without_variants_say_so():
    with pytest.raises(attnc.Error, match="the source defines no variant"):
        attnc.compile("")
    with pytest.raises(attnc.Error, match="the source defines no variant"):
        attnc.compile("// nothing here\n", variant="x")


EDGE = """
variant shift(c: f32) { score_mod(s, b, h, q, kv) = s + c }
variant soft_mask(c: f32) { score_mod(s, b, h, q, kv) = kv > q ? s - c : s }
"""


@pytest.mark.parametrize("variant", ["shift", "soft_mask"])
@pytest.mark.parametrize("c", [1e9, 1e30, -1e30, 2.3e38, 2.4e38, -3.0e38])
def test_finite_scores_at_the_range_edge(variant, c):
    """Scores shifted far from 0 (a "soft" mask of -1e30, finite scores up
    to f32's limit) keep their softmax: the exponent is exp2((s - m) c),
    exact near the row maximum at any magnitude. (One FMA, s c - round(m c),
    gave NaN or an empty row from |m| ~ 1e30.)"""
    rng = np.random.default_rng(9)
    kernel = attnc.compile(EDGE, variant=variant)
    q, k, v = qkv(rng, L=40)
    out, lse = kernel(q, k, v, c=c, return_lse=True)
    ref, ref_lse = kernel.reference(q, k, v, c=c)
    assert np.isfinite(out).all() and np.isfinite(lse).all()
    assert np.abs(out - ref).max() < 2e-5
    assert np.abs(lse - ref_lse).max() <= 1e-5 * np.abs(ref_lse).max()


def test_finite_scores_at_the_range_edge_on_the_device(cuda_device):
    rng = np.random.default_rng(10)
    kernel = attnc.compile(EDGE, variant="soft_mask")
    q, k, v = qkv(rng, L=40)
    for dtype in (np.float32, np.float16):
        dq, dk, dv = (attnc.cuda.to_device(x.astype(dtype)) for x in (q, k, v))
        for c in (1e30, 2.4e38):
            out = attnc.cuda.to_host(kernel(dq, dk, dv, c=c))
            ref, _ = kernel.reference(q.astype(dtype), k.astype(dtype),
                                      v.astype(dtype), c=c)
            assert np.isfinite(out).all()
            assert np.abs(out.astype(np.float64) - ref).max() < 3e-3, (dtype, c)


def resident_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def test_soak_through_torch_with_changing_shapes():
    """A long loop of calls through torch.compile'd code (the attnc
    operator in the graph) with batch and lengths changing every call:
    after the first dynamic compile, no recompiles; resident memory flat;
    outputs checked against the reference at intervals."""
    torch = pytest.importorskip("torch")
    from torch._dynamo.testing import CompileCounter
    kernel = attnc.compile(CAUSAL)
    counter = CompileCounter()

    @torch.compile(backend=counter, dynamic=True, fullgraph=True)
    def attend(q, k, v):
        return kernel(q, k, v) * 2

    g = torch.Generator().manual_seed(5)

    def shapes(i):
        return 1 + i % 3, 4 + (i * 7) % 45  # batch, length

    for i in range(20):  # warm-up: the first shapes, the allocator's pools
        B, L = shapes(i)
        attend(*(torch.randn(B, 2, L, 64, generator=g) for _ in range(3)))
    compiles, before = counter.frame_count, resident_mib()
    samples = []
    for i in range(20, 620):
        B, L = shapes(i)
        q, k, v = (torch.randn(B, 2, L, 64, generator=g) for _ in range(3))
        out = attend(q, k, v)
        if i % 100 == 0:
            ref, _ = kernel.reference(q, k, v)
            assert (out.double() / 2 - torch.from_numpy(ref)).abs().max() < 2e-5
            samples.append(resident_mib())
    assert counter.frame_count == compiles, "recompiled with changing shapes"
    assert max(samples) - before < 32, (before, samples)
