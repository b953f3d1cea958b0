"""The backward pass through torch autograd: attnc's operator has a
backward (the compiled CPU backward kernels), so loss.backward() gives q,
k, v and the captured tensors their gradients, through compiled .attn
kernels and attnc.flex_attention alike, eager and under torch.compile."""
import math
import os

import pytest

torch = pytest.importorskip("torch")

import attnc  # noqa: E402

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
EXAMPLES = os.path.join(ROOT, "examples")


def synaptic_reference(q, k, v, qamp, key_factor, barrier):
    """The synaptic example in plain torch ops (autograd differentiates it)."""
    L, S = q.shape[2], k.shape[2]
    G = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(G, 1), v.repeat_interleave(G, 1)
    scale = 1 / math.sqrt(q.shape[3])
    s = q @ k.transpose(-1, -2) * scale
    qi = torch.arange(L)[:, None] + (S - L)
    kj = torch.arange(S)[None, :]
    s = s + torch.log(qamp[:, :, qi] * key_factor[:, :, None, :S]) \
          - barrier * (qi - kj).abs()
    s = s.masked_fill(qi < kj, float("-inf"))
    return torch.softmax(s, -1) @ v


def leaves(*shapes, dtype=torch.float32, positive=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for shape in shapes:
        x = torch.rand(shape, generator=g) + 0.5 if positive else \
            torch.randn(shape, generator=g)
        out.append(x.to(dtype).requires_grad_())
    return out


def test_gradients_of_a_compiled_variant_match_torch_autograd():
    kernel = attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"),
                           variant="synaptic")
    q, k, v = leaves((2, 4, 37, 16), (2, 2, 37, 16), (2, 2, 37, 16))
    qamp, kf = leaves((2, 4, 37), (2, 4, 37), positive=True, seed=1)
    w = torch.randn(2, 4, 37, 16)
    (kernel(q, k, v, qamp=qamp, key_factor=kf, barrier=0.05) * w).sum().backward()
    ours = [t.grad.clone() for t in (q, k, v, qamp, kf)]
    for t in (q, k, v, qamp, kf):
        t.grad = None
    (synaptic_reference(q, k, v, qamp, kf, 0.05) * w).sum().backward()
    for name, got, t in zip("q k v qamp key_factor".split(), ours,
                            (q, k, v, qamp, kf)):
        torch.testing.assert_close(got, t.grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m: name + ": " + m)


def test_the_lse_output_is_differentiable_too():
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"), variant="causal")
    q, k, v = leaves((1, 2, 19, 8), (1, 2, 19, 8), (1, 2, 19, 8))
    out, lse = kernel(q, k, v, return_lse=True)
    (out.sum() + (lse * torch.linspace(-1, 1, 19)).sum()).backward()
    ours = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    s = q @ k.transpose(-1, -2) / math.sqrt(8)
    s = s.masked_fill(torch.ones(19, 19, dtype=torch.bool).triu(1), float("-inf"))
    ref_out, ref_lse = torch.softmax(s, -1) @ v, torch.logsumexp(s, -1)
    (ref_out.sum() + (ref_lse * torch.linspace(-1, 1, 19)).sum()).backward()
    for got, t in zip(ours, (q, k, v)):
        torch.testing.assert_close(got, t.grad, rtol=1e-4, atol=1e-5)


def test_flex_attention_gradients_match_the_same_closures_in_torch():
    # torch's flex_attention refuses backward on the CPU ("FlexAttention
    # does not support backward on CPU"), so the reference is the same
    # score_mod and mask evaluated densely in torch ops, which autograd
    # differentiates.
    def score_mod(score, b, h, q_idx, kv_idx):
        return score + bias[h, (q_idx - kv_idx).abs().clamp(max=15)]

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    q, k, v = leaves((2, 2, 33, 16), (2, 2, 33, 16), (2, 2, 33, 16), seed=3)
    (bias,) = leaves((2, 16), seed=4)
    mask = attnc.create_block_mask(causal, None, None, 33, 33)
    w = torch.randn(2, 2, 33, 16)
    (attnc.flex_attention(q, k, v, score_mod=score_mod, block_mask=mask) * w).sum().backward()
    ours = [t.grad.clone() for t in (q, k, v, bias)]
    for t in (q, k, v, bias):
        t.grad = None

    i, j = torch.arange(33)[:, None], torch.arange(33)[None, :]
    s = q @ k.transpose(-1, -2) / 4 + bias[:, (i - j).abs().clamp(max=15)]
    s = s.masked_fill(i < j, float("-inf"))
    ((torch.softmax(s, -1) @ v) * w).sum().backward()
    for name, got, t in zip("q k v bias".split(), ours, (q, k, v, bias)):
        torch.testing.assert_close(got, t.grad, rtol=1e-4, atol=1e-5,
                                   msg=lambda m: name + ": " + m)


class TwoLayers(torch.nn.Module):
    """Two attention layers with projections; `attend(q, k, v)` is attnc's
    kernel or a reference."""

    def __init__(self, attend, dim=32, heads=2):
        super().__init__()
        self.attend, self.heads = attend, heads
        self.qkv = torch.nn.ModuleList(torch.nn.Linear(dim, 3 * dim) for _ in range(2))
        self.out = torch.nn.ModuleList(torch.nn.Linear(dim, dim) for _ in range(2))

    def forward(self, x):
        B, T, C = x.shape
        for qkv, out in zip(self.qkv, self.out):
            q, k, v = qkv(x).view(B, T, 3, self.heads, -1).permute(2, 0, 3, 1, 4)
            y = self.attend(q, k, v)
            x = x + out(y.transpose(1, 2).reshape(B, T, C))
        return x


def train(attend, steps=4):
    torch.manual_seed(0)
    model = TwoLayers(attend)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    x, target = torch.randn(3, 29, 32, generator=g), torch.randn(3, 29, 32, generator=g)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - target) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_training_loop_gives_sdpa_s_losses():
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"), variant="causal")
    ours = train(lambda q, k, v: kernel(q, k, v))
    ref = train(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, is_causal=True))
    assert ours[-1] < ours[0]  # it trains
    for a, b in zip(ours, ref):
        assert a == pytest.approx(b, rel=1e-5)


def test_backward_under_torch_compile():
    kernel = attnc.compile(os.path.join(EXAMPLES, "alibi.attn"), variant="alibi")
    q, k, v = leaves((1, 2, 21, 8), (1, 2, 21, 8), (1, 2, 21, 8), seed=5)
    (slope,) = leaves((2,), seed=6)

    def f(q, k, v, slope):
        return kernel(q, k, v, slope=slope).square().sum()

    f(q, k, v, slope).backward()
    eager = [t.grad.clone() for t in (q, k, v, slope)]
    for t in (q, k, v, slope):
        t.grad = None
    torch.compile(f, fullgraph=True)(q, k, v, slope).backward()
    for got, t in zip(eager, (q, k, v, slope)):
        torch.testing.assert_close(t.grad, got, rtol=1e-5, atol=1e-6)


def test_backward_errors_name_what_is_wrong():
    kernel = attnc.compile(os.path.join(EXAMPLES, "causal.attn"), variant="causal")
    q, k, v = leaves((1, 2, 8, 8), (1, 2, 8, 8), (1, 2, 8, 8))
    out = kernel(q, k, v)
    with pytest.raises(Exception, match="grad_out"):
        kernel._backward(q.detach(), k.detach(), v.detach(), out.detach(),
                         torch.zeros(1, 2, 8), torch.zeros(1, 2, 7, 8), None,
                         scale=None, kv_lens=None, q_offsets=None, params={})


def test_a_rank0_capture_is_a_learnable_scalar():
    # Python numbers get no gradient; a rank-0 tensor capture does.
    kernel = attnc.compile("""
variant t(temp: f32[]) {
  score_mod(score, b, h, q, kv) = score * temp
  mask_mod(b, h, q, kv) = q >= kv
}""", variant="t")
    q, k, v = leaves((1, 2, 9, 8), (1, 2, 9, 8), (1, 2, 9, 8), seed=7)
    temp = torch.tensor(1.3, requires_grad=True)
    kernel(q, k, v, temp=temp).square().sum().backward()
    with torch.no_grad():
        f = lambda t: kernel(q, k, v, temp=torch.tensor(t)).square().sum().item()
        fd = (f(1.3 + 1e-3) - f(1.3 - 1e-3)) / 2e-3
    assert temp.grad.shape == ()
    assert temp.grad.item() == pytest.approx(fd, rel=1e-3)


@pytest.mark.parametrize("source", ["compiled", "package"])
def test_gpu_backward_on_device_arrays_matches_torch_autograd(cuda_device, source,
                                                              tmp_path):
    """The GPU backward kernels (under ctest, on the emulated driver with
    memcheck) through the extension's binding, on attnc.cuda arrays: dq, dk,
    dv and the captures' gradients equal torch autograd's of the same
    computation in torch ops. The kernel is compiled here, or read from a
    package written with backward=True (what a runtime-only install runs).
    (torch CUDA tensors take this path in attnc::attention_backward; torch
    cannot load the stand-in driver.)"""
    np = pytest.importorskip("numpy")
    path = os.path.join(EXAMPLES, "synaptic.attn")
    kernel = attnc.compile(path, variant="synaptic")
    q, k, v = leaves((1, 4, 37, 32), (1, 2, 37, 32), (1, 2, 37, 32), seed=4)
    qamp, kf = leaves((1, 4, 37), (1, 4, 37), positive=True, seed=5)
    dout = torch.randn(1, 4, 37, 32, generator=torch.Generator().manual_seed(6))
    ref = synaptic_reference(q, k, v, qamp, kf, 0.05)
    ref.backward(dout)

    host = dict(q=q, k=k, v=v, qamp=qamp, key_factor=kf)
    host = {n: x.detach().numpy() for n, x in host.items()}
    out, lse = kernel(host["q"], host["k"], host["v"], qamp=host["qamp"],
                      key_factor=host["key_factor"], barrier=0.05, return_lse=True)
    dev = {n: attnc.cuda.to_device(x) for n, x in
           dict(host, out=out, lse=lse, dout=dout.numpy()).items()}
    grads = {n: attnc.cuda.empty(host[n].shape, "f32", 0) for n in ("q", "k", "v")}
    if source == "package":
        pkg = tmp_path / "synaptic.json"
        attnc.compile_package(path, pkg, targets=("sm_90",), dtypes=("f32",),
                              head_dims=(32,), backward=True)
        program = attnc.load_package(pkg).kernel("synaptic").program
        assert not hasattr(program, "cpu_backward_kernel")
    else:
        program = kernel.program
    gpu = program.gpu_backward_kernel("synaptic", "f32", 32, 32, 0)
    args = kernel._args(None, None, None, dict(qamp=dev["qamp"],
                                               key_factor=dev["key_factor"],
                                               barrier=0.05))
    params = gpu.run(dev["q"], dev["k"], dev["v"], dev["out"], dev["lse"],
                     dev["dout"], None, grads["q"], grads["k"], grads["v"], args)
    for name, leaf in (("q", q), ("k", k), ("v", v)):
        got = attnc.cuda.to_host(grads[name])
        assert np.abs(got - leaf.grad.numpy()).max() < 1e-4, name
    for name, leaf in (("qamp", qamp), ("key_factor", kf)):
        assert params[name].shape == leaf.shape
        assert np.abs(params[name] - leaf.grad.double().numpy()).max() < 1e-4, name
    # dq in another dtype than the kernel's is refused by name.
    bad = attnc.cuda.empty(host["q"].shape, "bf16", 0)
    with pytest.raises(attnc.Error, match="dq"):
        gpu.run(dev["q"], dev["k"], dev["v"], dev["out"], dev["lse"], dev["dout"],
                None, bad, grads["k"], grads["v"], args)


@pytest.mark.parametrize("layout", ["dense", "strided"])
def test_cpu_backward_overwrites_its_outputs(layout):
    """The CPU backward accumulates dq, dk, dv straight into dense f32
    outputs (and into scratch copied out for any other layout): whatever
    the outputs held before (NaN here) is overwritten, and both layouts
    give torch autograd's gradients, with the synaptic factors'
    (summed per row and per column inside the kernel)."""
    np = pytest.importorskip("numpy")
    kernel = attnc.compile(os.path.join(EXAMPLES, "synaptic.attn"), variant="synaptic")
    q, k, v = leaves((2, 4, 45, 16), (2, 2, 45, 16), (2, 2, 45, 16), seed=12)
    qamp, kf = leaves((2, 4, 45), (2, 4, 45), positive=True, seed=13)
    dout = torch.randn(2, 4, 45, 16, generator=torch.Generator().manual_seed(14))
    synaptic_reference(q, k, v, qamp, kf, 0.05).backward(dout)
    host = {n: x.detach().numpy() for n, x in
            dict(q=q, k=k, v=v, qamp=qamp, key_factor=kf).items()}
    out, lse = kernel(host["q"], host["k"], host["v"], qamp=host["qamp"],
                      key_factor=host["key_factor"], barrier=0.05, return_lse=True)

    def output(shape):
        if layout == "dense":
            return np.full(shape, np.nan, np.float32)
        # [B, H, L, D] as a view of [B, L, H, D] storage: not dense.
        b, h, l, d = shape
        return np.full((b, l, h, d), np.nan, np.float32).transpose(0, 2, 1, 3)
    grads = [output(host[n].shape) for n in ("q", "k", "v")]
    bw = kernel.program.cpu_backward_kernel("synaptic", "f32", 16, 16)
    params = bw.run(host["q"], host["k"], host["v"], out, lse, dout.numpy(), None,
                    *grads, kernel._args(None, None, None, dict(
                        qamp=host["qamp"], key_factor=host["key_factor"],
                        barrier=0.05)), 2)
    for g, leaf in zip(grads, (q, k, v)):
        assert np.isfinite(g).all()
        assert np.abs(g - leaf.grad.numpy()).max() < 1e-5
    for name, leaf in (("qamp", qamp), ("key_factor", kf)):
        assert np.abs(params[name] - leaf.grad.double().numpy()).max() < 1e-5, name
