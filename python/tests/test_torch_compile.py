"""torch integration: attnc kernels on torch tensors are the operator
torch.ops.attnc.attention (torch.library, with a fake implementation), so a
torch.compile'd model calling one compiles into one graph (fullgraph=True
fails on any graph break) and gives eager's numbers."""
import os

import pytest

torch = pytest.importorskip("torch")

import attnc  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = os.path.join(ROOT, "examples")


class Block(torch.nn.Module):
    """Projections, an attnc variant with a captured tensor, an output
    projection: attnc in the middle of a compiled graph."""

    def __init__(self, kernel, dim=64, heads=2):
        super().__init__()
        self.kernel, self.heads = kernel, heads
        self.qkv = torch.nn.Linear(dim, 3 * dim * heads)
        self.proj = torch.nn.Linear(dim * heads, dim)

    def forward(self, x, qamp, key_factor):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
        y = self.kernel(q, k, v, qamp=qamp, key_factor=key_factor, barrier=0.05)
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


def test_a_compiled_model_runs_attnc_without_a_graph_break():
    torch.manual_seed(0)
    kernel = attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"), variant="synaptic")
    model = Block(kernel).eval()
    x = torch.randn(2, 33, 64)
    qamp, kf = torch.rand(2, 2, 33) + 0.5, torch.rand(2, 2, 33) + 0.5
    with torch.no_grad():
        eager = model(x, qamp, kf)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        got = compiled(x, qamp, kf)
    assert torch.allclose(got, eager, atol=1e-5)
    # New captured values go through the compiled graph and change the
    # output (per-key factors do; a per-query factor cancels in softmax).
    kf2 = torch.rand(2, 2, 33) + 0.5
    with torch.no_grad():
        other = compiled(x, qamp, kf2)
        assert torch.allclose(other, model(x, qamp, kf2), atol=1e-5)
    assert (other - got).abs().max() > 1e-4


def test_the_operator_passes_torch_opcheck():
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"))
    q, k, v = (torch.randn(1, 2, 17, 64) for _ in range(3))
    torch.library.opcheck(torch.ops.attnc.attention,
                          (q, k, v, kernel._op_id, "", [], "", [],
                           None, None, None))


def test_flex_attention_inside_a_compiled_function():
    """attnc.flex_attention with closures over a tensor and a number, inside
    torch.compile(fullgraph=True): traced once at Dynamo's trace time, the
    values read on each call."""
    slopes = torch.tensor([0.5, 0.25])
    cap = 30.0

    def alibi_softcap(score, b, h, q_idx, kv_idx):
        s = score + slopes[h] * (kv_idx - q_idx)
        return cap * torch.tanh(s / cap)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    bm = attnc.create_block_mask(causal, 1, 2, 40, 40)

    @torch.compile(fullgraph=True, backend="aot_eager")
    def f(q, k, v):
        return attnc.flex_attention(q, k, v, score_mod=alibi_softcap, block_mask=bm) * 2

    q, k, v = (torch.randn(1, 2, 40, 64) for _ in range(3))
    eager = attnc.flex_attention(q, k, v, score_mod=alibi_softcap, block_mask=bm)
    assert torch.allclose(f(q, k, v), 2 * eager, atol=1e-5)
    slopes.copy_(torch.tensor([2.0, 1.0]))  # a new value in the same tensor
    eager2 = attnc.flex_attention(q, k, v, score_mod=alibi_softcap, block_mask=bm)
    assert (eager2 - eager).abs().max() > 1e-3
    assert torch.allclose(f(q, k, v), 2 * eager2, atol=1e-5)


def test_paged_kv_through_the_operator():
    """torch tensors with a page table go through torch.ops.attnc.attention
    (its optional page-table arguments), eager and compiled."""
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"))
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 2, 1, 64, generator=g)
    pool_k, pool_v = (torch.randn(6, 2, 4, 64, generator=g) for _ in range(2))
    indptr, indices, last = [0, 3, 5], [4, 0, 5, 2, 1], [2, 4]  # 10 and 8 keys
    run = lambda q: kernel(q, pool_k, pool_v, kv_indptr=indptr,  # noqa: E731
                           kv_indices=indices, kv_last_page_len=last)
    eager = run(q)
    ref, _ = kernel.reference(q, pool_k, pool_v, kv_indptr=indptr,
                              kv_indices=indices, kv_last_page_len=last)
    assert (eager.double() - torch.from_numpy(ref)).abs().max() < 2e-5
    compiled = torch.compile(run, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q), eager)


def test_split_kv_through_the_operator():
    """num_splits reaches the kernel through torch.ops.attnc.attention, eager
    and compiled: forced splits agree with one pass to rounding."""
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"))
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 4, 1, 64, generator=g)
    k, v = (torch.randn(1, 1, 700, 64, generator=g) for _ in range(2))
    one = kernel(q, k, v, num_splits=1)
    split = lambda q: kernel(q, k, v, num_splits=9)  # noqa: E731
    eager = split(q)
    assert (eager - one).abs().max() < 2e-6
    compiled = torch.compile(split, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(q), eager)


def test_lengths_as_tensors_are_graph_inputs():
    """kv_lens / q_offsets given as integer tensors reach the kernel as the
    operator's tensor inputs: the same result as int lists, eager, compiled
    (new values, no recompile) and in the backward; bad ones are named."""
    import torch._dynamo
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"))
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 2, 3, 64, generator=g, requires_grad=True)
    k, v = (torch.randn(2, 2, 30, 64, generator=g) for _ in range(2))
    lens = torch.tensor([30, 17], dtype=torch.int32)
    want = kernel(q, k, v, kv_lens=[30, 17])
    got = kernel(q, k, v, kv_lens=lens)
    assert torch.equal(got, want)
    got.sum().backward()
    dq = q.grad.clone()
    q.grad = None
    want.sum().backward()
    assert torch.equal(q.grad, dq)
    torch._dynamo.reset()
    f = torch.compile(lambda q, n: kernel(q, k, v, kv_lens=n, q_offsets=n - 3),
                      fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        assert torch.equal(f(q, lens), kernel(q, k, v, kv_lens=[30, 17], q_offsets=[27, 14]))
        with torch._dynamo.config.patch(error_on_recompile=True):
            for n in (5, 9, 22):
                two = torch.tensor([n, n + 1], dtype=torch.int32)
                assert torch.equal(f(q, two), kernel(q, k, v, kv_lens=[n, n + 1],
                                                     q_offsets=[n - 3, n - 2]))
    with pytest.raises(TypeError, match="'kv_lens' must be a 1-d integer tensor"):
        kernel(q, k, v, kv_lens=torch.tensor([3.0, 4.0]))
    with pytest.raises(ValueError, match=r"'q_offsets\[1\]' is 4294967296"):
        kernel(q, k, v, q_offsets=torch.tensor([0, 2 ** 32]))
    with pytest.raises(attnc.Error, match="kv_lens"):
        kernel(q, k, v, kv_lens=torch.tensor([31, 3]))


def test_the_backward_operator_passes_opcheck_with_strided_captures():
    """The backward's fake kernel and the real one agree on every output's
    strides, for captures that are permuted views (as a model's per-head
    factors are): Inductor asserts them, and a mismatch failed a compiled
    synaptic training step."""
    kernel = attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"), variant="synaptic")
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 16, generator=g) for _ in range(3))
    factors = torch.rand(1, 9, 2, 2, generator=g).permute(2, 0, 3, 1) + 0.5
    captures = [factors[0], factors[1]]           # [B, H, S], strides (.., 1, 4)
    out, lse = torch.ops.attnc.attention(q, k, v, kernel._op_id, "qamp,key_factor",
                                         captures, "barrier", [0.05], None, None, None)
    torch.library.opcheck(torch.ops.attnc.attention_backward,
                          (torch.randn_like(out), None, q, k, v, out, lse, kernel._op_id,
                           "qamp,key_factor", captures, "barrier", [0.05], None, None, None))
