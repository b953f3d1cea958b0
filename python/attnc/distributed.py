"""Context parallelism on torch.distributed: one sequence's attention over
the ranks of a process group (docs/distributed.md).

Each rank holds a shard of the sequence's tokens: its queries, keys and
values, in the order `shard` gives. Each rank attends its queries at their
global positions, so any score_mod and mask_mod sees the same (b, h, q,
kv) as on one device. The communication is torch.distributed's (gloo on
CPUs, NCCL on GPUs); attnc adds no communication layer of its own. Two
schemes:

- "all_gather" (the default; PyTorch's scheme for flex_attention): K and V
  are all-gathered, and in the backward dK and dV are summed back to their
  owners. One kernel call per query run, against every key.
- "ring": K/V blocks travel around the ring of ranks (batched P2P), the
  next block's transfer overlapping the attention of the current one; the
  kernels take each block at its global key positions (kv_offsets) and
  return their LSE, and the partial results are merged by LSE (`merge`).
  The backward sends K/V around again with dK/dV accumulating behind them
  (each block's gradients from the merged output and LSE, as
  ring-flash-attention does). A block the mask leaves empty is skipped
  without a launch (`last_launches` counts them).
- "ulysses" (DeepSpeed-Ulysses, where the group divides the query and KV
  heads): an all-to-all turns sequence shards into head shards, each rank
  attends every token of its H/N heads (the kernels take the heads'
  global indices: head_offset), and a second all-to-all turns the output
  back; the backward runs the inverse all-to-alls.

Load balancing (`load_balance=True`, the default) splits the sequence
into 2N chunks and gives rank r chunks r and 2N-1-r (head and tail, as
PyTorch's and Megatron's balancers do), so every rank has the same causal
work. Captured tensors indexed by position (document ids, the synaptic
factors) are passed whole, in global order, on every rank: each rank's
kernel reads what its queries need. Their gradients are summed over the
ranks, so every rank ends with the full gradient.

Not here yet: torch.compile of these calls (the collectives run
eagerly).
"""
import contextlib
import threading

import torch
import torch.distributed as dist

__all__ = ["chunks", "shard", "unshard", "merge", "attention", "flex_attention",
           "context_parallel", "SCHEMES"]

#: The schemes `attention` takes.
SCHEMES = ("all_gather", "ring", "ulysses")

#: Kernel launches of this process's last `attention` call, by scheme and
#: pass: {"forward": n, "backward": n, "skipped": n} (ring: the blocks the
#: mask leaves empty are skipped).
last_launches = {}


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


def merge(outs, lses):
    """Partial attention results over disjoint key sets, merged by their
    LSEs: outs [..., L, Dv] and lses [..., L] (natural log, float32; -inf
    for a row with no key) -> (out, lse) of the attention over the union.
    A row no part has a key for is 0 with LSE -inf, as the kernels give.
    Differentiable (torch operations)."""
    if not outs or len(outs) != len(lses):
        raise ValueError("merge needs one LSE per output and at least one "
                         "part, got %d outputs and %d LSEs" % (len(outs), len(lses)))
    if len(outs) == 1:
        return outs[0], lses[0]
    lse = torch.logsumexp(torch.stack(lses), 0)
    live = torch.isfinite(lse)
    safe = torch.where(live, lse, torch.zeros_like(lse))
    out = 0
    for o, l in zip(outs, lses):
        w = torch.where(live, torch.exp(l - safe), torch.zeros_like(l))
        out = out + w.unsqueeze(-1) * o.to(torch.float32)
    return out.to(outs[0].dtype), lse


def _run(call, q, k, v, group, load_balance, params):
    B, seq = q.shape[0], q.shape[2] * _world(group)[0]
    kf = unshard(k, group, load_balance=load_balance)
    vf = unshard(v, group, load_balance=load_balance)
    params = {n: _Replicated.apply(x, group)
              if isinstance(x, torch.Tensor) and x.requires_grad else x
              for n, x in params.items()}
    outs, at = [], 0
    world, rank = _world(group)
    for s, n in chunks(seq, world, rank, load_balance):
        outs.append(call(q[:, :, at:at + n], kf, vf, [s] * B, params))
        at += n
    last_launches.clear()
    last_launches.update(forward=len(outs), skipped=0)
    return outs[0] if len(outs) == 1 else torch.cat(outs, 2)


def _all_to_all(x, group, split, cat):
    """x cut into N equal parts along `split`, part j to rank j; the parts
    received, in rank order, joined along `cat`."""
    world = _world(group)[0]
    parts = [p.contiguous() for p in x.chunk(world, split)]
    send = torch.cat([p.reshape(-1) for p in parts])
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send, group=group)
    return torch.cat([r.view(parts[0].shape) for r in recv.chunk(world)], cat)


class _AllToAll(torch.autograd.Function):
    """_all_to_all, whose backward is the inverse all-to-all."""

    @staticmethod
    def forward(ctx, x, group, split, cat):
        ctx.group, ctx.split, ctx.cat = group, split, cat
        return _all_to_all(x, group, split, cat)

    @staticmethod
    def backward(ctx, grad):
        return _all_to_all(grad.contiguous(), ctx.group, ctx.cat, ctx.split), \
            None, None, None


def _ulysses(kernel, q, k, v, group, load_balance, scale, dropout, params):
    world, rank = _world(group)
    B, H, HKV = q.shape[0], q.shape[1], k.shape[1]
    if H % world or HKV % world:
        raise ValueError("scheme 'ulysses' splits the heads over the %d ranks: "
                         "q has %d heads and k %d, expected multiples of %d"
                         % (world, H, HKV, world))
    seq = q.shape[2] * world
    # The tokens of every rank's shard, in rank order: their global
    # positions, and the order that sorts them.
    pos = torch.tensor([p for r in range(world)
                        for s, n in chunks(seq, world, r, load_balance)
                        for p in range(s, s + n)], device=q.device)
    order = torch.argsort(pos)

    def heads(x):  # [B, h, S/N, d] shards -> [B, h/N, S, d], global order
        return _AllToAll.apply(x, group, 1, 2).index_select(2, order)
    params = {n: _Replicated.apply(x, group)
              if isinstance(x, torch.Tensor) and x.requires_grad else x
              for n, x in params.items()}
    out = kernel(heads(q), heads(k), heads(v), q_offsets=[0] * B,
                 head_offset=rank * (H // world), head_count=H, scale=scale,
                 **params, **dropout)
    last_launches.clear()
    last_launches.update(forward=1, skipped=0)
    # Back to this rank's tokens of every head.
    return _AllToAll.apply(out.index_select(2, pos), group, 2, 1)


def _peer(group, rank):
    return rank if group is None else dist.get_global_rank(group, rank)


def _shift(tensors, group, back=False):
    """Starts sending `tensors` to the next rank (the previous one with
    `back`) and receiving as many from the other side: (received buffers,
    the requests to wait on)."""
    world, rank = _world(group)
    to, frm = ((rank - 1) % world, (rank + 1) % world) if back else \
        ((rank + 1) % world, (rank - 1) % world)
    bufs = [torch.empty_like(t) for t in tensors]
    ops = [dist.P2POp(dist.isend, t, _peer(group, to), group) for t in tensors]
    ops += [dist.P2POp(dist.irecv, b, _peer(group, frm), group) for b in bufs]
    return bufs, dist.batch_isend_irecv(ops)


def _wait(reqs):
    for r in reqs:
        r.wait()


class _Ring(torch.autograd.Function):
    """Ring attention over the group (the module's docstring): q, k, v this
    rank's shards, then the captured tensors (whole); returns this rank's
    output shard. Everything the kernels take besides q, k, v is in `spec`
    (the kernel, scalars, scale, dropout, load balancing)."""

    @staticmethod
    def forward(ctx, spec, q, k, v, *tensors):
        world, rank = _world(spec["group"])
        params = dict(spec["scalars"], **dict(zip(spec["names"], tensors)))
        B, seq = q.shape[0], q.shape[2] * world
        q_runs = chunks(seq, world, rank, spec["load_balance"])
        parts = [([], []) for _ in q_runs]
        kb, vb = k.contiguous(), v.contiguous()
        launches = skipped = 0
        for step in range(world):
            reqs = []
            if step + 1 < world:  # the next block in flight meanwhile
                (nk, nv), reqs = _shift([kb, vb], spec["group"])
            src = (rank - step) % world
            for qi, sq, nq, aq, sk, nkk, ak in _pairs(q_runs, seq, world, src, spec):
                if not _visits(spec, B, q.shape[1], sq, nq, sk, nkk):
                    skipped += 1
                    continue
                with torch.no_grad():
                    o, l = spec["kernel"](
                        q[:, :, aq:aq + nq], kb[:, :, ak:ak + nkk],
                        vb[:, :, ak:ak + nkk], q_offsets=[sq] * B,
                        kv_offsets=[sk] * B, scale=spec["scale"],
                        return_lse=True, **_detached(params), **spec["dropout"])
                parts[qi][0].append(o)
                parts[qi][1].append(l)
                launches += 1
            if reqs:
                _wait(reqs)
                kb, vb = nk, nv
        outs, lses = [], []
        for (sq, nq), (os_, ls_) in zip(q_runs, parts):
            if os_:
                o, l = merge(os_, ls_)
            else:  # no key for any of these queries
                o = q.new_zeros(B, q.shape[1], nq, v.shape[3])
                l = torch.full((B, q.shape[1], nq), float("-inf"),
                               dtype=torch.float32, device=q.device)
            outs.append(o)
            lses.append(l)
        out, lse = torch.cat(outs, 2), torch.cat(lses, 2)
        ctx.spec = spec
        ctx.save_for_backward(q, k, v, out, lse, *tensors)
        last_launches.clear()
        last_launches.update(forward=launches, skipped=skipped)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        spec = ctx.spec
        group = spec["group"]
        q, k, v, out, lse, *tensors = ctx.saved_tensors
        world, rank = _world(group)
        params = dict(spec["scalars"], **dict(zip(spec["names"], tensors)))
        B, seq = q.shape[0], q.shape[2] * world
        q_runs = chunks(seq, world, rank, spec["load_balance"])
        grad_out = grad_out.contiguous()
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dkb = torch.zeros(k.shape, dtype=torch.float32, device=k.device)
        dvb = torch.zeros(v.shape, dtype=torch.float32, device=v.device)
        grads = [torch.zeros_like(t, dtype=torch.float32)
                 if t.is_floating_point() else None for t in tensors]
        kb, vb = k.contiguous(), v.contiguous()
        dropout = spec["dropout"]
        drop = ((dropout["dropout_p"], dropout["dropout_seed"],
                 dropout["dropout_offset"]) if dropout else None)
        launches = 0
        for step in range(world):
            reqs = []
            if step + 1 < world:  # K/V ahead; dK/dV follow once formed
                (nk, nv), reqs = _shift([kb, vb], group)
            src = (rank - step) % world
            for qi, sq, nq, aq, sk, nkk, ak in _pairs(q_runs, seq, world, src, spec):
                if not _visits(spec, B, q.shape[1], sq, nq, sk, nkk):
                    continue
                rows = slice(aq, aq + nq)
                gq, gk, gv, gt = spec["kernel"]._backward(
                    q[:, :, rows].contiguous(), kb[:, :, ak:ak + nkk].contiguous(),
                    vb[:, :, ak:ak + nkk].contiguous(),
                    out[:, :, rows].contiguous(), lse[:, :, rows].contiguous(),
                    grad_out[:, :, rows].contiguous(), None, scale=spec["scale"],
                    kv_lens=None, q_offsets=[sq] * B, params=_detached(params),
                    dropout=drop, kv_offsets=[sk] * B)
                dq[:, :, rows] += gq.float()
                dkb[:, :, ak:ak + nkk] += gk.float()
                dvb[:, :, ak:ak + nkk] += gv.float()
                for i, g in enumerate(gt):
                    if grads[i] is not None:
                        grads[i] += g.float()
                launches += 1
            # The block's gradients so far go with it (to the rank that
            # holds it next); after the last step they go home.
            (dkb, dvb), dreqs = _shift([dkb, dvb], group)
            _wait(dreqs)
            if reqs:
                _wait(reqs)
                kb, vb = nk, nv
        for g in grads:  # each rank's part of a capture's gradient, summed
            if g is not None:
                dist.all_reduce(g, group=group)
        last_launches["backward"] = launches
        return (None, dq.to(q.dtype), dkb.to(k.dtype), dvb.to(v.dtype),
                *[None if g is None else g.to(t.dtype)
                  for g, t in zip(grads, tensors)])


def _pairs(q_runs, seq, world, src, spec):
    """(q run index, q start, q count, offset in the shard, key start, key
    count, offset in the block) for each of this rank's query runs and the
    runs of rank src's K/V block."""
    aq = 0
    for qi, (sq, nq) in enumerate(q_runs):
        ak = 0
        for sk, nk in chunks(seq, world, src, spec["load_balance"]):
            yield qi, sq, nq, aq, sk, nk, ak
            ak += nk
        aq += nq


def _visits(spec, B, H, sq, nq, sk, nk):
    """Whether the block of queries [sq, sq + nq) x keys [sk, sk + nk) has a
    pair the mask keeps: the compiler's closed-form classification (a
    kernel package, which has no compiler, and data-dependent masks launch
    every block; the kernel then visits no empty tile)."""
    program = spec["kernel"].program
    if not hasattr(program, "block_class"):
        return True
    sizes = {n: int(x) for n, x in spec["scalars"].items()
             if isinstance(x, int) and not isinstance(x, bool)}
    return program.block_class(spec["kernel"].variant, sizes, B, H, sq,
                               sq + nq - 1, sk, sk + nk - 1) != "empty"


def _detached(params):
    return {n: x.detach() if isinstance(x, torch.Tensor) else x
            for n, x in params.items()}


def _dropout_params(params, group):
    """dropout_p/seed/offset out of `params`, the seed drawn once for the
    group (rank 0's) when none is given: every rank then drops the pairs
    one device would."""
    params = dict(params)
    d = {n: params.pop(n) for n in ("dropout_p", "dropout_seed", "dropout_offset")
         if n in params}
    if d.get("dropout_p"):
        if d.get("dropout_seed") is None:
            seed = torch.randint(0, 2 ** 62, (1,), dtype=torch.int64)
            dist.broadcast(seed, _peer(group, 0), group=group)
            d["dropout_seed"] = int(seed.item())
        d.setdefault("dropout_offset", 0)
    else:
        d = {}
    return d, params


def attention(kernel, q, k, v, group=None, *, scheme="all_gather",
              load_balance=True, scale=None, **params):
    """A compiled variant (attnc.compile) over a sharded sequence: q, k, v
    are this rank's shards [B, H, S/N, D] (`shard`'s order), captured
    tensors are whole (global positions); returns this rank's output
    shard [B, H, S/N, Dv]. Differentiable. `scheme`: "all_gather" or
    "ring" (the module's docstring). dropout_p, dropout_seed and
    dropout_offset pass through (docs/dropout.md): with the seed drawn
    once for the group, every rank drops the pairs one device would.
    "ulysses" needs the group size to divide q's and k's heads."""
    if scheme not in SCHEMES:
        raise ValueError("'scheme' is %r, expected one of %s"
                         % (scheme, ", ".join(SCHEMES)))
    _check(q, k, v, _world(group)[0])
    dropout, params = _dropout_params(params, group)
    if scheme == "ulysses":
        return _ulysses(kernel, q, k, v, group, load_balance, scale, dropout,
                        params)
    if scheme == "all_gather":
        def call(qc, kf, vf, offsets, ps):
            return kernel(qc, kf, vf, q_offsets=offsets, scale=scale, **ps,
                          **dropout)
        return _run(call, q, k, v, group, load_balance, params)
    names = [n for n, x in params.items() if isinstance(x, torch.Tensor)]
    spec = {"kernel": kernel, "group": group, "load_balance": load_balance,
            "scale": scale, "dropout": dropout, "names": names,
            "scalars": {n: x for n, x in params.items() if n not in names}}
    return _Ring.apply(spec, q, k, v, *[params[n] for n in names])


def flex_attention(query, key, value, score_mod=None, mask_mod=None, group=None,
                   *, scheme="all_gather", load_balance=True, scale=None,
                   enable_gqa=False,
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
    return attention(kernel, query, key, value, group, scheme=scheme,
                     load_balance=load_balance, scale=scale, **params)


_state = threading.local()


def _active():
    """The innermost context_parallel's (group, scheme, load_balance), or
    None."""
    return getattr(_state, "ctx", None)


@contextlib.contextmanager
def context_parallel(group=None, *, buffers=(), buffer_seq_dims=(),
                     no_restore_buffers=(), scheme="all_gather",
                     load_balance=True):
    """PyTorch's context_parallel, for attnc: inside it, `buffers` (tensors
    over the whole sequence, their sequence axis in `buffer_seq_dims`) hold
    this rank's shard (`shard`'s order, in place: their .data), and
    attnc.flex_attention runs sharded over the group with the closures
    seeing global positions (a block_mask made for the whole sequence).
    On exit each buffer gets its whole data back, except those in
    `no_restore_buffers` (keep the inputs whose shard-shaped gradients
    the step reads). attnc.flex_attention returns the output only here (no
    LSE)."""
    buffers, dims = list(buffers), list(buffer_seq_dims)
    if len(buffers) != len(dims):
        raise ValueError("context_parallel: %d buffers but %d buffer_seq_dims"
                         % (len(buffers), len(dims)))
    if scheme not in SCHEMES:
        raise ValueError("'scheme' is %r, expected one of %s"
                         % (scheme, ", ".join(SCHEMES)))
    saved = []
    for b, d in zip(buffers, dims):
        saved.append(b.data)
        b.data = shard(b.data, group, dim=d, load_balance=load_balance).contiguous()
    outer = _active()
    _state.ctx = (group, scheme, load_balance)
    try:
        yield
    finally:
        _state.ctx = outer
        keep = {id(x) for x in no_restore_buffers}
        for b, data in zip(buffers, saved):
            if id(b) not in keep:
                b.data = data
