"""One rank of test_distributed.py: joins a gloo group on localhost, runs
every case of its world size sharded (attnc.distributed) and on the whole
sequence in this process, and prints one JSON line per case, scheme and
load-balance setting: the largest differences of the output shard, the
q/k/v gradient shards and the captures' gradients against the
whole-sequence run, and the sharded call's kernel launches.

  python distributed_worker.py RANK WORLD PORT
"""
import json
import os
import sys
import zlib

import torch
import torch.distributed as dist

import attnc
import attnc.distributed as cp
from attnc import flex

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def kernel(name):
    return attnc.compile(os.path.join(EXAMPLES, name + ".attn"), variant=name)


def inputs(B, H, HKV, S, D, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, S, D, generator=g)
    k = torch.randn(B, HKV, S, D, generator=g)
    v = torch.randn(B, HKV, S, D, generator=g)
    dout = torch.randn(B, H, S, D, generator=g)
    return q, k, v, dout, g


def cases(world):
    """(name, the call on whole or sharded tensors, shapes, captures)."""
    S = 16 * world  # 2N chunks of 8 tokens
    out = []

    def add(name, variant, H, HKV, make_params, only=None):
        if only and world not in only:
            return
        out.append((name, variant, H, HKV, S, make_params))

    add("causal", "causal", 4, 4, lambda g, B, H, S: {})
    add("sliding_window_gqa", "sliding_window", 4, 2,
        lambda g, B, H, S: {"window": 11}, only=(2,))
    add("document_mask_packed", "document_mask", 4, 4, lambda g, B, H, S: {
        # Packed documents of random lengths in each row.
        "doc": torch.cumsum((torch.rand(B, S, generator=g) < 0.15).to(torch.int32),
                            1, dtype=torch.int32)})
    add("alibi_slope_grad", "alibi", 4, 4, lambda g, B, H, S: {
        "slope": (torch.exp2(-(torch.arange(H) + 1.0) * 8 / H)).requires_grad_()},
        only=(2,))
    add("synaptic_gqa_factor_grads", "synaptic", 8, 4, lambda g, B, H, S: {
        "qamp": (torch.rand(B, H, S, generator=g) + 0.5).requires_grad_(),
        "key_factor": (torch.rand(B, H, S, generator=g) + 0.5).requires_grad_(),
        "barrier": 0.05})
    add("flex_softcap_causal", "flex", 4, 4, lambda g, B, H, S: {}, only=(2,))
    add("causal_dropout", "causal", 4, 4, lambda g, B, H, S: {
        "dropout_p": 0.25, "dropout_seed": 1234, "dropout_offset": 7}, only=(2,))
    return out


def softcap(score, b, h, q_idx, kv_idx):
    return 20.0 * torch.tanh(score / 20.0)


def causal_mask(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def run_case(rank, world, name, variant, H, HKV, S, make_params, balance, scheme,
             kernels):
    B, D = 2, 8
    # Every rank draws the same inputs (a seed from the case's name).
    q, k, v, dout, g = inputs(B, H, HKV, S, D, seed=zlib.crc32(name.encode()))
    params = make_params(g, B, H, S)

    def call(qq, kk, vv, ps, sharded):
        if variant == "flex":
            if sharded:
                return cp.flex_attention(qq, kk, vv, softcap, causal_mask,
                                         scheme=scheme, load_balance=balance)
            ker, traced = flex.traced_kernel(softcap, causal_mask)
            return ker(qq, kk, vv, **traced)
        if variant not in kernels:
            kernels[variant] = kernel(variant)
        ker = kernels[variant]
        if sharded:
            return cp.attention(ker, qq, kk, vv, scheme=scheme,
                                load_balance=balance, **ps)
        return ker(qq, kk, vv, **ps)

    # The whole sequence in this process.
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    whole_params = {n: (x.detach().clone().requires_grad_()
                        if isinstance(x, torch.Tensor) and x.requires_grad else x)
                    for n, x in params.items()}
    ref = call(*leaves, whole_params, False)
    ref.backward(dout)
    # Sharded over the group.
    sh = [cp.shard(t, load_balance=balance).clone().requires_grad_()
          for t in (q, k, v)]
    sh_params = {n: (x.detach().clone().requires_grad_()
                     if isinstance(x, torch.Tensor) and x.requires_grad else x)
                 for n, x in params.items()}
    got = call(*sh, sh_params, True)
    got.backward(cp.shard(dout, load_balance=balance))
    launches = dict(cp.last_launches)

    def diff(a, b):
        return float((a - b).abs().max())

    row = {"case": name, "rank": rank, "world": world, "load_balance": balance,
           "scheme": scheme, "launches": launches,
           "out": diff(got, cp.shard(ref.detach(), load_balance=balance))}
    for n, s, w in zip("qkv", sh, leaves):
        row["d" + n] = diff(s.grad, cp.shard(w.grad, load_balance=balance))
    for n, x in sh_params.items():
        if isinstance(x, torch.Tensor) and x.requires_grad:
            row["d" + n] = diff(x.grad, whole_params[n].grad)
    return row


def run_context_parallel(rank, world, scheme, balance):
    """attnc.flex_attention as FlexAttention users write it, inside
    cp.context_parallel: the buffers sharded in place, the block mask made
    for the whole sequence; the output shard and the gradient shards
    against the whole-sequence run."""
    B, H, S, D = 2, 4, 16 * world, 8
    q, k, v, dout, _ = inputs(B, H, H, S, D, seed=99)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    bm = attnc.create_block_mask(causal_mask, None, None, S, S)
    ref = attnc.flex_attention(*leaves, softcap, block_mask=bm)
    ref.backward(dout)
    sh = [t.clone().requires_grad_() for t in (q, k, v)]
    g = dout.clone()
    with cp.context_parallel(buffers=sh + [g], buffer_seq_dims=[2] * 4,
                             no_restore_buffers=sh + [g], scheme=scheme,
                             load_balance=balance):
        out = attnc.flex_attention(*sh, softcap, block_mask=bm)
        out.backward(g)
    restored = cp.shard(q, load_balance=balance)

    def diff(a, b):
        return float((a - b).abs().max())
    row = {"case": "context_parallel_flex", "rank": rank, "world": world,
           "load_balance": balance, "scheme": scheme,
           "out": diff(out, cp.shard(ref.detach(), load_balance=balance)),
           "shard_in_place": diff(sh[0].detach(), restored)}
    for n, s, w in zip("qkv", sh, leaves):
        row["d" + n] = diff(s.grad, cp.shard(w.grad, load_balance=balance))
    return row


def main():
    rank, world, port = (int(a) for a in sys.argv[1:4])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port,
                            rank=rank, world_size=world)
    kernels = {}
    try:
        for name, variant, H, HKV, S, make_params in cases(world):
            for scheme in cp.SCHEMES:
                for balance in (True, False):
                    try:
                        row = run_case(rank, world, name, variant, H, HKV, S,
                                       make_params, balance, scheme, kernels)
                    except Exception as e:  # reported: the test fails
                        row = {"case": name, "rank": rank, "world": world,
                               "load_balance": balance, "scheme": scheme,
                               "error": "%s: %s" % (type(e).__name__, e)}
                    print(json.dumps(row), flush=True)
        for scheme in cp.SCHEMES:
            for balance in (True, False):
                try:
                    row = run_context_parallel(rank, world, scheme, balance)
                except Exception as e:  # reported: the test fails
                    row = {"case": "context_parallel_flex", "rank": rank,
                           "world": world, "load_balance": balance,
                           "scheme": scheme,
                           "error": "%s: %s" % (type(e).__name__, e)}
                print(json.dumps(row), flush=True)
        # Ulysses needs heads the group divides: refused by name otherwise.
        try:
            z = torch.zeros(1, world + 1, 16, 8)
            cp.attention(kernel("causal"), z, z, z, scheme="ulysses")
            row = {"case": "ulysses_heads_refused", "rank": rank, "error": ""}
        except ValueError as e:
            row = {"case": "ulysses_heads_refused", "rank": rank,
                   "message": str(e)}
        print(json.dumps(row), flush=True)
        # Every rank done before any tears the group down: a rank leaving
        # while another's gloo threads still talk to it aborted the process
        # now and then ("terminate called without an active exception").
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
    sys.stdout.flush()
    # Skip interpreter teardown (torch's and gloo's static destructors):
    # what the test reads is already printed.
    os._exit(0)
