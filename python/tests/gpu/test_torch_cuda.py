"""On a real GPU, with the runtime-only package built there
(.device/build-python.sh) and the packages of .device/packages: torch CUDA
tensors through attnc against the packages' fp64 reference and torch's own
flex_attention, on torch's current stream (a side stream included), inside
torch.compile, and the FlexAttention route through exported closures.
Run by .device/run-gpu-validation.sh; it needs torch with CUDA, so it
cannot run on the emulator (torch does not load attnc's stand-in driver).

  PYTHONPATH=/tmp/attnc-python ATTNC_TEST_PACKAGES=.device/packages \\
      python3 -m pytest -q python/tests/gpu
"""
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("torch has no CUDA device", allow_module_level=True)

import attnc  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from closures import causal, tilt  # noqa: E402

PACKAGES = os.environ.get("ATTNC_TEST_PACKAGES", ".device/packages")


def kernel(variant):
    return attnc.load_package(os.path.join(PACKAGES, variant + ".json")).kernel(variant)


def qkv(dtype, B=2, H=8, HKV=2, LQ=77, LKV=77, D=64, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(B, H, LQ, D, device="cuda", dtype=dtype, generator=g),
            torch.randn(B, HKV, LKV, D, device="cuda", dtype=dtype, generator=g),
            torch.randn(B, HKV, LKV, D, device="cuda", dtype=dtype, generator=g))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.float16, 4e-3),
                                       (torch.bfloat16, 2e-2)])
def test_synaptic_gqa_on_torch_cuda_tensors(dtype, tol):
    k_ = kernel("synaptic")
    q, k, v = qkv(dtype)
    qamp = torch.rand(2, 8, 77, device="cuda") + 0.5
    kf = torch.rand(2, 8, 77, device="cuda") + 0.5
    out, lse = k_(q, k, v, qamp=qamp, key_factor=kf, barrier=0.05, return_lse=True)
    assert out.device == q.device and out.dtype == dtype and lse.dtype == torch.float32
    ref, ref_lse = k_.reference(q, k, v, qamp=qamp, key_factor=kf, barrier=0.05)
    assert np.abs(out.double().cpu().numpy() - ref).max() < tol
    assert np.abs(lse.double().cpu().numpy() - ref_lse).max() < 1e-3


def test_runs_on_the_current_side_stream():
    k_ = kernel("causal")
    q, k, v = qkv(torch.bfloat16, LQ=1, LKV=4000)  # decode
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        # The inputs are made on the side stream right before the call: a
        # call on another stream would read them unfinished.
        v2 = v * 2
        out = k_(q, k, v2)
    side.synchronize()
    ref, _ = k_.reference(q, k, v2)
    assert np.abs(out.double().cpu().numpy() - ref).max() < 2e-2


def test_flex_route_matches_torch_flex_attention():
    """The closures exported by device-bundle.sh (flex.json beside the
    packages' folder, in python-packages/)."""
    from torch.nn.attention import flex_attention as tfa
    attnc.load_package(os.path.join(PACKAGES, "..", "python-packages", "flex.json"))
    q, k, v = qkv(torch.bfloat16, H=8, HKV=8, LQ=256, LKV=256, D=64)
    ours_bm = attnc.create_block_mask(causal, 2, 8, 256, 256)
    theirs_bm = tfa.create_block_mask(causal, 2, 8, 256, 256, device="cuda")
    ours = attnc.flex_attention(q, k, v, score_mod=tilt, block_mask=ours_bm)
    theirs = tfa.flex_attention(q.double(), k.double(), v.double(), score_mod=tilt,
                                block_mask=theirs_bm)
    assert (ours.double() - theirs).abs().max().item() < 2e-2


def test_torch_compile_keeps_attnc_in_the_graph():
    k_ = kernel("causal")

    @torch.compile(fullgraph=True)
    def f(q, k, v):
        return k_(q * 1.0, k, v).float().sum(-1)

    q, k, v = qkv(torch.float16)
    assert torch.allclose(f(q, k, v), k_(q, k, v).float().sum(-1), atol=1e-2)
