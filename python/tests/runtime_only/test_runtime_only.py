"""The runtime-only package (built with -DATTNC_ENABLE_COMPILER=OFF, no
LLVM): kernel packages compiled elsewhere (make_packages.py) run on the
(emulated) GPU against the packages' fp64 reference, and FlexAttention
closures find their exported kernels. Run by scripts/check-runtime-only.sh
with ATTNC_TEST_PACKAGES set."""
import os
import sys

import numpy as np
import pytest

import attnc

sys.path.insert(0, os.path.dirname(__file__))
from closures import with_bias, window  # noqa: E402

PACKAGES = os.environ.get("ATTNC_TEST_PACKAGES", "")


def package(name):
    path = os.path.join(PACKAGES, name)
    if not os.path.exists(path):
        pytest.fail("no %s: run make_packages.py first (ATTNC_TEST_PACKAGES=%r)"
                    % (name, PACKAGES))
    return attnc.load_package(path)


def test_this_is_the_runtime_only_package():
    assert not attnc.has_compiler
    with pytest.raises(attnc.Error, match="runtime-only package"):
        attnc.compile("variant plain() {}\n")


def test_a_package_runs_on_the_device(cuda_device):
    torch = pytest.importorskip("torch")
    kernel = package("synaptic.json").kernel("synaptic")
    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 37, 64, generator=g) for _ in range(3))
    qamp = torch.rand(2, 2, 37, generator=g) + 0.5
    kf = torch.rand(2, 2, 37, generator=g) + 0.5
    for dtype, tol in ((torch.float32, 2e-5), (torch.bfloat16, 2e-2)):
        dev = [attnc.cuda.to_device(x.to(dtype)) for x in (q, k, v)]
        out = kernel(*dev, qamp=attnc.cuda.to_device(qamp),
                     key_factor=attnc.cuda.to_device(kf), barrier=0.05)
        ref, _ = kernel.reference(q.to(dtype), k.to(dtype), v.to(dtype),
                                  qamp=qamp, key_factor=kf, barrier=0.05)
        got = attnc.cuda.to_host(out)
        got = got.float().numpy() if hasattr(got, "float") else got
        assert np.abs(got - ref).max() < tol, dtype
    with pytest.raises(attnc.Error, match="GPU kernels only"):
        kernel(q, k, v, qamp=qamp, key_factor=kf, barrier=0.05)


def test_flex_closures_find_their_exported_kernel(cuda_device):
    package("flex.json")
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((1, 2, 30, 64)).astype(np.float32) for _ in range(3))
    bias = rng.standard_normal(7).astype(np.float32)
    bm = attnc.create_block_mask(window(8), 1, 2, 30, 30)
    out = attnc.flex_attention(*(attnc.cuda.to_device(x) for x in (q, k, v)),
                               score_mod=with_bias(attnc.cuda.to_device(bias)),
                               block_mask=bm)
    got = attnc.cuda.to_host(out)
    # By hand, in float64: query i sees keys i-7..i with bias[j % 7].
    s = np.einsum("bhqd,bhkd->bhqk", q, k).astype(np.float64) / 8.0
    s += bias[np.arange(30) % 7].astype(np.float64)
    i, j = np.arange(30)[:, None], np.arange(30)[None, :]
    s[..., ~((i >= j) & (i - j < 8))] = -np.inf
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
    assert np.abs(got - want).max() < 2e-5
    # window(4) is the same traced program (the size is a scalar parameter).
    out4 = attnc.flex_attention(*(attnc.cuda.to_device(x) for x in (q, k, v)),
                                block_mask=attnc.create_block_mask(window(4), 1, 2, 30, 30),
                                score_mod=with_bias(attnc.cuda.to_device(bias)))
    assert np.abs(attnc.cuda.to_host(out4) - got).max() > 1e-3
    # Closures with no exported kernel: a clear error, no compiler needed.
    with pytest.raises(attnc.Error, match="no loaded package has the traced variant"):
        attnc.flex_attention(*(attnc.cuda.to_device(x) for x in (q, k, v)))
