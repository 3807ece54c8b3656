"""Error metrics of one output tensor against its golden: the records (Metrics, what a bound assumes,
the parameters a dtype gives them). measuring.py computes them; row_statistics.py adds the statistics
that look across rows.
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields
from typing import Sequence

import torch

from ..common import FloatFormat, MathMode

# An element whose golden is below this share of the L2 norm of its summed terms has cancelled
# four bits or more: its |error| / |golden| measures the cancellation, not the kernel.
CANCELLED = 2.0**-4


# Below this many elements the error's fit (Metrics.fitted_scale) takes a scale or an offset alone:
# two parameters explain most of any error over a handful of elements.
FIT_ELEMENTS = 16


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
    # Where the rows are not runs of consecutive outputs: the dim whose index a row keeps (a batch
    # norm's channel, dim 1; the row is every element of one channel). None: consecutive runs.
    shared_dim: int | None = None
    # With a shared factor: what the row's statistic sums, as read back from the golden, for the fair
    # order's ceiling on the row's common error (row_statistics.RowSums): "probabilities"
    # (softmax: its sum scales the row), "log_probabilities" (log_softmax: its sum's log offsets the
    # row), "squares" (rms_norm: its mean square, over the normalized values, scales the row through
    # the rsqrt by half its error), "centred" (a centring norm: its mean offsets the row, its variance
    # scales it). None: no ceiling.
    row_sum: str | None = None
    # Where the row's statistic offsets it, broadcastable to the output: log_softmax's log-sum-exp,
    # whose one rounding moves the row by u times it; a centring norm's mean over its spread, signed.
    row_offset_size: torch.Tensor | None = None
    # The outputs of one sum err together (rows that share a factor, wherever they lie; a prefix
    # sum's run; a batch norm's channel): a bias is judged with numel / length groups as its samples.
    correlated: bool = False
    # The output is one sum of its terms (term_norm their norm) that fair kernels only reorder: a
    # sequential sum is the fair order that errs most (Metrics.order_rmse).
    plain_sum: bool = False
    # How many times a term's value recurs within its sum (bounds/terms/repeated_terms.py): roundings of one
    # value added again and again err alike, so K of them count as K·repeats independent ones.
    repeats: float = 1.0
    # The device's float32 math mode for this op where it is narrower than float32 (TF32, HF32):
    # each factor of the summed terms was rounded to it before the products (common/math_modes.py).
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
        """The error bound's multiple of each element's scale: r·u + sqrt(K)·u_acc (see ErrorBound), K
        counting each repeated term's roundings as correlated (sqrt(K·repeats))."""
        return self.roundings * fmt.unit_roundoff + math.sqrt(self.length * self.repeats) * fmt.accumulator.unit_roundoff


@dataclass(frozen=True)
class Limit:
    """One metric's limit: past ``error`` it fails, past ``warning`` (where given) it warns."""

    error: float
    warning: float | None = None


@dataclass(frozen=True)
class MetricParams:
    """Per-dtype constants that shape the metrics themselves (from the threshold table)."""

    rtol: float  # relative tolerance of the absolute-threshold standard (element_bound.small_value_rule below it)
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
    max_rel_err: float  # over normal values: |golden| >= the smallest normal, and not cancelled (see CANCELLED)
    mean_rel_err: float
    normal_count: int
    small_count: int
    rel_err_ratio: float  # share of normal values with relative error > rtol
    small_value_err_ratio: float  # share of subnormal results past the small-value rule (element_bound)
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
    # Elements farther than half a step of their grid (plus QUANTIZED_SLACK of the value) from an unrounded
    # golden: a quantizer's integer or float8 output that is not its exact value rounded to a nearest grid value.
    quantized_over: int = 0
    overflow: int = 0  # +-inf on the device where the golden, rounded to the dtype, is finite: downstream of one
    range_overflow: int = 0  # +-inf on the device where the exact result is finite but past the dtype's max
    # With a shared factor: the mean error over the elementwise bound once each row's common offset
    # and scale are taken out (_row_statistics); None for other outputs.
    mean_residual_ratio: float | None = None
    # The same at its largest element: one element far off, alone, where the bound's sqrt(K) share
    # (for the row's statistics, which move the whole row) would hide it.
    max_residual_ratio: float | None = None
    # With a shared factor whose statistic sums positive terms (Accumulation.row_sum), in float32 or
    # float64: the RMS of the rows' common errors over the most a fair order of each row's sum errs
    # (row_statistics.RowSums); None elsewhere.
    row_order_ratio: float | None = None
    # With that ceiling: the mean lean, over each element's bound, that the row statistic's terms under
    # u of its sum explain, all lost in a fair order that adds them last (a softmax over wide scores);
    # 0 elsewhere. A lean that small is a fair order's, not a bias (standards.bound.unbiased).
    row_order_lean: float = 0.0
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
    # Where the output is a plain sum of its terms: the RMS error a fair kernel that adds them one at a
    # time makes, expected (element_bound.order_rmse); 0 elsewhere. The same for every output judged
    # against one golden: it depends on the golden and the terms alone.
    order_rmse: float = 0.0
    # The least-squares fit of the error as fitted_scale·golden + fitted_offset (one of them alone below
    # FIT_ELEMENTS), and the share of the squared error it explains (near 1: a scaling or an offset;
    # near 0: noise or a few elements).
    fitted_scale: float = 0.0
    fitted_offset: float = 0.0
    fit_share: float = 0.0

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
