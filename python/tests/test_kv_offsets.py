"""Key blocks at their positions (kv_offsets): a sequence's keys cut into
blocks, each block attended at its true positions and the partial results
merged by LSE (attnc.distributed.merge), equal attending every key at
once, forward and backward (q, k, v and the captures' gradients), for
masks and score_mods that read positions and captures indexed by kv. The
fp64 reference agrees, the queries' default follows the keys, and bad
offsets are refused by name."""
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import attnc  # noqa: E402
from attnc.distributed import merge  # noqa: E402

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")
B, H, HKV, S, D = 2, 4, 2, 48, 16
BOUNDS = [0, 20, 32, 48]  # three key blocks, none a multiple of a tile


def kernel(name):
    return attnc.compile(os.path.join(EXAMPLES, name + ".attn"), variant=name)


def captures(name, g):
    if name == "sliding_window":
        return {"window": 9}
    if name == "document_mask":
        return {"doc": torch.cumsum((torch.rand(B, S, generator=g) < 0.2)
                                    .to(torch.int32), 1, dtype=torch.int32)}
    if name == "alibi":
        return {"slope": torch.exp2(-(torch.arange(H) + 1.0) * 8 / H)}
    if name == "synaptic":
        return {"qamp": torch.rand(B, H, S, generator=g) + 0.5,
                "key_factor": torch.rand(B, H, S, generator=g) + 0.5,
                "barrier": 0.05}
    if name == "relative_bias":
        return {"bias": torch.randn(H, 256, generator=g)}
    return {}


def leaves(q, k, v, params):
    """Fresh leaves of q, k, v and of the float captures, for a backward."""
    ps = {n: x.clone().requires_grad_() if isinstance(x, torch.Tensor)
          and x.is_floating_point() else x for n, x in params.items()}
    return [t.clone().requires_grad_() for t in (q, k, v)], ps


@pytest.mark.parametrize("name", ["causal", "sliding_window", "document_mask",
                                  "alibi", "synaptic", "relative_bias"])
def test_key_blocks_merged_equal_all_keys(name):
    g = torch.Generator().manual_seed(7)
    q = torch.randn(B, H, S, D, generator=g)
    k = torch.randn(B, HKV, S, D, generator=g)
    v = torch.randn(B, HKV, S, D, generator=g)
    params = captures(name, g)
    dout = torch.randn(B, H, S, D, generator=g)
    dlse = torch.randn(B, H, S, generator=g)
    ker = kernel(name)

    (qa, ka, va), pa = leaves(q, k, v, params)
    out, lse = ker(qa, ka, va, q_offsets=[0] * B, return_lse=True, **pa)
    ((out * dout).sum() + (lse * dlse).sum()).backward()

    (qb, kb, vb), pb = leaves(q, k, v, params)
    outs, lses = [], []
    for s, e in zip(BOUNDS, BOUNDS[1:]):
        o, l = ker(qb, kb[:, :, s:e], vb[:, :, s:e], q_offsets=[0] * B,
                   kv_offsets=[s] * B, return_lse=True, **pb)
        outs.append(o)
        lses.append(l)
    mout, mlse = merge(outs, lses)
    ((mout * dout).sum() + (mlse * dlse).sum()).backward()

    torch.testing.assert_close(mout, out, atol=2e-5, rtol=0)
    torch.testing.assert_close(mlse, lse, atol=2e-5, rtol=0)
    for n, a, b in (("dq", qa, qb), ("dk", ka, kb), ("dv", va, vb)):
        torch.testing.assert_close(b.grad, a.grad, atol=5e-5, rtol=0, msg=n)
    for n, x in pa.items():
        if isinstance(x, torch.Tensor) and x.requires_grad:
            torch.testing.assert_close(pb[n].grad, x.grad, atol=2e-4, rtol=0,
                                       msg="d" + n)

    # Without offsets the modifiers would see rows, not positions: the
    # blocks then disagree wherever the variant reads positions (captures
    # over KV are refused instead: they must span the positions).
    if name not in ("document_mask", "synaptic"):
        o0, l0 = ker(q, k[:, :, 20:32], v[:, :, 20:32], q_offsets=[0] * B,
                     return_lse=True, **params)
        assert not torch.allclose(o0, outs[1].detach(), atol=1e-4)


def test_the_reference_and_the_default_query_positions():
    g = torch.Generator().manual_seed(3)
    ker = kernel("synaptic")
    q = torch.randn(B, H, 8, D, generator=g)
    k = torch.randn(B, HKV, 16, D, generator=g)
    v = torch.randn(B, HKV, 16, D, generator=g)
    ps = captures("synaptic", g)
    # Keys 32..47 and 20..35: the 8 queries default to each sequence's
    # last 8 positions (40 and 28).
    got = ker(q, k, v, kv_offsets=[32, 20], **ps)
    explicit = ker(q, k, v, kv_offsets=[32, 20], q_offsets=[40, 28], **ps)
    torch.testing.assert_close(got, explicit, atol=0, rtol=0)
    ref, _ = ker.reference(q, k, v, kv_offsets=[32, 20], **ps)
    np.testing.assert_allclose(got.numpy(), ref, atol=2e-5)


def test_merge_of_rows_without_keys():
    o = torch.ones(1, 1, 2, 4)
    ninf = float("-inf")
    out, lse = merge([o, 2 * o], [torch.tensor([[[ninf, 0.0]]]),
                                  torch.tensor([[[ninf, ninf]]])])
    assert torch.equal(out[0, 0, 0], torch.zeros(4))
    assert lse[0, 0, 0] == ninf and lse[0, 0, 1] == 0
    assert torch.equal(out[0, 0, 1], torch.ones(4))
    with pytest.raises(ValueError, match="one LSE per output"):
        merge([o], [])


def test_bad_offsets_are_refused_by_name():
    ker = kernel("document_mask")
    q = torch.zeros(B, H, 8, D)
    k = v = torch.zeros(B, HKV, 16, D)
    doc = torch.zeros(B, 40, dtype=torch.int32)
    with pytest.raises(attnc.Error, match="capture 'doc' spans 40 key positions"
                       ".*'kv_offsets' the keys reach position 47"):
        ker(q, k, v, kv_offsets=[32, 0], doc=doc)
    with pytest.raises(attnc.Error, match=r"'kv_offsets' has 1 entries, "
                       r"expected one per sequence \(2\)"):
        ker(q, k, v, kv_offsets=[0], doc=doc)
    with pytest.raises(attnc.Error, match=r"'kv_offsets\[1\]' is -4"):
        ker(q, k, v, kv_offsets=[0, -4], doc=doc)


SIZES = os.path.join(os.path.dirname(__file__), "..", "..", "test", "Frontend",
                     "Inputs", "sizes.attn")


@pytest.mark.parametrize("name", ["alibi", "synaptic", "relative_bias",
                                  "table_bias"])
def test_head_shards_equal_the_whole_model(name):
    # Heads 0-1 and 2-3 of a 4-head model (GQA 2:1) attended apart, each
    # with its heads' model indices (head_offset, head_count), equal the
    # whole model's heads, gradients included: h, `size H` and `size HKV`
    # and the captures over H reach the modifiers as on one call.
    g = torch.Generator().manual_seed(11)
    q = torch.randn(B, H, S, D, generator=g)
    k = torch.randn(B, HKV, S, D, generator=g)
    v = torch.randn(B, HKV, S, D, generator=g)
    dout = torch.randn(B, H, S, D, generator=g)
    if name == "table_bias":
        ker = attnc.compile(SIZES, variant=name)
        params = {"bias": torch.randn(7, generator=g)}
    else:
        ker = kernel(name)
        params = captures(name, g)

    (qa, ka, va), pa = leaves(q, k, v, params)
    out = ker(qa, ka, va, **pa)
    (out * dout).sum().backward()
    (qb, kb, vb), pb = leaves(q, k, v, params)
    half = H // 2
    parts = [ker(qb[:, i * half:(i + 1) * half], kb[:, i:i + 1], vb[:, i:i + 1],
                 head_offset=i * half, head_count=H, **pb) for i in range(2)]
    merged = torch.cat(parts, 1)
    (merged * dout).sum().backward()
    torch.testing.assert_close(merged, out, atol=2e-5, rtol=0)
    for n, a, b in (("dq", qa, qb), ("dk", ka, kb), ("dv", va, vb)):
        torch.testing.assert_close(b.grad, a.grad, atol=5e-5, rtol=0, msg=n)
    for n, x in pa.items():
        if isinstance(x, torch.Tensor) and x.requires_grad:
            torch.testing.assert_close(pb[n].grad, x.grad, atol=2e-4, rtol=0,
                                       msg="d" + n)
    # Without the offset the second shard reads the first heads' values.
    wrong = ker(q[:, half:], k[:, 1:], v[:, 1:], **{
        n: (x[..., :half, :] if n == "bias" and x.dim() == 2 else
            x[:, :half] if n in ("qamp", "key_factor") else
            x[:half] if n == "slope" else x) for n, x in params.items()})
    assert not torch.allclose(wrong, out[:, half:], atol=1e-4)


def test_bad_head_offsets_are_refused_by_name():
    ker = kernel("alibi")
    q = torch.zeros(1, 2, 8, D)
    k = v = torch.zeros(1, 1, 8, D)
    slope = torch.ones(4)
    with pytest.raises(attnc.Error, match="'head_offset' 3 and 'head_count' 4 "
                       "must place the 2 query heads"):
        ker(q, k, v, head_offset=3, head_count=4, slope=slope)
    with pytest.raises(ValueError, match="'head_offset'"):
        ker(q, k, v, head_offset=-1, slope=slope)
