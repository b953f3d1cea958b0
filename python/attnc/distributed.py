"""Context parallelism on torch.distributed: one sequence's attention over
the ranks of a process group (docs/distributed.md).

Each rank holds a shard of the sequence's tokens: its queries, keys and
values, in the order `shard` gives. The scheme is the one PyTorch's
context parallelism uses for flex_attention. K and V are all-gathered
(in the backward, dK and dV are summed back to their owners), and each
rank attends its queries at their global positions against every key.
Any score_mod and mask_mod therefore sees the same (b, h, q, kv) as on
one device, and tiles the mask leaves empty cost nothing. The communication
is torch.distributed's collectives (gloo on CPUs, NCCL on GPUs); attnc adds
no communication layer of its own.

Load balancing (`load_balance=True`, the default) splits the sequence
into 2N chunks and gives rank r chunks r and 2N-1-r (head and tail, as
PyTorch's and Megatron's balancers do), so every rank has the same causal
work. Captured tensors indexed by position (document ids, the synaptic
factors) are passed whole, in global order, on every rank: each rank's
kernel reads what its queries need. Their gradients are summed over the
ranks, so every rank ends with the full gradient.

Not here yet: ring attention (K/V passed around the ring, overlapped
with compute) and the all-to-all over heads (Ulysses); torch.compile of
these calls (the collectives run eagerly).
"""
import torch
import torch.distributed as dist

__all__ = ["chunks", "shard", "unshard", "attention", "flex_attention"]


def _world(group):
    return dist.get_world_size(group), dist.get_rank(group)


def chunks(seq_len, world, rank, load_balance=True):
    """The global positions rank `rank` of `world` holds, as (start, length)
    runs in its shard's order."""
    parts = 2 * world if load_balance else world
    if seq_len % parts:
        raise ValueError("the sequence length (%d) must be a multiple of %d (%s "
                         "%d ranks)" % (seq_len, parts, "2 chunks on each of"
                                        if load_balance else "one chunk on each of",
                                        world))
    if not 0 <= rank < world:
        raise ValueError("'rank' is %d, expected 0..%d" % (rank, world - 1))
    n = seq_len // parts
    if not load_balance:
        return [(rank * n, n)]
    return [(rank * n, n), ((parts - 1 - rank) * n, n)]


def shard(x, group=None, *, dim=2, load_balance=True):
    """This rank's shard of a tensor over the whole sequence (its `dim`):
    the runs of `chunks`, concatenated."""
    world, rank = _world(group)
    runs = chunks(x.shape[dim], world, rank, load_balance)
    return torch.cat([x.narrow(dim, s, n) for s, n in runs], dim)


class _Gather(torch.autograd.Function):
    """All-gather of the shards into global order; the backward
    reduce-scatters: each position's gradient summed over the ranks onto
    the rank that holds it."""

    @staticmethod
    def forward(ctx, x, group, dim, load_balance):
        world, rank = _world(group)
        ctx.group, ctx.dim, ctx.load_balance = group, dim, load_balance
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x, group=group)
        seq = x.shape[dim] * world
        shape = list(x.shape)
        shape[dim] = seq
        out = x.new_empty(shape)
        for r, part in enumerate(parts):
            at = 0
            for s, n in chunks(seq, world, r, load_balance):
                out.narrow(dim, s, n).copy_(part.narrow(dim, at, n))
                at += n
        return out

    @staticmethod
    def backward(ctx, grad):
        # Every rank's share of each shard, summed onto the shard's owner.
        world, rank = _world(ctx.group)
        seq, dim = grad.shape[ctx.dim], ctx.dim
        shares = [torch.cat([grad.narrow(dim, s, n)
                             for s, n in chunks(seq, world, r, ctx.load_balance)],
                            dim).contiguous() for r in range(world)]
        local = torch.empty_like(shares[rank])
        dist.reduce_scatter(local, shares, group=ctx.group)
        return local, None, None, None


class _Replicated(torch.autograd.Function):
    """A tensor every rank holds whole: the identity, whose gradient is
    summed over the ranks (each rank's attention adds its part)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def unshard(x, group=None, *, dim=2, load_balance=True):
    """The whole sequence from every rank's shard (differentiable: the
    gradient of the result is summed back to the shards' owners)."""
    return _Gather.apply(x, group, dim, load_balance)


def _check(q, k, v, world):
    for t, n in ((q, "q"), (k, "k"), (v, "v")):
        if not isinstance(t, torch.Tensor) or t.dim() != 4:
            raise ValueError("'%s' must be a 4-d torch tensor [B, H, S/N, D] (this "
                             "rank's shard)" % n)
    if not (q.shape[2] == k.shape[2] == v.shape[2]):
        raise ValueError("q, k and v must hold the same tokens: shard lengths %d, "
                         "%d, %d" % (q.shape[2], k.shape[2], v.shape[2]))


def _run(call, q, k, v, group, load_balance, params):
    world, rank = _world(group)
    _check(q, k, v, world)
    if params.get("dropout_p") and params.get("dropout_seed") is None:
        # One stream on every rank (the mask is a function of the global
        # positions, so it is the single-device mask): rank 0's seed.
        seed = torch.randint(0, 2 ** 62, (1,), dtype=torch.int64)
        dist.broadcast(seed, 0, group=group)
        params = dict(params, dropout_seed=int(seed.item()))
    B, seq = q.shape[0], q.shape[2] * world
    kf = unshard(k, group, load_balance=load_balance)
    vf = unshard(v, group, load_balance=load_balance)
    params = {n: _Replicated.apply(x, group)
              if isinstance(x, torch.Tensor) and x.requires_grad else x
              for n, x in params.items()}
    outs, at = [], 0
    for s, n in chunks(seq, world, rank, load_balance):
        outs.append(call(q[:, :, at:at + n], kf, vf, [s] * B, params))
        at += n
    return outs[0] if len(outs) == 1 else torch.cat(outs, 2)


def attention(kernel, q, k, v, group=None, *, load_balance=True, scale=None,
              **params):
    """A compiled variant (attnc.compile) over a sharded sequence: q, k, v
    are this rank's shards [B, H, S/N, D] (`shard`'s order), captured
    tensors are whole (global positions); returns this rank's output
    shard [B, H, S/N, Dv]. Differentiable."""
    def call(qc, kf, vf, offsets, ps):
        return kernel(qc, kf, vf, q_offsets=offsets, scale=scale, **ps)
    # dropout_p, dropout_seed, dropout_offset pass through (docs/dropout.md):
    # with the seed drawn once for the group, every rank drops the pairs
    # one device would.
    return _run(call, q, k, v, group, load_balance, params)


def flex_attention(query, key, value, score_mod=None, mask_mod=None, group=None,
                   *, load_balance=True, scale=None, enable_gqa=False,
                   dropout_p=0.0, dropout_seed=None, dropout_offset=0):
    """attnc.flex_attention's closures over a sharded sequence: the closures
    see global positions (q_idx, kv_idx of the whole sequence), as on one
    device. Tensors the closures capture are whole, as with `attention`."""
    from . import _attnc, flex
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise _attnc.Error("query has %d heads and key %d: pass enable_gqa=True "
                           "for grouped-query attention"
                           % (query.shape[1], key.shape[1]))
    kernel, params = flex.traced_kernel(score_mod, mask_mod, bool(query.is_cuda))
    if dropout_p:
        params.update(dropout_p=dropout_p, dropout_seed=dropout_seed,
                      dropout_offset=dropout_offset)
    return attention(kernel, query, key, value, group, load_balance=load_balance,
                     scale=scale, **params)
