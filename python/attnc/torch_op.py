"""attnc as a torch operator: `torch.ops.attnc.attention`, registered with
torch.library with a fake (meta) implementation, so that torch.compile
traces models calling attnc kernels on torch tensors into one graph (no
graph break) and runs the kernel at that point of the compiled program.

Kernel.__call__ goes through it for torch tensors under torch.compile and
when autograd needs it; an eager call that needs no gradient runs the
kernel directly (the same _run; no dispatch, no torch._dynamo import), and
NumPy and attnc.cuda arrays skip it. A Kernel is named in
the graph by its registry number (attnc._registry: every Kernel is
registered when made, outside any trace, and lives for the process).

The operator is differentiable (torch.library.register_autograd): its
backward is the operator attnc::attention_backward, the compiled backward
kernels (CPU), giving q, k, v and every float captured tensor their
gradients.

Per-sequence key counts and query offsets come as int lists (constants of
a compiled graph) or as integer tensors (`kv_lens_t`, `q_offsets_t`: graph
inputs, so a compiled decode loop whose cache length grows every step
does not recompile). The tensors are read on the host when the operator
runs (a CUDA tensor costs one device-to-host copy).
"""
from typing import List, Optional, Tuple

import torch

def _kernel(n):
    import attnc
    return attnc._registry[n]


@torch.library.custom_op("attnc::attention", mutates_args=())
def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: int,
              tensor_names: str, tensors: List[torch.Tensor],
              scalar_names: str, scalars: List[float],
              scale: Optional[float], kv_lens: Optional[List[int]],
              q_offsets: Optional[List[int]], kv_indptr: Optional[List[int]] = None,
              kv_indices: Optional[List[int]] = None,
              kv_last_page_len: Optional[List[int]] = None,
              num_splits: int = 0, kv_lens_t: Optional[torch.Tensor] = None,
              q_offsets_t: Optional[torch.Tensor] = None,
              dropout_p: float = 0.0, dropout_rng: Optional[torch.Tensor] = None,
              kv_offsets: Optional[List[int]] = None, head_offset: int = 0,
              head_count: int = 0
              ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(out [B, H, Lq, Dv] in q's dtype, lse [B, H, Lq] float32). The
    names are comma-separated (the schema has no list of strings).
    dropout_rng: int64 [2], the dropout seed and offset (a graph input, so
    a new seed per step does not recompile)."""
    params = dict(zip(_names(tensor_names), tensors))
    params.update(zip(_names(scalar_names), scalars))
    kv_lens = _lengths(kv_lens, kv_lens_t, "kv_lens")
    q_offsets = _lengths(q_offsets, q_offsets_t, "q_offsets")
    pages = None if kv_indptr is None else (kv_indptr, kv_indices, kv_last_page_len)
    return _kernel(kernel)._run(q, k, v, scale=scale, kv_lens=kv_lens,
                                q_offsets=q_offsets, kv_offsets=kv_offsets,
                                heads=(head_offset, head_count),
                                out=None, return_lse=True,
                                num_threads=0, stream=None, params=params,
                                pages=pages, num_splits=num_splits,
                                dropout=_dropout(dropout_p, dropout_rng))


def _dropout(p, rng):
    """The kernels' (p, seed, offset), or None without dropout."""
    if not p:
        return None
    seed, offset = (int(x) % 2 ** 64 for x in rng.detach().cpu().tolist())
    return (p, seed, offset)


def dropout_rng(seed, offset):
    """The operator's int64 [seed, offset] tensor: `seed` an int, a tensor,
    or None (drawn from torch's default generator)."""
    def signed(x):
        return x - 2 ** 64 if x >= 2 ** 63 else x
    off = torch.tensor([signed(offset)], dtype=torch.int64)
    if seed is None:
        s = torch.randint(0, 2 ** 62, (1,), dtype=torch.int64)
    elif isinstance(seed, torch.Tensor):
        s = seed.detach().reshape(1).to(device="cpu", dtype=torch.int64)
    else:
        s = torch.tensor([signed(seed)], dtype=torch.int64)
    return torch.cat([s, off])


def _names(joined):
    return joined.split(",") if joined else []


def _lengths(as_list, as_tensor, name):
    """The per-sequence ints of a call, from the list or the tensor form."""
    if as_tensor is None:
        return as_list
    import attnc
    return attnc._ints(as_tensor.detach().cpu().numpy(), name)


def check_lengths(t, name):
    """An integer tensor of per-sequence values, checked without reading
    it (reading would break a torch.compile graph): 1-d, integer dtype."""
    if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64, torch.int16,
                                      torch.int8, torch.uint8):
        raise TypeError("'%s' must be a 1-d integer tensor, got %s of shape %s"
                        % (name, t.dtype, tuple(t.shape)))
    return t


@attention.register_fake
def _(q, k, v, kernel, tensor_names, tensors, scalar_names, scalars, scale,
      kv_lens, q_offsets, kv_indptr=None, kv_indices=None, kv_last_page_len=None,
      num_splits=0, kv_lens_t=None, q_offsets_t=None, dropout_p=0.0,
      dropout_rng=None, kv_offsets=None, head_offset=0, head_count=0):
    B, H, L = q.shape[0], q.shape[1], q.shape[2]
    return (q.new_empty((B, H, L, v.shape[3])),
            q.new_empty((B, H, L), dtype=torch.float32))


@torch.library.custom_op("attnc::attention_backward", mutates_args=())
def attention_backward(grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor],
                       q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                       out: torch.Tensor, lse: torch.Tensor, kernel: int,
                       tensor_names: str, tensors: List[torch.Tensor],
                       scalar_names: str, scalars: List[float],
                       scale: Optional[float], kv_lens: Optional[List[int]],
                       q_offsets: Optional[List[int]],
                       kv_lens_t: Optional[torch.Tensor] = None,
                       q_offsets_t: Optional[torch.Tensor] = None,
                       dropout_p: float = 0.0,
                       dropout_rng: Optional[torch.Tensor] = None,
                       kv_offsets: Optional[List[int]] = None,
                       head_offset: int = 0, head_count: int = 0
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                  List[torch.Tensor]]:
    """(dq, dk, dv, the gradient of each captured tensor: zeros for those
    that are not floats). With dropout, the forward's mask regenerated."""
    params = dict(zip(_names(tensor_names), tensors))
    params.update(zip(_names(scalar_names), scalars))
    kv_lens = _lengths(kv_lens, kv_lens_t, "kv_lens")
    q_offsets = _lengths(q_offsets, q_offsets_t, "q_offsets")
    return _kernel(kernel)._backward(
        q, k, v, out, lse, grad_out, grad_lse, scale=scale, kv_lens=kv_lens,
        q_offsets=q_offsets, kv_offsets=kv_offsets,
        heads=(head_offset, head_count), params=params,
        dropout=_dropout(dropout_p, dropout_rng))


@attention_backward.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, kernel, tensor_names, tensors,
      scalar_names, scalars, scale, kv_lens, q_offsets, kv_lens_t=None,
      q_offsets_t=None, dropout_p=0.0, dropout_rng=None, kv_offsets=None,
      head_offset=0, head_count=0):
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            [torch.empty_like(t) for t in tensors])


def _setup_context(ctx, inputs, output):
    (q, k, v, kernel, tensor_names, tensors, scalar_names, scalars, scale,
     kv_lens, q_offsets, kv_indptr, kv_indices, kv_last_page_len,
     num_splits, kv_lens_t, q_offsets_t, dropout_p, dropout_rng,
     kv_offsets, head_offset, head_count) = inputs
    out, lse = output
    lengths = [t for t in (kv_lens_t, q_offsets_t, dropout_rng) if t is not None]
    ctx.save_for_backward(q, k, v, out, lse, *lengths, *tensors)
    ctx.lengths = (kv_lens_t is not None, q_offsets_t is not None,
                   dropout_rng is not None)
    ctx.dropout_p = dropout_p
    ctx.args = (kernel, tensor_names, scalar_names, scalars, scale, kv_lens,
                q_offsets, kv_offsets, head_offset, head_count)
    ctx.paged = kv_indptr is not None
    # The gradient has the inputs' structure: torch treats a list of
    # tensors (or an empty list) as a list, any other list as one value.
    ctx.structure = [
        len(x) if isinstance(x, (list, tuple)) and
        (not x or isinstance(x[0], torch.Tensor)) else None
        for x in inputs]


def _backward(ctx, grad_out, grad_lse):
    if ctx.paged:
        raise RuntimeError("attnc: the backward pass takes contiguous K/V, "
                           "not pages (kv_indptr, ...)")
    q, k, v, out, lse, *tensors = ctx.saved_tensors
    kv_lens_t = tensors.pop(0) if ctx.lengths[0] else None
    q_offsets_t = tensors.pop(0) if ctx.lengths[1] else None
    rng = tensors.pop(0) if ctx.lengths[2] else None
    (kernel, tensor_names, scalar_names, scalars, scale, kv_lens, q_offsets,
     kv_offsets, head_offset, head_count) = ctx.args
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv, dts = torch.ops.attnc.attention_backward(
        grad_out.contiguous(), grad_lse, q, k, v, out, lse, kernel,
        tensor_names, tensors, scalar_names, scalars, scale, kv_lens, q_offsets,
        kv_lens_t, q_offsets_t, ctx.dropout_p, rng, kv_offsets, head_offset,
        head_count)
    dts = [d if t.is_floating_point() else None for d, t in zip(dts, tensors)]
    grads = [None if n is None else [None] * n for n in ctx.structure]
    grads[0], grads[1], grads[2], grads[5] = dq, dk, dv, dts
    return tuple(grads)


torch.library.register_autograd("attnc::attention", _backward,
                                setup_context=_setup_context)


def call(kernel_id, q, k, v, scale, kv_lens, q_offsets, return_lse, params,
         pages=None, num_splits=0, dropout_p=0.0, dropout_seed=None,
         dropout_offset=0, kv_offsets=None, heads=(0, 0)):
    """A kernel (by registry number) on torch tensors, through the
    operator: Kernel.__call__ and flex_attention."""
    tensor_names, tensors, scalar_names, scalars = [], [], [], []
    for name, value in params.items():
        if isinstance(value, torch.Tensor):
            tensor_names.append(name)
            tensors.append(value)
        else:
            scalar_names.append(name)
            scalars.append(float(value))
    kv_lens_t = kv_lens if isinstance(kv_lens, torch.Tensor) else None
    q_offsets_t = q_offsets if isinstance(q_offsets, torch.Tensor) else None
    out, lse = torch.ops.attnc.attention(
        q, k, v, kernel_id, ",".join(tensor_names), tensors,
        ",".join(scalar_names), scalars,
        None if scale is None else float(scale),
        None if kv_lens is None or kv_lens_t is not None else [int(x) for x in kv_lens],
        None if q_offsets is None or q_offsets_t is not None else
        [int(x) for x in q_offsets],
        *([None] * 3 if pages is None else
          [[int(x) for x in (p.tolist() if hasattr(p, "tolist") else p)] for p in pages]),
        int(num_splits), kv_lens_t, q_offsets_t, float(dropout_p),
        dropout_rng(dropout_seed, dropout_offset) if dropout_p else None,
        None if kv_offsets is None else [int(x) for x in kv_offsets],
        int(heads[0]), int(heads[1]))
    return (out, lse) if return_lse else out
