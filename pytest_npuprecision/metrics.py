"""Error metrics of one output tensor against its golden, computed with torch where the data lives.

The tensors are walked in flat chunks so that a tensor of hundreds of millions of elements needs
only a few chunk-sized temporaries, and every reduction stays on the device until one final
transfer. Metrics are computed in float64 where the device has it (float32 elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields, replace
from typing import Sequence

import torch

from .dtypes import FloatFormat, float_format
from .math_modes import MathMode

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
    # The output is one rounding of a computation in a wider precision, with no rounded constant or
    # factor shared by many elements: a fair kernel's errors there lean neither up nor toward zero.
    rounded_once: bool = False
    # The same where the output is float16 or bfloat16 only: ops a fair kernel computes in float32
    # for those types (accumulation.ROUNDED_ONCE_IN_HALF), and may return in float32 under autocast.
    rounded_once_in_half: bool = False
    # The output is the exact result rounded once (accumulation.EXACTLY_ROUNDED: an add of two tensors):
    # its inputs' conditioning excuses none of its error, so judge takes no second look.
    exactly_rounded: bool = False
    sensitivity: torch.Tensor | None = None
    # Each run of ``length`` consecutive outputs is scaled by one factor a fair kernel may round to
    # the output dtype (softmax's sum, a norm's rsqrt): their errors share up to u of relative error,
    # so sign and bias are counted against the golden scaled by that common error (_shared_shift).
    shared: bool = False
    # With a shared factor, how a row-common error moves each element, broadcastable to the output:
    # an offset in the normalized value moves it by shared_offset (a norm's weight; 1 if None), a
    # relative error scales it around shared_origin (a norm's bias; 0 if None). What is left of the
    # error once the row's best such pair is taken out is judged on the elementwise bound alone.
    shared_offset: torch.Tensor | None = None
    shared_origin: torch.Tensor | None = None
    # The outputs of one sum err together (rows that share a factor, wherever they lie; a prefix
    # sum's run; a batch norm's channel): a bias is judged with numel / length groups as its samples.
    correlated: bool = False
    # The device's float32 math mode for this op where it is narrower than float32 (TF32, HF32):
    # each factor of the summed terms was rounded to it before the products (math_modes.py).
    math_mode: MathMode | None = None

    def input_share(self, fmt: FloatFormat) -> float:
        """The bound's multiple of the term norms for inputs rounded to the math mode's format: each
        product's two factors rounded once each, 2·u_in, independent errors that add over the terms
        as the norm does. Nothing where the output's own dtype is no wider than the mode's format."""
        mode = self.math_mode
        if mode is None or mode.mantissa_bits >= fmt.mantissa_bits:
            return 0.0
        return 2 * mode.unit_roundoff

    def one_rounding(self, fmt: FloatFormat) -> bool:
        """Whether an output in ``fmt`` is one rounding of a wider computation."""
        return self.rounded_once or (self.rounded_once_in_half and fmt.computed_wider)

    def per_scale(self, fmt: FloatFormat) -> float:
        """The error bound's multiple of each element's scale: r·u + sqrt(K)·u_acc (see ErrorBound)."""
        return self.roundings * fmt.unit_roundoff + math.sqrt(self.length) * fmt.accumulator.unit_roundoff


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
class Repetition:
    """Golden values that recur: each about ``factor`` times in a sample holding ``distinct`` of them."""

    factor: float
    distinct: int

    def independent(self, count: float) -> float:
        """How many of ``count`` samples err independently: the count over the factor, and no more than
        the distinct values seen (a sample all alike says one computation, whatever its size)."""
        return min(count / self.factor, self.distinct)


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
    magnitude_balance: float  # (#larger - #smaller in magnitude) / #finite, where |golden| > bound: truncation
    max_ulp_err: float
    mean_ulp_err: float
    ulp_over_ratio: float
    thousandth_ratio: float  # share within thousandth_rtol, or within the element's error bound
    cosine: float
    max_bound_ratio: float  # error divided by the error bound of the computation
    mean_bound_ratio: float
    bound_bias: float  # mean of (actual - golden) / bound: an offset hidden under a loose bound
    magnitude_bound_bias: float  # mean of (|actual| - |golden|) / bound, 0 where |golden| <= bound: scaling
    golden_rms: float
    worst: WorstIndices
    # The standard deviations of the per-element ratios that bound_bias and magnitude_bound_bias
    # average: how far each mean strays by chance is this over the square root of the samples.
    bias_spread: float = 0.0
    magnitude_bias_spread: float = 0.0
    # The mean of u·|golden| / bound: how much of bound_bias one rounded constant shared by every
    # element (a mean's 1/n, a loss scale, alpha) may explain, up to u of relative error.
    constant_share: float = 0.0
    # How golden values recur (metrics._repetition; None where they differ): alike computations err
    # alike, so every sample count behind a chance counts them once (Metrics.independent).
    repetition: Repetition | None = None
    over_bound: int = 0  # elements whose error is past their error bound (ratio > 1); float outputs only
    overflow: int = 0  # +-inf on the device where the golden, rounded to the dtype, is finite: downstream of one
    range_overflow: int = 0  # +-inf on the device where the exact result is finite but past the dtype's max
    # With a shared factor: the mean error over the elementwise bound once each row's common offset
    # and scale are taken out (_row_statistics); None for other outputs.
    mean_residual_ratio: float | None = None
    # With a shared factor: the standard error of error_balance with rows as the samples (a row's
    # signs move together with its factor's rounding); None for other outputs.
    error_balance_noise: float | None = None
    # With a shared factor and a rounding gate: the standard error of rounding_bias with rows as the
    # samples (a factor the kernel rounds in the output dtype leans its whole row); None elsewhere.
    rounding_bias_noise: float | None = None
    # Where outputs err in groups (Accumulation.correlated): how many groups; None: every element.
    bias_samples: int | None = None
    # Where the output is one rounding (Accumulation.rounded_once): the elements whose bound is little
    # more than that rounding, and the share of them leaning one way, up or down, or toward or away
    # from zero, beyond the other: a fair kernel rounds to nearest; one that truncates leans by half.
    rounding_elements: int = 0
    rounding_bias: float = 0.0
    reduction_length: int = 1  # terms per sum in the error bound: 1 where each element is one rounding

    def independent(self, count: float) -> float:
        """How many of ``count`` samples (elements, rows, groups) err independently of each other."""
        return count if self.repetition is None else self.repetition.independent(count)

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["shape"] = list(self.shape)
        out["worst"] = {f.name: getattr(self.worst, f.name) for f in fields(self.worst)}
        if self.repetition is not None:
            out["repetition"] = {"factor": self.repetition.factor, "distinct": self.repetition.distinct}
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
            if values["repetition"] is not None:
                values["repetition"] = Repetition(float(values["repetition"]["factor"]),
                                                  int(values["repetition"]["distinct"]))
            for f in fields(cls):
                if f.name in ("dtype", "shape", "worst", "repetition") or (values[f.name] is None and f.default is None):
                    continue  # an optional metric the output did not have
                values[f.name] = (int if f.type == "int" else float)(values[f.name])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"metrics are malformed: {exc}") from None
        return cls(**values)


def element_index(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    """The index in ``shape`` of flat (row-major) index ``flat``. Plain arithmetic: torch.unravel_index
    imports sympy on its first call, half a second that every fresh process (each xdist worker) pays."""
    index = []
    for size in reversed(shape):
        flat, i = divmod(flat, size) if size else (flat, 0)
        index.append(i)
    return tuple(reversed(index))


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
    term_norm = _flat_term_norm(acc.term_norm, first.shape, device, work)
    sensitivity = _flat_term_norm(acc.sensitivity, first.shape, device, work)
    shifts = [_shared_shift(f, flat_g, acc.length, fmt, work) if acc.shared and fmt is not None else None
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
    repetition = _repetition(flat_g, device, work)
    combined = [replace(_combine(total, a, golden_rms), reduction_length=acc.length, bias_samples=groups,
                        repetition=repetition)
                for total, a in zip(totals, actuals)]
    if shifts[0] is None:
        return combined
    alike_rows = _alike_rows(flat_g, acc.length, device, work) if acc.one_rounding(fmt) else None
    rows = [_row_statistics(flat, flat_g, first.shape, term_norm, sensitivity, fmt, acc, golden_rms, alike_rows, work)
            for flat in flats]
    return [replace(m, mean_residual_ratio=row.residual, error_balance_noise=row.balance_noise,
                    rounding_bias_noise=row.lean_noise)
            for m, row in zip(combined, rows)]


REPETITION_SAMPLE = 4096
ALIKE_BITS = 12  # golden values that agree to 12 significant bits count as alike
NATURAL_COLLISIONS = 1.5  # a continuous spread sampled at 12 bits collides now and then: not repetition
# Odd multipliers that mix a row's keys into one: distinct rows collide with a chance near 2^-64.
# One per ROW_PROBES, as signed int64.
_ROW_MIX = (-7046029254386353131, 7146057691288625177, 1983613069789375825, -8796714831421723037)


def _repetition(flat_g, device, work) -> Repetition | None:
    """How often the nonzero values of a strided sample of the golden recur; None where they mostly
    differ. Alike values come from alike computations (a row repeated down a batch, a constant, a
    half-precision input's few hundred values), whose errors repeat rather than average out."""
    step = max(1, flat_g.numel() // REPETITION_SAMPLE)
    sample = flat_g[::step][:REPETITION_SAMPLE].to(device=device, dtype=work)
    return _alike(sample[torch.isfinite(sample) & (sample != 0)])  # zeros are mostly exact, not repeated work


def _alike_rows(flat_g, length: int, device, work) -> Repetition | None:
    """How often the golden's rows of ``length`` recur, told apart by ROW_PROBES evenly spaced values."""
    probes = torch.arange(ROW_PROBES, device=flat_g.device) * length // ROW_PROBES
    prints = flat_g.reshape(-1, length)[:, probes].to(device=device, dtype=work)
    return _alike(torch.where(torch.isfinite(prints), prints, 0))


def _alike(values: torch.Tensor) -> Repetition | None:
    """How often the values (or rows of values) recur, to ALIKE_BITS; None where they mostly differ."""
    if not values.numel():
        return None
    mantissa, exponent = torch.frexp(values)
    key = torch.round(mantissa * 2.0**ALIKE_BITS).to(torch.int64) + exponent.to(torch.int64) * 2**16
    if key.dim() > 1:  # a row's keys mixed into one (wrapping int64): torch.unique(dim=0) is 40x slower
        key = (key * torch.tensor(_ROW_MIX[: key.shape[1]], device=key.device)).sum(-1)
    distinct = int(torch.unique(key).shape[0])
    repetition = Repetition(values.shape[0] / distinct, distinct)
    return repetition if repetition.factor >= NATURAL_COLLISIONS else None


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


# The elementwise steps of a fair normalization around its shared factor (the function of the
# element, the multiplication by the factor), each up to u of the element's scale.
RESIDUAL_ROUNDINGS = 2


@dataclass(frozen=True)
class _Rows:
    residual: float
    balance_noise: float
    lean_noise: float | None


def _row_statistics(flat_a, flat_g, shape, term_norm, sensitivity, fmt: FloatFormat, acc: Accumulation,
                    golden_rms: float, alike_rows: Repetition | None, work) -> _Rows:
    """Over rows that share a rounded factor, in one pass: the mean residual ratio, the standard
    error of the error balance and, where the output is one rounding, of the rounding lean.

    The residual is the mean error over the elementwise bound once each row's common error is taken out.

    A fair normalization errs along a row in two ways: through its shared statistics (a rounded sum,
    a rounded rsqrt), which the bound allows for with sqrt(K)·u_acc and which move every element of
    the row together, as an offset (times the weight) and a scale (around the bias); and per element,
    by a few roundings. The least-squares offset and scale of each row's error are taken out, so
    what is left is the per-element part, judged against the bound without the sqrt(K) share:
    noise of tens of ulp shows at any K, where under the full bound it hides past K of about 1000.

    The balance's standard error is the spread of the rows' own balances over sqrt(rows): a fair
    float32 softmax's row leans to its factor's side (+-0.5 from row to row), a kernel that
    truncates leans the same way in every row; the first is noise, the second a bias. One row says
    nothing of which it is: 1/3 (the balance is never judged). The rounding lean's standard error is
    the cluster-robust one, rows as the clusters, of the share that rounding_bias takes.
    """
    device = flat_a.device
    rows = flat_a.numel() // acc.length
    balances = torch.empty(rows, dtype=work, device=device)
    rows_per_chunk = max(1, _MAX_CHUNK // acc.length)
    offset = _flat_term_norm(acc.shared_offset, shape, device, work)
    origin = _flat_term_norm(acc.shared_origin, shape, device, work)
    residual_scale = (acc.roundings + RESIDUAL_ROUNDINGS) * fmt.unit_roundoff
    once = acc.one_rounding(fmt)
    leans = torch.zeros(rows, 3, dtype=work, device=device)  # per row: rounding elements, up, larger
    total, count = 0.0, 0
    for start in range(0, flat_a.numel(), rows_per_chunk * acc.length):
        part = slice(start, start + rows_per_chunk * acc.length)
        a = flat_a[part].to(work).reshape(-1, acc.length)
        g = flat_g[part].to(device=device, dtype=work).reshape(-1, acc.length)
        finite = torch.isfinite(a) & torch.isfinite(g)
        error = torch.where(finite, a - g, 0)
        p = torch.ones_like(g) if offset is None else offset[part].reshape(g.shape)
        q = g if origin is None else g - origin[part].reshape(g.shape)
        p, q = torch.where(finite, p, 0), torch.where(finite, q, 0)
        fit = _fit_two(error, p, q)
        term = None if term_norm is None else term_norm[part].reshape(g.shape)
        moved = None if sensitivity is None else sensitivity[part].reshape(g.shape)
        abs_g = torch.where(finite, g.abs(), 0)
        bound = _error_bound(abs_g, term, moved, fmt, residual_scale, golden_rms, work)
        total += float((torch.where(finite, (error - fit).abs(), 0) / bound).sum())
        count += int(finite.sum())
        # signs against the golden as the dtype holds it, as error_balance counts them
        g_round = flat_g[part].to(flat_a.dtype).to(device=device, dtype=work).reshape(g.shape)
        signed = torch.isfinite(a) & torch.isfinite(g_round)
        signs = torch.where(signed, torch.sign(a - g_round), 0)
        first = start // acc.length
        balances[first:first + a.shape[0]] = signs.sum(-1) / signed.sum(-1).clamp(min=1)
        if once:  # the elements GoldenChunk.rounding picks, counted per row
            dominated = _error_bound(abs_g, term, moved, fmt, acc.per_scale(fmt), golden_rms, work) <= \
                ROUNDING_DOMINATED * fmt.unit_roundoff * abs_g
            dominated &= signed
            growth = torch.where(abs_g > 0, torch.sign(a.abs() - g_round.abs()), 0)
            leans[first:first + a.shape[0]] = torch.stack(
                [dominated.sum(-1), (signs * dominated).sum(-1), (growth * dominated).sum(-1)], -1).to(work)
    residual = total / count if count else 0.0
    return _Rows(residual, float(balances.std() / math.sqrt(rows)) if rows >= 2 else 1 / 3,
                 _clustered_noise(leans, alike_rows) if once else None)


# Fewer rows than this estimate their own spread too poorly for a 6-sigma gate: four rows whose
# rounded factors happen to lean alike look like one truncating kernel.
LEAN_ROWS = 16
ROW_PROBES = 4  # values of each row's golden, evenly spaced, that tell alike rows (near-uniform softmax) apart


def _clustered_noise(leans: torch.Tensor, repetition: Repetition | None) -> float:
    """The larger standard error of the two shares of rounding_bias (up, larger), rows as clusters:
    sqrt(sum over rows of (row's sum - share * row's count)^2) / total count, widened where rows
    repeat alike (whose goldens agree at ROW_PROBES places: they count once). Too few independent
    rows: 1/3, which no lean exceeds by 6 sigma."""
    counts = leans[:, 0]
    total = float(counts.sum())
    rows = int((counts > 0).sum())
    independent = rows if repetition is None else repetition.independent(rows)
    if total == 0 or independent < LEAN_ROWS:
        return 1 / 3
    worst = 0.0
    for sums in (leans[:, 1], leans[:, 2]):
        share = float(sums.sum()) / total
        worst = max(worst, math.sqrt(float(((sums - share * counts) ** 2).sum())) / total)
    return worst * math.sqrt(rows / independent)


def _fit_two(e: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """Per row, the least-squares combination alpha·p + c·q closest to e (one of them alone where the
    two are parallel within rounding)."""
    spp, spq, sqq = (p * p).sum(-1, keepdim=True), (p * q).sum(-1, keepdim=True), (q * q).sum(-1, keepdim=True)
    spe, sqe = (p * e).sum(-1, keepdim=True), (q * e).sum(-1, keepdim=True)
    det = spp * sqq - spq * spq
    tiny = torch.finfo(e.dtype).tiny
    solvable = det > 1e-9 * spp * sqq
    alpha = torch.where(solvable, (sqq * spe - spq * sqe) / det.clamp(min=tiny), 0)
    c = torch.where(solvable, (spp * sqe - spq * spe) / det.clamp(min=tiny), 0)
    # parallel or one of them zero: the larger one alone
    alone_q = ~solvable & (sqq >= spp)
    c = torch.where(alone_q, sqe / sqq.clamp(min=tiny), c)
    alpha = torch.where(~solvable & ~alone_q, spe / spp.clamp(min=tiny), alpha)
    return alpha * p + c * q


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
    "sum_bound", "sum_bias", "sum_magnitude_bias", "sum_shared_bias", "sum_shared_magnitude_bias",
    "sum_bias_sq", "sum_magnitude_bias_sq", "sum_constant_share",
    "rounding_elements", "rounding_up", "rounding_larger", "over_bound",
    "overflow", "range_overflow",
)
ROUNDING_DOMINATED = 4  # bound <= 4·u·|golden|: the output's rounding and little else


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
        self.small = abs_g < params.small_value
        # relative errors only where the sum did not cancel
        self.uncancelled = None if term_norm is None else abs_g >= CANCELLED * term_norm
        self.rel_scale = abs_g.clamp(min=params.small_value)
        self.ulp = self.bound = self.rounding = self.settled = self.constant_share = None
        if fmt is None:
            return
        tiny = math.ldexp(1.0, fmt.min_exponent)
        exponent = torch.frexp(abs_g.clamp(min=tiny)).exponent - 1
        self.ulp = torch.exp2((exponent - fmt.mantissa_bits).to(work))
        self.bound = _error_bound(abs_g, term_norm, sensitivity, fmt, acc.per_scale(fmt), golden_rms, work,
                                  acc.input_share(fmt))
        # Where the golden lies within its bound of zero (a sum that cancelled: a conv's bias gradient
        # ahead of a batch norm) any error makes |actual| larger: that says nothing of a scaling, so
        # growth in magnitude counts only where the golden's sign is settled.
        self.settled = abs_g > self.bound
        # Where the output is one rounding of a wider computation, the elements a condition number or
        # a long sum does not dominate: a fair kernel rounds them to nearest, a truncating one leans.
        once = acc.one_rounding(fmt)
        self.rounding = self.bound <= ROUNDING_DOMINATED * fmt.unit_roundoff * abs_g if once else None
        # what one rounded constant shared by every element may move each element by (constant_share)
        self.constant_share = fmt.unit_roundoff * abs_g / self.bound


def _error_bound(abs_g, term_norm, sensitivity, fmt: FloatFormat, per_scale: float, golden_rms: float, work,
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
        # An inf of the right sign where the exact result reaches the dtype's max is a fair overflow.
        past_max = inf_a & (torch.sign(a) == torch.sign(g)) & torch.isfinite(g) & (
            g.abs() >= (fmt.max if fmt is not None else math.inf))
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
        count(small), count(small & (abs_err > params.small_value_atol)), count(signed > 0), count(signed < 0),
        count(growth > 0), count(growth < 0), ulp_err.sum(), count(ulp_err > params.ulp_threshold),
        count(((abs_err <= params.thousandth_rtol * abs_g + params.small_value_atol) | (bound_ratio <= 1)) & both),
        torch.dot(a_fin, g_fin), torch.dot(a_fin, a_fin), torch.dot(g_fin, g_fin), bound_ratio.sum(), *bias, *lean,
        count(bound_ratio > 1), zero if all_finite else count(overflow), zero if all_finite else count(past_max),
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
        overflow=int(s["overflow"]),
        range_overflow=int(s["range_overflow"]),
    )


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
