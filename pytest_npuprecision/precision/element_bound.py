"""The error bound of each element: what a fair kernel may err by, from its golden, its terms' norm and
its inputs' sensitivity, in the output format's units (the bound of docs/standards.md#error-bound).
"""

from __future__ import annotations

import math

import torch

from ..common import FloatFormat

ROUNDING_DOMINATED = 4  # bound <= 4·u·|golden|: the output's rounding and little else


def flat_term_norm(term_norm, shape, device, work):
    if term_norm is None:
        return None
    norm = term_norm.detach().to(device=device, dtype=work)
    if norm.numel() == math.prod(shape) and norm.shape != torch.Size(shape):
        norm = norm.reshape(shape)  # the same elements flattened (a weight's terms over its normalized shape)
    return norm.broadcast_to(shape).reshape(-1)


def subnormal_floor(fmt: FloatFormat, roundings: int) -> float:
    """What a fair result may err by where it is subnormal, however small it is: half a quantum (the
    format's smallest subnormal) for rounding the output, and a whole one for each intermediate
    rounding, whose error later steps scale (a float16 division's divisor gradient -g·((x/y)/y)
    rounds three times and errs about 3 quanta there). Relative to a normal result it is negligible."""
    return (0.5 + roundings) * fmt.smallest_subnormal


def small_value_rule(fmt: FloatFormat | None, rtol: float, roundings: int) -> tuple[float, float]:
    """The absolute standard's two regimes: below the smallest normal number, where the format's spacing
    stops shrinking, an element may err by rtol times that number (what rtol allows the smallest normal
    result) plus a quantum per intermediate rounding; above it, by rtol of its own size. Both follow
    the dtype's range, not the data's scale. Outputs that are no float have no small values."""
    if fmt is None:
        return 1.0, 0.0
    smallest_normal = math.ldexp(1.0, fmt.min_exponent)
    return smallest_normal, rtol * smallest_normal + roundings * fmt.smallest_subnormal


def error_bound(abs_g, term_norm, sensitivity, fmt: FloatFormat, per_scale: float, golden_rms: float, work,
                input_share: float = 0.0, roundings: int = 0):
    """u·|golden| + per_scale·scale + the subnormal floor (+ the sensitivity's and the math mode's
    shares): see ErrorBound."""
    scale = abs_g.clamp(min=golden_rms)
    terms = None
    if term_norm is not None:  # terms that overflowed or are NaN say nothing: the plain scale there
        finite = torch.isfinite(term_norm)
        scale = torch.where(finite, term_norm + abs_g, scale)
        terms = torch.where(finite, term_norm, scale) if input_share else None
    floor = max(subnormal_floor(fmt, roundings), torch.finfo(work).tiny)
    bound = fmt.unit_roundoff * abs_g + per_scale * scale + floor
    if input_share:  # rounded inputs err per term, so they cancel with the terms, not with |golden|
        bound = bound + input_share * (scale if terms is None else terms)
    if sensitivity is not None:  # in the compute dtype's units: half types compute in float32
        bound = bound + fmt.accumulator.unit_roundoff * torch.where(torch.isfinite(sensitivity), sensitivity, 0)
    return bound


# A round-to-nearest result errs uniformly within half its spacing, and the spacing of a value
# m·2^e (m in [1, 2)) is 2u·2^e: the RMS error is sqrt(E[(2u/m)^2] / 12) of u times the value, 0.42
# over mantissas spread as sums' are (Benford's law), and at most 0.47 where partial sums crowd the
# low half of their last binade (positive terms whose sum ends at 1.5·2^e: m uniform in [1, 1.5)).
ROUNDING_RMS = 0.47
# One rounding's RMS error where the values crowd the bottom of their binade (m near 1): 1/sqrt(3) of u.
ONE_ROUNDING_RMS = 1 / math.sqrt(3)
# What the roundings that made each term add, in units of ROUNDING_RMS·u_acc·|term| squared: a
# product's one, a squared difference's three ((x - y)^2 doubles its difference's): 1 + 4.
TERM_ROUNDINGS = 5


def order_widening(samples: float) -> float:
    """How far a fair order's RMS error may stray above its expected value by chance: 4 sigma of a mean
    of ``samples`` independent squares, 1 + 2·sqrt(2/n) (a scalar, n = 1: 3.8 times)."""
    return 1 + 2 * math.sqrt(2 / max(samples, 1))


def order_rmse(golden, term_norm, fmt: FloatFormat, length: float, roundings: int, work, chunk: int = 1 << 18) -> float:
    """The RMS error, expected, of the fair kernel that errs most where the output sums its terms: one
    that adds them one at a time, in the accumulator's precision (a pairwise or blocked sum errs less).

    Its partial sums S_k run from 0 to the result g as a bridge over the K terms of norm t, so
    sum_k S_k^2 is about K·(g^2/3 + t^2/6), and each addition errs ROUNDING_RMS·u_acc·|S_k|, at random;
    the terms' own roundings add TERM_ROUNDINGS·t^2 to that. The output's rounding, and each
    intermediate one the rule counts, add ONE_ROUNDING_RMS·u of |g| or of the scale (t + |g|). Where
    terms repeat, ``length`` is K·repeats: runs of one value err alike (Accumulation.repeats).
    ``golden`` and ``term_norm`` are flat; finite elements only, ``chunk`` at a time."""
    u, u_acc = fmt.unit_roundoff, fmt.accumulator.unit_roundoff
    total, count = 0.0, 0
    for start in range(0, golden.numel(), chunk):
        g = golden[start:start + chunk].to(device=term_norm.device, dtype=work).abs()
        t = term_norm[start:start + chunk]
        finite = torch.isfinite(g) & torch.isfinite(t)
        g, t = torch.where(finite, g, 0), torch.where(finite, t, 0)
        square = (ROUNDING_RMS * u_acc)**2 * (length * (g * g / 3 + t * t / 6) + TERM_ROUNDINGS * t * t) \
            + (ONE_ROUNDING_RMS * u)**2 * (g * g + roundings * (t + g).square())
        total += float(square.sum())
        count += int(torch.count_nonzero(finite))
    return math.sqrt(total / count) if count else 0.0
