"""The FlexAttention route: attnc.flex_attention / create_block_mask with
ordinary Python score_mod / mask_mod, against torch's own flex_attention
(eager, CPU) on the same inputs; tracing errors name the function and line."""
import os

import pytest
import torch  # scripts/setup.sh installs it: these tests never skip
from torch.nn.attention import flex_attention as tfa

import attnc

B, H, S, D = 2, 4, 96, 32


def inputs(dtype=torch.float32, seed=0, hkv=H, lq=S, lkv=S):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, lq, D, generator=g).to(dtype)
    k = torch.randn(B, hkv, lkv, D, generator=g).to(dtype)
    v = torch.randn(B, hkv, lkv, D, generator=g).to(dtype)
    return q, k, v


def both(score_mod=None, mask_mod=None, dtype=torch.float32, gqa=False, lq=S, lkv=S, **kw):
    """(attnc's output, torch's) for the same modifiers and inputs."""
    q, k, v = inputs(dtype, hkv=2 if gqa else H, lq=lq, lkv=lkv)
    ours_bm = attnc.create_block_mask(mask_mod, B, H, lq, lkv) if mask_mod else None
    theirs_bm = tfa.create_block_mask(mask_mod, B, H, lq, lkv, device="cpu") if mask_mod else None
    ours = attnc.flex_attention(q, k, v, score_mod=score_mod, block_mask=ours_bm,
                                enable_gqa=gqa, **kw)
    # torch's reference in float64 (its eager path on the CPU).
    theirs = tfa.flex_attention(q.double(), k.double(), v.double(), score_mod=score_mod,
                                block_mask=theirs_bm, enable_gqa=gqa, **kw)
    return ours, theirs


def close(ours, theirs, tol):
    if isinstance(ours, tuple):
        for a, b in zip(ours, theirs):
            close(a, b, tol)
        return
    err = (ours.double() - theirs.double()).abs().max().item()
    assert err < tol, err


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


WINDOW = 24


def sliding_window(b, h, q_idx, kv_idx):
    return (q_idx >= kv_idx) & (q_idx - kv_idx < WINDOW)


def test_gym_masks_match_torch():
    prefix = 20

    def prefix_lm(b, h, q_idx, kv_idx):
        return (kv_idx < prefix) | (q_idx >= kv_idx)

    doc = torch.zeros(B, S, dtype=torch.int64)  # torch's default int dtype
    doc[:, 30:] = 1
    doc[1, 70:] = 2

    def document(b, h, q_idx, kv_idx):
        return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)

    def python_int_ops(b, h, q_idx, kv_idx):
        # Python's // and % on negative operands, & on bools, ~.
        d = q_idx - kv_idx
        return (((d // 8) % 3) == 0) & ~((kv_idx % 5) == 4)

    for mask in (causal, sliding_window, prefix_lm, document, python_int_ops):
        close(*both(mask_mod=mask), 2e-5)


def test_gym_score_mods_match_torch():
    slopes = torch.tensor([2.0 ** -(i + 1) for i in range(H)])

    def alibi(score, b, h, q_idx, kv_idx):
        return score + slopes[h] * (kv_idx - q_idx)

    def rel_bias(score, b, h, q_idx, kv_idx):
        return score + (q_idx - kv_idx) / 16

    for mod in (alibi, rel_bias):
        close(*both(score_mod=mod, mask_mod=causal), 2e-5)


def make_softcap(cap):
    def softcap(score, b, h, q_idx, kv_idx):
        return cap * torch.tanh(score / cap)
    return softcap


def test_python_numbers_become_scalars():
    # torch's own flex_attention refuses a closed-over Python float (it
    # takes a 0-d tensor); attnc takes both: a float is a scalar parameter,
    # a 0-d tensor a rank-0 capture. Same numbers either way.
    q, k, v = inputs()
    bm = attnc.create_block_mask(causal, B, H, S, S)
    ours = attnc.flex_attention(q, k, v, score_mod=make_softcap(2.5), block_mask=bm)
    ours0d = attnc.flex_attention(q, k, v, score_mod=make_softcap(torch.tensor(2.5)),
                                  block_mask=bm)
    theirs = tfa.flex_attention(
        q.double(), k.double(), v.double(),
        score_mod=make_softcap(torch.tensor(2.5, dtype=torch.float64)),
        block_mask=tfa.create_block_mask(causal, B, H, S, S, device="cpu"))
    close(ours, theirs, 2e-5)
    close(ours0d, theirs, 2e-5)


def test_synaptic_ports_unchanged():
    g = torch.Generator().manual_seed(3)
    qamp = torch.rand(B, H, S, generator=g) + 0.5
    key_factor = torch.rand(B, H, S, generator=g) + 0.5
    barrier = torch.tensor(0.05)  # torch's flex takes no Python floats

    def synaptic(score, b, h, q_idx, kv_idx):
        bias = torch.log(qamp[b, h, q_idx] * key_factor[b, h, kv_idx])
        return score + bias - barrier * (q_idx - kv_idx).abs()

    close(*both(score_mod=synaptic, mask_mod=causal), 2e-5)
    close(*both(score_mod=synaptic, mask_mod=causal, dtype=torch.bfloat16), 3e-2)


def test_gqa_lse_scale_and_more_queries_than_keys():
    def softcap(score, b, h, q_idx, kv_idx):
        return torch.tanh(score / 4) * 4

    close(*both(score_mod=softcap, gqa=True, scale=0.3, return_lse=True), 2e-5)
    # FlexAttention's convention: query i at position i, also with L > S.
    close(*both(mask_mod=causal, lq=80, lkv=50), 2e-5)


def test_new_values_do_not_recompile():
    t = torch.ones(H)

    def mod(score, b, h, q_idx, kv_idx):
        return score * t[h]

    q, k, v = inputs()
    attnc.flex.__dict__["_kernels"].clear()
    a = attnc.flex_attention(q, k, v, score_mod=mod)
    t.fill_(2.0)  # the same tensor, new values
    b = attnc.flex_attention(q, k, v, score_mod=mod)
    assert len(attnc.flex._kernels) == 1
    assert (a - b).abs().max() > 1e-3


def test_tracing_errors_name_the_function_and_line():
    def branchy(score, b, h, q_idx, kv_idx):
        if q_idx > kv_idx:  # data-dependent Python control flow
            return score
        return score * 2

    q, k, v = inputs()
    with pytest.raises(attnc.TraceError, match=r"test_flex_route.py:\d+: in branchy: data-dependent"):
        attnc.flex_attention(q, k, v, score_mod=branchy)

    def unsupported(score, b, h, q_idx, kv_idx):
        return torch.cumsum(score, 0)

    with pytest.raises(attnc.TraceError, match="torch.cumsum is not supported"):
        attnc.flex_attention(q, k, v, score_mod=unsupported)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 2e-2)])
def test_scaled_dot_product_attention_parity(dtype, tol):
    """torch's SDPA (float64 math on the same rounded inputs): full and
    causal prefill at odd lengths with GQA through the FlexAttention route,
    and decode/chunks at absolute offsets through the .attn route."""
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = inputs(dtype, seed=5, hkv=2, lq=37, lkv=37)
    ref = sdpa(q.double(), k.double(), v.double(), is_causal=True, enable_gqa=True)
    bm = attnc.create_block_mask(causal, B, H, 37, 37)
    close(attnc.flex_attention(q, k, v, block_mask=bm, enable_gqa=True), ref, tol)
    ref = sdpa(q.double(), k.double(), v.double(), enable_gqa=True)
    close(attnc.flex_attention(q, k, v, enable_gqa=True), ref, tol)

    kernel = attnc.compile(os.path.join(os.path.dirname(__file__), "..", "..",
                                        "examples", "causal.attn"))
    for lq in (1, 5):  # decode and a chunk, ending at the last of 53 keys
        q, k, v = inputs(dtype, seed=lq, hkv=2, lq=lq, lkv=53)
        pos = torch.arange(53 - lq, 53)[:, None] >= torch.arange(53)[None, :]
        ref = sdpa(q.double(), k.double(), v.double(), attn_mask=pos, enable_gqa=True)
        close(kernel(q, k, v, q_offsets=[53 - lq] * B), ref, tol)
        close(kernel(q, k, v), ref, tol)  # the default: queries end at the last key
