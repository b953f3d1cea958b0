"""Kernels written in Triton and compiled by it for sm_90a on this machine
(no GPU needed), for the emulator's conformance tests: a matmul whose
operands are K-major or MN-major in memory (Triton picks the shared
layouts, swizzles and descriptors), a flash-attention forward (P from
registers: the register-A form of wgmma), and a matmul through tensor
descriptors (TMA loads completed on mbarriers; with warp_specialize, a
producer warpgroup and two consumers with setmaxnreg and named barriers)."""
import json
import os

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

# Compiled kernels can be recorded here and replayed on a device machine,
# whose Triton may be another version (.device/run-gpu-session.sh runs
# these tests against the real driver): $ATTNC_TRITON_PTX_RECORD names a
# JSON file each compilation is added to; $ATTNC_TRITON_PTX_REPLAY one
# compilations are read from instead (a kernel missing from it is an
# error).
_RECORD = os.environ.get("ATTNC_TRITON_PTX_RECORD")
_REPLAY = os.environ.get("ATTNC_TRITON_PTX_REPLAY")


def _key(fn, signature, constexprs, num_warps, num_stages):
    return json.dumps([fn.__name__, sorted(signature.items()),
                       sorted((k, str(v)) for k, v in constexprs.items()),
                       num_warps, num_stages])


@triton.jit
def matmul(a_ptr, b_ptr, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
           A_K_MAJOR: tl.constexpr, B_K_MAJOR: tl.constexpr,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    # C[M, N] = A[M, K] B[K, N]; A row-major (K contiguous) or column-major,
    # B column-major (K contiguous) or row-major.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, K, BK):
        if A_K_MAJOR:
            a = tl.load(a_ptr + rm[:, None] * K + (k + rk)[None, :])
        else:
            a = tl.load(a_ptr + rm[:, None] + (k + rk)[None, :] * M)
        if B_K_MAJOR:
            b = tl.load(b_ptr + (k + rk)[:, None] + rn[None, :] * K)
        else:
            b = tl.load(b_ptr + (k + rk)[:, None] * N + rn[None, :])
        acc += tl.dot(a, b)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc)


@triton.jit
def attention(q_ptr, k_ptr, v_ptr, o_ptr, scale, L: tl.constexpr, D: tl.constexpr,
              BM: tl.constexpr, BN: tl.constexpr):
    # O = softmax(Q K^T scale) V over one head: Q, K, V [L, D] row-major.
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rd = tl.arange(0, D)
    rn = tl.arange(0, BN)
    q = tl.load(q_ptr + rm[:, None] * D + rd[None, :])
    m = tl.full((BM,), float("-inf"), tl.float32)
    l = tl.zeros((BM,), tl.float32)
    acc = tl.zeros((BM, D), tl.float32)
    for start in range(0, L, BN):
        k = tl.load(k_ptr + (start + rn)[None, :] * D + rd[:, None])
        s = tl.dot(q, k) * scale
        mn = tl.maximum(m, tl.max(s, 1))
        p = tl.exp(s - mn[:, None])
        alpha = tl.exp(m - mn)
        l = l * alpha + tl.sum(p, 1)
        v = tl.load(v_ptr + (start + rn)[:, None] * D + rd[None, :])
        acc = acc * alpha[:, None] + tl.dot(p.to(tl.bfloat16), v)
        m = mn
    tl.store(o_ptr + rm[:, None] * D + rd[None, :], acc / l[:, None])


@triton.jit
def tma_matmul(a_desc, b_desc, c_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, WS: tl.constexpr):
    # C[M, N] = A[M, K] B[N, K]^T, A and B row-major behind tensor
    # descriptors: out-of-range rows and columns of a box read as zero.
    pm = tl.program_id(0) * BM
    pn = tl.program_id(1) * BN
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in tl.range(0, K, BK, warp_specialize=WS):
        a = a_desc.load([pm, k])
        b = b_desc.load([pn, k])
        acc = tl.dot(a, b.T, acc)
    rm = pm + tl.arange(0, BM)
    rn = pn + tl.arange(0, BN)
    tl.store(c_ptr + rm[:, None] * N + rn[None, :], acc,
             mask=(rm[:, None] < M) & (rn[None, :] < N))


def compile_sm90a(fn, signature, constexprs, num_warps=4, num_stages=2, meta=False):
    """(PTX text, dynamic shared bytes) of `fn` for sm_90a; with `meta`, also
    the warps of the CTA and the tensor descriptors' metadata."""
    key = _key(fn, signature, constexprs, num_warps, num_stages)
    if _REPLAY:
        with open(_REPLAY) as f:
            ptx, shared, warps, descs = json.load(f)[key]
    else:
        src = ASTSource(fn=fn, signature=signature, constexprs=constexprs)
        # PTX ISA 9.0: what a CUDA 13.0 driver loads (the lent GPUs' 580
        # driver refused Triton's default, this ptxas's 9.4, 2026-11-27);
        # Triton generates code for at most 9.0's features either way.
        k = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": num_warps, "num_stages": num_stages,
                                    "ptx_version": 90})
        ptx, shared, warps = k.asm["ptx"], int(k.metadata.shared), int(k.metadata.num_warps)
        descs = list(getattr(k.metadata, "tensordesc_meta", None) or [])
        if _RECORD:
            book = {}
            if os.path.exists(_RECORD):
                with open(_RECORD) as f:
                    book = json.load(f)
            book[key] = [ptx, shared, warps, descs]
            with open(_RECORD, "w") as f:
                json.dump(book, f)
    if meta:
        return ptx, shared, warps, descs
    return ptx, shared


def matmul_ptx(M, N, K, a_k_major, b_k_major, BM, BN, BK, num_warps=4):
    sig = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*fp32"}
    consts = dict(M=M, N=N, K=K, A_K_MAJOR=a_k_major, B_K_MAJOR=b_k_major,
                  BM=BM, BN=BN, BK=BK)
    sig.update({n: "constexpr" for n in consts})
    return compile_sm90a(matmul, sig, consts, num_warps)


def attention_ptx(L, D, BM, BN):
    sig = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*fp32",
           "scale": "fp32"}
    consts = dict(L=L, D=D, BM=BM, BN=BN)
    sig.update({n: "constexpr" for n in consts})
    return compile_sm90a(attention, sig, consts)


def tma_matmul_ptx(M, N, K, BM, BN, BK, warp_specialize, num_warps=4, num_stages=3):
    """(PTX, shared bytes, warps, descriptor metadata) of tma_matmul."""
    sig = {"a_desc": "tensordesc<bf16[%d, %d]>" % (BM, BK),
           "b_desc": "tensordesc<bf16[%d, %d]>" % (BN, BK), "c_ptr": "*fp32"}
    consts = dict(M=M, N=N, K=K, BM=BM, BN=BN, BK=BK, WS=warp_specialize)
    sig.update({n: "constexpr" for n in consts})
    return compile_sm90a(tma_matmul, sig, consts, num_warps, num_stages, meta=True)
