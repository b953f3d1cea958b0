"""The .attn route on the CPU: attnc.compile(...) then kernel(q, k, v, ...)
on NumPy arrays (and torch CPU tensors when torch is installed), against the
fp64 reference, with the runtime's errors as attnc.Error."""
import os

import numpy as np
import pytest

import attnc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = os.path.join(ROOT, "examples")


def qkv(rng, B=2, H=4, HKV=4, LQ=37, LKV=37, D=64, DV=64, dtype=np.float32):
    q = rng.standard_normal((B, H, LQ, D)).astype(dtype)
    k = rng.standard_normal((B, HKV, LKV, D)).astype(dtype)
    v = rng.standard_normal((B, HKV, LKV, DV)).astype(dtype)
    return q, k, v


def synaptic_params(rng, B, H, LQ, LKV):
    return dict(qamp=rng.uniform(0.5, 1.5, (B, H, LKV)).astype(np.float32),
                key_factor=rng.uniform(0.5, 1.5, (B, H, LKV)).astype(np.float32),
                barrier=0.05)


def test_synaptic_matches_the_reference():
    rng = np.random.default_rng(1)
    kernel = attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"), variant="synaptic")
    q, k, v = qkv(rng)
    p = synaptic_params(rng, 2, 4, 37, 37)
    out, lse = kernel(q, k, v, return_lse=True, **p)
    ref, ref_lse = kernel.reference(q, k, v, **p)
    assert out.dtype == np.float32 and out.shape == (2, 4, 37, 64)
    assert np.abs(out - ref).max() < 2e-5
    assert np.abs(lse - ref_lse).max() < 2e-5
    # The captures matter: other values give another output.
    p2 = dict(p, barrier=3.0)
    assert np.abs(kernel(q, k, v, **p2) - out).max() > 1e-3


def test_strided_float16_gqa_decode_with_offsets():
    rng = np.random.default_rng(2)
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"))
    # BSHD memory, viewed as [B, H, S, D]: not contiguous.
    q = rng.standard_normal((3, 1, 8, 64)).astype(np.float16).transpose(0, 2, 1, 3)
    k = rng.standard_normal((3, 50, 2, 64)).astype(np.float16).transpose(0, 2, 1, 3)
    v = rng.standard_normal((3, 50, 2, 64)).astype(np.float16).transpose(0, 2, 1, 3)
    lens, offs = [50, 17, 1], [49, 3, 0]
    out = kernel(q, k, v, kv_lens=lens, q_offsets=offs)
    ref, _ = kernel.reference(q, k, v, kv_lens=lens, q_offsets=offs)
    assert out.dtype == np.float16
    assert np.abs(out.astype(np.float64) - ref).max() < 4e-3
    # Sequence 2's only query sits at position 0: it sees key 0 alone.
    assert np.allclose(out[2, :, 0].astype(np.float64), v[2, [0, 0, 0, 0, 1, 1, 1, 1], 0],
                       atol=2e-3)


def test_out_is_written_in_place_and_source_text_compiles():
    rng = np.random.default_rng(3)
    kernel = attnc.compile("""
variant capped(cap: f32[]) {
  score_mod(score, b, h, q, kv) = cap * tanh(score / cap)
  mask_mod(b, h, q, kv) = q >= kv
}
""")
    q, k, v = qkv(rng, LQ=20, LKV=20)
    out = np.full((2, 4, 20, 64), np.nan, dtype=np.float32)
    res = kernel(q, k, v, out=out, cap=np.array(0.75, dtype=np.float32))
    assert res is out and np.isfinite(out).all()
    ref, _ = kernel.reference(q, k, v, cap=np.array(0.75, dtype=np.float32))
    assert np.abs(out - ref).max() < 2e-5


def test_errors_name_the_argument():
    rng = np.random.default_rng(4)
    kernel = attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"), variant="synaptic")
    q, k, v = qkv(rng)
    p = synaptic_params(rng, 2, 4, 37, 37)
    with pytest.raises(attnc.Error, match="missing capture 'qamp'"):
        kernel(q, k, v, key_factor=p["key_factor"], barrier=0.05)
    bad = dict(p, key_factor=p["key_factor"][:, :, :5])
    with pytest.raises(attnc.Error, match=r"capture 'key_factor' has shape \[2, 4, 5\], expected \[2, 4, 37\]"):
        kernel(q, k, v, **bad)
    with pytest.raises(attnc.Error, match="'q' is float64; expected float32, float16 or bfloat16"):
        kernel(q.astype(np.float64), k, v, **p)
    with pytest.raises(attnc.Error) as e:
        attnc.compile("variant v() {\n  score_mod(score, b, h, q, kv) = score +\n}\n", name="bad.attn")
    assert "bad.attn:3:1: error:" in str(e.value) and "^" in str(e.value)
    with pytest.raises(attnc.Error, match="no variant 'nope'"):
        attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"), variant="nope")


def test_read_only_output_is_refused():
    rng = np.random.default_rng(5)
    kernel = attnc.compile(os.path.join(EXAMPLES, "full.attn"))
    q, k, v = qkv(rng, LQ=8, LKV=8)
    out = np.zeros((2, 4, 8, 64), dtype=np.float32)
    out.setflags(write=False)
    with pytest.raises(ValueError, match="'out' is read-only"):
        kernel(q, k, v, out=out)


def test_torch_cpu_tensors():
    import torch  # scripts/setup.sh installs it: this test never skips
    kernel = attnc.compile(os.path.join(EXAMPLES, "alibi.attn"))
    g = torch.Generator().manual_seed(6)
    q = torch.randn(2, 4, 33, 64, generator=g, dtype=torch.bfloat16)
    k = torch.randn(2, 4, 33, 64, generator=g, dtype=torch.bfloat16)
    v = torch.randn(2, 4, 33, 64, generator=g, dtype=torch.bfloat16)
    slopes = torch.tensor([2.0 ** -(i + 1) for i in range(4)])
    out = kernel(q, k, v, slope=slopes)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.bfloat16
    ref, _ = kernel.reference(q, k, v, slope=slopes)
    assert (out.double() - torch.from_numpy(ref)).abs().max() < 2e-2


def paged(rng, k, v, lens, page_size, nhd=False):
    """K and V [B, Hkv, S, D] moved into a shuffled page pool with two spare
    NaN pages: (k_pool, v_pool, kv_indptr, kv_indices, kv_last_page_len).
    nhd: the pool is stored [pages, page_size, Hkv, D] (a permuted view)."""
    B, HKV, _, D = k.shape
    counts = [-(-n // page_size) for n in lens]
    pool = sum(counts) + 2
    order = rng.permutation(pool)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    indices = order[:sum(counts)].astype(np.int32)
    last = np.array([n - (c - 1) * page_size if c else 0 for n, c in zip(lens, counts)],
                    np.int32)
    pools = []
    for t in (k, v):
        shape = (pool, page_size, HKV, t.shape[3]) if nhd else (pool, HKV, page_size, t.shape[3])
        p = np.full(shape, np.nan, t.dtype)
        view = p.transpose(0, 2, 1, 3) if nhd else p
        for b, n in enumerate(lens):
            for j in range(n):
                page = indices[indptr[b] + j // page_size]
                view[page, :, j % page_size] = t[b, :, j]
        pools.append(view)
    return pools[0], pools[1], indptr, indices, last


def test_paged_kv_matches_contiguous_kv():
    rng = np.random.default_rng(12)
    kernel = attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"), variant="synaptic")
    q, k, v = qkv(rng, B=3, H=4, HKV=2, LQ=5, LKV=70)
    lens, offs = [70, 0, 33], [65, 0, 28]
    p = synaptic_params(rng, 3, 4, 5, 70)
    flat = kernel(q, k, v, kv_lens=lens, q_offsets=offs, **p)
    for page_size, nhd in ((16, False), (7, True), (1, False)):
        kp, vp, indptr, indices, last = paged(rng, k, v, lens, page_size, nhd)
        got = kernel(q, kp, vp, kv_indptr=indptr, kv_indices=indices,
                     kv_last_page_len=last, q_offsets=offs, **p)
        assert np.array_equal(got, flat), (page_size, nhd)
        ref, _ = kernel.reference(q, kp, vp, kv_indptr=indptr, kv_indices=indices,
                                  kv_last_page_len=last, q_offsets=offs, **p)
        assert np.abs(got - ref).max() < 2e-5
    bad = indices.copy()
    bad[3] = len(bad) + 5
    with pytest.raises(attnc.Error, match="sequence 0, page 3: index .* outside the pool"):
        kernel(q, kp, vp, kv_indptr=indptr, kv_indices=bad, kv_last_page_len=last,
               q_offsets=offs, **p)
    with pytest.raises(attnc.Error, match="together"):
        kernel(q, kp, vp, kv_indptr=indptr, q_offsets=offs, **p)


def test_split_kv_matches_one_pass():
    rng = np.random.default_rng(14)
    kernel = attnc.compile(os.path.join(EXAMPLES, "sliding_window.attn"))
    q, k, v = qkv(rng, B=3, H=8, HKV=2, LQ=1, LKV=900)
    lens, offs = [900, 1, 0], [899, 0, 0]
    one, lse1 = kernel(q, k, v, kv_lens=lens, q_offsets=offs, return_lse=True,
                       num_splits=1, window=100)
    for n in (2, 7, 64, 0):  # 0: the planner's choice
        got, lse = kernel(q, k, v, kv_lens=lens, q_offsets=offs, return_lse=True,
                          num_splits=n, window=100)
        assert np.abs(got - one).max() < 2e-6, n
        assert np.array_equal(np.isinf(lse), np.isinf(lse1))
        finite = np.isfinite(lse1)
        assert np.abs(lse[finite] - lse1[finite]).max() < 2e-5
    ref, _ = kernel.reference(q, k, v, kv_lens=lens, q_offsets=offs, window=100)
    assert np.abs(got - ref).max() < 2e-5
    with pytest.raises(attnc.Error, match="'num_splits' must be 0 .* or 1 to 256, got 300"):
        kernel(q, k, v, num_splits=300, window=100)
