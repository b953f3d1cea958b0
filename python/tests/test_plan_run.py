"""Plan/run from Python: Kernel.plan validates and plans a call once (the
lengths, the page table, the scalars, the split plan); the Plan then runs
per layer with that layer's arrays, on the CPU and on the (emulated) GPU,
giving the direct call's result; what a plan cannot take is refused by
name."""
import os

import numpy as np
import pytest

import attnc

SYNAPTIC = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "synaptic.attn")


def _paged_layers(rng, layers=3):
    """Per layer: q [2, 4, 3, 16] (a 3-token chunk), K/V pools of 9 pages of
    8, and the synaptic factors [2, 4, 30]."""
    out = []
    for _ in range(layers):
        q = rng.standard_normal((2, 4, 3, 16), dtype=np.float32)
        k, v = (rng.standard_normal((9, 2, 8, 16), dtype=np.float32) for _ in range(2))
        qamp, kf = (rng.uniform(0.5, 1.5, (2, 4, 30)).astype(np.float32) for _ in range(2))
        out.append((q, k, v, dict(qamp=qamp, key_factor=kf)))
    return out


TABLE = dict(kv_indptr=[0, 4, 8], kv_indices=[3, 0, 7, 5, 1, 8, 2, 6],
             kv_last_page_len=[6, 6])  # two sequences of 30 keys


def test_a_cpu_plan_runs_every_layer_as_the_direct_call():
    kernel = attnc.compile(SYNAPTIC, variant="synaptic")
    layers = _paged_layers(np.random.default_rng(0))
    q, k, v, caps = layers[0]
    plan = kernel.plan(q, k, v, barrier=0.05, return_lse=True, num_splits=2, **TABLE,
                       **caps)
    assert plan.splits == 2
    for q, k, v, caps in layers:
        out, lse = plan(q, k, v, barrier=0.05, **caps)
        want, want_lse = kernel(q, k, v, barrier=0.05, return_lse=True, num_splits=2,
                                **TABLE, **caps)
        np.testing.assert_array_equal(out, want)
        np.testing.assert_array_equal(lse, want_lse)
        ref, _ = kernel.reference(q, k, v, barrier=0.05, **TABLE, **caps)
        assert np.abs(out - ref).max() < 1e-4


def test_what_a_plan_refuses_is_named():
    kernel = attnc.compile(SYNAPTIC, variant="synaptic")
    q, k, v, caps = _paged_layers(np.random.default_rng(1), 1)[0]
    plan = kernel.plan(q, k, v, barrier=0.05, **TABLE, **caps)
    with pytest.raises(ValueError, match="'barrier' is 0.5, but the plan was made "
                       "with 0.05"):
        plan(q, k, v, barrier=0.5, **caps)
    with pytest.raises(attnc.Error, match="q"):
        plan(q[:, :, :2], k, v, **caps)                 # another shape
    with pytest.raises(attnc.Error, match="key_factor"):
        plan(q, k, v, qamp=caps["qamp"], key_factor=caps["key_factor"][:, :, :20])
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(q).requires_grad_()
    with pytest.raises(attnc.Error, match="a plan runs outside autograd"):
        kernel.plan(t, torch.from_numpy(k), torch.from_numpy(v), barrier=0.05,
                    **TABLE, **{n: torch.from_numpy(x) for n, x in caps.items()})


def test_a_gpu_plan_runs_every_layer_as_the_direct_call(cuda_device):
    kernel = attnc.compile(SYNAPTIC, variant="synaptic")
    layers = _paged_layers(np.random.default_rng(2), 2)
    dev = lambda x: attnc.cuda.to_device(x)  # noqa: E731
    q, k, v, caps = layers[0]
    plan = kernel.plan(dev(q), dev(k), dev(v), barrier=0.05, **TABLE,
                       **{n: dev(x) for n, x in caps.items()})
    for q, k, v, caps in layers:
        dcaps = {n: dev(x) for n, x in caps.items()}
        got = attnc.cuda.to_host(plan(dev(q), dev(k), dev(v), **dcaps))
        want = attnc.cuda.to_host(kernel(dev(q), dev(k), dev(v), barrier=0.05, **TABLE,
                                         **dcaps))
        np.testing.assert_array_equal(got, want)


def test_the_checked_mode_covers_plan_runs():
    """A plan's run reports an out-of-range gather in the checked mode, as a
    call does (attnc.set_checked)."""
    kernel = attnc.compile("variant v(t: f32[N]) {\n"
                           "  score_mod(score, b, h, q, kv) = score + t[q]\n}\n")
    x = np.zeros((1, 1, 9, 8), np.float32)
    plan = kernel.plan(x, x, x, t=np.zeros(9, np.float32))
    was = attnc.set_checked(True)
    try:
        plan(x, x, x, t=np.zeros(9, np.float32))          # in range: runs
        with pytest.raises(IndexError, match=r"index \[4\] is out of bounds for "
                           r"'t' of shape \[4\]"):
            plan(x, x, x, t=np.zeros(4, np.float32))
    finally:
        attnc.set_checked(was)
