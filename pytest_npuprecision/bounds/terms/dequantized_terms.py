"""Matmuls of a weight stored as integers and dequantized on the fly (npu_weight_quant_batchmatmul): the
summed terms are x times the dequantized weight, (w + offset) · scale, whose norms the integers alone do
not give (the offset shifts them, the scale sizes them)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from ..op_arguments import argument


def dequantized_weight(weight: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor | None,
                       group_size: int, dtype: torch.dtype) -> torch.Tensor:
    """(weight + offset) · scale in ``dtype``; per group of ``group_size`` rows of K, the scale's and offset's
    row of that group (their shape (ceil(K / group_size), N)), else broadcast as given ((N,), (1, N), (1,))."""
    w = weight.to(dtype)
    scale, offset = scale.to(dtype), None if offset is None else offset.to(dtype)
    if group_size and scale.dim() == 2 and scale.shape[0] > 1:
        rows = w.shape[-2]
        scale = scale.repeat_interleave(group_size, dim=0)[:rows]
        offset = None if offset is None else offset.repeat_interleave(group_size, dim=0)[:rows]
    return (w if offset is None else w + offset) * scale


def weight_quant_terms(args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.Tensor:
    """Per output element, the L2 norm of its K terms x_k · dequantized w_kn."""
    x = argument(args, kwargs, 0, "x")
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    weight = dequantized_weight(argument(args, kwargs, 1, "weight"), argument(args, kwargs, 2, "antiquant_scale"),
                                argument(args, kwargs, 3, "antiquant_offset"),
                                int(argument(args, kwargs, 7, "antiquant_group_size") or 0), dtype)
    x = x.to(dtype)
    return torch.matmul(x * x, weight * weight).sqrt()
