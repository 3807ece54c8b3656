"""Error metrics of one output tensor against its golden, computed with torch where the data lives.

The tensors are walked in flat chunks so that a tensor of hundreds of millions of elements needs
only a few chunk-sized temporaries, and every reduction stays on the device until one final
transfer. Metrics are computed in float64 where the device has it (float32 elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields

import torch

from .dtypes import FloatFormat, float_format

# An element whose golden is below this share of the L2 norm of its summed terms has cancelled
# four bits or more: its |error| / |golden| measures the cancellation, not the kernel.
CANCELLED = 2.0**-4
_MIN_CHUNK = 1 << 16
_MAX_CHUNK = 1 << 18  # about 30 MiB of float64 temporaries per chunk of the metrics
_RMS_CHUNK = 1 << 20  # the golden's RMS takes two temporaries per chunk


@dataclass(frozen=True)
class Accumulation:
    """How much accumulation produced each output element, for the error-bound standard.

    length: the reduction length K (1 for elementwise ops).
    term_norm: optional, broadcastable to the output: per output element, the L2 norm of the K
        terms that were summed, e.g. ``sqrt((a * a) @ (b * b))`` for ``a @ b``. It scales the
        bound, and keeps elements that cancelled out of the relative-error metrics.
    roundings: how many intermediate results a fair implementation rounds to the output dtype
        (attention rounds its probabilities before multiplying by V); each adds u·scale.
    shared: see below. sensitivity: optional, broadcastable to the output: per output element, how far it moves when
        the intermediates a fair kernel rounds once each (not K times) move by one unit roundoff of
        their own, e.g. exp's argument in a softmax of scores in the tens. It adds u_acc·sensitivity,
        in the compute dtype's unit roundoff (float32's for half types, as fair kernels compute).
    """

    length: int = 1
    term_norm: torch.Tensor | None = None
    roundings: int = 0  # intermediate results rounded to the output dtype (fused ops, attention)
    sensitivity: torch.Tensor | None = None
    # Each run of ``length`` consecutive outputs is scaled by one factor a fair kernel may round to
    # the output dtype (softmax's sum, a norm's rsqrt): their errors share up to u of relative error,
    # so sign and bias are counted against the golden scaled by that common error (_shared_shift).
    shared: bool = False


@dataclass(frozen=True)
class MetricParams:
    """Per-dtype constants that shape the metrics themselves (from the threshold table)."""

    small_value: float  # |golden| below this is judged by absolute, not relative, error
    small_value_atol: float
    rtol: float  # relative tolerance of the absolute-threshold standard
    ulp_threshold: float  # an element erring by more ULP than this counts as "over"
    thousandth_rtol: float  # relative error that still counts towards the thousandth ratio


@dataclass(frozen=True)
class WorstIndices:
    """Flat indices of the decisive elements; -1 where there is none."""

    nonfinite: int = -1  # first element whose inf/nan disagrees with the golden
    binary: int = -1  # first element not bit-equal to the golden rounded to the dtype
    abs: int = -1
    rel: int = -1
    ulp: int = -1
    bound: int = -1
    range_overflow: int = -1  # first element that is inf because the exact result is past the dtype's max


@dataclass(frozen=True)
class Metrics:
    dtype: str
    shape: tuple[int, ...]
    numel: int
    finite: int  # elements finite on both sides: the ones the numeric metrics use
    nan_actual: int
    nan_golden: int  # counted on the golden rounded to the output dtype
    inf_actual: int
    inf_golden: int
    nonfinite_mismatch: int
    binary_mismatch: int
    max_abs_err: float
    mean_abs_err: float
    rmse: float
    max_rel_err: float  # over normal values: |golden| >= small_value, and not cancelled (see CANCELLED)
    mean_rel_err: float
    normal_count: int
    small_count: int
    rel_err_ratio: float  # share of normal values with relative error > rtol
    small_value_err_ratio: float  # share of small values with absolute error > small_value_atol
    error_balance: float  # (#above - #below) / #finite against the golden rounded to the dtype
    magnitude_balance: float  # (#larger - #smaller in magnitude) / #finite: relative bias, truncation
    max_ulp_err: float
    mean_ulp_err: float
    ulp_over_ratio: float
    thousandth_ratio: float  # share within thousandth_rtol, or within the element's error bound
    cosine: float
    max_bound_ratio: float  # error divided by the error bound of the computation
    mean_bound_ratio: float
    bound_bias: float  # mean of (actual - golden) / bound: an offset hidden under a loose bound
    magnitude_bound_bias: float  # mean of (|actual| - |golden|) / bound: scaling, truncation
    golden_rms: float
    worst: WorstIndices
    over_bound: int = 0  # elements whose error is past their error bound (ratio > 1); float outputs only
    overflow: int = 0  # +-inf on the device where the golden, rounded to the dtype, is finite: downstream of one
    range_overflow: int = 0  # +-inf on the device where the exact result is finite but past the dtype's max

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["shape"] = list(self.shape)
        out["worst"] = {f.name: getattr(self.worst, f.name) for f in fields(self.worst)}
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "Metrics":
        """The inverse of ``as_dict``; raise ValueError naming the first missing or mistyped field."""
        values = {}
        for f in fields(cls):
            if f.name not in data:
                if f.default is not MISSING:  # added after files were recorded: they still load
                    values[f.name] = f.default
                    continue
                raise ValueError(f"metrics lack {f.name!r}")
            values[f.name] = data[f.name]
        try:
            values["shape"] = tuple(int(n) for n in values["shape"])
            values["worst"] = WorstIndices(**values["worst"])
            for f in fields(cls):
                if f.name not in ("dtype", "shape", "worst"):
                    values[f.name] = (int if f.type == "int" else float)(values[f.name])
        except (TypeError, ValueError) as exc:
            raise ValueError(f"metrics are malformed: {exc}") from None
        return cls(**values)


def compute_dtype(device: torch.device) -> torch.dtype:
    return torch.float64 if device.type in ("cpu", "cuda") else torch.float32


def compute_metrics(
    actual: torch.Tensor,
    golden: torch.Tensor,
    params: MetricParams,
    accumulation: Accumulation | None = None,
) -> Metrics:
    """Every metric of ``actual`` (any dtype) against ``golden`` (same shape, higher precision)."""
    fmt = float_format(actual.dtype) if actual.dtype.is_floating_point else None
    device = actual.device
    work = compute_dtype(device)
    flat_a = actual.detach().reshape(-1)
    flat_g = golden.detach().reshape(-1)
    numel = flat_a.numel()
    acc = accumulation or Accumulation()
    term_norm = _flat_term_norm(acc.term_norm, actual.shape, device, work)
    sensitivity = _flat_term_norm(acc.sensitivity, actual.shape, device, work)
    shift = _shared_shift(flat_a, flat_g, acc.length, fmt, work) if acc.shared and fmt is not None else None
    golden_rms = _finite_rms(flat_g, device, work) if numel else 0.0
    chunk = max(_MIN_CHUNK, min(_MAX_CHUNK, numel // 16 or 1))
    if numel == 0:
        return _empty(actual)
    totals = _Totals(device)
    for start in range(0, numel, chunk):
        stop = start + chunk
        part = None if term_norm is None else term_norm[start:stop]
        moved = None if sensitivity is None else sensitivity[start:stop]
        shared = None if shift is None else shift[start:stop]
        totals.add(*_chunk_partials(flat_a[start:stop], flat_g[start:stop], part, moved, shared, start, fmt, params,
                                    acc, golden_rms, work))
    return _combine(totals, actual, golden_rms)


def _shared_shift(flat_a, flat_g, length: int, fmt: FloatFormat, work) -> torch.Tensor | None:
    """Per element, how far its row's rounded factor moves it: the row's common relative error (the
    least-squares fit of actual = (1 + c) golden), clamped to the output dtype's unit roundoff, times
    the golden. None where the output does not split into rows of ``length``."""
    numel = flat_a.numel()
    if length <= 1 or numel % length:
        return None
    a = flat_a.to(work).reshape(-1, length)
    g = flat_g.to(device=a.device, dtype=work).reshape(-1, length)
    finite = torch.isfinite(a) & torch.isfinite(g)
    a, g = torch.where(finite, a, 0), torch.where(finite, g, 0)
    weight = (g * g).sum(-1, keepdim=True)
    common = torch.where(weight > 0, ((a - g) * g).sum(-1, keepdim=True) / weight.clamp(min=torch.finfo(work).tiny), 0)
    return (common.clamp(-fmt.unit_roundoff, fmt.unit_roundoff) * g).reshape(-1)


def _flat_term_norm(term_norm, shape, device, work):
    if term_norm is None:
        return None
    norm = term_norm.detach().to(device=device, dtype=work)
    if norm.numel() == math.prod(shape) and norm.shape != torch.Size(shape):
        norm = norm.reshape(shape)  # the same elements flattened (a weight's terms over its normalized shape)
    return norm.broadcast_to(shape).reshape(-1)


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
    "sum_bound", "sum_bias", "sum_magnitude_bias", "sum_shared_bias", "sum_shared_magnitude_bias", "over_bound",
    "overflow", "range_overflow",
)
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


def _chunk_partials(a_raw, g_raw, term_norm, sensitivity, shift, offset, fmt: FloatFormat | None, params, acc,
                    golden_rms, work):
    device = a_raw.device
    a = a_raw.to(work)
    g = g_raw.to(device=device, dtype=work)
    # The golden as the output dtype would hold it: rounding is not an error, overflow is expected.
    g_round = g_raw.to(device=device, dtype=a_raw.dtype).to(work)
    count = torch.count_nonzero
    fin_a, fin_g = torch.isfinite(a), torch.isfinite(g_round)
    both = fin_a & fin_g
    all_finite = bool(both.all())
    if all_finite:  # the common case: no masks needed
        same = a == g_round
        nonfinite_mismatch = None
        nan_a = nan_g = inf_a = inf_g = None
        diff = a - g
        abs_g = g.abs()
        a_fin, g_fin = a, g
    else:
        nan_a, nan_g = torch.isnan(a), torch.isnan(g_round)
        inf_a, inf_g = torch.isinf(a), torch.isinf(g_round)
        same = (a == g_round) | (nan_a & nan_g)
        # An inf of the right sign where the exact result reaches the dtype's max is a fair overflow.
        past_max = inf_a & (torch.sign(a) == torch.sign(g)) & torch.isfinite(g) & (
            g.abs() >= (fmt.max if fmt is not None else math.inf))
        same |= past_max
        nonfinite_mismatch = ~both & ~same
        overflow = nonfinite_mismatch & inf_a & fin_g & (torch.sign(a) == torch.sign(g))
        diff = torch.where(both, a - g, 0)
        abs_g = torch.where(both, g.abs(), 0)
        a_fin, g_fin = torch.where(both, a, 0), torch.where(both, g, 0)
    abs_err = diff.abs()
    small = abs_g < params.small_value
    if not all_finite:
        small &= both
    normal = ~small if all_finite else both & ~small
    if term_norm is not None:  # relative errors only where the sum did not cancel
        normal &= abs_g >= CANCELLED * term_norm
    rel = abs_err / abs_g.clamp(min=params.small_value) * normal

    if fmt is not None:
        tiny = math.ldexp(1.0, fmt.min_exponent)
        exponent = torch.frexp(abs_g.clamp(min=tiny)).exponent - 1
        ulp_err = abs_err / torch.exp2((exponent - fmt.mantissa_bits).to(work))
        scale = abs_g.clamp(min=golden_rms)
        if term_norm is not None:  # terms that overflowed or are NaN say nothing: the plain scale there
            scale = torch.where(torch.isfinite(term_norm), term_norm + abs_g, scale)
        per_scale = acc.roundings * fmt.unit_roundoff + math.sqrt(acc.length) * fmt.accumulator.unit_roundoff
        floor = max(fmt.smallest_subnormal / 2, torch.finfo(work).tiny)
        bound = fmt.unit_roundoff * abs_g + per_scale * scale + floor
        if sensitivity is not None:  # in the compute dtype's units: half types compute in float32
            bound = bound + fmt.accumulator.unit_roundoff * torch.where(torch.isfinite(sensitivity), sensitivity, 0)
        bound_ratio = abs_err / bound
        signed = a - g_round if all_finite else torch.where(both, a - g_round, 0)
        growth = a.abs() - g_round.abs() if all_finite else torch.where(both, a.abs() - g_round.abs(), 0)
        bias = [(signed / bound).sum(), (growth / bound).sum()]
        if shift is None:
            bias += bias
        else:  # the same against the golden as the row's rounded factor scales it, rounded to the dtype
            fair = torch.where(both, (g_raw.to(work) + shift).to(a_raw.dtype).to(work), 0)
            bias += [(torch.where(both, a - fair, 0) / bound).sum(), (torch.where(both, a.abs() - fair.abs(), 0) / bound).sum()]
    else:
        ulp_err = bound_ratio = signed = growth = abs_err
        bias = [abs_err.sum() * 0] * 4

    n = a.numel()
    zero = torch.zeros((), dtype=torch.int64, device=device)
    sums = torch.stack([x.to(torch.float64) for x in (
        count(both), zero if all_finite else count(nan_a), zero if all_finite else count(nan_g),
        zero if all_finite else count(inf_a), zero if all_finite else count(inf_g),
        zero if all_finite else count(nonfinite_mismatch), n - count(same),
        abs_err.sum(), torch.dot(abs_err, abs_err), count(normal), rel.sum(), count(rel > params.rtol),
        count(small), count(small & (abs_err > params.small_value_atol)), count(signed > 0), count(signed < 0),
        count(growth > 0), count(growth < 0), ulp_err.sum(), count(ulp_err > params.ulp_threshold),
        count(((abs_err <= params.thousandth_rtol * abs_g + params.small_value_atol) | (bound_ratio <= 1)) & both),
        torch.dot(a_fin, g_fin), torch.dot(a_fin, a_fin), torch.dot(g_fin, g_fin), bound_ratio.sum(), *bias,
        count(bound_ratio > 1), zero if all_finite else count(overflow), zero if all_finite else count(past_max),
    )])
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
        golden_rms=golden_rms,
        worst=worst,
        over_bound=int(s["over_bound"]) if actual.dtype.is_floating_point else 0,
        overflow=int(s["overflow"]),
        range_overflow=int(s["range_overflow"]),
    )


def _empty(actual: torch.Tensor) -> Metrics:
    zero = {f.name: 0 for f in fields(Metrics)}
    zero.update(
        dtype=str(actual.dtype).removeprefix("torch."), shape=tuple(actual.shape),
        thousandth_ratio=1.0, cosine=1.0, golden_rms=0.0, worst=WorstIndices(),
    )
    return Metrics(**zero)
