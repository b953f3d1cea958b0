"""attnc as a torch operator: `torch.ops.attnc.attention`, registered with
torch.library with a fake (meta) implementation, so that torch.compile
traces models calling attnc kernels on torch tensors into one graph (no
graph break) and runs the kernel at that point of the compiled program.

Kernel.__call__ goes through it for torch tensors (eager too, so both run
the same path); NumPy and attnc.cuda arrays skip it. A Kernel is named in
the graph by its registry number (attnc._registry: every Kernel is
registered when made, outside any trace, and lives for the process).

The operator is differentiable (torch.library.register_autograd): its
backward is the operator attnc::attention_backward, the compiled backward
kernels (CPU), giving q, k, v and every float captured tensor their
gradients.
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
              num_splits: int = 0
              ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(out [B, H, Lq, Dv] in q's dtype, lse [B, H, Lq] float32). The
    names are comma-separated (the schema has no list of strings)."""
    params = dict(zip(_names(tensor_names), tensors))
    params.update(zip(_names(scalar_names), scalars))
    pages = None if kv_indptr is None else (kv_indptr, kv_indices, kv_last_page_len)
    return _kernel(kernel)._run(q, k, v, scale=scale, kv_lens=kv_lens,
                                q_offsets=q_offsets, out=None, return_lse=True,
                                num_threads=0, stream=None, params=params,
                                pages=pages, num_splits=num_splits)


def _names(joined):
    return joined.split(",") if joined else []


@attention.register_fake
def _(q, k, v, kernel, tensor_names, tensors, scalar_names, scalars, scale,
      kv_lens, q_offsets, kv_indptr=None, kv_indices=None, kv_last_page_len=None,
      num_splits=0):
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
                       q_offsets: Optional[List[int]]
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                  List[torch.Tensor]]:
    """(dq, dk, dv, the gradient of each captured tensor: zeros for those
    that are not floats)."""
    params = dict(zip(_names(tensor_names), tensors))
    params.update(zip(_names(scalar_names), scalars))
    return _kernel(kernel)._backward(
        q, k, v, out, lse, grad_out, grad_lse, scale=scale, kv_lens=kv_lens,
        q_offsets=q_offsets, params=params)


@attention_backward.register_fake
def _(grad_out, grad_lse, q, k, v, out, lse, kernel, tensor_names, tensors,
      scalar_names, scalars, scale, kv_lens, q_offsets):
    return (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v),
            [torch.empty_like(t) for t in tensors])


def _setup_context(ctx, inputs, output):
    (q, k, v, kernel, tensor_names, tensors, scalar_names, scalars, scale,
     kv_lens, q_offsets, kv_indptr, kv_indices, kv_last_page_len,
     num_splits) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, *tensors)
    ctx.args = (kernel, tensor_names, scalar_names, scalars, scale, kv_lens,
                q_offsets)
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
    kernel, tensor_names, scalar_names, scalars, scale, kv_lens, q_offsets = ctx.args
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    dq, dk, dv, dts = torch.ops.attnc.attention_backward(
        grad_out.contiguous(), grad_lse, q, k, v, out, lse, kernel,
        tensor_names, tensors, scalar_names, scalars, scale, kv_lens, q_offsets)
    dts = [d if t.is_floating_point() else None for d, t in zip(dts, tensors)]
    grads = [None if n is None else [None] * n for n in ctx.structure]
    grads[0], grads[1], grads[2], grads[5] = dq, dk, dv, dts
    return tuple(grads)


torch.library.register_autograd("attnc::attention", _backward,
                                setup_context=_setup_context)


def call(kernel_id, q, k, v, scale, kv_lens, q_offsets, return_lse, params,
         pages=None, num_splits=0):
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
    out, lse = torch.ops.attnc.attention(
        q, k, v, kernel_id, ",".join(tensor_names), tensors,
        ",".join(scalar_names), scalars,
        None if scale is None else float(scale),
        None if kv_lens is None else [int(x) for x in kv_lens],
        None if q_offsets is None else [int(x) for x in q_offsets],
        *([None] * 3 if pages is None else
          [[int(x) for x in (p.tolist() if hasattr(p, "tolist") else p)] for p in pages]),
        int(num_splits))
    return (out, lse) if return_lse else out
