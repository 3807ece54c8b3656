"""Sensitivities of scaled_dot_product_attention to the roundings a fair kernel makes once per score.

Scores s = scale * q k^T carry their dot product's rounding, about u * scale * sqrt(q^2 k^2) each,
and the shift z = s - max(s) its own, u |z|. exp turns both into a relative error of p: e = |z| +
scale * sqrt(q^2 k^2), in units of u, and the row's sum spreads their p-weighted mean e_bar into
every p. These are single roundings, not sums of K of them: Accumulation.sensitivity, which adds
u * sensitivity to the bound. Scores in the tens make each p fairly off by tens of ulps: a fair
float32 attention at scores of spread 8 failed 7x past its bound forward and 69x backward.

Forward, o = P V moves by the L2 norm of p (e + e_bar) v over the keys (its sum is bounded as any
other, by |o|: a row of one key is o = v). Backward from the output gradient g: dV = P^T g alike;
dS = P * (dP - rowsum(P * dP)) with dP = g V^T moves by p (e + e_bar) |dP - rowsum|, which dQ =
scale dS K and dK = scale dS^T Q sum; and those two sums cancel to nothing by construction, so
their terms (gradient_terms) scale the bound rather than the result.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import torch

from ..op_arguments import argument

# Vectorized kernels flush what falls below float32's normal range: that is a p's absolute accuracy.
_UNDERFLOW_IN_U = 2.0 ** -126 / 2.0 ** -24  # float32's smallest normal, in units of its unit roundoff


class _Attention:
    """The probabilities, and the relative error (in units of u) each fairly carries, in float64."""

    def __init__(self, args: Sequence[Any], kwargs: Mapping[str, Any]):
        q, k, v = (argument(args, kwargs, i, name).detach().double() for i, name in enumerate(("query", "key", "value")))
        self.groups = _query_groups(q, k, v)
        if self.groups > 1:  # grouped-query attention: each key and value head serves `groups` query heads
            k, v = k.repeat_interleave(self.groups, -3), v.repeat_interleave(self.groups, -3)
        scale = argument(args, kwargs, 6, "scale")
        scale = 1 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
        scores = scale * q @ k.transpose(-2, -1)
        mask = argument(args, kwargs, 3, "attn_mask")
        if mask is not None:
            mask = mask.to(q.device)
            scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask.double()
        if argument(args, kwargs, 5, "is_causal", default=False):
            causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
            scores = scores.masked_fill(~causal, -math.inf)
        self.p = torch.softmax(scores, -1).nan_to_num()
        finite = torch.isfinite(scores)
        shifted = scores - scores.amax(-1, keepdim=True).nan_to_num(neginf=0.0)
        # The dot product, the scale's product, the shift and exp itself (about 2 ulp) each round once.
        error = (scale * (q * q @ (k * k).transpose(-2, -1)).sqrt() + torch.where(finite, scores.abs(), 0)
                 + torch.where(finite, shifted.abs(), 0) + 2)
        self.moved = self.p * (error + (self.p * error).sum(-1, keepdim=True)) + _UNDERFLOW_IN_U * finite
        self.q, self.k, self.v, self.scale = q, k, v, scale


def _query_groups(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    """How many query heads share each key and value head (1 for plain attention); ValueError, which
    leaves the plain bound, where the shapes are neither."""
    if k.shape[:-1] != v.shape[:-1] or q.dim() < 3 or q.shape[:-3] != k.shape[:-3] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"query {tuple(q.shape)}, key {tuple(k.shape)} and value {tuple(v.shape)} are not "
                         f"attention's shapes")
    heads, shared = q.shape[-3], k.shape[-3]
    if heads % shared:
        raise ValueError(f"{heads} query heads do not divide among {shared} key heads")
    return heads // shared


def _folded(per_query_head: torch.Tensor, groups: int) -> torch.Tensor:
    """A key's or value's gradient terms, given per query head, folded onto the heads they share: the
    group's independent errors add as an L2 norm."""
    if groups == 1:
        return per_query_head
    shape = per_query_head.shape
    split = per_query_head.reshape(*shape[:-3], shape[-3] // groups, groups, *shape[-2:])
    return split.square().sum(-3).sqrt()


def _summed(terms: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """The L2 norm of the terms of ``terms @ other``: independent errors add up with random signs."""
    return (terms * terms @ (other * other)).sqrt()


def forward_sensitivity(args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.Tensor:
    a = _Attention(args, kwargs)
    return _summed(a.moved, a.v)


def gradient_sensitivities(args: Sequence[Any], kwargs: Mapping[str, Any],
                           cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    a = _Attention(args, kwargs)
    g = cotangent.detach().double().to(a.q.device)
    d_p = g @ a.v.transpose(-2, -1)
    moved_s = a.moved * (d_p - (a.p * d_p).sum(-1, keepdim=True)).abs()
    return {
        "query": a.scale * _summed(moved_s, a.k),
        "key": _folded(a.scale * _summed(moved_s.transpose(-2, -1), a.q), a.groups),
        "value": _folded(_summed(a.moved.transpose(-2, -1), g), a.groups),
    }


def gradient_terms(args: Sequence[Any], kwargs: Mapping[str, Any], cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    """The terms the gradients sum: dQ and dK sum p (dP - rowsum) k, which cancels to nothing by
    construction, so their terms are p (|dP| + |rowsum|) before it; dV sums p g."""
    a = _Attention(args, kwargs)
    g = cotangent.detach().double().to(a.q.device)
    d_p = g @ a.v.transpose(-2, -1)
    d_p = d_p.abs() + (g * g @ (a.v * a.v).transpose(-2, -1)).sqrt()  # with its own dot product's terms
    d_s = a.p * (d_p + (a.p * d_p).sum(-1, keepdim=True))
    return {"query": a.scale * _summed(d_s, a.k),
            "key": _folded(a.scale * _summed(d_s.transpose(-2, -1), a.q), a.groups),
            "value": _folded(_summed(a.p.transpose(-2, -1), g), a.groups)}
