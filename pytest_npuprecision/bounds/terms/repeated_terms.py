"""How often the terms of a sum repeat one value: where they do, their roundings stop being independent.

Adding one value c to a partial sum that stays in one binade errs the same amount every time (the
partial sum sits on that binade's grid, so c's offset from the grid is the same), and a sum whose K
terms take each of D values about r = 1 + (K - 1) / D times errs along each value's run linearly, not
as a random walk: about sqrt(K·r) roundings' worth where independent ones give sqrt(K). A conv's bias
gradient behind a global average pool (one gradient value spread over every position), a sum of a
constant row, a matmul of repeated values: torch's own float32 kernels err there 20 times the
independent bound. The bound counts them as correlated (Accumulation.repeats) instead.

The terms are products of the op's summed factors (the input of a sum, both operands of a matmul, the
output gradient and the other operand of a gradient): a term repeats only where every factor does, so
the distinct terms number the product of the factors' distinct values, at most.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch

SAMPLE = 1 << 14  # values of each factor looked at, evenly strided, and the longest run looked at whole
WINDOWS = 8  # runs of consecutive values looked at, evenly spaced


def distinct_values(factor: torch.Tensor, length: int) -> float:
    """How many distinct nonzero values ``factor`` feeds one sum of ``length`` terms, at fewest: over the
    whole tensor (a strided sample), or within runs of ``length`` consecutive values, which a sum over
    the last dims or a channel's plane sees (the median of WINDOWS such runs). A gradient spread by a
    pool holds 32 values in all but 4 in each channel's sum. Zeros add exactly: they are not counted."""
    flat = factor.detach().reshape(-1)
    step = max(1, flat.numel() // SAMPLE)
    overall = _distinct(flat[::step][:SAMPLE])
    run = min(length, SAMPLE, flat.numel())
    starts = torch.linspace(0, flat.numel() - run, WINDOWS).long().unique().tolist()
    local = sorted(_distinct(flat[start:start + run]) for start in starts)[len(starts) // 2] * length / run
    return min(overall, local)


def _distinct(sample: torch.Tensor) -> float:
    """The distinct nonzero values behind ``sample``: the count seen where it repeats heavily, else from
    its collisions (of m draws from D equally likely values, about m²/2D collide); infinite where it
    holds no value twice."""
    sample = sample[torch.isfinite(sample) & (sample != 0)]
    drawn = sample.numel()
    if drawn < 2:
        return math.inf
    seen = int(torch.unique(sample).numel())
    if seen == drawn:
        return math.inf
    return float(seen) if 2 * seen <= drawn else max(seen, drawn * drawn / (2 * (drawn - seen)))


def term_repeats(factors: Iterable[torch.Tensor], length: int,
                 counted_before: dict[tuple[int, int], float] | None = None) -> float:
    """How many times, on average, a term's value recurs within its sum of ``length`` terms, whose terms
    are products of ``factors``' values: 1 + (K - 1) / D for D distinct terms, and at most K.
    counted_before: distinct_values already counted during one call, by (id of the factor, length): a
    call's gradients share its output gradient and its operands."""
    if length <= 1:
        return 1.0
    distinct, counted = 1.0, False
    for factor in factors:
        if isinstance(factor, torch.Tensor) and factor.is_floating_point() and factor.numel():
            if counted_before is None:
                distinct *= distinct_values(factor, length)
            else:
                key = (id(factor), length)
                if key not in counted_before:
                    counted_before[key] = distinct_values(factor, length)
                distinct *= counted_before[key]
            counted = True
            if math.isinf(distinct):
                return 1.0
    if not counted:
        return 1.0
    return min(1 + (length - 1) / max(distinct, 1.0), float(length))
