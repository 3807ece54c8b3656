"""Deterministic tensors that fit the statistics msprobe keeps in ``task: statistics`` dumps.

A statistics dump keeps only dtype, shape, Max, Min, Mean and Norm of each tensor. msprobe
regenerates inputs uniformly on [Min, Max], turns a tensor with one NaN into an all-NaN tensor
and overflows wide fp16 ranges. Here instead:

* floats have the dumped Mean and the std implied by Norm (std² = Norm²/n − Mean²), with Min and
  Max present as elements: a normal clipped to [Min, Max] and re-standardized where the range
  leaves it room or a bound of zero may pile up (relu), else a Beta of the range or a skewed
  log-normal tail, so that no nonzero value is repeated by construction;
* a non-finite Max/Min/Mean/Norm puts only a few NaN / ±inf elements in a finite tensor;
* values are made in float64, clamped to the dtype's finite range, and only then cast;
* a small table of op roles keeps indices, class targets, masks and probabilities valid.

Everything comes from one local ``torch.Generator`` seeded by the caller, never the global RNG.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import torch

if TYPE_CHECKING:
    from .descriptors import TensorSpec


class RoleKind(enum.Enum):
    INDEX = "index"  # positions into a dimension of another argument
    CLASS_TARGET = "class target"  # labels of a classification loss, or its ignore_index
    MASK = "mask"  # only 0 and 1 (False and True)
    PROBABILITY = "probability"  # values in [0, 1]
    POSITIVE = "positive"  # the op's domain is x > 0 (log, sqrt, rsqrt)


@dataclass(frozen=True)
class Role:
    """What an argument means to its op, beyond its statistics."""

    kind: RoleKind
    size_of: tuple[str, ...] = ()  # where-paths of the argument whose size bounds an index
    dim: int | None = 0  # which dimension of it; None: its number of elements
    dim_from: tuple[str, ...] = ()  # where-paths of an int argument that gives the dimension instead
    ignore_from: tuple[str, ...] = ()  # where-paths of the loss's ignore_index argument
    ignore_default: int | None = None
    limit: int | None = None  # exclusive upper bound, filled in by arguments.resolve_role
    ignore_index: int | None = None  # filled in by arguments.resolve_role


def _param(name: str, position: int) -> tuple[str, str]:
    """The two places an argument can be dumped: by position or by keyword."""
    return f"input_args[{position}]", f"input_kwargs[{name!r}]"


_INDEX_OF_WEIGHT = Role(RoleKind.INDEX, size_of=_param("weight", 1), dim=0)
_INDEX_ALONG_DIM = Role(RoleKind.INDEX, size_of=_param("input", 0), dim_from=_param("dim", 1))
_CLASS_TARGET = Role(RoleKind.CLASS_TARGET, size_of=_param("input", 0), ignore_from=_param("ignore_index", 4),
                     ignore_default=-100)
_MASK = Role(RoleKind.MASK)
_PROBABILITY = Role(RoleKind.PROBABILITY)
_POSITIVE = Role(RoleKind.POSITIVE)

# op name (last dotted part) -> ((where-paths of the argument, its role), ...). Tensor methods
# dump ``self`` as input_args[0], so one row covers torch.X, Tensor.X and F.X alike.
ROLE_TABLE: dict[str, tuple[tuple[tuple[str, ...], Role], ...]] = {
    "embedding": ((_param("input", 0), _INDEX_OF_WEIGHT),),
    "embedding_bag": ((_param("input", 0), _INDEX_OF_WEIGHT),),
    "index_select": ((_param("index", 2), _INDEX_ALONG_DIM),),
    "gather": ((_param("index", 2), _INDEX_ALONG_DIM),),
    "take": ((_param("index", 1), Role(RoleKind.INDEX, size_of=_param("input", 0), dim=None)),),
    "cross_entropy": ((_param("target", 1), _CLASS_TARGET),),
    "nll_loss": ((_param("target", 1), _CLASS_TARGET),),
    "binary_cross_entropy": ((_param("input", 0), _PROBABILITY), (_param("target", 1), _PROBABILITY)),
    "masked_fill": ((_param("mask", 1), _MASK),),
    "masked_fill_": ((_param("mask", 1), _MASK),),
    "masked_select": ((_param("mask", 1), _MASK),),
    "masked_scatter": ((_param("mask", 1), _MASK),),
    "where": ((_param("condition", 0), _MASK),),
    "log": ((_param("input", 0), _POSITIVE),),
    "log2": ((_param("input", 0), _POSITIVE),),
    "log10": ((_param("input", 0), _POSITIVE),),
    "sqrt": ((_param("input", 0), _POSITIVE),),
    "rsqrt": ((_param("input", 0), _POSITIVE),),
}


def role_for(op_name: str, where: str) -> Role | None:
    """The role of the argument at ``where`` (e.g. ``input_args[0]``) of op ``op_name``, if any."""
    for wheres, role in ROLE_TABLE.get(op_name.rsplit(".", 1)[-1], ()):
        if where in wheres:
            return role
    return None


def synthesize(spec: "TensorSpec", generator_seed: int, *, role: Role | None = None) -> torch.Tensor:
    """A CPU tensor of ``spec.dtype`` and ``spec.shape`` that fits the spec's statistics."""
    gen = torch.Generator().manual_seed(generator_seed)
    n = math.prod(spec.shape)
    if n == 0:
        return torch.empty(spec.shape, dtype=spec.dtype)
    kind = role.kind if role else None
    if spec.dtype == torch.bool or kind is RoleKind.MASK:
        flat = _bools(spec, n, gen).to(spec.dtype)
    elif spec.dtype.is_complex:
        flat = _complex(spec, n, gen)
    elif spec.dtype.is_floating_point:
        flat = _floats(spec, n, gen, kind)
    else:
        flat = _integers(spec, n, gen, role)
    return flat.reshape(spec.shape)


def _bools(spec: "TensorSpec", n: int, gen: torch.Generator) -> torch.Tensor:
    # bool statistics are Max = any() and Min = all().
    any_true = True if spec.max is None else bool(spec.max)
    all_true = False if spec.min is None else bool(spec.min)
    if not any_true or all_true:
        return torch.full((n,), any_true, dtype=torch.bool)
    flat = torch.rand(n, generator=gen) < 0.5
    if n >= 2:
        first, second = torch.randperm(n, generator=gen)[:2].tolist()
        flat[first], flat[second] = True, False
    return flat


def _integers(spec: "TensorSpec", n: int, gen: torch.Generator, role: Role | None) -> torch.Tensor:
    info = torch.iinfo(spec.dtype)
    low = info.min if spec.min is None else max(int(spec.min), info.min)
    high = info.max if spec.max is None else min(int(spec.max), info.max)
    low, high = min(low, high), max(low, high)
    extra: list[int] = []
    if role is not None and role.limit is not None and role.limit > 0:
        if role.ignore_index is not None and low <= role.ignore_index <= high \
                and not 0 <= role.ignore_index < role.limit:
            extra = [role.ignore_index] * _few(n)  # the dump shows ignored targets: keep a few
        low, high = _intersect(low, high, 0, role.limit - 1)
    flat = _randint(low, high, n, gen)
    pinned = ([low, high] + extra)[:n]
    places = torch.randperm(n, generator=gen)[: len(pinned)]
    flat[places] = torch.tensor(pinned, dtype=torch.int64)
    return flat.to(spec.dtype)


def _randint(low: int, high: int, n: int, gen: torch.Generator) -> torch.Tensor:
    if high - low < 2**62:
        return torch.randint(low, high + 1, (n,), generator=gen, dtype=torch.int64)
    # A span this wide does not fit randint's int64 arithmetic; draw a narrower one and clamp.
    return torch.randint(-(2**62), 2**62, (n,), generator=gen, dtype=torch.int64).clamp_(low, high)


def _intersect(low: int, high: int, lo: int, hi: int) -> tuple[int, int]:
    """The overlap of two ranges, or the second range when they do not overlap (bad statistics)."""
    new_low, new_high = max(low, lo), min(high, hi)
    return (new_low, new_high) if new_low <= new_high else (lo, hi)


def _few(n: int) -> int:
    """How many special elements to place: at least one, about 1%, never more than 16."""
    return max(1, min(16, n // 100))


def _stat(value) -> float | None:
    return None if value is None else float(value)


def _floats(spec: "TensorSpec", n: int, gen: torch.Generator, kind: RoleKind | None) -> torch.Tensor:
    top, bottom, mean, norm = (_stat(v) for v in (spec.max, spec.min, spec.mean, spec.norm))
    if top is None or bottom is None:
        raise ValueError(f"{spec.where} has no Min/Max to synthesize a {spec.dtype} tensor from")
    if top == -math.inf or bottom == math.inf:  # every element is that infinity (or NaN)
        return torch.full((n,), math.inf if bottom == math.inf else -math.inf, dtype=spec.dtype)
    specials = _non_finite_elements(top, bottom, mean, norm, n)
    lo, hi = _finite_range(bottom, top)
    if kind is RoleKind.PROBABILITY:
        lo, hi = _intersect_float(lo, hi, 0.0, 1.0)
    info = torch.finfo(spec.dtype)
    lo, hi = max(lo, -info.max), min(hi, info.max)
    pinned = specials + [v for v in (bottom, top) if math.isfinite(v) and lo <= v <= hi]
    pinned = pinned[:n]
    bulk_lo = lo
    if kind is RoleKind.POSITIVE and lo == 0 < hi:
        # The Min element is still placed once; the rest stays off the pole / -inf at zero.
        bulk_lo = hi * 1e-3
    fit = (mean, norm) if not specials else (None, None)
    bulk = _bulk(n - len(pinned), n, pinned, fit, bulk_lo, hi, gen)
    flat = torch.empty(n, dtype=torch.float64)
    places = torch.randperm(n, generator=gen)
    flat[places[: len(pinned)]] = torch.tensor(pinned, dtype=torch.float64)
    flat[places[len(pinned):]] = bulk
    finite = torch.isfinite(flat)
    flat = torch.where(finite, flat.clamp(-info.max, info.max), flat)
    return flat.to(spec.dtype)


def _non_finite_elements(top: float, bottom: float, mean: float | None, norm: float | None, n: int) -> list[float]:
    """A few NaN / ±inf values that the statistics say are present, one of each kind first.

    A NaN Max, Min or Norm means NaN elements (torch.max/min/norm propagate NaN); a NaN Mean means
    NaN unless +inf and -inf are both present. An infinite Norm with finite Max and Min is read as
    the statistic overflowing in a narrow dtype, not as inf elements.
    """
    kinds = []
    if math.isinf(top) or math.isinf(bottom):
        kinds += [v for v in (-math.inf, math.inf) if v in (top, bottom)]
    both_inf = top == math.inf and bottom == -math.inf
    if any(v is not None and math.isnan(v) for v in (top, bottom, norm)) or (
            mean is not None and math.isnan(mean) and not both_inf):
        kinds.append(math.nan)
    if not kinds:
        return []
    copies = max(1, min(_few(n), (n - 2) // len(kinds)))
    return [v for _ in range(copies) for v in kinds]


def _finite_range(bottom: float, top: float) -> tuple[float, float]:
    """The range of the finite elements; a default of width max(1, |bound|) beside a lone finite bound."""
    lo = bottom if math.isfinite(bottom) else None
    hi = top if math.isfinite(top) else None
    if lo is None and hi is None:
        return -1.0, 1.0
    if lo is None:
        return hi - 2 * max(1.0, abs(hi)), hi
    if hi is None:
        return lo, lo + 2 * max(1.0, abs(lo))
    return min(lo, hi), max(lo, hi)


def _intersect_float(lo: float, hi: float, a: float, b: float) -> tuple[float, float]:
    new_lo, new_hi = max(lo, a), min(hi, b)
    return (new_lo, new_hi) if new_lo <= new_hi else (a, b)


def _bulk(count: int, n: int, pinned: list[float], fit, lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    """``count`` values in [lo, hi] so that, with ``pinned``, the n elements have the dumped Mean and Norm."""
    if count <= 0:
        return torch.empty(0, dtype=torch.float64)
    if lo >= hi:
        return torch.full((count,), lo, dtype=torch.float64)
    target = _bulk_moments(count, n, pinned, *fit, lo, hi)
    if target is None:  # no usable Mean/Norm: the range is all we know
        return torch.rand(count, generator=gen, dtype=torch.float64) * (hi - lo) + lo
    mean, std = target
    if std > 0 and min(mean - lo, hi - mean) < NORMAL_CLEARANCE * std and not _piles_at_zero(mean, lo, hi):
        return _bounded(count, mean, std, lo, hi, gen)
    values = torch.randn(count, generator=gen, dtype=torch.float64) * std + mean
    # Clipping to [lo, hi] moves the mean and shrinks the spread; re-standardize a few times, until
    # nothing is left to clip.
    for _ in range(8):
        values.clamp_(lo, hi)
        spread = values.std(correction=0)
        values = (values - values.mean()) * (std / spread) + mean if spread > 0 else values - values.mean() + mean
        smallest, largest = torch.aminmax(values)
        if lo <= smallest and largest <= hi:
            return values
    return values.clamp_(lo, hi)


# A normal whose mean is this many stds inside both bounds loses under 0.2 % of its mass to clipping.
NORMAL_CLEARANCE = 3.0


# A Beta shape parameter below this puts whole percents of the range's elements within a float's
# resolution of that bound (P(x < eps) ~ eps^alpha): copies of the bound again.
BETA_POLE = 0.5


def _piles_at_zero(mean: float, lo: float, hi: float) -> bool:
    """A bound of zero nearer the mean than the other: relu, a mask, a clamp. Those tensors do hold
    many exact zeros, and zeros add exactly, so a pile there is both faithful and harmless."""
    return (lo == 0 and mean - lo <= hi - mean) or (hi == 0 and hi - mean <= mean - lo)


def _bounded(count: int, mean: float, std: float, lo: float, hi: float, gen: torch.Generator) -> torch.Tensor:
    """Values in [lo, hi] with this mean and std where a clipped normal would pile many elements at a
    bound: copies of one value that every sum then rounds alike, so that even a fair kernel's errors
    lean one way. Where no bound is a strong pole, the range's Beta of these moments (uniform-like ranges);
    else a log-normal tail away from the pole's side, what gradients and activations with rare
    large values look like. Either is continuous: no two elements share a value by construction."""
    width = hi - lo
    centre, spread = (mean - lo) / width, (std / width) ** 2
    common = centre * (1 - centre) / spread - 1  # > 0 below the Bhatia–Davis limit
    alpha, beta = centre * common, (1 - centre) * common
    if min(alpha, beta) >= BETA_POLE:
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=gen)))
        return torch.from_numpy(lo + width * rng.beta(alpha, beta, count))
    # A log-normal tail from the pole's bound, with the mean's offset from there and the std; the far
    # bound clips its longest values, so refit the two a few times on the same draws. The refit works
    # on the tail's length alone, in numpy: a few small ops a round, in every tensor a statistics dump's
    # cases synthesize.
    side, pole = (1.0, lo) if alpha < beta else (-1.0, hi)
    normal = torch.randn(count, generator=gen, dtype=torch.float64).numpy()
    wanted_offset = abs(mean - pole)
    offset, spread, tail = wanted_offset, std, None
    for _ in range(8):
        sigma2 = math.log1p((spread / offset) ** 2)
        tail = np.minimum(np.exp(normal * math.sqrt(sigma2) + (math.log(offset) - sigma2 / 2)), width)
        got_offset = float(tail.sum()) / count
        got_std = math.sqrt(max(float(tail @ tail) / count - got_offset * got_offset, 0.0))
        if not (got_offset > 0 and got_std > 0) or _close(got_offset, wanted_offset) and _close(got_std, std):
            break
        offset, spread = offset * wanted_offset / got_offset, spread * std / got_std
    return torch.from_numpy(np.clip(pole + side * tail, lo, hi))


def _close(got: float, wanted: float) -> bool:
    return abs(got - wanted) <= 1e-9 * abs(wanted)


def _bulk_moments(count: int, n: int, pinned: list[float], mean: float | None, norm: float | None,
                  lo: float, hi: float) -> tuple[float, float] | None:
    if mean is None or norm is None or not (math.isfinite(mean) and math.isfinite(norm)):
        return None
    if not lo <= mean <= hi:
        return None  # inconsistent statistics
    # What the pinned elements leave for the bulk: sum = n·Mean, sum of squares = Norm².
    bulk_mean = (n * mean - sum(pinned)) / count
    bulk_square = (norm * norm - sum(v * v for v in pinned)) / count
    if not lo <= bulk_mean <= hi or bulk_square < 0:
        bulk_mean, bulk_square = mean, norm * norm / n
    variance = max(bulk_square - bulk_mean * bulk_mean, 0.0)
    # No distribution on [lo, hi] with this mean has a larger variance (Bhatia–Davis).
    variance = min(variance, (bulk_mean - lo) * (hi - bulk_mean))
    return bulk_mean, math.sqrt(variance)


def _complex(spec: "TensorSpec", n: int, gen: torch.Generator) -> torch.Tensor:
    # msprobe's complex statistics describe |x|: draw the magnitudes, then a uniform phase.
    real_dtype = torch.float64 if spec.dtype == torch.complex128 else torch.float32
    magnitude_spec = replace(spec, dtype=real_dtype, shape=(n,))
    magnitude = _floats(magnitude_spec, n, gen, None).clamp(min=0)
    phase = torch.rand(n, generator=gen, dtype=real_dtype) * (2 * math.pi)
    return torch.polar(magnitude, phase).to(spec.dtype)
