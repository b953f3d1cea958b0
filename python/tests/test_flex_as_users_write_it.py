"""FlexAttention code the way a new user writes it (torch 2.15, CPU): a
module whose score_mod is a bound method reading `self.slopes[h]` and
`self.buf["x"][h]`, compiled with fullgraph=True, parameters updated in
place between calls (no recompile, the new values used), gradients to the
learnable bias; torch's `return_aux=AuxRequest(lse=True)`; the errors for
float64 and 3-d inputs; and the checked mode for out-of-range indices
into captured tensors."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import attnc  # noqa: E402
from attnc import flex_attention  # noqa: E402

B, H, S, D = 2, 2, 24, 16


def _qkv(seed=0, requires_grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, S, D, generator=g).requires_grad_(requires_grad)
            for _ in range(3)]


def _manual(q, k, v, bias):
    """softmax(q kᵀ / sqrt(D) + bias) v, bias [H, S, S], with autograd."""
    s = q @ k.transpose(-2, -1) * D ** -0.5 + bias
    return torch.softmax(s, -1) @ v


class Alibi(torch.nn.Module):
    """A learnable ALiBi-like bias: the score_mod is a method reading the
    module's parameter, a dict buffer and a config object."""

    class Config:
        def __init__(self):
            self.offset = 0.25

    def __init__(self):
        super().__init__()
        self.slopes = torch.nn.Parameter(torch.tensor([0.5, 0.125]))
        self.buf = {"x": torch.tensor([0.0, 1.0])}
        self.cfg = self.Config()
        self.register_buffer("window", torch.tensor(S))  # int64, 0-d

    def score_mod(self, score, b, h, q_idx, kv_idx):
        s = (score + self.slopes[h] * (kv_idx - q_idx) + self.buf["x"][h]
             + self.cfg.offset)
        return torch.where((q_idx - kv_idx).abs() < self.window, s, s - 1e4)

    def forward(self, q, k, v):
        return flex_attention(q, k, v, score_mod=self.score_mod)

    def bias(self):
        i = torch.arange(S)
        far = ((i[:, None] - i[None, :]).abs() >= self.window).float() * -1e4
        return (self.slopes[:, None, None] * (i[None, :] - i[:, None])
                + self.buf["x"][:, None, None] + self.cfg.offset + far)


def test_a_bound_method_reading_self_traces_and_matches_torch():
    m = Alibi()
    q, k, v = _qkv()
    got = m(q, k, v)
    from torch.nn.attention.flex_attention import flex_attention as torch_flex
    want = torch_flex(q, k, v, score_mod=m.score_mod)
    assert (got - want).abs().max() < 1e-5


def test_a_compiled_module_uses_updated_parameters_without_recompiling():
    import torch._dynamo
    torch._dynamo.reset()
    m = Alibi()
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    q, k, v = _qkv(1)
    with torch.no_grad():
        first = compiled(q, k, v)
        assert (first - _manual(q, k, v, m.bias())).abs().max() < 1e-5
        with torch._dynamo.config.patch(error_on_recompile=True):
            m.slopes.mul_(-2.0)           # in place, as an optimizer does
            m.buf["x"].add_(3.0)
            second = compiled(q, k, v)
        assert (second - first).abs().max() > 1e-3
        assert (second - _manual(q, k, v, m.bias())).abs().max() < 1e-5
        # A window held in a 0-d integer tensor, moved in place: no
        # recompile either.
        with torch._dynamo.config.patch(error_on_recompile=True):
            for w in (3, 7):
                m.window.fill_(w)
                assert (compiled(q, k, v) - _manual(q, k, v, m.bias())).abs().max() < 1e-5
        # A changed Python number is a new constant to Dynamo (it guards on
        # the attribute and recompiles: Dynamo's rule for numbers, which is
        # why values that change belong in tensors); the value is used.
        for offset in (0.75, -2.0):
            m.cfg.offset = offset
            assert (compiled(q, k, v) - _manual(q, k, v, m.bias())).abs().max() < 1e-5


def test_the_learnable_bias_gets_its_gradient():
    m = Alibi()
    q, k, v = _qkv(2, requires_grad=True)
    m(q, k, v).square().sum().backward()
    got = m.slopes.grad.clone()
    m.slopes.grad = None
    _manual(q, k, v, m.bias()).square().sum().backward()
    assert (got - m.slopes.grad).abs().max() < 1e-4 * max(1.0, m.slopes.grad.abs().max())


def test_closures_over_a_local_tensor_and_a_global_parameter_compile():
    import torch._dynamo
    torch._dynamo.reset()
    q, k, v = _qkv(3)
    local = torch.tensor([0.3, -0.2])

    def local_mod(score, b, h, q_idx, kv_idx):
        return score + local[h]

    def global_mod(score, b, h, q_idx, kv_idx):
        return score + GLOBAL_BIAS[h] * (q_idx - kv_idx)

    for mod, bias in ((local_mod, local[:, None, None].expand(H, S, S)),
                      (global_mod, GLOBAL_BIAS.detach()[:, None, None] *
                       (torch.arange(S)[:, None] - torch.arange(S)[None, :]))):
        f = torch.compile(lambda q, k, v: flex_attention(q, k, v, score_mod=mod),
                          fullgraph=True, backend="aot_eager")
        with torch.no_grad():
            assert (f(q, k, v) - _manual(q, k, v, bias)).abs().max() < 1e-5


GLOBAL_BIAS = torch.nn.Parameter(torch.tensor([0.05, 0.1]))


def test_return_aux_is_torchs_current_spelling():
    from torch.nn.attention.flex_attention import AuxOutput, AuxRequest
    q, k, v = _qkv(4)
    out, aux = flex_attention(q, k, v, return_aux=AuxRequest(lse=True))
    assert isinstance(aux, AuxOutput) and aux.max_scores is None
    out2, lse = flex_attention(q, k, v, return_lse=True)
    assert torch.equal(out, out2) and torch.equal(aux.lse, lse)
    out3, aux3 = flex_attention(q, k, v, return_aux=AuxRequest())
    assert torch.equal(out3, out) and aux3.lse is None
    with pytest.raises(NotImplementedError, match="max_scores"):
        flex_attention(q, k, v, return_aux=AuxRequest(lse=True, max_scores=True))


def test_bad_inputs_are_named():
    q, k, v = _qkv(5)
    with pytest.raises(attnc.Error, match="'q' is float64; expected float32, "
                       "float16 or bfloat16"):
        flex_attention(q.double(), k.double(), v.double())
    with pytest.raises(ValueError, match=r"'query' must be 4-d \[B, H, L, E\], "
                       r"got shape \(2, 24, 16\)"):
        flex_attention(q[0], k[0], v[0])
    table = [0.1, 0.2]

    def indexes_a_list(score, b, h, q_idx, kv_idx):
        return score + table[h]
    with pytest.raises(attnc.TraceError, match="a list is indexed by a traced value"):
        flex_attention(q, k, v, score_mod=indexes_a_list)


def test_the_checked_mode_reports_an_out_of_range_index():
    q, k, v = _qkv(6)
    ids = torch.tensor([0, 5])

    def reads_past_the_end(score, b, h, q_idx, kv_idx):
        return score + ids[h * 3]     # h = 1 reads ids[3]

    clamped = flex_attention(q, k, v, score_mod=reads_past_the_end)  # clamps
    bias = torch.tensor([0.0, 5.0])[:, None, None].expand(H, S, S)
    assert (clamped - _manual(q, k, v, bias)).abs().max() < 1e-5
    was = attnc.set_checked(True)
    try:
        with pytest.raises(IndexError, match=r"index \[3\] is out of bounds for "
                           r"'ids' of shape \[2\]"):
            flex_attention(q, k, v, score_mod=reads_past_the_end)
        flex_attention(q, k, v, score_mod=Alibi().score_mod)  # in range: runs
    finally:
        attnc.set_checked(was)


def test_the_checked_mode_from_the_environment():
    code = ("import numpy as np, attnc\n"
            "k = attnc.compile('variant v(t: f32[N]) {\\n"
            "  score_mod(score, b, h, q, kv) = score + t[q]\\n}\\n')\n"
            "x = np.zeros((1, 1, 9, 8), np.float32)\n"
            "k(x, x, x, t=np.zeros(4, np.float32))\n")
    env = dict(os.environ, ATTNC_CHECKED="1")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode != 0
    assert "IndexError: index [4] is out of bounds for 't' of shape [4]" in res.stderr


def test_inference_calls_skip_the_operator_and_torch_dynamo():
    """An eager call that needs no gradient runs the kernel directly: the
    same result as through the operator, and a process that only infers
    never imports torch._dynamo (which alone cost 1.4 s of a first call)."""
    code = ("import sys, torch, attnc\n"
            "q = torch.randn(1, 2, 16, 8)\n"
            "def sm(score, b, h, q_idx, kv_idx): return score + 0.1 * (kv_idx - q_idx)\n"
            "attnc.flex_attention(q, q, q, score_mod=sm)\n"
            "attnc.compile('examples/causal.attn')(q, q, q)\n"
            "assert 'torch._dynamo' not in sys.modules, 'dynamo imported'\n"
            "print('ok')\n")
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    res = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and "ok" in res.stdout, res.stderr[-2000:]
    q, k, v = _qkv(7)
    m = Alibi()
    with torch.no_grad():
        direct = m(q, k, v)
    through_op = m(q, k, v)            # slopes requires grad: the operator
    assert through_op.requires_grad and torch.equal(direct, through_op.detach())


def test_precompile_compiles_before_the_first_call():
    kernel = attnc.compile("variant pre() {\n  score_mod(score, b, h, q, kv) = score * 0.5\n}\n")
    assert kernel.precompile(dtypes=["f32", torch.bfloat16], head_dims=[16, (16, 8)],
                             backward=True) is kernel
    compiled = dict(kernel._kernels)
    assert len(compiled) == 8
    q, k, v = _qkv(8, requires_grad=True)
    kernel(q, k, v).sum().backward()
    kernel(q.detach().bfloat16(), k.detach().bfloat16(), v.detach().bfloat16()[..., :8])
    assert kernel._kernels == compiled          # nothing compiled on the calls

    def bias(score, b, h, q_idx, kv_idx):
        return score - 0.01 * (q_idx - kv_idx).abs()
    flex_kernel = attnc.flex.precompile(bias, dtypes=["f32"], head_dims=[16])
    before = dict(flex_kernel._kernels)
    flex_attention(q.detach(), k.detach(), v.detach(), score_mod=bias)
    assert flex_kernel._kernels == before and len(before) == 1
    with pytest.raises(ValueError, match="'dtypes' entry 'f64'"):
        kernel.precompile(dtypes=["f64"])
    with pytest.raises(ValueError, match="'device' must be"):
        kernel.precompile(device="tpu")
