"""MoE gating: each token's expert scores (softmax or sigmoid of its logits, plus an optional bias),
the best k experts among the best k_group groups, and their weights."""

from __future__ import annotations

import torch

from ..opmath import opmath_dtype, statistic_dtype
from ..record import FusedOp, TopKSelection, UnjudgedFusedCall

_NORMS = {0: "softmax", 1: "sigmoid"}


def npu_moe_gating_top_k(x, k, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1, group_select_mode=0,
                         renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0, eps=1e-20):
    """torch_npu.npu_moe_gating_top_k(x, k, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
    group_select_mode=0, renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0, eps=1e-20)
    -> (y_out, expert_idx_out, norm_out)

    norm = softmax(x) (norm_type 0) or sigmoid(x) (1) over the experts; score = norm + bias. With
    group_count > 1 the experts split into group_count equal groups, each scored by its best score
    (group_select_mode 0) or the sum of its best two (1); the k_group best groups stay and the rest
    score -inf. expert_idx_out (int32): the k best scores, best first (ties to the lower index); with
    input_ids and tid2eid (hash mode) tid2eid[input_ids] instead. y_out = norm at those experts, for
    sigmoid divided by (their sum + eps), times routed_scaling_factor, in x's dtype. norm_out: norm in
    float32 where out_flag, else empty (the kernel leaves it unwritten). Computed in float32 for half
    types."""
    _check_modes(renorm, norm_type)
    norm = _normalized(x, norm_type)
    indices = _selected(norm, bias, int(k), input_ids, tid2eid, int(k_group), int(group_count), int(group_select_mode))
    y = _weights(norm, indices, norm_type, routed_scaling_factor, eps)
    norm_out = norm.to(statistic_dtype(x.dtype)) if out_flag else norm.new_empty(0, dtype=statistic_dtype(x.dtype))
    return y.to(x.dtype), indices.to(torch.int32), norm_out


def _check_modes(renorm, norm_type) -> None:
    if int(renorm) != 0:
        raise UnjudgedFusedCall(f"renorm={renorm} (torch_npu supports only 0: norm before top-k)")
    if int(norm_type) not in _NORMS:
        raise UnjudgedFusedCall(f"norm_type={norm_type} (documented: 0 softmax, 1 sigmoid)")


def _normalized(x: torch.Tensor, norm_type) -> torch.Tensor:
    wide = x.to(opmath_dtype(x.dtype))
    return torch.softmax(wide, -1) if int(norm_type) == 0 else torch.sigmoid(wide)


def _scores(norm: torch.Tensor, bias, k_group: int, group_count: int, group_select_mode: int) -> torch.Tensor:
    """What the top-k ranks: norm plus bias, -inf outside the k_group best groups."""
    score = norm if bias is None else norm + bias.to(norm.dtype)
    if group_count <= 1:
        return score
    grouped = score.reshape(*score.shape[:-1], group_count, -1)
    if group_select_mode == 0:
        group_score = grouped.amax(-1)
    else:
        group_score = torch.sort(grouped, -1, descending=True).values[..., :2].sum(-1)
    best = torch.sort(group_score.detach(), dim=-1, descending=True, stable=True).indices[..., :k_group]
    kept = torch.zeros_like(group_score, dtype=torch.bool).scatter(-1, best, True)
    return torch.where(kept.unsqueeze(-1), grouped, float("-inf")).reshape(score.shape)


def _selected(norm, bias, k, input_ids, tid2eid, k_group, group_count, group_select_mode) -> torch.Tensor:
    if input_ids is not None and tid2eid is not None:  # hash mode: a table names each token's experts
        return tid2eid.long()[input_ids.long()][..., :k]
    score = _scores(norm, bias, k_group, group_count, group_select_mode)
    return torch.sort(score.detach(), dim=-1, descending=True, stable=True).indices[..., :k]


def _weights(norm, indices, norm_type, routed_scaling_factor, eps) -> torch.Tensor:
    y = norm.gather(-1, indices.long())
    if int(norm_type) == 1:
        y = y / (y.sum(-1, keepdim=True) + eps)
    return y * routed_scaling_factor


def _gating_scores(x, k, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1, group_select_mode=0,
                   renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0, eps=1e-20):
    """(score, magnitude) of every expert as the reference ranks them; None in hash mode (no ranking).
    The magnitude |norm| + |bias| sizes a fair kernel's error in the score (the bias may cancel it)."""
    if input_ids is not None and tid2eid is not None:
        return None
    norm = _normalized(x, norm_type)
    score = _scores(norm, bias, int(k_group), int(group_count), int(group_select_mode))
    return score, norm.abs() + (0 if bias is None else bias.to(norm.dtype).abs())


def _gating_values_at(indices, x, k, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1,
                      group_select_mode=0, renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0,
                      eps=1e-20):
    """y_out for these chosen experts: their weights renormalised among themselves."""
    return _weights(_normalized(x, norm_type), indices, norm_type, routed_scaling_factor, eps).to(x.dtype)


OPS = (
    FusedOp("npu_moe_gating_top_k", npu_moe_gating_top_k,
            "npu_moe_gating_top_k(x, k, bias=None, input_ids=None, tid2eid=None, k_group=1, group_count=1, "
            "group_select_mode=0, renorm=0, norm_type=0, out_flag=False, routed_scaling_factor=1.0, eps=1e-20)",
            "y_out, expert_idx_out (int32), norm_out (float32; empty unless out_flag)",
            "renorm != 0 (torch_npu supports only 0); norm_type other than 0 (softmax) and 1 (sigmoid)",
            selection=TopKSelection(values=0, indices=1, scores=_gating_scores, values_at=_gating_values_at)),
)
