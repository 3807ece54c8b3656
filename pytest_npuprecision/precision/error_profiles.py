"""How the error of one failing output is distributed, in a few dozen numbers a report can plot.

The verdict keeps only summary metrics (the maximum, the mean, the worst element). A person deciding
whether a failure is one bad element or a shifted distribution wants its shape: a histogram of the
per-element error in units in the last place (ULP) of the output dtype, in power-of-two bins, and a
small sample of (golden, device) value pairs, the worst elements first, for a scatter plot.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch

from ..common import float_format

FIRST_EXPONENT = -4  # the first histogram bin counts errors in (0, 2^-4] ULP
_CHUNK = 1 << 20
_WORST = 8  # elements with the largest error, always in the sample
_SPREAD = 40  # evenly spaced elements, for the shape of the whole output


@dataclass(frozen=True)
class ErrorProfile:
    """The error distribution of one output.

    unit: "ulp" for float outputs (error over the spacing of the output dtype at the golden), "abs"
        for integer and bool outputs. counts[i] is the number of finite elements whose error lies in
        (2^(first_exponent + i - 1), 2^(first_exponent + i)], the first bin taking everything in
        (0, 2^first_exponent] and the last ending at the largest error; zero counts exact elements.
    sample: (golden, device, signed error in unit) for the worst elements, then evenly spaced ones.
    """

    unit: str
    numel: int
    nonfinite: int  # elements with an inf or nan on either side: not in the histogram or the sample
    zero: int
    first_exponent: int
    counts: tuple[int, ...]
    sample: tuple[tuple[float, float, float], ...]
    worst: int  # how many of the sample's first entries are the worst elements

    def as_dict(self) -> dict:
        out = asdict(self)
        out["counts"] = list(self.counts)
        out["sample"] = [list(s) for s in self.sample]
        return out


def error_profile(actual: torch.Tensor, golden: torch.Tensor) -> ErrorProfile:
    """Histogram and sample of the per-element error of ``actual`` against ``golden`` (same shape)."""
    floating = actual.dtype.is_floating_point
    first = FIRST_EXPONENT if floating else 0
    flat_a = actual.detach().reshape(-1)
    flat_g = golden.detach().reshape(-1)
    numel = flat_a.numel()
    bins = torch.zeros(0, dtype=torch.int64)
    zero = nonfinite = 0
    worst_err = torch.zeros(0, dtype=torch.float64)
    worst_index = torch.zeros(0, dtype=torch.int64)
    for start in range(0, numel, _CHUNK):
        a, g, err = _signed_error(flat_a[start:start + _CHUNK], flat_g[start:start + _CHUNK], floating)
        finite = torch.isfinite(err)
        nonfinite += int((~finite).sum())
        size = torch.where(finite, err.abs(), -1.0)
        zero += int((size == 0).sum())
        positive = size[size > 0]
        exponents = torch.ceil(torch.log2(positive)).clamp(min=first).to(torch.int64) - first
        chunk_bins = torch.bincount(exponents)
        width = max(bins.numel(), chunk_bins.numel())
        bins = _padded(bins, width) + _padded(chunk_bins, width)
        top = torch.topk(size, min(_WORST, size.numel()))
        worst_err = torch.cat([worst_err, top.values])
        worst_index = torch.cat([worst_index, top.indices + start])
    order = torch.argsort(worst_err, descending=True, stable=True)
    picked = [int(i) for i, e in zip(worst_index[order], worst_err[order]) if e > 0][:_WORST]
    spread = torch.linspace(0, max(numel - 1, 0), min(_SPREAD, numel)).round().to(torch.int64).tolist()
    indices = list(dict.fromkeys(picked + spread))
    return ErrorProfile(
        unit="ulp" if floating else "abs",
        numel=numel,
        nonfinite=nonfinite,
        zero=zero,
        first_exponent=first,
        counts=tuple(int(c) for c in bins),
        sample=tuple(_sample(flat_a, flat_g, indices, floating)),
        worst=len(picked),
    )


def _signed_error(a_raw: torch.Tensor, g_raw: torch.Tensor, floating: bool):
    a = a_raw.cpu().to(torch.float64)
    g = g_raw.cpu().to(torch.float64)
    diff = a - g
    if not floating:
        return a, g, diff
    # The spacing of the output dtype at |golden|, on the subnormal grid below the normals (as metrics does).
    fmt = float_format(a_raw.dtype)
    tiny = math.ldexp(1.0, fmt.min_exponent)
    exponent = torch.frexp(g.abs().clamp(min=tiny)).exponent - 1
    return a, g, diff / torch.exp2((exponent - fmt.mantissa_bits).to(torch.float64))


def _padded(counts: torch.Tensor, width: int) -> torch.Tensor:
    return torch.nn.functional.pad(counts, (0, width - counts.numel()))


def _sample(flat_a, flat_g, indices: list[int], floating: bool):
    if not indices:
        return
    where = torch.tensor(indices, dtype=torch.int64)
    a, g, err = _signed_error(flat_a[where], flat_g[where], floating)
    for golden, actual, error in zip(g.tolist(), a.tolist(), err.tolist()):
        if math.isfinite(error):
            yield _short(golden), _short(actual), _short(error)


def _short(value: float) -> float:
    """Eight significant digits: enough to plot, small in a JSON record."""
    return float(f"{value:.8g}")
