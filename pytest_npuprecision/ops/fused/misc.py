"""Ops that move or select: confusion transpose, sort without indices, MoE gating top-k."""

from __future__ import annotations

import torch

from .opmath import int_list, opmath_dtype
from .record import FusedOp


def npu_confusion_transpose(self, perm, shape, transpose_first):
    """torch_npu.npu_confusion_transpose(self, perm, shape, transpose_first) -> Tensor

    permute then reshape when transpose_first, else reshape then permute.
    """
    perm, shape = int_list(perm), int_list(shape)
    if transpose_first:
        return self.permute(perm).reshape(shape)
    return self.reshape(shape).permute(perm)


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


OPS = (
    FusedOp("npu_confusion_transpose", npu_confusion_transpose,
            "npu_confusion_transpose(self, perm, shape, transpose_first)", "output"),
    FusedOp("npu_sort_v2", npu_sort_v2, "npu_sort_v2(self, dim=-1, descending=False, out=None)", "sorted values",
            "out is not written"),
    FusedOp("npu_moe_gating_top_k_softmax", npu_moe_gating_top_k_softmax,
            "npu_moe_gating_top_k_softmax(x, finished=None, k=1)", "y, expert_idx (int32), row_idx (int32)",
            "finished rows: undocumented output; expert_idx set to the expert count as msprobe does"),
)
