"""The seeds' models end to end on attnc (examples/models): the standard GPT
(MHA/GQA/MQA) and the synaptic GPT, full forward, decode of the last token
and decode of a chunk from a KV cache, with each attention backend against
the reference one (SDPA for the standard GPT, the manual softmax path for
the synaptic one); a training step's gradients; greedy generation; and
torch.compile(fullgraph=True) decoding step after step with no recompile."""
import os
import sys

import pytest

torch = pytest.importorskip("torch")

MODELS = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "models")
sys.path.insert(0, MODELS)

import attention  # noqa: E402
import gpt  # noqa: E402
from gpt import GPT, GPTConfig, KVCache, generate  # noqa: E402

HEADS = {"MHA": 4, "GQA": 2, "MQA": 1}
MODES = ("full", "decode", "chunk")
T, PREFIX = 40, 32  # tokens; the prefix cached before a decode or a chunk


def _model(synaptic, kv_heads, backend, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(synaptic=synaptic, n_kv_head=kv_heads, backend=backend)).eval()


def _reference(synaptic):
    return "manual" if synaptic else "sdpa"


def _run(model, idx, mode):
    """The logits of the last 8 positions (decode: of the last one), the way
    `mode` computes them."""
    if mode == "full":
        return model(idx)[:, -8:]
    cache = KVCache.for_model(model, idx.shape[0])
    start = T - 1 if mode == "decode" else PREFIX
    model(idx[:, :start], cache=cache)
    cache.pos += start
    return model(idx[:, start:], cache=cache)[:, -8:]


def _attention_inputs(model, idx, mode):
    """Every attend() call of a run of `model`: (q, k, v, pos, synaptic)."""
    calls = []
    real = gpt.attend

    def record(backend, q, k, v, pos, synaptic=None, pages=None, plans=None,
               dropout_p=0.0):
        assert pages is None and plans is None and not dropout_p  # the dense cache
        calls.append((q, k, v, None if pos is None else pos.clone(), synaptic))
        return real(backend, q, k, v, pos, synaptic)
    gpt.attend = record
    try:
        _run(model, idx, mode)
    finally:
        gpt.attend = real
    return calls


@pytest.mark.parametrize("backend", ["attnc", "attnc_flex", "flex"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("heads", list(HEADS))
@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_parity_matrix_fp32(synaptic, heads, mode, backend):
    """The seeds' matrix: each attention call of the model (the kernels
    compared on the model's own q, k, v) within 1e-6 of the reference
    backend's in fp32, and the logits within 4e-6 (two layers and the head
    on top)."""
    ref_model = _model(synaptic, HEADS[heads], _reference(synaptic))
    idx = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        worst = 0.0
        for q, k, v, pos, syn in _attention_inputs(ref_model, idx, mode):
            want = attention.attend(_reference(synaptic), q, k, v, pos, syn)
            got = attention.attend(backend, q, k, v, pos, syn)
            worst = max(worst, (got - want).abs().max().item())
        assert worst <= 1e-6, worst
        want = _run(ref_model, idx, mode)
        got = _run(_model(synaptic, HEADS[heads], backend), idx, mode)
    assert (got - want).abs().max().item() <= 4e-6


def _on_cuda_route(q, k, v, pos, synaptic, dtype):
    """attend("attnc", ...) on the attnc.cuda device (the emulated GPU in
    CI: torch here has no CUDA tensors), as a float64 torch tensor."""
    import attnc

    def dev(x):
        x = x.to(dtype).contiguous()
        return attnc.cuda.to_device(x if dtype == torch.bfloat16 else x.numpy())
    kw = {}
    if pos is not None:
        kw["kv_lens"] = [int(pos) + q.shape[2]] * q.shape[0]
    name = "causal"
    if synaptic is not None:
        name = "synaptic"
        kw.update(qamp=attnc.cuda.to_device(synaptic[0].contiguous().numpy()),
                  key_factor=attnc.cuda.to_device(synaptic[1].contiguous().numpy()),
                  barrier=synaptic[2])
    out = attnc.cuda.to_host(attention._kernel(name)(dev(q), dev(k), dev(v), **kw))
    out = out if isinstance(out, torch.Tensor) else torch.from_numpy(out)
    return out.double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("heads", list(HEADS))
@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_parity_matrix_on_the_cuda_route(synaptic, heads, mode, dtype, cuda_device):
    """The same matrix through attnc's GPU kernels (attnc.cuda arrays; the
    PTX emulator in CI): every attention call of the model within 1e-6 of
    the reference backend in fp32; in bf16 no farther from the exact result
    than 2x torch's bf16 attention on the CPU."""
    model = _model(synaptic, HEADS[heads], _reference(synaptic))
    idx = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for q, k, v, pos, syn in _attention_inputs(model, idx, mode):
            got = _on_cuda_route(q, k, v, pos, syn, dtype)
            if dtype == torch.float32:
                want = attention.attend(_reference(synaptic), q, k, v, pos, syn)
                assert (got - want.double()).abs().max().item() <= 1e-6
                continue
            ex = None if syn is None else tuple(
                x.double() if isinstance(x, torch.Tensor) else x for x in syn)
            exact = attention.attend("manual", q.double(), k.double(), v.double(), pos, ex)
            low = tuple(x.to(dtype) for x in (q, k, v))
            torch_err = (attention.attend(_reference(synaptic), *low, pos, syn).double()
                         - exact).abs().max().item()
            assert (got - exact).abs().max().item() <= 2 * torch_err + 1e-3


@pytest.mark.parametrize("mode", ["decode", "chunk"])
@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_the_cache_gives_the_full_forward(synaptic, mode):
    """Decoding from the KV cache reproduces the full forward's logits at the
    same positions (attnc both ways)."""
    model = _model(synaptic, 2, "attnc")
    idx = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = _run(model, idx, "full")
        cached = _run(model, idx, mode)
    n = cached.shape[1]
    assert (cached - full[:, -n:]).abs().max().item() <= 4e-6


@pytest.mark.parametrize("heads", ["GQA", "MQA"])
@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_training_step_gradients_match(synaptic, heads):
    """loss.backward() through attnc gives every parameter (the synaptic
    factors' projection included) the reference model's gradient."""
    idx = torch.randint(0, 256, (4, T + 1), generator=torch.Generator().manual_seed(3))
    grads = {}
    for backend in (_reference(synaptic), "attnc"):
        model = _model(synaptic, HEADS[heads], backend).train()
        model(idx[:, :-1], idx[:, 1:]).backward()
        grads[backend] = {n: p.grad for n, p in model.named_parameters()}
    ref, got = grads[_reference(synaptic)], grads["attnc"]
    assert set(ref) == set(got)
    if synaptic:
        assert ref["blocks.0.attn.c_factors.weight"].abs().max() > 0
    for name in ref:
        err = (got[name] - ref[name]).abs().max().item()
        scale = ref[name].abs().max().item()
        assert err <= 1e-5 * max(scale, 1e-3), (name, err, scale)


@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_generation_matches_the_reference(synaptic):
    prompt = torch.randint(0, 256, (2, 12), generator=torch.Generator().manual_seed(4))
    tokens = {b: generate(_model(synaptic, 2, b), prompt, 20)
              for b in (_reference(synaptic), "attnc")}
    assert torch.equal(tokens["attnc"], tokens[_reference(synaptic)])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_error_is_sdpas(dtype):
    """In bf16/fp16 attnc's attention is as far from the fp32 result as
    SDPA's (PyTorch's yardstick for low precision: the error against the
    exact result, relative to another kernel's error)."""
    model = _model(False, 2, "sdpa")
    idx = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(5))
    calls = _attention_inputs(model, idx, "chunk")
    for q, k, v, pos, _ in calls:
        exact = attention.attend("manual", q.double(), k.double(), v.double(), pos)
        errs = {b: (attention.attend(b, q.to(dtype), k.to(dtype), v.to(dtype), pos)
                    .double() - exact).abs().max().item() for b in ("sdpa", "attnc")}
        assert errs["attnc"] <= 2 * errs["sdpa"] + 1e-3, errs


def test_compiled_kv_cache_decoding_never_recompiles():
    """The synaptic GPT under torch.compile(fullgraph=True): a prefill and
    the first decode step compile (one graph each); then a whole generation
    (prefill and 14 decode steps of growing length) recompiles nothing
    (dynamo's error_on_recompile), and the tokens are eager's. This is the
    path FlexAttention failed on."""
    import torch._dynamo
    torch._dynamo.reset()
    graphs = torch._dynamo.utils.counters["stats"]
    model = _model(True, 2, "attnc")
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    prompt = torch.randint(0, 256, (1, 10), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        eager = generate(model, prompt, 14)
        before = graphs["unique_graphs"]
        generate(model, prompt, 1, step_fn=compiled)  # compiles prefill, decode
        assert graphs["unique_graphs"] - before == 2
        with torch._dynamo.config.patch(error_on_recompile=True):
            got = generate(model, prompt, 14, step_fn=compiled)
        assert graphs["unique_graphs"] - before == 2
    assert torch.equal(got, eager)


def test_compiled_training_step_matches_eager():
    """A compiled synaptic training step (attnc's forward and backward
    inside the graph) gives eager's loss and gradients."""
    import torch._dynamo
    torch._dynamo.reset()
    idx = torch.randint(0, 256, (2, 25), generator=torch.Generator().manual_seed(7))
    results = []
    for compile_it in (False, True):
        model = _model(True, 2, "attnc").train()
        run = torch.compile(model, fullgraph=True, backend="aot_eager") if compile_it else model
        loss = run(idx[:, :-1], idx[:, 1:])
        loss.backward()
        results.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    assert abs(results[0][0] - results[1][0]) <= 1e-6
    for a, b in zip(results[0][1], results[1][1]):
        assert (a - b).abs().max().item() <= 1e-6


def test_a_bad_backend_is_named():
    with pytest.raises(ValueError, match="backend must be one of"):
        attention.attend("cudnn", *(torch.zeros(1, 1, 1, 8) for _ in range(3)),
                         torch.zeros((), dtype=torch.int64))


@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_training_on_attnc_follows_the_reference_curve(synaptic):
    """examples/models/train.py, short: the loss falls, and attnc's curve is
    the reference backend's (same seed and batches; rounding apart)."""
    import train
    ref, _ = train.train(_reference(synaptic), steps=12, batch=4, seq=32,
                         synaptic=synaptic)
    got, model = train.train("attnc", steps=12, batch=4, seq=32, synaptic=synaptic)
    assert got[-1] < got[0] - 0.5
    assert max(abs(a - b) for a, b in zip(got, ref)) < 1e-4
    text = generate(model, train.corpus()[:16][None], 8)
    assert text.shape == (1, 24)


def test_the_model_benchmark_runs(tmp_path):
    """bench/models.py end to end at a toy size: each backend in its own
    process, the table printed, the JSON written, the losses equal."""
    import json
    import subprocess
    bench = os.path.join(MODELS, "..", "..", "bench", "models.py")
    res = subprocess.run(
        [sys.executable, bench, "--backends", "sdpa,attnc", "--layers", "1",
         "--seq", "32", "--batch", "2", "--warmup", "0", "--iters", "1",
         "--train-tokens", "128", "--no-compile", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "| attnc |" in res.stdout
    (result,) = tmp_path.iterdir()
    rows = json.load(open(result))["rows"]
    assert [r["backend"] for r in rows] == ["sdpa", "attnc"]
    assert abs(rows[0]["final_loss"] - rows[1]["final_loss"]) < 1e-4


def test_the_training_script_runs_as_the_readme_says(tmp_path):
    """README's command line, shortened: trains, generates, writes the
    curves."""
    import subprocess
    res = subprocess.run(
        [sys.executable, os.path.join(MODELS, "train.py"), "--backends", "sdpa",
         "attnc", "--steps", "3", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "attnc" in res.stdout and "generates" in res.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["losses-gpt.json",
                                                          "losses-gpt.svg"]


@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_generation_from_a_paged_cache(synaptic):
    """attnc decoding from a paged KV cache (pools in shuffled pages, read
    through FlashInfer's table) gives the dense cache's logits and tokens;
    other backends refuse the paged cache by name."""
    from gpt import PagedKVCache
    model = _model(synaptic, 2, "attnc")
    prompt = torch.randint(0, 256, (2, 21), generator=torch.Generator().manual_seed(8))
    dense = generate(model, prompt, 15)
    paged = generate(model, prompt, 15,
                     cache=PagedKVCache.for_model(model, 2, page_size=8, seed=3))
    assert torch.equal(paged, dense)
    idx = torch.randint(0, 256, (2, T), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        cache = PagedKVCache.for_model(model, 2, page_size=8)
        model(idx[:, :PREFIX], cache=cache)
        cache.pos += PREFIX
        got = model(idx[:, PREFIX:], cache=cache)
        assert (got - _run(model, idx, "chunk")).abs().max().item() <= 4e-6
        with pytest.raises(ValueError, match="a paged KV cache runs on the attnc backend"):
            _model(synaptic, 2, "sdpa")(idx[:, :4], cache=PagedKVCache.for_model(model, 2))


@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_generation_with_a_plan_per_step(synaptic, monkeypatch):
    """PagedKVCache(plan=True): each step (the prefill, every decode) is
    planned once and every layer runs the plan; the tokens are the dense
    cache's."""
    import attnc
    from gpt import PagedKVCache
    model = _model(synaptic, 2, "attnc")
    prompt = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(10))
    dense = generate(model, prompt, 9)
    made = []
    real = attnc.Kernel.plan
    monkeypatch.setattr(attnc.Kernel, "plan",
                        lambda self, *a, **kw: made.append(1) or real(self, *a, **kw))
    cache = PagedKVCache.for_model(model, 2, page_size=4, seed=5, plan=True)
    assert torch.equal(generate(model, prompt, 9, cache=cache), dense)
    assert len(made) == 1 + 9 and model.config.n_layer > 1   # a plan per step


@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_training_step_gradients_on_the_cuda_route(synaptic, cuda_device):
    """A training step's attention calls through attnc's GPU forward and
    backward kernels (attnc.cuda arrays; the emulator in CI): with the
    gradient the model sends into each call, dq, dk, dv (and the synaptic
    factors' gradients) equal torch autograd's through the reference
    backend."""
    import attnc
    import numpy as np
    model = _model(synaptic, 2, _reference(synaptic)).train()
    idx = torch.randint(0, 256, (2, 25), generator=torch.Generator().manual_seed(11))
    calls, real = [], gpt.attend

    def record(backend, q, k, v, pos, syn=None, pages=None, plans=None,
               dropout_p=0.0):
        assert not dropout_p
        y = real(backend, q, k, v, pos, syn)
        calls.append((q.detach(), k.detach(), v.detach(), syn, y))
        y.retain_grad()
        return y
    gpt.attend = record
    try:
        model(idx[:, :-1], idx[:, 1:]).backward()
    finally:
        gpt.attend = real
    for q, k, v, syn, y in calls:
        leaves = [x.clone().requires_grad_() for x in (q, k, v)]
        factors = None if syn is None else [syn[0].detach().clone().requires_grad_(),
                                             syn[1].detach().clone().requires_grad_()]
        ref = attention.attend(_reference(synaptic), *leaves, None,
                               None if syn is None else (*factors, syn[2]))
        ref.backward(y.grad)
        dev = lambda x: attnc.cuda.to_device(x.detach().contiguous().numpy())  # noqa: E731
        name = "synaptic" if synaptic else "causal"
        kernel = attention._kernel(name)
        params = {} if syn is None else dict(qamp=dev(factors[0]),
                                             key_factor=dev(factors[1]), barrier=syn[2])
        out, lse = kernel(dev(q), dev(k), dev(v), return_lse=True, **params)
        D = q.shape[-1]
        gpu = kernel.program.gpu_backward_kernel(name, "f32", D, D, 0)
        grads = [attnc.cuda.empty(tuple(x.shape), "f32", 0) for x in (q, k, v)]
        pgrads = gpu.run(dev(q), dev(k), dev(v), out, lse, dev(y.grad), None, *grads,
                         kernel._args(None, None, None, params))
        for g, leaf in zip(grads, leaves):
            assert np.abs(attnc.cuda.to_host(g) - leaf.grad.numpy()).max() < 1e-5
        if syn is not None:
            for n, leaf in zip(("qamp", "key_factor"), factors):
                assert np.abs(pgrads[n] - leaf.grad.double().numpy()).max() < 1e-5, n


@pytest.mark.parametrize("backend", ["attnc", "attnc_flex"])
@pytest.mark.parametrize("synaptic", [False, True], ids=["gpt", "synaptic"])
def test_training_with_attention_dropout(backend, synaptic):
    """GPTConfig.attn_dropout on attnc's backends (the dropout drawn in the
    kernels, forward and backward; FlexAttention has none): a training
    step is reproducible under torch.manual_seed, differs from the step
    without dropout, and sends a gradient to every parameter; in eval()
    the model is the one without dropout."""
    idx = torch.randint(0, 256, (2, 25), generator=torch.Generator().manual_seed(4))

    def step(p, seed):
        model = _model(synaptic, 2, backend)
        model.config.attn_dropout = p
        model.train()
        torch.manual_seed(seed)
        loss = model(idx[:, :-1], idx[:, 1:])
        loss.backward()
        return model, loss.item(), [x.grad.clone() for x in model.parameters()]
    model, loss, grads = step(0.2, 1)
    _, again, grads2 = step(0.2, 1)
    _, other, _ = step(0.2, 2)
    _, plain, _ = step(0.0, 1)
    assert loss == again and all(torch.equal(a, b) for a, b in zip(grads, grads2))
    assert len({loss, other, plain}) == 3
    assert all(g.abs().sum() > 0 for g in grads)
    model.eval()
    reference = _model(synaptic, 2, backend)
    with torch.no_grad():
        assert torch.equal(model(idx), reference(idx))


def test_train_py_learns_with_attention_dropout():
    """train.py's loop with attention dropout in attnc's kernels: the loss
    falls as without it."""
    import train
    got, _ = train.train("attnc", steps=12, batch=4, seq=32, attn_dropout=0.1)
    assert got[-1] < got[0] - 0.5
