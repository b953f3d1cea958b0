"""Context parallelism (attnc.distributed) on torch.distributed with gloo on
localhost: 2 and 4 processes, each world size one launch of its ranks
(distributed_worker.py), bounded in time. Every rank's output shard, its
dq/dk/dv shards and the captures' gradients must equal the
whole-sequence run within float32 rounding, with load balancing on and
off (docs/distributed.md)."""
import json
import os
import socket
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import attnc  # noqa: E402
import attnc.distributed as cp  # noqa: E402

WORKER = os.path.join(os.path.dirname(__file__), "distributed_worker.py")

CASES = {
    2: ["causal", "sliding_window_gqa", "document_mask_packed", "alibi_slope_grad",
        "synaptic_gqa_factor_grads", "flex_softcap_causal", "causal_dropout"],
    4: ["causal", "document_mask_packed", "synaptic_gqa_factor_grads"],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(world, timeout=300):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, WORKER, str(r), str(world), str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for r in range(world)]
    rows = []
    try:
        for r, p in enumerate(procs):
            out, err = p.communicate(timeout=timeout)
            assert p.returncode == 0, "rank %d exited %d:\n%s" % (r, p.returncode, err)
            rows += [json.loads(line) for line in out.splitlines()
                     if line.startswith("{")]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return rows


@pytest.fixture(scope="module", params=[2, 4])
def world_rows(request):
    return request.param, launch(request.param)


def test_sharded_runs_equal_one_process(world_rows):
    world, rows = world_rows
    refused = [r for r in rows if r["case"] == "ulysses_heads_refused"]
    assert len(refused) == world, refused
    for r in refused:
        assert r.get("message", "").startswith(
            "scheme 'ulysses' splits the heads over the %d ranks: q has %d "
            "heads and k %d, expected multiples of %d"
            % (world, world + 1, world + 1, world)), r
    rows = [r for r in rows if r["case"] != "ulysses_heads_refused"]
    seen = {(r["case"], r["rank"], r["load_balance"], r["scheme"]) for r in rows}
    want = {(c, rank, lb, sc) for c in CASES[world] + ["context_parallel_flex"]
            for rank in range(world) for lb in (True, False) for sc in cp.SCHEMES}
    assert seen == want, "missing: %s" % sorted(want - seen)
    for r in rows:
        assert "error" not in r, r
        for key, value in r.items():
            if key in ("case", "rank", "world", "load_balance", "scheme",
                       "launches"):
                continue
            if key in ("out", "dq", "dk", "dv", "shard_in_place"):
                assert value <= 1e-5, r
            elif key.startswith("d") and key not in ("dq", "dk", "dv"):
                # A capture's gradient: every rank's part summed over the group.
                assert value <= 1e-4, r


def test_ring_skips_the_blocks_the_mask_leaves_empty(world_rows):
    # Causal without balancing: rank r's queries are chunk r, so the K/V
    # blocks of ranks after it are empty (skipped, no launch), its own is
    # partial and the earlier ones full. Balanced, every rank's head chunk
    # meets every block, so nothing is skipped.
    world, rows = world_rows
    rows = [r for r in rows if r["case"] != "ulysses_heads_refused"]
    for r in rows:
        if r["case"] != "causal" or r["scheme"] != "ring":
            continue
        n = r["launches"]
        if r["load_balance"]:
            # 2 query runs x 2 key runs per block; a run pair is skipped
            # when the keys all follow the queries.
            assert n["forward"] + n["skipped"] == 4 * world, r
        else:
            assert (n["forward"], n["skipped"]) == (r["rank"] + 1,
                                                    world - 1 - r["rank"]), r
        assert n["backward"] == n["forward"], r
    # The all-gather scheme launches one call per query run, Ulysses one.
    for r in rows:
        if r["scheme"] == "all_gather" and "launches" in r:
            assert r["launches"]["forward"] == (2 if r["load_balance"] else 1), r
        if r["scheme"] == "ulysses" and "launches" in r:
            assert r["launches"]["forward"] == 1, r


def test_every_capture_gradient_is_compared(world_rows):
    world, rows = world_rows
    by_case = {r["case"]: r for r in rows}
    if "synaptic_gqa_factor_grads" in by_case:
        assert {"dqamp", "dkey_factor"} <= set(by_case["synaptic_gqa_factor_grads"])
    if "alibi_slope_grad" in by_case:
        assert "dslope" in by_case["alibi_slope_grad"]


def test_load_balancing_evens_causal_work():
    # Pairs a causal mask keeps per rank, with and without head-tail chunks.
    S, world = 64, 4
    def pairs(balance):
        return [sum(n * s + n * (n + 1) // 2 for s, n in cp.chunks(S, world, r, balance))
                for r in range(world)]
    even, naive = pairs(True), pairs(False)
    assert len(set(even)) == 1
    assert max(naive) > 3 * min(naive)


def test_chunks_and_shapes_are_checked():
    with pytest.raises(ValueError, match="multiple of 8"):
        cp.chunks(20, 4, 0)
    with pytest.raises(ValueError, match="'rank' is 5"):
        cp.chunks(16, 4, 5)
    with pytest.raises(ValueError, match="'scheme' is 'tree', expected one of all_gather, ring, ulysses"):
        cp.attention(None, torch.zeros(1, 1, 8, 8), torch.zeros(1, 1, 8, 8),
                     torch.zeros(1, 1, 8, 8), scheme="tree")
    with pytest.raises(ValueError, match="2 buffers but 1 buffer_seq_dims"):
        with cp.context_parallel(buffers=[torch.zeros(1), torch.zeros(1)],
                                 buffer_seq_dims=[2]):
            pass
    with pytest.raises(ValueError, match="4-d"):
        cp._check(torch.zeros(2, 3), torch.zeros(1, 1, 1, 1), torch.zeros(1, 1, 1, 1), 2)
