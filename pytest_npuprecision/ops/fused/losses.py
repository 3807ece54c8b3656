"""Fused losses: cross entropy with its log-probabilities, and softmax cross entropy against soft labels."""

from __future__ import annotations

import torch

from .opmath import opmath_dtype, widened
from .record import FusedOp, UnjudgedFusedCall


def npu_cross_entropy_loss(input, target, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0,
                           lse_square_scale_for_zloss=0.0, return_zloss=False):
    """torch_npu.npu_cross_entropy_loss(input, target, weight=None, reduction="mean", ignore_index=-100,
    label_smoothing=0.0, lse_square_scale_for_zloss=0.0, return_zloss=False) -> (loss, log_prob, zloss,
    lse_for_zloss)

    log_softmax and nll_loss fused: input [N, C], target [N]; loss [N] for reduction 'none', else [1]; log_prob
    [N, C]; both in input's dtype, computed in float32 for half inputs. zloss and lse_for_zloss are empty
    (torch_npu does not compute them yet)."""
    if return_zloss or float(lse_square_scale_for_zloss) != 0.0:
        raise UnjudgedFusedCall("zloss (return_zloss, lse_square_scale_for_zloss) is not computed by torch_npu "
                                "either")
    dtype = opmath_dtype(input.dtype)
    if weight is not None and weight.dtype == torch.float64:
        dtype = torch.float64
    log_prob = torch.log_softmax(input.to(dtype), dim=-1)
    weights = widened(weight, dtype)
    if label_smoothing:  # as torch's cross_entropy: (1 - s) * nll + s * the mean over classes of -log_prob
        loss = torch.nn.functional.cross_entropy(input.to(dtype), target.long(), weights,
                                                 ignore_index=int(ignore_index), reduction=str(reduction),
                                                 label_smoothing=float(label_smoothing))
    else:
        loss = torch.nn.functional.nll_loss(log_prob, target.long(), weights, ignore_index=int(ignore_index),
                                            reduction=str(reduction))
    if str(reduction) != "none":
        loss = loss.reshape(1)
    empty = input.new_empty((0,))
    return loss.to(input.dtype), log_prob.to(input.dtype), empty, empty


def npu_softmax_cross_entropy_with_logits(features, labels):
    """torch_npu.npu_softmax_cross_entropy_with_logits(features, labels) -> Tensor

    Per row of features [batch, classes]: -sum(labels * log_softmax(features)), labels a distribution over the
    classes of the same shape; [batch] in features' dtype."""
    dtype = opmath_dtype(features.dtype)
    log_prob = torch.log_softmax(features.to(dtype), dim=-1)
    return -(labels.to(dtype) * log_prob).sum(-1).to(features.dtype)


OPS = (
    FusedOp("npu_cross_entropy_loss", npu_cross_entropy_loss,
            "npu_cross_entropy_loss(input, target, weight=None, reduction='mean', ignore_index=-100, "
            "label_smoothing=0.0, lse_square_scale_for_zloss=0.0, return_zloss=False)",
            "loss, log_prob, zloss (empty), lse_for_zloss (empty)", "zloss (torch_npu does not compute it yet)"),
    FusedOp("npu_softmax_cross_entropy_with_logits", npu_softmax_cross_entropy_with_logits,
            "npu_softmax_cross_entropy_with_logits(features, labels)", "loss (per row)"),
)
