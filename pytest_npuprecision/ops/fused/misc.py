"""Ops that move or select: transposes, slices, broadcasts, sort without indices, MoE gating top-k."""

from __future__ import annotations

import torch

from .opmath import int_list, opmath_dtype
from .record import FusedOp, TopKSelection, UnjudgedFusedCall


def npu_confusion_transpose(self, perm, shape, transpose_first):
    """torch_npu.npu_confusion_transpose(self, perm, shape, transpose_first) -> Tensor

    permute then reshape when transpose_first, else reshape then permute.
    """
    perm, shape = int_list(perm), int_list(shape)
    if transpose_first:
        return self.permute(perm).reshape(shape)
    return self.reshape(shape).permute(perm)


def npu_transpose(self, perm, require_contiguous=True):
    """torch_npu.npu_transpose(self, perm, require_contiguous=True) -> Tensor: self with its dims permuted,
    contiguous (require_contiguous only chooses the kernel's speed)."""
    return self.permute(int_list(perm)).contiguous()


def npu_slice(self, offsets, size):
    """torch_npu.npu_slice(self, offsets, size) -> Tensor: size[d] elements from offsets[d] along each dim."""
    index = tuple(slice(start, start + length) for start, length in zip(int_list(offsets), int_list(size)))
    return self[index].contiguous()


def npu_broadcast(self, size):
    """torch_npu.npu_broadcast(self, size) -> Tensor: self expanded to size (its singleton dims repeated)."""
    return self.expand(int_list(size)).contiguous()


def npu_sort_v2(self, dim=-1, descending=False, out=None):
    """torch_npu.npu_sort_v2(self, dim=-1, descending=False, out=None) -> Tensor: sorted values only.

    out is not written: the reference returns a new tensor.
    """
    return torch.sort(self, dim=int(dim), descending=bool(descending), stable=True).values


def npu_moe_gating_top_k_softmax(x, finished=None, k=1):
    """torch_npu.npu_moe_gating_top_k_softmax(x, finished=None, k=1) -> (y, expert_idx, row_idx)

    y, expert_idx = top-k of softmax(x) over experts (ties to the lower expert index); y in x's dtype,
    expert_idx and row_idx int32. row_idx numbers the k * rows outputs k-major: row r, slot j holds
    j * rows + r. The docs say finished rows "take no part" without saying what they output: their
    expert_idx is the expert count (as msprobe has it) and y keeps its softmax values.
    """
    k = int(k)
    probabilities = torch.softmax(x.to(opmath_dtype(x.dtype)), dim=-1)
    order = torch.sort(probabilities.detach(), dim=-1, descending=True, stable=True).indices[..., :k]
    y = probabilities.gather(-1, order)
    expert_idx = order.to(torch.int32)
    if finished is not None:
        expert_idx = torch.where(finished.bool().unsqueeze(-1), x.shape[-1], expert_idx).to(torch.int32)
    rows = y[..., 0].numel()
    row_idx = torch.arange(rows * k, dtype=torch.int32, device=x.device).reshape(k, rows).t().reshape(y.shape)
    return y.to(x.dtype), expert_idx, row_idx


def _softmax_scores(x, finished=None, k=1):
    """(score, magnitude) of every expert: its probability, ranked as the reference ranks them."""
    probabilities = torch.softmax(x.to(opmath_dtype(x.dtype)), dim=-1)
    return probabilities, probabilities


def _softmax_values_at(indices, x, finished=None, k=1):
    """y for these chosen experts: their probabilities."""
    return torch.softmax(x.to(opmath_dtype(x.dtype)), dim=-1).gather(-1, indices.long()).to(x.dtype)


def npu_format_cast(input, acl_format, customize_dtype=None):
    """torch_npu.npu_format_cast(input, acl_format, customize_dtype=None) -> Tensor

    The same values in another storage format (ND, NZ, NC1HWC0, ...): what a dump reads back is the
    input's values, bit for bit. A customize_dtype reinterprets the storage: no reference for that."""
    if customize_dtype is not None:
        raise UnjudgedFusedCall(f"customize_dtype {customize_dtype} reinterprets the storage: no reference here")
    return input.clone()


def npu_scatter_nd_update(input, indices, updates):
    """torch_npu.npu_scatter_nd_update(input, indices, updates) -> Tensor (and npu_scatter_nd_update_, in place)

    indices [..., a] (a <= input.dim()) name positions in input's first a dims; updates, of shape
    indices.shape[:-1] + input.shape[a:], replace what is there. An index named twice has no defined
    winner: no reference for that."""
    depth = indices.shape[-1]
    where = indices.reshape(-1, depth).long()
    if torch.unique(where, dim=0).shape[0] != where.shape[0]:
        raise UnjudgedFusedCall("an index named twice (which of its updates lands is not defined)")
    out = input.clone()
    out[tuple(where.t())] = updates.reshape(-1, *input.shape[depth:]).to(out.dtype)
    return out


OPS = (
    FusedOp("npu_confusion_transpose", npu_confusion_transpose,
            "npu_confusion_transpose(self, perm, shape, transpose_first)", "output"),
    FusedOp("npu_transpose", npu_transpose, "npu_transpose(self, perm, require_contiguous=True)", "output"),
    FusedOp("npu_slice", npu_slice, "npu_slice(self, offsets, size)", "output"),
    FusedOp("npu_broadcast", npu_broadcast, "npu_broadcast(self, size)", "output"),
    FusedOp("npu_format_cast", npu_format_cast, "npu_format_cast(input, acl_format, customize_dtype=None)", "output",
            "customize_dtype (a reinterpreted storage)"),
    FusedOp("npu_scatter_nd_update", npu_scatter_nd_update, "npu_scatter_nd_update(input, indices, updates)",
            "output (npu_scatter_nd_update_: input, updated)", "indices that repeat (no defined winner)"),
    FusedOp("npu_sort_v2", npu_sort_v2, "npu_sort_v2(self, dim=-1, descending=False, out=None)", "sorted values",
            "out is not written"),
    FusedOp("npu_moe_gating_top_k_softmax", npu_moe_gating_top_k_softmax,
            "npu_moe_gating_top_k_softmax(x, finished=None, k=1)", "y, expert_idx (int32), row_idx (int32)",
            "finished rows: undocumented output; expert_idx set to the expert count as msprobe does",
            selection=TopKSelection(values=0, indices=1, scores=_softmax_scores, values_at=_softmax_values_at)),
)
