"""torch's rule for ``Tensor.view`` on a non-contiguous tensor (ATen's ``computeStride``).

A view is possible when every run of the new shape spans whole "chunks" of the old one: maximal groups of dims
that are contiguous with each other (``stride[i] == stride[i+1] * size[i+1]``).  So the ``(B, T, C)`` slice
``x.split(C, dim=2)[0]`` of a ``(B, T, 3C)`` tensor can be viewed as ``(B, T, H, C // H)`` (only the last dim is
split), while a transposed matrix cannot be flattened.
"""
from __future__ import annotations


def contiguous_strides(shape) -> tuple:
    """The element strides of a C-contiguous (row-major) array of ``shape``."""
    st, acc = [], 1
    for n in reversed(shape):
        st.append(acc)
        acc *= n
    return tuple(reversed(st))


def element_strides(d) -> tuple:
    """NumPy array ``d``'s strides in elements (torch's ``stride()``), not bytes."""
    return tuple(s // d.itemsize for s in d.strides)


def viewable(shape: tuple, strides: tuple, new_shape: tuple) -> bool:
    """Whether ``new_shape`` can view data of ``shape`` with element ``strides`` without a copy."""
    if not shape:
        return True
    n = 1
    for s in shape:
        n *= s
    if n == 0:
        return True
    view_d = len(new_shape) - 1
    chunk_base_stride = strides[-1]
    tensor_numel = view_numel = 1
    for tensor_d in range(len(shape) - 1, -1, -1):
        tensor_numel *= shape[tensor_d]
        # a chunk ends at dim 0 or where the next-outer dim is not contiguous with this one
        if tensor_d == 0 or (shape[tensor_d - 1] != 1
                             and strides[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_shape[view_d] == 1):
                view_numel *= new_shape[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return False
            if tensor_d > 0:
                chunk_base_stride = strides[tensor_d - 1]
                tensor_numel = view_numel = 1
    return view_d == -1
