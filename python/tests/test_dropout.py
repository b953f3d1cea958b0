"""Attention dropout from Python (docs/dropout.md): the keep mask each
route draws (NumPy on the CPU, torch through the operator and directly,
attnc.cuda arrays on the emulated GPU, attnc.flex_attention) against the
fp64 reference's, gradients against torch autograd with that mask, seeds,
errors, torch.compile without recompiles, and a model trained with it.

With V the identity (one key per output column), O[b, h, q, kv] is the
pair's P z: the mask a kernel drew is read off its output. The mask is a
function of positions, seed and offset alone, so it is the mask of any
q and k of the same shapes."""
import numpy as np
import pytest

import attnc

torch = pytest.importorskip("torch")

SOURCE = """
variant causal() { mask_mod(b, h, q, kv) = q >= kv }
variant alibi(slope: f32[H]) {
  score_mod(s, b, h, q, kv) = s - slope[h] * abs(q - kv)
  mask_mod(b, h, q, kv) = q >= kv
}
"""
B, H, HK, L, D = 2, 4, 2, 40, 16


@pytest.fixture(scope="module")
def program():
    return attnc.compile(SOURCE, "causal"), attnc.compile(SOURCE, "alibi")


def _qk(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, H, L, D)).astype(dtype)
    k = rng.standard_normal((B, HK, L, D)).astype(dtype)
    return q, k


def _identity():
    return np.ascontiguousarray(np.broadcast_to(np.eye(L, dtype=np.float32),
                                                (B, HK, L, L)))


def _mask(kernel, p, seed, offset=0):
    """The fp64 reference's keep mask [B, H, L, L] (causal pairs only)."""
    q, k = _qk()
    ref, _ = kernel.reference(q, k, _identity(), dropout_p=p, dropout_seed=seed,
                              dropout_offset=offset, **_params(kernel))
    return ref != 0


def _params(kernel):
    return {"slope": np.linspace(0.1, 0.4, H, dtype=np.float32)} \
        if kernel.variant == "alibi" else {}


CAUSAL = np.tril(np.ones((L, L), dtype=bool))


@pytest.mark.parametrize("which", [0, 1], ids=["causal", "alibi"])
def test_the_cpu_kernel_draws_the_references_mask(program, which):
    kernel = program[which]
    q, k = _qk()
    out = kernel(q, k, _identity(), dropout_p=0.25, dropout_seed=11,
                 dropout_offset=2, **_params(kernel))
    ref, _ = kernel.reference(q, k, _identity(), dropout_p=0.25, dropout_seed=11,
                              dropout_offset=2, **_params(kernel))
    assert np.array_equal(out != 0, ref != 0)
    assert np.abs(out - ref).max() < 1e-5
    kept = (out != 0)[..., CAUSAL].mean()
    assert 0.7 < kept < 0.8   # 1 - p = 0.75 over 6560 pairs
    # Another offset, another mask; the same arguments, the same output.
    other = kernel(q, k, _identity(), dropout_p=0.25, dropout_seed=11,
                   dropout_offset=3, **_params(kernel))
    assert not np.array_equal(other != 0, out != 0)
    again = kernel(q, k, _identity(), dropout_p=0.25, dropout_seed=11,
                   dropout_offset=2, **_params(kernel))
    assert np.array_equal(again, out)


def test_the_emulated_gpu_draws_the_same_mask(program, cuda_device):
    kernel = program[1]
    q, k = _qk()
    slope = {"slope": attnc.cuda.to_device(_params(kernel)["slope"])}
    dev = attnc.cuda.to_device
    out = attnc.cuda.to_host(kernel(dev(q), dev(k), dev(_identity()), dropout_p=0.4,
                                    dropout_seed=2 ** 63 + 5, **slope))
    assert np.array_equal(out != 0, _mask(kernel, 0.4, 2 ** 63 + 5))


def _manual(q, k, v, keep, p, slope=None):
    """softmax(q k^T scale [+ bias], causal) with the mask, in float64."""
    G = q.shape[1] // k.shape[1]
    k, v = (x.repeat_interleave(G, dim=1) for x in (k, v))
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if slope is not None:
        i = torch.arange(L, dtype=torch.float64)
        s = s - slope[:, None, None] * (i[:, None] - i[None, :]).abs()
    s = s.masked_fill(~torch.from_numpy(CAUSAL), float("-inf"))
    return (torch.softmax(s, -1) * torch.from_numpy(keep) / (1 - p)) @ v


@pytest.mark.parametrize("which", [0, 1], ids=["causal", "alibi"])
def test_gradients_equal_torch_autograd_with_the_same_mask(program, which):
    kernel = program[which]
    p, seed = 0.3, 1234
    keep = _mask(kernel, p, seed)
    q, k = (torch.from_numpy(x) for x in _qk(5))
    v = torch.randn(B, HK, L, 24, generator=torch.Generator().manual_seed(1))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    out = kernel(*leaves, dropout_p=p, dropout_seed=seed,
                 **{n: torch.from_numpy(x) for n, x in _params(kernel).items()})
    grad = torch.randn_like(out)
    out.backward(grad)
    ref_leaves = [x.double().clone().requires_grad_() for x in (q, k, v)]
    slope = torch.from_numpy(_params(kernel)["slope"]).double() if which else None
    ref = _manual(*ref_leaves, keep, p, slope)
    ref.backward(grad.double())
    assert (out.double() - ref).abs().max() < 1e-5
    for got, want in zip(leaves, ref_leaves):
        assert (got.grad.double() - want.grad).abs().max() < 2e-5


def test_seeds_from_torch_and_p_zero(program):
    kernel = program[0]
    q, k = (torch.from_numpy(x) for x in _qk())
    v = torch.from_numpy(_identity())
    torch.manual_seed(3)
    a = kernel(q, k, v, dropout_p=0.5)
    b = kernel(q, k, v, dropout_p=0.5)
    torch.manual_seed(3)
    c = kernel(q, k, v, dropout_p=0.5)
    assert torch.equal(a, c) and not torch.equal(a, b)
    # The operator's route (autograd) draws the same mask as the direct one.
    qg = q.clone().requires_grad_()
    torch.manual_seed(3)
    d = kernel(qg, k, v, dropout_p=0.5)
    assert torch.equal(d.detach(), a)
    # p = 0 is no dropout, bit for bit.
    assert torch.equal(kernel(q, k, v, dropout_p=0.0, dropout_seed=9), kernel(q, k, v))


def test_bad_dropout_arguments_are_refused_by_name(program):
    kernel = program[0]
    q, k = _qk()
    v = _identity()
    for p in (-0.1, 1.0, 2, float("nan")):
        with pytest.raises(ValueError, match="'dropout_p' must be in \\[0, 1\\)"):
            kernel(q, k, v, dropout_p=p)
    with pytest.raises(TypeError, match="'dropout_p'"):
        kernel(q, k, v, dropout_p="0.1x")
    with pytest.raises(ValueError, match="'dropout_seed' is -1"):
        kernel(q, k, v, dropout_p=0.1, dropout_seed=-1)
    with pytest.raises(ValueError, match="'dropout_offset'"):
        kernel(q, k, v, dropout_p=0.1, dropout_offset=2 ** 64)
    with pytest.raises(ValueError, match="'dropout_p'"):
        attnc.flex_attention(torch.from_numpy(q), torch.from_numpy(k).repeat(1, 2, 1, 1),
                             torch.from_numpy(v).repeat(1, 2, 1, 1), dropout_p=1.5)


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def test_flex_attention_dropout_forward_and_backward(program):
    """attnc.flex_attention with dropout_p: the mask of the same program's
    kernels (a function of positions, seed and offset), gradients equal
    torch autograd's with it."""
    p, seed = 0.2, 77
    keep = _mask(program[0], p, seed, offset=4)
    q, k = (torch.from_numpy(x) for x in _qk(9))
    v = torch.randn(B, HK, L, D, generator=torch.Generator().manual_seed(2))
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    mask = attnc.create_block_mask(_causal, B, H, L, L)
    out = attnc.flex_attention(*leaves, block_mask=mask, enable_gqa=True,
                               dropout_p=p, dropout_seed=seed, dropout_offset=4)
    out.sum().backward()
    ref_leaves = [x.double().clone().requires_grad_() for x in (q, k, v)]
    ref = _manual(*ref_leaves, keep, p)
    ref.sum().backward()
    assert (out.double() - ref).abs().max() < 1e-5
    for got, want in zip(leaves, ref_leaves):
        assert (got.grad.double() - want.grad).abs().max() < 2e-5


def test_compiled_training_steps_draw_fresh_masks_without_recompiling():
    """Under torch.compile(fullgraph=True) the seed is a graph input (an
    int64 tensor drawn from torch's generator in the graph): every step
    draws a new mask and none recompiles."""
    torch._dynamo.reset()
    q, k = (torch.from_numpy(x) for x in _qk())
    v = torch.from_numpy(_identity()).repeat(1, 2, 1, 1)
    k = k.repeat(1, 2, 1, 1)

    def step(q, k, v):
        return attnc.flex_attention(q, k, v, dropout_p=0.5)
    compiled = torch.compile(step, fullgraph=True, backend="eager")
    qg = q.clone().requires_grad_()
    first = compiled(qg, k, v)
    first.sum().backward()
    outs = []
    with torch._dynamo.config.patch(error_on_recompile=True):
        for _ in range(3):
            outs.append(compiled(qg, k, v).detach())
    masks = [o != 0 for o in [first.detach()] + outs]
    assert all(not torch.equal(masks[0], m) for m in masks[1:])
    torch.manual_seed(8)
    a = compiled(qg, k, v)
    torch.manual_seed(8)
    assert torch.equal(a, compiled(qg, k, v))
