"""A property test of the Python API's argument handling (docs/reliability.md):
seeded random calls -- shapes, strides and layouts, dtypes, GQA, lengths and
offsets, page tables, outputs that alias inputs, arguments of the wrong
kind -- each built either valid (then it must match the fp64 reference) or
with one known defect (then it must raise attnc.Error, TypeError or
ValueError naming what is wrong). Never another exception, never a crash."""
import os

import numpy as np
import pytest

import attnc
import test_attn_route as attn_route  # its page-pool builder

SOURCE = """
variant causal_bias(bias: f32[H]) {
  score_mod(s, b, h, q, kv) = s + bias[h]
  mask_mod(b, h, q, kv) = q >= kv
}
"""

DEFECTS = [
    None, None, None,  # valid calls, as often as all defects together
    "out_aliases_k", "out_overlaps_q", "kv_len_too_long", "negative_offset",
    "float_in_lengths", "rank3_v", "k_dtype", "out_shape", "bias_shape",
    "page_outside_pool", "page_float", "num_splits_float", "bad_out_kind",
]
# What each defect's message must contain (a regular expression).
NAMED = {
    "out_aliases_k": r"'out' shares memory with the input 'k'",
    "out_overlaps_q": r"'out' shares memory with the input 'q'",
    "kv_len_too_long": r"'kv_lens\[\d+\]' is \d+, expected 0\.\.\d+",
    "negative_offset": r"'q_offsets\[\d+\]' is -\d+",
    "float_in_lengths": r"'kv_lens\[\d+\]' must be an integer",
    "rank3_v": r"'v' must be 4-d",
    "k_dtype": r"'k' has dtype",
    "out_shape": r"'out' has shape",
    "bias_shape": r"capture 'bias' has shape",
    "page_outside_pool": r"sequence \d+, page \d+: index \d+ is outside the pool",
    "page_float": r"'kv_indices\[\d+\]' must be an integer",
    "num_splits_float": r"'num_splits' must be an integer",
    "bad_out_kind": r"'out' must be an array",
}


def layout(rng, a):
    """`a` as a random-strided view with the same logical contents: BHSD,
    BSHD (a transpose of a copy), a slice of a larger buffer, or reversed
    storage of the last axis (a copy made contiguous)."""
    kind = rng.integers(4)
    if kind == 0:
        return a
    if kind == 1:
        return np.ascontiguousarray(a.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    if kind == 2:
        big = np.zeros(a.shape[:3] + (a.shape[3] * 2,), a.dtype)
        big[..., ::2] = a
        return big[..., ::2]
    return np.ascontiguousarray(a)


def paged(rng, k, v, lens, page_size):
    """K/V [B, Hkv, S, D] in a shuffled page pool (test_attn_route.paged:
    spare pages of NaN), the table as lists."""
    kp, vp, indptr, indices, last = attn_route.paged(rng, k, v, lens, page_size)
    return kp, vp, [int(x) for x in indptr], [int(x) for x in indices], \
        [int(x) for x in last]


def to_paged(rng, k, v, lens, kwargs):
    """(k, v) moved into a page pool of 4-row pages unless they already
    are, with the table in kwargs (replacing kv_lens)."""
    if "kv_indptr" in kwargs:
        return k, v
    kp, vp, indptr, indices, last = paged(rng, np.asarray(k), np.asarray(v), lens, 4)
    kwargs.update(kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last)
    kwargs.pop("kv_lens", None)
    return kp, vp


def make_call(rng, defect):
    """(args, kwargs, reference kwargs or None)."""
    dtype = [np.float32, np.float16][rng.integers(2)]
    B = int(rng.integers(1, 4))
    HKV = int(rng.choice([1, 2]))
    H = HKV * int(rng.choice([1, 2]))
    D, DV = int(rng.choice([32, 64])), int(rng.choice([32, 64]))
    LQ = int(rng.integers(1, 9))
    LKV = LQ + int(rng.integers(0, 24))
    buf = rng.standard_normal((3, B, max(H, HKV), LKV, max(D, DV))).astype(dtype)
    q = layout(rng, buf[0, :, :H, :LQ, :D])
    k = layout(rng, buf[1, :, :HKV, :, :D])
    v = layout(rng, buf[2, :, :HKV, :, :DV])
    lens = [int(x) for x in rng.integers(LQ, LKV + 1, B)]
    offsets = [int(n - LQ) for n in lens]
    bias = rng.standard_normal(H).astype(np.float32)
    kwargs = dict(kv_lens=lens, q_offsets=offsets, bias=bias)
    if rng.integers(3) == 0:  # paged K/V
        page = int(rng.choice([1, 4, 16]))
        kp, vp, indptr, indices, last = paged(rng, np.asarray(k), np.asarray(v), lens, page)
        k, v = kp, vp
        kwargs.update(kv_indptr=indptr, kv_indices=indices, kv_last_page_len=last)
        del kwargs["kv_lens"]
    if rng.integers(4) == 0:
        kwargs["num_splits"] = int(rng.choice([0, 1, 3]))
    reference = dict(kwargs)
    reference.pop("num_splits", None)
    if defect is None:
        return (q, k, v), kwargs, reference
    if defect == "out_aliases_k":
        # k and out the same [B, H, LQ, D] array (so that shapes agree).
        k = rng.standard_normal((B, H, LQ, D)).astype(dtype)
        v = rng.standard_normal((B, H, LQ, D)).astype(dtype)
        for name in ("kv_indptr", "kv_indices", "kv_last_page_len"):
            kwargs.pop(name, None)
        kwargs.update(kv_lens=[LQ] * B, q_offsets=[0] * B, out=k)
    elif defect == "out_overlaps_q":
        flat = np.zeros(q.size * 2 + B * H * LQ * DV, dtype)
        q = flat[:q.size].reshape(q.shape)
        q[...] = rng.standard_normal(q.shape)
        start = q.size // 2
        kwargs["out"] = flat[start:start + B * H * LQ * DV].reshape(B, H, LQ, DV)
    elif defect == "kv_len_too_long":
        if "kv_indptr" in kwargs:
            kwargs["kv_lens"] = [n + 1 for n in lens]  # disagrees with the table
            return (q, k, v), kwargs, "'kv_lens\\[\\d+\\]' is \\d+, but the page table"
        kwargs["kv_lens"] = [LKV + 1] * B
    elif defect == "negative_offset":
        kwargs["q_offsets"] = [-1 - int(rng.integers(5))] * B
    elif defect == "float_in_lengths":
        kwargs.pop("kv_indptr", None), kwargs.pop("kv_indices", None)
        kwargs.pop("kv_last_page_len", None)
        kwargs["kv_lens"] = [float(n) for n in lens]
    elif defect == "rank3_v":
        v = v[0]
    elif defect == "k_dtype":
        k = k.astype(np.float32 if dtype == np.float16 else np.float16)
    elif defect == "out_shape":
        kwargs["out"] = np.zeros((B, H, LQ + 1, DV), dtype)
    elif defect == "bias_shape":
        kwargs["bias"] = np.zeros(H + 1, np.float32)
    elif defect == "page_outside_pool":
        k, v = to_paged(rng, k, v, lens, kwargs)
        kwargs["kv_indices"] = list(kwargs["kv_indices"])
        kwargs["kv_indices"][0] = k.shape[0] + 3
    elif defect == "page_float":
        k, v = to_paged(rng, k, v, lens, kwargs)
        kwargs["kv_indices"] = [float(x) for x in kwargs["kv_indices"]]
    elif defect == "num_splits_float":
        kwargs["num_splits"] = 2.0
    elif defect == "bad_out_kind":
        kwargs["out"] = [[0.0]]
    return (q, k, v), kwargs, None


@pytest.mark.parametrize("seed", range(6))
def test_random_calls_match_the_reference_or_name_the_defect(seed):
    rng = np.random.default_rng(1000 + seed)
    kernel = attnc.compile(SOURCE)
    checked = {"valid": 0, "refused": 0}
    for case in range(40):
        defect = DEFECTS[int(rng.integers(len(DEFECTS)))]
        args, kwargs, reference = make_call(rng, defect)
        what = "seed %d case %d (%s)" % (seed, case, defect or "valid")
        if defect is None:
            out = kernel(*args, **kwargs)
            ref, _ = kernel.reference(*args, **reference)
            tol = 2e-5 if args[0].dtype == np.float32 else 4e-3
            assert np.abs(np.asarray(out, np.float64) - ref).max() < tol, what
            checked["valid"] += 1
            continue
        pattern = reference if isinstance(reference, str) else NAMED[defect]
        with pytest.raises((attnc.Error, TypeError, ValueError), match=pattern):
            kernel(*args, **kwargs)
        checked["refused"] += 1
    assert checked["valid"] >= 3 and checked["refused"] >= 10, checked


def test_random_calls_on_the_device(cuda_device):
    """The same property on the emulated GPU (a few valid and defective
    calls; the arrays copied to the device)."""
    rng = np.random.default_rng(77)
    kernel = attnc.compile(SOURCE)
    seen = set()
    for case in range(12):
        defect = [None, "out_overlaps_q", "kv_len_too_long", "negative_offset",
                  "k_dtype", "out_shape"][case % 6]
        args, kwargs, reference = make_call(rng, defect)
        if "kv_indptr" in kwargs:
            continue
        dev = [attnc.cuda.to_device(np.ascontiguousarray(a)) for a in args]
        dkw = {n: attnc.cuda.to_device(np.ascontiguousarray(x))
               if isinstance(x, np.ndarray) and n != "out" else x
               for n, x in kwargs.items()}
        if "out" in kwargs and defect == "out_overlaps_q":
            continue  # the overlap lives in host memory: covered on the CPU
        if "out" in kwargs:
            dkw["out"] = attnc.cuda.to_device(np.ascontiguousarray(kwargs["out"]))
        seen.add(defect)
        if defect is None:
            out = attnc.cuda.to_host(kernel(*dev, **dkw))
            ref, _ = kernel.reference(*args, **reference)
            tol = 2e-5 if args[0].dtype == np.float32 else 4e-3
            assert np.abs(out.astype(np.float64) - ref).max() < tol
        else:
            with pytest.raises((attnc.Error, TypeError, ValueError),
                               match=NAMED[defect] if reference is None else reference):
                kernel(*dev, **dkw)
    assert None in seen and len(seen) >= 4
