"""``F.linear`` and ``F.bilinear`` (``y = x1^T A x2 + b`` per output feature, a matmul and a reduction):
compositions of primitives, so they differentiate and compile.
"""
from __future__ import annotations

from ...ir.ops import OPS
from ...library import elementary as F
from ...runtime import dispatch as _dispatch
from ...runtime.bind_route import ROUTE as _ROUTE
from ...runtime.node_chain import join_addmm
from ...library.torch_kwargs import torch_kwargs
from ...declarations import published


_PERMUTE = OPS["permute"]      # (a matrix's .T binds it with perm (1, 0): views.py's _swap_last2)


def linear(input, weight, bias=None, **torch_kw):
    """``input @ weight.T + bias`` with torch's ``(out_features, in_features)`` weight layout."""
    if torch_kw:       # keepdims=, out=, or a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(linear, 'linear', (input, weight, bias), {}, torch_kw)
    xs, ws = tuple(input._data.shape), tuple(weight._data.shape)      # (payloads': a device array's may be no tuple)
    if xs[-1] != ws[-1]:
        raise RuntimeError(f"linear: mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, input.shape))} "
                           f"and {'x'.join(map(str, weight.shape[::-1]))})")
    if len(xs) != 2:
        out = F.matmul(input, weight.T)
        return out if bias is None else out + bias
    # the 2-d case as torch records it: weight.t() (TBackward0), then one MmBackward0 or AddmmBackward0 node
    # (weight.T's permute bound directly where no profiler or dual level intercepts: the same bind)
    wt = _dispatch._bind(_PERMUTE, (weight,), {"perm": (1, 0)}) if _ROUTE.plain and len(ws) == 2 else weight.T
    if wt.grad_fn is not None:
        wt.grad_fn.torch_name = "TBackward0"
    out = F.matmul(input, wt)
    if bias is None:
        if out.grad_fn is not None:
            out.grad_fn.torch_name = "MmBackward0"
        return out
    out = out + bias
    if out.grad_fn is not None:
        if out.grad_fn.next_functions[0][0] is not None:
            join_addmm(out)         # one node for mm and add (runtime/node_chain.py)
        if out.grad_fn.op.name != "addmm":
            out.grad_fn.torch_name = "AddmmBackward0"
    return out


@published("jitgrad")      # torch.bilinear, the same function
def bilinear(input1, input2, weight, bias=None, **torch_kw):
    """``y[..., o] = sum_ij input1[..., i] * weight[o, i, j] * input2[..., j] + bias[o]``."""
    if torch_kw:       # a torch keyword jitgrad lacks (torch_kwargs.py)
        return torch_kwargs(bilinear, 'bilinear', (input1, input2, weight, bias), {}, torch_kw)
    if input1.ndim != input2.ndim:
        raise RuntimeError(f"bilinear(): input dimensions do not match: got {input1.ndim} and {input2.ndim}")
    for i in range(input1.ndim - 1):
        if input1.shape[i] != input2.shape[i]:
            raise RuntimeError(f"bilinear(): input batch dimensions do not match at dim {i}: got {input1.shape[i]} "
                               f"and {input2.shape[i]}")
    if weight.ndim != 3 or input1.shape[-1] != weight.shape[1]:
        raise RuntimeError(f"bilinear(): input1 size does not match weight size: got {input1.shape[-1]} but expected "
                           f"{weight.shape[1] if weight.ndim > 1 else weight.shape}")
    if input2.shape[-1] != weight.shape[2]:
        raise RuntimeError(f"bilinear(): input2 size does not match weight size: got {input2.shape[-1]} but expected "
                           f"{weight.shape[2]}")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != weight.shape[0]):
        raise RuntimeError(f"bilinear(): bias size does not match weight size: got {bias.shape[0]} but expected "
                           f"{weight.shape[0]}")
    o, i, j = weight.shape
    batch = tuple(input1.shape[:-1])
    x1 = input1.reshape(-1, i)
    x2 = input2.reshape(-1, j)
    # (N, i) @ (i, o * j) -> (N, o, j), then contracted with x2 over j
    t = (x1 @ weight.permute(1, 0, 2).reshape(i, o * j)).reshape(-1, o, j)
    y = (t * x2.unsqueeze(1)).sum(2)
    if bias is not None:
        y = y + bias
    return y.reshape(*batch, o)


__all__ = ["linear", "bilinear"]
