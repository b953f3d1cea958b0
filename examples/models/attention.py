"""The attention of the example GPTs, behind one switch: `backend` is one of

    "manual"      softmax(q kᵀ · scale + bias, masked) v, written out in torch
                  (the synaptic model's reference, as the seeds wrote it)
    "sdpa"        torch.nn.functional.scaled_dot_product_attention
    "flex"        torch.nn.attention.flex_attention (its score_mod/mask_mod)
    "attnc"       an attnc kernel compiled from examples/*.attn
    "attnc_flex"  attnc.flex_attention with the same closures as "flex"

Every backend takes q [B, H, T, D] and a key/value window k, v [B, Hkv, S,
D] (GQA/MQA when Hkv < H) in which the queries sit at absolute positions
pos .. pos+T-1 and the first pos+T keys are valid (a decode step reads a
preallocated cache, S = its capacity). `pos` is a 0-d int64 tensor, never
a Python int, so a compiled decode loop sees a graph input, not a constant
to specialize on; pos=None is a training step (S = T, positions 0..T-1),
where each backend takes its fastest causal form (SDPA's is_causal, a
causal block mask for flex, no lengths for attnc).

The synaptic bias (docs/language.md, examples/synaptic.attn) is
    score + log(qamp[b, h, q] · key_factor[b, h, kv]) − barrier · |q − kv|
under the causal mask, with qamp and key_factor indexed by absolute
position ([B, H, S], like the keys).
"""
import os

import torch
import torch.nn.functional as F

import attnc

BACKENDS = ("manual", "sdpa", "flex", "attnc", "attnc_flex")
EXAMPLES = os.path.join(os.path.dirname(__file__), "..")

_kernels = {}


def _kernel(name):
    """The .attn kernel (compiled once per process; attnc caches the
    specializations per dtype and head dim)."""
    if name not in _kernels:
        _kernels[name] = attnc.compile(os.path.join(EXAMPLES, name + ".attn"),
                                       variant=name)
    return _kernels[name]


def attend(backend, q, k, v, pos, synaptic=None, pages=None, plans=None,
           dropout_p=0.0):
    """Causal attention of q over the window k, v (see the module's doc).
    synaptic: None, or (qamp, key_factor, barrier) with qamp, key_factor
    [B, H, S] positive and barrier a float. pages: None, or a paged cache's
    (kv_indptr, kv_indices, kv_last_page_len), k and v being its pools
    [pages, Hkv, page_size, D] ("attnc" only). plans: None, or a dict that
    lives for one decode step: the first layer's call plans it
    (Kernel.plan: the page table and lengths validated once), every layer
    runs the plan. dropout_p: attention dropout (training): attnc's
    backends draw it in the kernel, SDPA in its kernel, the manual path
    with torch.dropout; torch's flex_attention has none (an error)."""
    if backend not in BACKENDS:
        raise ValueError("backend must be one of %s, got %r" % (BACKENDS, backend))
    if dropout_p and (backend == "flex" or plans is not None):
        raise ValueError("attention dropout: torch's flex_attention has none, and "
                         "a plan (decoding) takes none")
    drop = {"dropout_p": dropout_p} if dropout_p else {}
    B, H, T, _ = q.shape
    S, Hkv = k.shape[2], k.shape[1]
    gqa = Hkv != H
    if pages is not None and backend != "attnc":
        raise ValueError("a paged KV cache runs on the attnc backend, not %r" % backend)
    if backend == "attnc":
        # The kernel's default query offset puts the T queries at the end
        # of the kv_lens valid keys: positions pos .. pos+T-1.
        lens = {} if pos is None else {"kv_lens": (pos + T).to(torch.int32).expand(B)}
        if pages is not None:  # the lengths come from the page table
            lens = dict(zip(("kv_indptr", "kv_indices", "kv_last_page_len"), pages))
        name, captures, scalars = "causal", {}, {}
        if synaptic is not None:
            name = "synaptic"
            captures = dict(qamp=synaptic[0], key_factor=synaptic[1])
            scalars = dict(barrier=synaptic[2])
        if plans is None:
            return _kernel(name)(q, k, v, **lens, **captures, **scalars, **drop)
        if name not in plans:
            plans[name] = _kernel(name).plan(q, k, v, **lens, **captures, **scalars)
        return plans[name](q, k, v, **captures)
    if backend in ("flex", "attnc_flex"):
        if synaptic is not None and backend == "flex":
            # torch's flex_attention refuses a closure over a Python float
            # (a SymFloat when it traces): the barrier as a 0-d tensor.
            synaptic = synaptic[:2] + (torch.tensor(synaptic[2], device=q.device),)
        score_mod = _flex_score_mod(pos, synaptic)
        if backend == "attnc_flex":
            mask = None if pos is not None else attnc.create_block_mask(
                _causal, B, H, T, S)
            return attnc.flex_attention(q, k, v, score_mod=score_mod,
                                        block_mask=mask, enable_gqa=gqa, **drop)
        from torch.nn.attention.flex_attention import flex_attention
        mask = None if pos is not None else _torch_block_mask(T, S, q.device)
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=mask,
                              enable_gqa=gqa)
    if pos is None and synaptic is None:
        if backend == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                  enable_gqa=gqa, **drop)
    qpos = torch.arange(T, device=q.device)
    if pos is not None:
        qpos = qpos + pos
    kpos = torch.arange(S, device=q.device)
    allowed = qpos[:, None] >= kpos[None, :]  # [T, S]; also hides keys >= pos+T
    if backend == "sdpa" and synaptic is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed,
                                              enable_gqa=gqa, **drop)
    bias = torch.zeros(T, S, dtype=torch.float32, device=q.device)
    if synaptic is not None:
        qamp, key_factor, barrier = synaptic
        qa = qamp.index_select(2, qpos)[..., :, None]         # [B, H, T, 1]
        bias = (torch.log(qa * key_factor[..., None, :])
                - barrier * (qpos[:, None] - kpos[None, :]).abs())
    bias = bias.masked_fill(~allowed, float("-inf")).to(q.dtype)
    if backend == "sdpa":  # synaptic through SDPA: the bias as a float mask
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                              enable_gqa=gqa, **drop)
    if gqa:
        k, v = (x.repeat_interleave(H // Hkv, dim=1) for x in (k, v))
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5 + bias
    probs = torch.softmax(scores.float(), dim=-1)
    if dropout_p:
        probs = F.dropout(probs, dropout_p)
    return probs.to(q.dtype) @ v


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


_block_masks = {}


def _torch_block_mask(T, S, device):
    """torch's causal BlockMask for T queries over S keys, built once."""
    key = (T, S, str(device))
    if key not in _block_masks:
        from torch.nn.attention.flex_attention import create_block_mask
        _block_masks[key] = create_block_mask(_causal, None, None, T, S,
                                              device=device)
    return _block_masks[key]


def _flex_score_mod(pos, synaptic):
    """FlexAttention's closures. In flex_attention q_idx counts from 0, so
    with a cache the query's absolute position is q_idx + pos (a captured
    0-d tensor) and the causal mask is applied in the score (-inf), which
    needs no block mask per step; without one (pos None) the block mask
    does it."""
    if synaptic is None:
        if pos is None:
            return None

        def causal(score, b, h, q_idx, kv_idx):
            return torch.where(q_idx + pos >= kv_idx, score, -float("inf"))
        return causal
    qamp, key_factor, barrier = synaptic

    def synaptic_score(score, b, h, q_idx, kv_idx):
        qp = q_idx if pos is None else q_idx + pos
        s = (score + torch.log(qamp[b, h, qp] * key_factor[b, h, kv_idx])
             - barrier * (qp - kv_idx).abs())
        return s if pos is None else torch.where(qp >= kv_idx, s, -float("inf"))
    return synaptic_score
