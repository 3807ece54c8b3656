"""Outputs that are unique only up to sign: each side's choice aligned to the golden's before judging.

A singular vector, an eigenvector of a symmetric matrix and a column of Q in QR are each determined
up to its sign, and LAPACK's float32 and float64 paths may pick either: a fair float32 SVD then
differs from the golden by 2|u| in whole columns. So the device's (and the baseline's) vectors are
flipped where they point against the golden's, and the factor that carries the same sign (Vh's
rows, R's rows) with them. The flip is exact, so it hides no error. Gradients are left alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import torch

# op -> (the output whose columns carry the sign, [(another output, the dim of it that flips along)])
_SIGNED: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {
    "svd": ("output.0", (("output.2", -2),)),  # U's columns with Vh's rows (torch.svd's V: its columns)
    "eigh": ("output.1", ()),  # the eigenvectors' columns
    "qr": ("output.0", (("output.1", -2),)),  # Q's columns with R's rows
}


def aligned(op, outputs: Sequence) -> list:
    """The outputs (runner.RunOutput) of ``op`` (ops.ResolvedOp) with each vector of the device and
    baseline flipped towards the golden's, for ops whose vectors are unique only up to sign."""
    rule = _SIGNED.get(op.base_name)
    by_name = {o.name: o for o in outputs}
    if rule is None or rule[0] not in by_name:
        return list(outputs)
    vectors, carried = rule
    if op.func is torch.svd:
        carried = (("output.2", -1),)  # torch.svd returns V, whose columns carry the sign
    signs = {side: _signs(getattr(by_name[vectors], side), by_name[vectors].golden)
             for side in ("actual", "baseline") if getattr(by_name[vectors], side) is not None}
    flipped = {vectors: -1}
    flipped.update(dict(carried))
    result = []
    for out in outputs:
        if out.name in flipped and out.actual.is_floating_point() and out.actual.dim() >= 2:
            dim = flipped[out.name]
            changes = {side: _flip(getattr(out, side), _sized(sign, getattr(out, side).shape[dim]), dim)
                       for side, sign in signs.items() if getattr(out, side) is not None}
            out = replace(out, **changes)
        result.append(out)
    return result


def _signs(side: torch.Tensor, golden: torch.Tensor) -> torch.Tensor:
    """Per column (the last dim), +1 or -1: the sign of the column's dot product with the golden's."""
    dots = (side.double() * golden.to(side.device).double()).sum(-2)
    return torch.where(dots < 0, -1.0, 1.0)


def _sized(sign: torch.Tensor, size: int) -> torch.Tensor:
    """The signs of the first ``size`` vectors: a full U (or Vh) has vectors past the k singular values
    that carry no sign into the other factor, whose own extra vectors keep theirs."""
    if sign.shape[-1] >= size:
        return sign[..., :size]
    return torch.cat([sign, sign.new_ones((*sign.shape[:-1], size - sign.shape[-1]))], -1)


def _flip(t: torch.Tensor, sign: torch.Tensor, dim: int) -> torch.Tensor:
    """``t`` with its slices along ``dim`` (-1: columns, -2: rows) multiplied by ``sign``."""
    shaped = sign.unsqueeze(-1) if dim == -2 else sign.unsqueeze(-2)
    return (t.double() * shaped.to(t.device)).to(t.dtype)
