"""The error bound of each element: what a fair kernel may err by, from its golden, its terms' norm and
its inputs' sensitivity, in the output format's units (the bound of docs/standards.md#error-bound).
"""

from __future__ import annotations

import math

import torch

from ..common.dtypes import FloatFormat

ROUNDING_DOMINATED = 4  # bound <= 4·u·|golden|: the output's rounding and little else


def flat_term_norm(term_norm, shape, device, work):
    if term_norm is None:
        return None
    norm = term_norm.detach().to(device=device, dtype=work)
    if norm.numel() == math.prod(shape) and norm.shape != torch.Size(shape):
        norm = norm.reshape(shape)  # the same elements flattened (a weight's terms over its normalized shape)
    return norm.broadcast_to(shape).reshape(-1)


def error_bound(abs_g, term_norm, sensitivity, fmt: FloatFormat, per_scale: float, golden_rms: float, work,
                input_share: float = 0.0):
    """u·|golden| + per_scale·scale (+ the sensitivity's and the math mode's shares): see ErrorBound."""
    scale = abs_g.clamp(min=golden_rms)
    terms = None
    if term_norm is not None:  # terms that overflowed or are NaN say nothing: the plain scale there
        finite = torch.isfinite(term_norm)
        scale = torch.where(finite, term_norm + abs_g, scale)
        terms = torch.where(finite, term_norm, scale) if input_share else None
    floor = max(fmt.smallest_subnormal / 2, torch.finfo(work).tiny)
    bound = fmt.unit_roundoff * abs_g + per_scale * scale + floor
    if input_share:  # rounded inputs err per term, so they cancel with the terms, not with |golden|
        bound = bound + input_share * (scale if terms is None else terms)
    if sensitivity is not None:  # in the compute dtype's units: half types compute in float32
        bound = bound + fmt.accumulator.unit_roundoff * torch.where(torch.isfinite(sensitivity), sensitivity, 0)
    return bound
