"""Quantizers' float outputs that cancel: npu_dynamic_quant_asymmetric's offset, 127 - row max / scale, is small
where the row straddles zero evenly and row max / scale (up to 255, far more for a row of one sign) is not; a fair
float32 kernel errs by a few units of the larger term."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from ..op_arguments import argument

_OFFSET = "output.2"
_INT8_MAX, _INT8_LEVELS = 127.0, 255.0


def _smoothed_rows(args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.Tensor:
    """x times smooth_scales (by group of rows where group_index is given), as [rows, last dim] in float64."""
    x = argument(args, kwargs, 0, "x").to(torch.float64)
    rows = x.reshape(-1, x.shape[-1])
    smooth, groups = kwargs.get("smooth_scales"), kwargs.get("group_index")
    if smooth is None:
        return rows
    if groups is None:
        return rows * smooth.to(torch.float64)
    ends = [int(e) for e in torch.as_tensor(groups).reshape(-1).tolist()]
    factors = torch.ones_like(rows)
    for group, (start, end) in enumerate(zip([0] + ends, ends)):
        factors[start:end] = smooth[group].to(torch.float64)
    return rows * factors


def asymmetric_offset_terms(args: Sequence[Any], kwargs: Mapping[str, Any], name: str,
                            shape: torch.Size) -> torch.Tensor | None:
    """Per row, the L2 norm of the offset's two terms, 127 and row max / scale; None for the other outputs."""
    if name != _OFFSET:
        return None
    rows = _smoothed_rows(args, kwargs)
    high, low = rows.amax(-1), rows.amin(-1)
    quotient = high * _INT8_LEVELS / (high - low).clamp(min=torch.finfo(torch.float64).tiny)
    return torch.sqrt(_INT8_MAX**2 + quotient * quotient).reshape(shape)
