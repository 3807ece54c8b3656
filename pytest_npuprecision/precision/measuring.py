"""Computing the metrics of one output tensor against its golden, with torch where the data lives.

The tensors are walked in flat chunks so that a tensor of hundreds of millions of elements needs
only a few chunk-sized temporaries, and every reduction stays on the device until one final
transfer. Metrics are computed in float64 where the device has it (float32 elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import fields, replace
from typing import Sequence

import torch

from ..common import FloatFormat, float_format, quantized_grid
from .element_bound import ROUNDING_DOMINATED, error_bound, flat_term_norm, order_rmse, small_value_rule
from .metrics import CANCELLED, FIT_ELEMENTS, Accumulation, MetricParams, Metrics, WorstIndices, element_index
from .row_statistics import alike_rows, repetition_of, rounding_bound, row_statistics, shared_shift

_MIN_CHUNK = 1 << 16
_MAX_CHUNK = 1 << 18  # about 30 MiB of float64 temporaries per chunk of the metrics
_RMS_CHUNK = 1 << 20  # the golden's RMS takes two temporaries per chunk


def compute_dtype(device: torch.device) -> torch.dtype:
    return torch.float64 if device.type in ("cpu", "cuda") else torch.float32


def compute_metrics(
    actual: torch.Tensor,
    golden: torch.Tensor,
    params: MetricParams,
    accumulation: Accumulation | None = None,
) -> Metrics:
    """Every metric of ``actual`` (any dtype) against ``golden`` (same shape, higher precision)."""
    return compute_metrics_each((actual,), golden, params, accumulation)[0]


def compute_metrics_each(
    actuals: Sequence[torch.Tensor],
    golden: torch.Tensor,
    params: MetricParams,
    accumulation: Accumulation | None = None,
) -> list[Metrics]:
    """The metrics of each of ``actuals`` (one dtype and shape: a device's and a baseline's output)
    against one golden, whose share of the work (conversions, ulps, bounds) is done once per chunk."""
    first = actuals[0]
    fmt = float_format(first.dtype) if first.dtype.is_floating_point else None
    device = first.device
    work = compute_dtype(device)
    flats = [a.detach().reshape(-1) for a in actuals]
    flat_g = golden.detach().reshape(-1)
    numel = flats[0].numel()
    if numel == 0:
        return [_empty(a) for a in actuals]
    acc = accumulation or Accumulation()
    if acc.shared and acc.shared_dim is not None:
        return _rows_along(actuals, golden, params, acc)
    term_norm = flat_term_norm(acc.term_norm, first.shape, device, work)
    sensitivity = flat_term_norm(acc.sensitivity, first.shape, device, work)
    shifts = [shared_shift(f, flat_g, acc.length, fmt, work) if acc.shared and fmt is not None else None
              for f in flats]
    golden_rms = _finite_rms(flat_g, device, work)
    chunk = max(_MIN_CHUNK, min(_MAX_CHUNK, numel // 16 or 1))
    totals = [_Totals(device) for _ in actuals]
    for start in range(0, numel, chunk):
        stop = start + chunk
        part = None if term_norm is None else term_norm[start:stop]
        moved = None if sensitivity is None else sensitivity[start:stop]
        shared_golden = _GoldenChunk(flat_g[start:stop], first.dtype, device, part, moved, fmt, params, acc,
                                     golden_rms, work)
        for flat, shift, total in zip(flats, shifts, totals):
            total.add(*_chunk_partials(flat[start:stop], shared_golden, None if shift is None else shift[start:stop],
                                       start, fmt, params))
    groups = max(numel // acc.length, 1) if acc.correlated else None
    repetition = repetition_of(flat_g, device, work)
    sequential = _order_rmse(flat_g, term_norm, sensitivity, fmt, acc, work)
    combined = [replace(_combine(total, a, golden_rms), reduction_length=acc.length, bias_samples=groups,
                        repetition=repetition, order_rmse=sequential)
                for total, a in zip(totals, actuals)]
    if shifts[0] is None:
        return combined
    alike = alike_rows(flat_g, acc.length, device, work) if acc.one_rounding(fmt) or acc.row_sum else None
    rows = [row_statistics(flat, flat_g, first.shape, term_norm, sensitivity, fmt, acc, golden_rms, alike, work)
            for flat in flats]
    return [replace(m, mean_residual_ratio=row.residual, max_residual_ratio=row.max_residual,
                    row_order_ratio=row.order_ratio, row_order_lean=row.order_lean,
                    error_balance_noise=row.balance_noise,
                    rounding_bias_noise=row.lean_noise)
            for m, row in zip(combined, rows)]


def _rows_along(actuals: Sequence[torch.Tensor], golden: torch.Tensor, params: MetricParams,
                acc: Accumulation) -> list[Metrics]:
    """The metrics where each row is every output of one index along acc.shared_dim (a batch norm's
    channel): that dim moved first, so its rows run consecutively, and the worst indices moved back."""
    shape, dim = tuple(actuals[0].shape), acc.shared_dim
    if dim >= len(shape) or shape[dim] * acc.length != math.prod(shape):  # not the rows the rule meant
        return compute_metrics_each(actuals, golden, params, replace(acc, shared=False, shared_dim=None))

    def moved(t: torch.Tensor | None) -> torch.Tensor | None:
        if t is None:
            return None
        full = t.reshape(shape) if t.numel() == math.prod(shape) else t.broadcast_to(shape)
        return full.movedim(dim, 0)

    along = replace(acc, shared_dim=None, term_norm=moved(acc.term_norm), sensitivity=moved(acc.sensitivity),
                    shared_offset=moved(acc.shared_offset), shared_origin=moved(acc.shared_origin),
                    row_offset_size=moved(acc.row_offset_size))
    metrics = compute_metrics_each([a.movedim(dim, 0) for a in actuals], golden.movedim(dim, 0), params, along)
    return [replace(m, shape=shape, worst=_moved_back(m.worst, shape, dim)) for m in metrics]


def _moved_back(worst: WorstIndices, shape: tuple[int, ...], dim: int) -> WorstIndices:
    """WorstIndices of an output whose ``dim`` was moved first, as flat indices of the output itself."""
    moved_shape = (shape[dim],) + shape[:dim] + shape[dim + 1:]

    def back(index: int) -> int:
        if index < 0:
            return index
        moved = element_index(index, moved_shape)
        flat = 0
        for size, coord in zip(shape, (*moved[1:dim + 1], moved[0], *moved[dim + 1:])):
            flat = flat * size + coord
        return flat

    return WorstIndices(**{f.name: back(getattr(worst, f.name)) for f in fields(WorstIndices)})


def _order_rmse(flat_g, term_norm, sensitivity, fmt: FloatFormat | None, acc: Accumulation, work) -> float:
    """Metrics.order_rmse where the output is a plain sum of its terms (Accumulation.plain_sum, their
    norms known, nothing shared or sensitive), summed in its own format (float32, float64); 0 elsewhere.
    A half type's output rounding dwarfs its float32 sum's error, and fair kernels may round twice
    (an unfused bias); inputs rounded to a math mode (TF32, HF32) err per term far more than any
    order: the ceiling would measure those, not the order."""
    if fmt is None or not acc.plain_sum or acc.length <= 1 or term_norm is None or sensitivity is not None \
            or acc.shared or fmt.accumulator.unit_roundoff != fmt.unit_roundoff or acc.input_share(fmt):
        return 0.0
    return order_rmse(flat_g, term_norm, fmt, acc.length * acc.repeats, acc.roundings, work, _MAX_CHUNK)


def _finite_rms(flat_g: torch.Tensor, device, work) -> float:
    total = torch.zeros((), dtype=work, device=device)
    for start in range(0, flat_g.numel(), _RMS_CHUNK):
        g = flat_g[start : start + _RMS_CHUNK].to(device=device, dtype=work)
        g = torch.where(torch.isfinite(g), g, 0)
        total += torch.dot(g, g)
    return math.sqrt(total.item() / flat_g.numel())


# Names of the per-chunk partial results, in the order _chunk_partials returns them.
_SUMS = (
    "finite", "nan_actual", "nan_golden", "inf_actual", "inf_golden", "nonfinite_mismatch",
    "binary_mismatch", "sum_abs", "sum_sq", "normal_count", "sum_rel", "rel_over", "small_count",
    "small_over", "above", "below", "larger", "smaller", "sum_ulp", "ulp_over", "thousandth", "dot", "norm_a", "norm_g",
    "sum_bound", "sum_bias", "sum_magnitude_bias", "sum_shared_bias", "sum_shared_magnitude_bias",
    "sum_bias_sq", "sum_magnitude_bias_sq", "sum_constant_share",
    "rounding_elements", "rounding_up", "rounding_larger", "over_bound",
    "overflow", "range_overflow", "sum_err", "sum_g", "sum_err_g", "quantized_over",
)
# How far past half a unit a fair quantizer's integer may lie from its exact value, relative to it: the
# float32 steps before its rounding (a smoothing product, the row's scale, the quotient) err a few u each.
QUANTIZED_SLACK = 2.0**-20


def _grid_step(magnitude: torch.Tensor, fmt: FloatFormat, work) -> torch.Tensor:
    """The spacing of fmt's values at each |value| (its ulp; the subnormal spacing below the normal range)."""
    tiny = math.ldexp(1.0, fmt.min_exponent)
    exponent = torch.frexp(magnitude.clamp(min=tiny)).exponent - 1
    return torch.exp2((exponent - fmt.mantissa_bits).to(work))


def _off_grid(a: torch.Tensor, abs_err: torch.Tensor, golden: "_GoldenChunk", fmt: FloatFormat | None,
              both: torch.Tensor) -> torch.Tensor:
    """Metrics.quantized_over: the elements farther from the exact value than half a step of the output's grid,
    past the slack: the integers' unit, or a float8 format's spacing, the smaller of the golden's and the
    element's (so a value one step below a power of two, where the grid halves, is a step off, not half).
    Wider float formats, which no quantizer emits, count none."""
    if fmt is None:
        return torch.count_nonzero(both & (abs_err > 0.5 + QUANTIZED_SLACK * golden.abs_g.clamp(min=1)))
    if not quantized_grid(fmt.dtype):
        return torch.zeros((), dtype=torch.int64, device=a.device)
    step = torch.minimum(golden.ulp, _grid_step(a.abs(), fmt, a.dtype))
    return torch.count_nonzero(both & (abs_err > 0.5 * step + QUANTIZED_SLACK * golden.abs_g))


def _lean(rounding: torch.Tensor | None, signed: torch.Tensor, growth: torch.Tensor,
          both: torch.Tensor | None) -> list[torch.Tensor]:
    """The rounding-dominated elements finite on both sides, how many more of them sit above the golden
    rounded to the dtype than below, and how many more lie farther from zero than nearer."""
    if rounding is None:
        return [signed.new_zeros(())] * 3
    if both is not None:
        rounding = rounding & both
    return [torch.count_nonzero(rounding), (torch.sign(signed) * rounding).sum(), (torch.sign(growth) * rounding).sum()]


_MAXIMA = ("abs", "rel", "ulp", "bound")
_FIRSTS = ("nonfinite", "binary", "range_overflow")


class _Totals:
    """Running reductions over the chunks, updated in place.

    Keeping no per-chunk results alive matters: small tensors kept between large temporaries
    pin the allocator's heap, which then grows with every chunk instead of reusing its memory.
    """

    def __init__(self, device: torch.device):
        self.sums = torch.zeros(len(_SUMS), dtype=torch.float64, device=device)
        self.max_values = torch.full((len(_MAXIMA),), -1.0, dtype=torch.float64, device=device)
        self.max_indices = torch.full((len(_MAXIMA),), -1, dtype=torch.int64, device=device)
        self.firsts = torch.full((len(_FIRSTS),), _NONE, dtype=torch.int64, device=device)

    def add(self, sums, max_values, max_indices, firsts) -> None:
        self.sums += sums
        better = max_values > self.max_values
        self.max_values.copy_(torch.where(better, max_values, self.max_values))
        self.max_indices.copy_(torch.where(better, max_indices, self.max_indices))
        torch.minimum(self.firsts, firsts, out=self.firsts)


_NONE = torch.iinfo(torch.int64).max


def _first_true(mask: torch.Tensor, offset: int) -> torch.Tensor:
    """Flat index of the first True element plus offset, or _NONE when there is none."""
    index = torch.argmax(mask.to(torch.uint8)) + offset
    return torch.where(mask.any(), index, _NONE)


class _GoldenChunk:
    """One chunk of the golden and what follows from it alone: its dtype-rounded values, its ulps and
    each element's error bound. Shared by every output judged against it."""

    def __init__(self, g_raw, dtype, device, term_norm, sensitivity, fmt: FloatFormat | None, params, acc,
                 golden_rms, work):
        self.raw = g_raw
        self.g = g_raw.to(device=device, dtype=work)
        # The golden as the output dtype would hold it: rounding is not an error, overflow is expected.
        self.g_round = g_raw.to(device=device, dtype=dtype).to(work)
        self.fin = torch.isfinite(self.g_round)
        self.all_finite = bool(self.fin.all())
        # |golden| where it is finite: an element either side leaves non-finite is masked by its caller.
        abs_g = self.g.abs() if self.all_finite else torch.where(torch.isfinite(self.g), self.g.abs(), 0)
        self.abs_g = abs_g
        small_value, self.small_value_atol = small_value_rule(fmt, params.rtol, acc.roundings)
        self.small = abs_g < small_value
        # relative errors only where the sum did not cancel
        self.uncancelled = None if term_norm is None else abs_g >= CANCELLED * term_norm
        self.rel_scale = abs_g.clamp(min=small_value)
        self.ulp = self.bound = self.rounding = self.settled = self.constant_share = None
        if fmt is None:
            return
        self.ulp = _grid_step(abs_g, fmt, work)
        self.bound = error_bound(abs_g, term_norm, sensitivity, fmt, acc.per_scale(fmt), golden_rms, work,
                                  acc.input_share(fmt), acc.roundings)
        # Where the golden lies within its bound of zero (a sum that cancelled: a conv's bias gradient
        # ahead of a batch norm) any error makes |actual| larger: that says nothing of a scaling, so
        # growth in magnitude counts only where the golden's sign is settled.
        self.settled = abs_g > self.bound
        # Where the output is one rounding of a wider computation, the elements a condition number or
        # a long sum does not dominate: a fair kernel rounds them to nearest, a truncating one leans.
        once = acc.one_rounding(fmt)
        if once:
            bound = rounding_bound(abs_g, term_norm, sensitivity, fmt, acc, golden_rms, work) if acc.shared \
                else self.bound  # where rows share a factor, the rows as clusters allow for its error
            self.rounding = bound <= ROUNDING_DOMINATED * fmt.unit_roundoff * abs_g
        else:
            self.rounding = None
        # what one rounded constant shared by every element may move each element by (constant_share)
        self.constant_share = fmt.unit_roundoff * abs_g / self.bound


def _chunk_partials(a_raw, golden: _GoldenChunk, shift, offset, fmt: FloatFormat | None, params):
    device = a_raw.device
    work = golden.g.dtype
    a = a_raw.to(work)
    g, g_round, abs_g = golden.g, golden.g_round, golden.abs_g
    count = torch.count_nonzero
    fin_a, fin_g = torch.isfinite(a), golden.fin
    both = fin_a & fin_g
    all_finite = golden.all_finite and bool(fin_a.all())
    if all_finite:  # the common case: no masks needed
        same = a == g_round
        nonfinite_mismatch = None
        nan_a = nan_g = inf_a = inf_g = None
        diff = a - g
        a_fin, g_fin = a, g
    else:
        nan_a, nan_g = torch.isnan(a), torch.isnan(g_round)
        inf_a, inf_g = torch.isinf(a), torch.isinf(g_round)
        same = (a == g_round) | (nan_a & nan_g)
        # An inf of the right sign where the exact result passes the dtype's max is a fair overflow; at the max
        # itself (a saturating quantizer's golden) it is not.
        past_max = inf_a & (torch.sign(a) == torch.sign(g)) & torch.isfinite(g) & (
            g.abs() > (fmt.max if fmt is not None else math.inf))
        same |= past_max
        nonfinite_mismatch = ~both & ~same
        overflow = nonfinite_mismatch & inf_a & fin_g & (torch.sign(a) == torch.sign(g))
        diff = torch.where(both, a - g, 0)
        a_fin, g_fin = torch.where(both, a, 0), torch.where(both, g, 0)
    abs_err = diff.abs()
    small = golden.small if all_finite else golden.small & both
    normal = ~small if all_finite else both & ~small
    if golden.uncancelled is not None:
        normal = normal & golden.uncancelled
    rel = abs_err / golden.rel_scale * normal

    if fmt is not None:
        ulp_err = abs_err / golden.ulp
        bound = golden.bound
        bound_ratio = abs_err / bound
        signed = a - g_round if all_finite else torch.where(both, a - g_round, 0)
        settled = golden.settled if all_finite else both & golden.settled
        growth = torch.where(settled, a.abs() - g_round.abs(), 0)
        signed_ratio, growth_ratio = signed / bound, growth / bound
        bias = [signed_ratio.sum(), growth_ratio.sum()]
        if shift is None:
            bias += bias
        else:  # the same against the golden as the row's rounded factor scales it, rounded to the dtype
            fair = torch.where(both, (golden.raw.to(work) + shift).to(a_raw.dtype).to(work), 0)
            bias += [(torch.where(both, a - fair, 0) / bound).sum(),
                     (torch.where(settled, a.abs() - fair.abs(), 0) / bound).sum()]
        share = golden.constant_share
        bias += [torch.dot(signed_ratio, signed_ratio), torch.dot(growth_ratio, growth_ratio),
                 share.sum() if all_finite else torch.where(both, share, 0).sum()]
        lean = _lean(golden.rounding, signed, growth, None if all_finite else both)
    else:
        ulp_err = bound_ratio = signed = growth = abs_err
        bias = [abs_err.new_zeros(())] * 7
        lean = [abs_err.new_zeros(())] * 3

    n = a.numel()
    zero = torch.zeros((), dtype=torch.int64, device=device)
    # stack promotes the counts to the sums' dtype: exact, as a chunk holds at most _MAX_CHUNK elements
    sums = torch.stack((
        count(both), zero if all_finite else count(nan_a), zero if all_finite else count(nan_g),
        zero if all_finite else count(inf_a), zero if all_finite else count(inf_g),
        zero if all_finite else count(nonfinite_mismatch), n - count(same),
        abs_err.sum(), torch.dot(abs_err, abs_err), count(normal), rel.sum(), count(rel > params.rtol),
        count(small), count(small & (abs_err > golden.small_value_atol)), count(signed > 0), count(signed < 0),
        count(growth > 0), count(growth < 0), ulp_err.sum(), count(ulp_err > params.ulp_threshold),
        count(((abs_err <= params.thousandth_rtol * abs_g + golden.small_value_atol) | (bound_ratio <= 1)) & both),
        torch.dot(a_fin, g_fin), torch.dot(a_fin, a_fin), torch.dot(g_fin, g_fin), bound_ratio.sum(), *bias, *lean,
        count(bound_ratio > 1), zero if all_finite else count(overflow), zero if all_finite else count(past_max),
        diff.sum(), g_fin.sum(), torch.dot(diff, g_fin),
        # a quantizer's integers or float8 values against an unrounded golden (quantized standard)
        _off_grid(a, abs_err, golden, fmt, both),
    )).to(torch.float64)
    maxima = [torch.max(v, dim=0) for v in (abs_err, rel, ulp_err, bound_ratio)]
    max_values = torch.stack([m.values.to(torch.float64) for m in maxima])
    max_indices = torch.stack([m.indices for m in maxima]) + offset
    no_mismatch = torch.full((), _NONE, dtype=torch.int64, device=device)
    firsts = torch.stack([
        no_mismatch if nonfinite_mismatch is None else _first_true(nonfinite_mismatch, offset),
        _first_true(~same, offset),
        no_mismatch if nonfinite_mismatch is None else _first_true(past_max, offset),
    ])
    return sums, max_values, max_indices, firsts


def _combine(totals: _Totals, actual: torch.Tensor, golden_rms: float) -> Metrics:
    numel = actual.numel()
    # One transfer for everything.
    s = dict(zip(_SUMS, totals.sums.cpu().tolist()))
    mx = dict(zip(_MAXIMA, totals.max_values.cpu().tolist()))
    ix = dict(zip(_MAXIMA, totals.max_indices.cpu().tolist()))
    fs = dict(zip(_FIRSTS, totals.firsts.cpu().tolist()))
    finite = int(s["finite"])

    def mean(total: float, count: float) -> float:
        return total / count if count else 0.0

    worst = WorstIndices(
        nonfinite=-1 if fs["nonfinite"] == _NONE else int(fs["nonfinite"]),
        binary=-1 if fs["binary"] == _NONE else int(fs["binary"]),
        range_overflow=-1 if fs["range_overflow"] == _NONE else int(fs["range_overflow"]),
        **{k: (int(ix[k]) if finite and mx[k] > 0 else -1) for k in _MAXIMA},
    )
    norm_a, norm_g = math.sqrt(s["norm_a"]), math.sqrt(s["norm_g"])
    if norm_a == 0 or norm_g == 0:
        cosine = 1.0 if norm_a == norm_g else 0.0
    else:
        cosine = max(-1.0, min(1.0, s["dot"] / (norm_a * norm_g)))
    return Metrics(
        dtype=str(actual.dtype).removeprefix("torch."),
        shape=tuple(actual.shape),
        numel=numel,
        finite=finite,
        nan_actual=int(s["nan_actual"]),
        nan_golden=int(s["nan_golden"]),
        inf_actual=int(s["inf_actual"]),
        inf_golden=int(s["inf_golden"]),
        nonfinite_mismatch=int(s["nonfinite_mismatch"]),
        binary_mismatch=int(s["binary_mismatch"]),
        max_abs_err=mx["abs"] if finite else 0.0,
        mean_abs_err=mean(s["sum_abs"], finite),
        rmse=math.sqrt(mean(s["sum_sq"], finite)),
        max_rel_err=mx["rel"] if s["normal_count"] else 0.0,
        mean_rel_err=mean(s["sum_rel"], s["normal_count"]),
        normal_count=int(s["normal_count"]),
        small_count=int(s["small_count"]),
        rel_err_ratio=mean(s["rel_over"], s["normal_count"]),
        small_value_err_ratio=mean(s["small_over"], s["small_count"]),
        error_balance=mean(s["above"] - s["below"], finite),
        magnitude_balance=mean(s["larger"] - s["smaller"], finite),
        max_ulp_err=mx["ulp"] if finite else 0.0,
        mean_ulp_err=mean(s["sum_ulp"], finite),
        ulp_over_ratio=mean(s["ulp_over"], finite),
        thousandth_ratio=mean(s["thousandth"], finite) if finite else 1.0,
        cosine=cosine,
        max_bound_ratio=mx["bound"] if finite else 0.0,
        mean_bound_ratio=mean(s["sum_bound"], finite),
        # With a shared factor, the kernel is judged with whichever factor, none or the row's own
        # rounded one, leaves it the smaller bias.
        bound_bias=mean(min(s["sum_bias"], s["sum_shared_bias"], key=abs), finite),
        magnitude_bound_bias=mean(min(s["sum_magnitude_bias"], s["sum_shared_magnitude_bias"], key=abs), finite),
        bias_spread=_spread(s["sum_bias"], s["sum_bias_sq"], finite),
        magnitude_bias_spread=_spread(s["sum_magnitude_bias"], s["sum_magnitude_bias_sq"], finite),
        constant_share=mean(s["sum_constant_share"], finite),
        golden_rms=golden_rms,
        worst=worst,
        rounding_elements=int(s["rounding_elements"]),
        rounding_bias=mean(max(abs(s["rounding_up"]), abs(s["rounding_larger"])), s["rounding_elements"]),
        over_bound=int(s["over_bound"]) if actual.dtype.is_floating_point else 0,
        quantized_over=int(s["quantized_over"]),
        overflow=int(s["overflow"]),
        range_overflow=int(s["range_overflow"]),
        **_fitted(s, finite),
    )


def _fitted(s: dict, finite: int) -> dict:
    """The least-squares scale c and offset d of error = c·golden + d over the finite elements, and the
    share of the squared error they explain: what lets a message call a scaling a scaling. Over fewer
    than FIT_ELEMENTS, the better of a scale alone and an offset alone (two parameters fit most of any
    error over a handful of elements)."""
    total = s["sum_sq"]
    if not finite or total <= 0:
        return {}
    gg, g, eg, e = s["norm_g"], s["sum_g"], s["sum_err_g"], s["sum_err"]
    if finite < FIT_ELEMENTS:
        by_scale = (eg / math.sqrt(gg)) ** 2 / total if gg > 0 else 0.0  # no product of tiny sums: it underflows
        by_offset = (e / math.sqrt(finite)) ** 2 / total
        if by_scale >= by_offset:
            return {"fitted_scale": eg / gg, "fitted_offset": 0.0, "fit_share": min(by_scale, 1.0)}
        return {"fitted_scale": 0.0, "fitted_offset": e / finite, "fit_share": min(by_offset, 1.0)}
    det = gg * finite - g * g
    if det > 1e-12 * gg * finite:
        scale, offset = (eg * finite - g * e) / det, (gg * e - g * eg) / det
    elif gg > 0:  # every golden alike: a scale and an offset are one; called a scale
        scale, offset = eg / gg, 0.0
    else:
        scale, offset = 0.0, e / finite
    explained = (scale * eg + offset * e) / total
    return {"fitted_scale": scale, "fitted_offset": offset, "fit_share": min(max(explained, 0.0), 1.0)}


def _spread(total: float, squares: float, count: float) -> float:
    """The standard deviation of ``count`` values from their sum and sum of squares."""
    if not count:
        return 0.0
    centre = total / count
    return math.sqrt(max(squares / count - centre * centre, 0.0))


def _empty(actual: torch.Tensor) -> Metrics:
    zero = {f.name: 0 for f in fields(Metrics)}
    zero.update(
        dtype=str(actual.dtype).removeprefix("torch."), shape=tuple(actual.shape),
        thousandth_ratio=1.0, cosine=1.0, golden_rms=0.0, worst=WorstIndices(), repetition=None,
    )
    return Metrics(**zero)
