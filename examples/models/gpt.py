"""Two small GPTs as the seeds wrote them (nanochat-style), with their
attention behind a switch (`attention.py`): the standard GPT (rotary
embeddings, MHA/GQA/MQA by `n_kv_head`) and the synaptic GPT (the same,
with the synaptic bias: per-position factors qamp and key_factor computed
from the activations, and a distance barrier). Both train, and generate
with a KV cache (prefill, decode of one token, decode of a chunk).

    from gpt import GPT, GPTConfig, KVCache, PagedKVCache
    model = GPT(GPTConfig(synaptic=True, backend="attnc"))
    loss = model(idx, targets)                       # a training step
    cache = KVCache.for_model(model, batch=1, capacity=256)
    logits = model(prompt, cache=cache)              # prefill
    logits = model(next_token, cache=cache)          # decode
    paged = PagedKVCache.for_model(model, batch=1, page_size=16)  # "attnc" only

The cache is preallocated and its position is a 0-d tensor, so a model
under torch.compile(fullgraph=True) decodes step after step with no
recompile (tests/test_models.py asserts it).
"""
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from attention import attend


@dataclass
class GPTConfig:
    vocab_size: int = 256       # bytes
    n_layer: int = 2
    n_head: int = 4
    n_kv_head: int = 4          # < n_head: GQA; 1: MQA
    n_embd: int = 64
    max_seq_len: int = 256
    synaptic: bool = False
    barrier: float = 0.05       # the synaptic distance penalty per position
    backend: str = "attnc"
    attn_dropout: float = 0.0   # attention dropout while training (not flex)


class KVCache:
    """Keys and values of every layer for `capacity` positions (and, for
    the synaptic GPT, each position's qamp and key_factor), written at
    `pos` by each forward call; `pos` (a 0-d int64 tensor) advances after
    the call."""

    def __init__(self, n_layer, batch, n_head, n_kv_head, capacity, head_dim,
                 synaptic, dtype=torch.float32, device="cpu"):
        kv = (n_layer, batch, n_kv_head, capacity, head_dim)
        self.k = torch.zeros(kv, dtype=dtype, device=device)
        self.v = torch.zeros(kv, dtype=dtype, device=device)
        self.factors = None
        if synaptic:  # qamp, key_factor per layer: [2, n_layer, B, H, capacity]
            self.factors = torch.ones((2, n_layer, batch, n_head, capacity),
                                      dtype=torch.float32, device=device)
        self.pos = torch.zeros((), dtype=torch.int64, device=device)
        self.capacity = capacity

    @classmethod
    def for_model(cls, model, batch, capacity=None, dtype=torch.float32, **kw):
        c = model.config
        return cls(c.n_layer, batch, c.n_head, c.n_kv_head,
                   capacity or c.max_seq_len, c.n_embd // c.n_head, c.synaptic,
                   dtype, model.lm_head.weight.device, **kw)

    def write(self, layer, k, v, where):
        """Stores one call's keys and values [B, Hkv, T, D] at positions
        `where` [T]."""
        self.k[layer].index_copy_(2, where, k)
        self.v[layer].index_copy_(2, where, v)

    def read(self, layer, T):
        """(k, v, pages) for attend: the whole window; no page table."""
        return self.k[layer], self.v[layer], None

    def read_factors(self, layer, T):
        """The synaptic factors [2, B, H, S] for the keys attend sees."""
        return self.factors[:, layer]

    def plans(self, T):
        """Where attend keeps this step's plans (None: no plans)."""
        return None


class PagedKVCache(KVCache):
    """The same cache in pages, as a serving engine keeps it: per layer a
    pool [pages, Hkv, page_size, D] and per sequence a page table (here a
    shuffled one, so no sequence's pages are in order). attnc's kernels
    read the pools through FlashInfer's table (kv_indptr, kv_indices,
    kv_last_page_len); only the "attnc" backend takes it, eagerly (the
    table is host integers, rebuilt per call). With plan=True each decode
    step is planned once (Kernel.plan: lengths and the table validated,
    the split plan made) and every layer runs the plan."""

    def __init__(self, n_layer, batch, n_head, n_kv_head, capacity, head_dim,
                 synaptic, dtype=torch.float32, device="cpu", page_size=16, seed=0,
                 plan=False):
        super().__init__(n_layer, batch, n_head, n_kv_head, 0, head_dim, synaptic,
                         dtype, device)
        self.page_size, self.capacity = page_size, capacity
        self.plan, self._plans = plan, None  # plan=True: a plan per step
        per_seq = -(-capacity // page_size)
        order = torch.randperm(batch * per_seq, generator=torch.Generator().manual_seed(seed))
        self.table = order.view(batch, per_seq).to(device)
        pool = (n_layer, batch * per_seq, n_kv_head, page_size, head_dim)
        self.k = torch.zeros(pool, dtype=dtype, device=device)
        self.v = torch.zeros(pool, dtype=dtype, device=device)
        if synaptic:
            self.factors = torch.ones((2, n_layer, batch, n_head, capacity),
                                      dtype=torch.float32, device=device)

    def write(self, layer, k, v, where):
        page = self.table[:, where // self.page_size]             # [B, T]
        slot = (where % self.page_size).expand_as(page)           # [B, T]
        self.k[layer][page, :, slot] = k.permute(0, 2, 1, 3)
        self.v[layer][page, :, slot] = v.permute(0, 2, 1, 3)

    def read(self, layer, T):
        n = int(self.pos) + T                    # keys per sequence after this call
        used = -(-n // self.page_size)
        B = self.table.shape[0]
        pages = (list(range(0, B * used + 1, used)),
                 self.table[:, :used].flatten().tolist(),
                 [n - (used - 1) * self.page_size] * B)
        return self.k[layer], self.v[layer], pages

    def plans(self, T):
        # One dict per (position, T): the step's plans, shared by its layers.
        if not self.plan or torch.is_grad_enabled():
            return None
        step = (int(self.pos), T)
        if self._plans is None or self._plans[0] != step:
            self._plans = (step, {})
        return self._plans[1]

    def read_factors(self, layer, T):
        # With pages the kernel's key axis is the sequences' length (the
        # table's), and synaptic.attn declares qamp, key_factor [B, H, KV].
        return self.factors[:, layer, ..., :int(self.pos) + T]


def _rotary(x, cos, sin):
    d = x.shape[-1] // 2
    x1, x2 = x[..., :d], x[..., d:]
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        c = config
        assert c.n_embd % c.n_head == 0 and c.n_head % c.n_kv_head == 0
        self.layer, self.n_head, self.n_kv_head = layer, c.n_head, c.n_kv_head
        self.head_dim = c.n_embd // c.n_head
        self.config = c
        self.c_q = nn.Linear(c.n_embd, c.n_head * self.head_dim, bias=False)
        self.c_kv = nn.Linear(c.n_embd, 2 * c.n_kv_head * self.head_dim, bias=False)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=False)
        if c.synaptic:  # one qamp and one key_factor per head and position
            self.c_factors = nn.Linear(c.n_embd, 2 * c.n_head, bias=True)

    def forward(self, x, cos, sin, cache):
        B, T, _ = x.shape
        q = self.c_q(x).view(B, T, self.n_head, self.head_dim)
        k, v = self.c_kv(x).view(B, T, 2, self.n_kv_head, self.head_dim).unbind(2)
        q, k = _rotary(q, cos, sin), _rotary(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))         # [B, H, T, D]
        factors = None
        if self.config.synaptic:  # positive: softplus, kept away from 0
            factors = (F.softplus(self.c_factors(x).float()) + 1e-3)
            factors = factors.view(B, T, 2, self.n_head).permute(2, 0, 3, 1)
        pos, pages = None, None  # no cache: positions 0 .. T-1
        if cache is not None:
            # Write this call's keys at pos .. pos+T-1; attend over the cache.
            pos = cache.pos
            where = pos + torch.arange(T, device=x.device)
            cache.write(self.layer, k, v, where)
            k, v, pages = cache.read(self.layer, T)
            if factors is not None:
                cache.factors[:, self.layer].index_copy_(3, where, factors)
                factors = cache.read_factors(self.layer, T)
        synaptic = None
        if factors is not None:
            synaptic = (factors[0], factors[1], self.config.barrier)
        plans = None if cache is None else cache.plans(T)
        # Dropout on the attention probabilities in training only, as SDPA's
        # dropout_p is used (attnc draws it in the kernel: docs/dropout.md).
        p = self.config.attn_dropout if self.training else 0.0
        y = attend(self.config.backend, q, k, v, pos, synaptic, pages, plans,
                   dropout_p=p)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, -1))


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd, bias=False)
        self.c_proj = nn.Linear(4 * n_embd, n_embd, bias=False)

    def forward(self, x):
        return self.c_proj(F.relu(self.c_fc(x)).square())


class Block(nn.Module):
    def __init__(self, config, layer):
        super().__init__()
        self.attn = Attention(config, layer)
        self.mlp = MLP(config.n_embd)

    def forward(self, x, cos, sin, cache):
        x = x + self.attn(F.rms_norm(x, (x.shape[-1],)), cos, sin, cache)
        return x + self.mlp(F.rms_norm(x, (x.shape[-1],)))


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        head_dim = config.n_embd // config.n_head
        inv = 1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim)
        angles = torch.outer(torch.arange(config.max_seq_len).float(), inv)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def set_backend(self, backend):
        self.config.backend = backend
        return self

    def forward(self, idx, targets=None, cache=None):
        """Logits [B, T, vocab] (or the mean cross-entropy with targets).
        With a cache, idx continues the cached sequence at cache.pos; the
        caller advances cache.pos by T afterwards (generate does)."""
        B, T = idx.shape
        start = (torch.zeros((), dtype=torch.int64, device=idx.device)
                 if cache is None else cache.pos)
        where = start + torch.arange(T, device=idx.device)
        cos = self.cos.index_select(0, where)[None, :, None, :]
        sin = self.sin.index_select(0, where)[None, :, None, :]
        x = F.rms_norm(self.wte(idx), (self.config.n_embd,))
        for block in self.blocks:
            x = block(x, cos, sin, cache)
        logits = self.lm_head(F.rms_norm(x, (self.config.n_embd,))).float()
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


@torch.no_grad()
def generate(model, prompt, steps, cache=None, step_fn=None):
    """Greedy continuation of prompt [B, T0] by `steps` tokens with a KV
    cache: one prefill, then one decode call per token. `step_fn` replaces
    `model` for the calls (a torch.compile'd model, say)."""
    run = model if step_fn is None else step_fn
    if cache is None:
        cache = KVCache.for_model(model, prompt.shape[0],
                                  dtype=model.lm_head.weight.dtype)
    logits = run(prompt, cache=cache)
    cache.pos += prompt.shape[1]
    out = [prompt]
    token = logits[:, -1:].argmax(-1)
    for _ in range(steps):
        out.append(token)
        logits = run(token, cache=cache)
        cache.pos += 1
        token = logits[:, -1:].argmax(-1)
    return torch.cat(out, dim=1)
