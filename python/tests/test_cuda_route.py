"""CUDA arrays: the .attn route, the FlexAttention route and kernel
packages on device memory (attnc.cuda device arrays; under ctest the
emulated driver runs the PTX with memcheck), against the fp64 reference.
torch CUDA tensors take the same path (DLPack, torch's current stream) and
are tested where a GPU is lent (docs/python.md)."""
import os

import numpy as np
import pytest

import attnc

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = os.path.join(ROOT, "examples")


def host_qkv(rng, B=1, H=2, HKV=2, LQ=40, LKV=40, D=64, dtype=np.float32):
    return (rng.standard_normal((B, H, LQ, D)).astype(dtype),
            rng.standard_normal((B, HKV, LKV, D)).astype(dtype),
            rng.standard_normal((B, HKV, LKV, D)).astype(dtype))


def test_synaptic_f32_on_the_device(cuda_device):
    rng = np.random.default_rng(11)
    kernel = attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"), variant="synaptic")
    q, k, v = host_qkv(rng)
    p = dict(qamp=rng.uniform(0.5, 1.5, (1, 2, 40)).astype(np.float32),
             key_factor=rng.uniform(0.5, 1.5, (1, 2, 40)).astype(np.float32))
    dev = {n: attnc.cuda.to_device(x) for n, x in dict(q=q, k=k, v=v, **p).items()}
    out, lse = kernel(dev["q"], dev["k"], dev["v"], qamp=dev["qamp"],
                      key_factor=dev["key_factor"], barrier=0.05, return_lse=True)
    assert isinstance(out, attnc.cuda.DeviceArray) and out.shape == (1, 2, 40, 64)
    assert out.dtype == "f32" and lse.dtype == "f32" and lse.shape == (1, 2, 40)
    ref, ref_lse = kernel.reference(q, k, v, barrier=0.05, **p)
    assert np.abs(attnc.cuda.to_host(out) - ref).max() < 2e-5
    assert np.abs(attnc.cuda.to_host(lse) - ref_lse).max() < 2e-5
    # The reference also takes the device arrays (copied to the host).
    ref2, _ = kernel.reference(dev["q"], dev["k"], dev["v"], qamp=dev["qamp"],
                               key_factor=dev["key_factor"], barrier=0.05)
    assert np.array_equal(ref, ref2)


def test_bf16_gqa_decode_on_tensor_cores(cuda_device):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(3)
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"))
    q = torch.randn(3, 4, 2, 64, generator=g).to(torch.bfloat16)
    k = torch.randn(3, 2, 70, 64, generator=g).to(torch.bfloat16)
    v = torch.randn(3, 2, 70, 64, generator=g).to(torch.bfloat16)
    lens, offs = [70, 33, 1], [68, 31, 0]
    dq, dk, dv = (attnc.cuda.to_device(x) for x in (q, k, v))
    out = kernel(dq, dk, dv, kv_lens=lens, q_offsets=offs)
    assert out.dtype == "bf16"
    got = attnc.cuda.to_host(out)  # a torch tensor: NumPy has no bfloat16
    ref, _ = kernel.reference(q, k, v, kv_lens=lens, q_offsets=offs)
    assert np.abs(got.double().numpy() - ref).max() < 2e-2
    # Sequence 2's only query, at position 0, sees key 0 alone.
    assert torch.equal(got[2, :, 0], v[2, [0, 0, 1, 1], 0])


def test_out_on_the_device_is_written_in_place(cuda_device):
    rng = np.random.default_rng(5)
    kernel = attnc.compile("variant plain() {}\n", name="plain.attn")
    q, k, v = host_qkv(rng, LQ=9, LKV=20)
    out = attnc.cuda.empty((1, 2, 9, 64), "f32")
    assert kernel(*(attnc.cuda.to_device(x) for x in (q, k, v)), out=out,
                  stream=0) is out
    ref, _ = kernel.reference(q, k, v)
    assert np.abs(attnc.cuda.to_host(out) - ref).max() < 2e-5


def test_mixed_devices_and_bad_arguments_are_refused(cuda_device):
    rng = np.random.default_rng(6)
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"))
    q, k, v = host_qkv(rng)
    dq = attnc.cuda.to_device(q)
    with pytest.raises(attnc.Error, match="'k' is on cpu but the query is on cuda:0"):
        kernel(dq, k, v)
    with pytest.raises(attnc.Error, match="'out' is on cuda:0 but the query is on cpu"):
        kernel(q, k, v, out=attnc.cuda.empty((1, 2, 40, 64), "f32"))
    # The runtime's own checks, as on the CPU: nothing is launched.
    dk = attnc.cuda.to_device(k[:, :, :, :32].copy())
    with pytest.raises(attnc.Error, match="k"):
        kernel(dq, dk, attnc.cuda.to_device(v))
    with pytest.raises(attnc.Error, match="C-contiguous"):
        attnc.cuda.to_device(q.transpose(0, 2, 1, 3))


def test_flex_route_on_device_arrays(cuda_device):
    rng = np.random.default_rng(8)
    q, k, v = host_qkv(rng, LQ=33, LKV=33)
    dq, dk, dv = (attnc.cuda.to_device(x) for x in (q, k, v))

    def tilt(score, b, h, q_idx, kv_idx):
        return score * 0.5 + (q_idx - kv_idx) * 0.01

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    bm = attnc.create_block_mask(causal, 1, 2, 33, 33)
    out = attnc.flex_attention(dq, dk, dv, score_mod=tilt, block_mask=bm)
    got = attnc.cuda.to_host(out)
    # The same closures on the CPU (host JIT) agree with the device.
    cpu = attnc.flex_attention(q, k, v, score_mod=tilt, block_mask=bm)
    assert np.abs(got - cpu).max() < 2e-5
    assert np.abs(got[0, 0, 0] - v[0, 0, 0]).max() < 1e-6  # query 0 sees key 0


def test_packages_run_on_the_device_and_flex_finds_exported_closures(cuda_device, tmp_path):
    rng = np.random.default_rng(9)
    path = tmp_path / "causal.json"
    attnc.compile_package(os.path.join(EXAMPLES, "causal.attn"), path,
                          targets=["sm_80"], dtypes=["f32"], head_dims=[64])
    package = attnc.load_package(path)
    assert package.variants == ["causal"]
    kernel = package.kernel()
    q, k, v = host_qkv(rng, LQ=5, LKV=30)
    out = kernel(*(attnc.cuda.to_device(x) for x in (q, k, v)))
    ref, _ = kernel.reference(q, k, v)
    assert np.abs(attnc.cuda.to_host(out) - ref).max() < 2e-5
    with pytest.raises(attnc.Error, match="GPU kernels only"):
        kernel(q, k, v)
    with pytest.raises(attnc.Error, match="no kernel of variant .causal. for sm_90 f16"):
        kernel(*(attnc.cuda.to_device(x.astype(np.float16)) for x in (q, k, v)))

    def with_bias(bias):
        def key_bias(score, b, h, q_idx, kv_idx):
            return score + bias[kv_idx]
        return key_bias

    bias = rng.standard_normal(30).astype(np.float32)
    name = attnc.flex.export_package(tmp_path / "flex.json", with_bias(bias),
                                     targets=["sm_80"], dtypes=["f32"], head_dims=[64])
    assert attnc.load_package(tmp_path / "flex.json").variants == [name]
    # The same closure over a device copy of the table finds the package.
    dqkv = [attnc.cuda.to_device(x) for x in (q, k, v)]
    out = attnc.flex_attention(*dqkv, score_mod=with_bias(attnc.cuda.to_device(bias)))
    used = [kern for (src, on_cuda), kern in attnc.flex._kernels.items()
            if on_cuda and name in src]
    assert len(used) == 1 and isinstance(used[0].program, attnc._attnc.Package)
    cpu = attnc.flex_attention(q, k, v, score_mod=with_bias(bias))
    assert np.abs(attnc.cuda.to_host(out) - cpu).max() < 2e-5


def test_paged_kv_on_the_device(cuda_device):
    from test_attn_route import paged
    rng = np.random.default_rng(13)
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"))
    q, k, v = host_qkv(rng, B=2, H=4, HKV=2, LQ=3, LKV=50)
    lens, offs = [50, 9], [47, 6]
    kp, vp, indptr, indices, last = paged(rng, k, v, lens, 16)  # HND pools
    out = kernel(*(attnc.cuda.to_device(x) for x in (q, kp, vp)),
                 kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last,
                 q_offsets=offs)
    ref, _ = kernel.reference(q, kp, vp, kv_indptr=indptr, kv_indices=indices,
                              kv_last_page_len=last, q_offsets=offs)
    assert np.abs(attnc.cuda.to_host(out) - ref).max() < 2e-5
    flat = kernel(q, k, v, kv_lens=lens, q_offsets=offs)  # the CPU, contiguous
    assert np.abs(attnc.cuda.to_host(out) - flat).max() < 2e-5
    # Split-KV on the device: 5 splits, the merge launched after the kernel.
    split = kernel(*(attnc.cuda.to_device(x) for x in (q, kp, vp)),
                   kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last,
                   q_offsets=offs, num_splits=5)
    assert np.abs(attnc.cuda.to_host(split) - ref).max() < 2e-5


def test_a_package_with_key_offsets_runs_key_blocks(cuda_device, tmp_path):
    """key_offsets="both" packages each kernel with and without key offsets;
    a call with kv_offsets gets the kernel that reads them (forward and
    backward, against the fp64 reference), a call without the one that
    pays nothing for them; a package without them names what it holds."""
    rng = np.random.default_rng(17)
    path = tmp_path / "causal.json"
    attnc.compile_package(os.path.join(EXAMPLES, "causal.attn"), path,
                          targets=["sm_80"], dtypes=["f32"], head_dims=[64],
                          key_offsets="both")
    kernel = attnc.load_package(path).kernel()
    q, k, v = host_qkv(rng, LQ=5, LKV=30)
    dqkv = [attnc.cuda.to_device(x) for x in (q, k, v)]
    for offsets in ([0], [40]):
        out = kernel(*dqkv, kv_offsets=offsets)
        ref, _ = kernel.reference(q, k, v, kv_offsets=offsets)
        assert np.abs(attnc.cuda.to_host(out) - ref).max() < 2e-5
    names = sorted(k.name for k in kernel._kernels.values())
    assert names == ["attnc_causal_f32_d64v64_kvoff_m64n64w2s1",
                     "attnc_causal_f32_d64v64_m64n64w2s1"]
    plain = tmp_path / "plain.json"
    attnc.compile_package(os.path.join(EXAMPLES, "causal.attn"), plain,
                          targets=["sm_80"], dtypes=["f32"], head_dims=[64])
    with pytest.raises(attnc.Error, match="f32 Dqk=64 Dv=64 key offsets "
                       r"\(it has: sm_80 f32 D=64/64\)"):
        attnc.load_package(plain).kernel()(*dqkv, kv_offsets=[40])
    with pytest.raises(attnc.Error, match="'key_offsets' is 'yes'"):
        attnc.compile_package(os.path.join(EXAMPLES, "causal.attn"), plain,
                              key_offsets="yes")
