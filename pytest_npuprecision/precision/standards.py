"""Precision standards: small objects that say whether they apply and judge metrics against limits.

The first standard in :data:`STANDARDS` that applies to a subject wins. Every float standard sits
behind the inf/nan gate: an inf or NaN the golden (rounded to the output dtype) does not have, or
the reverse, is an error whatever the other metrics say.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

from ..common.dtypes import quantized_grid
from .element_bound import order_widening
from .metrics import Metrics
from .rules import Limit, OpName, OpRule
from .verdict import Check, Status


@dataclass(frozen=True)
class Subject:
    """What is being judged, as far as choosing a standard is concerned."""

    op: OpName | None
    dtype: torch.dtype
    rule: OpRule
    has_baseline: bool

    @property
    def table_standard(self) -> str | None:
        if self.op is not None and self.op.direction == "backward":
            return self.rule.backward
        return self.rule.standard


def _check(metric: str, value: float, limit: Limit, *, upper: bool = True, baseline: float | None = None) -> Check:
    def beyond(bound: float) -> bool:
        # NaN metrics never pass: they mean the comparison itself broke down.
        return not (value <= bound) if upper else not (value >= bound)

    if beyond(limit.error):
        status = Status.ERROR
    elif limit.warning is not None and beyond(limit.warning):
        status = Status.WARNING
    else:
        status = Status.PASS
    return Check(metric, value, limit.error, status, upper, baseline, limit.warning)


def inf_nan_gate(m: Metrics) -> Check:
    return _check("nonfinite_mismatch", m.nonfinite_mismatch, Limit(0))


# A kernel that truncates leans half its rounding-dominated elements one way (Metrics.rounding_bias);
# one that rounds to nearest leans by chance alone, 1/sqrt(n) in share: 6 sigma, since rows correlate.
# Where rows share a factor, the rows are the samples (Metrics.rounding_bias_noise).
ROUNDING_BIAS = Limit(0.25)
ROUNDING_SIGMAS = 6


def rounding_gate(m: Metrics) -> Check | None:
    """Where the output is one rounding, its errors lean neither up nor toward zero; None elsewhere."""
    if not m.rounding_elements:
        return None
    chance = max(1 / math.sqrt(m.independent(m.rounding_elements)), m.rounding_bias_noise or 0.0)
    return _check("rounding_bias", m.rounding_bias, _at_least(ROUNDING_BIAS, ROUNDING_SIGMAS * chance))


class Standard:
    name: str
    worst: str  # which WorstIndices field points at the decisive element

    def applies(self, subject: Subject) -> bool:
        return subject.table_standard == self.name

    def checks(self, m: Metrics, limits: dict[str, Limit], baseline: Metrics | None, floor: float) -> list[Check]:
        raise NotImplementedError


class Quantized(Standard):
    """A quantizer's integer or float8 output (the op table's quantized ops), against the exact value before
    its rounding: each element the nearest value of its format's grid (the integers, or the float8 values),
    or either neighbour where that value lies within its compute slack of a half-way point (half-way values
    may round either way). Its wider float outputs (a scale) fall to the error bound."""

    name, worst = "quantized", "abs"

    def applies(self, subject: Subject) -> bool:
        return subject.table_standard == self.name and quantized_grid(subject.dtype)

    def checks(self, m, limits, baseline, floor):
        return [_check("quantized_mismatch", m.quantized_over, limits["quantized_mismatch"])]


class Binary(Standard):
    """Integer, bool and index outputs, and ops that must be bit-exact: no element may differ."""

    name, worst = "binary", "binary"

    def applies(self, subject: Subject) -> bool:
        return not subject.dtype.is_floating_point or subject.table_standard == self.name

    def checks(self, m, limits, baseline, floor):
        return [_check("binary_mismatch", m.binary_mismatch, limits["binary_mismatch"])]


# The scaled ratios compare errors in units of each element's error bound (u times its scale), which
# knows the size of the terms even where the golden cancels to nothing; msprobe's relative errors
# measure that cancellation instead (gelu's 1 + erf(x / sqrt 2) at x = -4.6: a ratio of 10 000
# between two fair kernels). Below these floors an error meets its own bound with a wide margin,
# and no ratio of it fails: half the bound on average, half the error bound standard's maximum.
SCALED_FLOORS = {"max_scaled_err_ratio": 4.0, "mean_scaled_err_ratio": 0.5}


def _scaled_floor(metric: str, finite: int) -> float:
    """SCALED_FLOORS, with the mean's raised where it averages few elements: the mean of one element
    is its maximum (a scalar loss), and a mean of n is that noisy to about 1 / sqrt(n)."""
    floor = SCALED_FLOORS[metric]
    return floor + 1 / math.sqrt(finite) if metric == "mean_scaled_err_ratio" and finite else floor


def _chance(m: Metrics, grouped: bool = False) -> float:
    """How far a fair kernel's mean signed error over its bound strays from 0 by chance: the mean of n
    signed ratios whose typical size is the mean ratio strays by about mean/sqrt(n); 4 sigma, because a
    search over many inputs (Hypothesis) meets 3-sigma events, and rounding errors in a row correlate.
    ``grouped``: where a sum's outputs err together (Metrics.bias_samples), its groups are the n. The
    coarse bias limits need not: chance only widens their fixed share of the bound, which a fair
    kernel's rows stay under; the finer one (_bias_limit) and the benchmark's excuse have no such floor."""
    samples = _samples(m, grouped)
    return 4 * m.mean_bound_ratio / math.sqrt(samples) if samples else math.inf


def _samples(m: Metrics, grouped: bool) -> float:
    """How many samples a mean over the elements holds: the groups that err together where
    ``grouped`` (Metrics.bias_samples), alike values once (Metrics.independent)."""
    return m.independent(m.finite if m.bias_samples is None or not grouped else min(m.finite, m.bias_samples))


# A bias below the limit fails where it lies this many standard errors from zero, with at least this
# many independent samples, and is larger than FINE_BIAS times the limit plus what a rounded shared
# constant explains (Metrics.constant_share): an unbiased kernel errs either way in every sample.
BIAS_SIGMAS = 6
BIAS_SAMPLES = 16
FINE_BIAS = 1 / 3


def _bias_limit(m: Metrics, limit: Limit, spread: float) -> Limit:
    """The coarse limit (the table's, or chance counted elementwise where larger), or a finer one
    where enough independent samples show a bias many standard errors wide."""
    coarse = _at_least(limit, _chance(m))
    samples = _samples(m, grouped=True)
    if samples < BIAS_SAMPLES:
        return coarse
    fine = max(FINE_BIAS * limit.error, BIAS_SIGMAS * spread / math.sqrt(samples)) + m.constant_share
    return Limit(min(coarse.error, fine), coarse.warning)


def _unbiased(m: Metrics) -> bool:
    """No offset or scaling beyond chance, or beyond what the row statistic's terms that vanish whole
    explain (Metrics.row_order_lean): otherwise reordering a sum changes its noise, not its centre. A
    few elements (a scalar loss, 16 row sums) leave chance wide: one fair order's error may then be many
    times another's, and nothing tells a bias from it."""
    return max(abs(m.bound_bias), abs(m.magnitude_bound_bias)) <= _chance(m, grouped=True) + m.row_order_lean


def _within_floors(m) -> bool:
    """The device meets its own error bound with the floors' wide margin."""
    return m.max_bound_ratio <= SCALED_FLOORS["max_scaled_err_ratio"] and \
        m.mean_bound_ratio <= _scaled_floor("mean_scaled_err_ratio", m.finite)


# The benchmark's ratios, in the order it judges them (the last ends them in a verdict's checks).
BENCHMARK_RATIOS = ("small_value_err_ratio", "rmse_ratio", "max_scaled_err_ratio", "mean_scaled_err_ratio",
                    "error_balance_ratio")


class Benchmark(Standard):
    """The device's error against the golden, divided by the baseline's error against the golden.

    Floors keep a perfect baseline from dividing by zero: RMSE uses the dtype's floor times the
    golden's RMS (so it follows the data's scale), the small-value ratio the dtype's floor or one
    small element's share, whichever is larger (a share of one small value is 0 or 1), the
    scaled ratios SCALED_FLOORS, and error balance 0.1 or the sampling noise of a fair coin over
    the finite elements, whichever is larger: a 55:45 split of error signs is not a bias worth
    failing for. msprobe's relative errors stay in the metrics, for familiarity.
    """

    name, worst = "benchmark", "bound"

    def applies(self, subject: Subject) -> bool:
        return subject.has_baseline

    def checks(self, m, limits, baseline, floor):
        assert baseline is not None
        noise = 3 / math.sqrt(m.finite) if m.finite else 1.0
        if m.error_balance_noise is not None:  # rows of a shared factor: the rows are the samples
            noise = max(noise, 3 * m.error_balance_noise)
        pairs = {
            # A share of n small values moves by 1/n per element: one element is no evidence.
            "small_value_err_ratio": (m.small_value_err_ratio, baseline.small_value_err_ratio,
                                      max(floor, 1 / m.small_count if m.small_count else 0.0)),
            "rmse_ratio": (m.rmse, baseline.rmse, floor * m.golden_rms),
            "max_scaled_err_ratio": (m.max_bound_ratio, baseline.max_bound_ratio, 0.0),
            "mean_scaled_err_ratio": (m.mean_bound_ratio, baseline.mean_bound_ratio, 0.0),
            "error_balance_ratio": (abs(m.error_balance), abs(baseline.error_balance), max(0.1, noise)),
        }
        # Where the device meets its own bound with the floors' margin, some ratios measure the
        # baseline's care rather than the device's fault, and only warn:
        # - the small-value share: a subnormal result's error may pass the small-value rule by far
        #   where a fair kernel's bound allows it (an unfused bias rounds the product first, and
        #   outputs that cancel to subnormals keep its error, against a fused kernel's none);
        # - RMSE and error balance, for an op that sums nothing (each element one function value:
        #   gelu's 1 + erf cancels below -3, an erfc-based peer errs 100x less and rounds the other
        #   way), or whose errors show no offset: a sequential sum errs 4-9x a pairwise one, two
        #   matmul blockings 1.3-5.5x, a blocked prefix sum leans its rows' signs, all unbiased.
        #   A truncating kernel is the rounding gate's to find, beside any baseline.
        # An op that accumulates keeps both where its errors lean: there the RMSE ratio is what finds
        # a bias of a few ulp under a bound of K terms. (Where the output is a plain sum, the error
        # bound standard beside this one fails an RMSE past what any fair order of it errs.)
        margin = _within_floors(m)
        excused = {"small_value_err_ratio"} if margin else set()
        if margin and (m.reduction_length <= 1 or _unbiased(m)):
            excused |= {"rmse_ratio", "error_balance_ratio"}
        checks = []
        for metric, (device, base, least) in pairs.items():
            if metric in SCALED_FLOORS:
                least = _scaled_floor(metric, m.finite)
                device = max(device, least)
            denominator = max(base, least)
            ratio = device / denominator if denominator > 0 else (0.0 if device == 0 else math.inf)
            check = _check(metric, ratio, limits[metric], baseline=base)
            if metric in excused and check.status is Status.ERROR:
                check = dataclasses.replace(check, status=Status.WARNING)
            checks.append(check)
        return checks


class AbsoluteThreshold(Standard):
    """Every normal element within rtol, every subnormal one within rtol of the smallest normal number
    (element_bound.small_value_rule): the verdict does not depend on the data's scale."""

    name, worst = "absolute", "rel"

    def checks(self, m, limits, baseline, floor):
        return [
            _check("rel_err_ratio", m.rel_err_ratio, limits["rel_err_ratio"]),
            _check("small_value_err_ratio", m.small_value_err_ratio, limits["small_value_err_ratio"]),
        ]


class Ulp(Standard):
    """Errors in units in the last place of the output dtype (subnormal spacing below the normals)."""

    name, worst = "ulp", "ulp"

    def checks(self, m, limits, baseline, floor):
        return [
            _check("max_ulp_err", m.max_ulp_err, limits["max_ulp_err"]),
            _check("mean_ulp_err", m.mean_ulp_err, limits["mean_ulp_err"]),
            _check("ulp_over_ratio", m.ulp_over_ratio, _at_least_one(limits["ulp_over_ratio"], m.finite)),
        ]


def _at_least_one(share: Limit, count: int) -> Limit:
    """A share limit that lets one element of ``count`` through: below 1/share elements a share means
    nothing (one element of 16 is 6 %), and a maximum such as max_ulp_err still bounds that element."""
    if count <= 0:
        return share
    floor = 1.0 / count
    return Limit(max(share.error, floor), None if share.warning is None else max(share.warning, floor))


class Thousandth(Standard):
    """At least 99.9 % of the elements within the dtype's thousandth tolerance or their own error bound
    (convolutions; below 1000 elements, all but one), no element far past its error bound (the 0.1 %
    allowance is for rounding, not for a gross outlier) and no bias: the thousandth tolerance admits
    a scaling of every element by 32 eps, which fast convolutions (Winograd, FFT) err around, not by."""

    name, worst = "thousandth", "rel"

    def checks(self, m, limits, baseline, floor):
        share = limits["thousandth_ratio"]  # a minimum: below 1000 elements, one element may miss it
        least = Limit(min(share.error, 1 - 1 / m.finite) if m.finite else share.error, share.warning)
        return [_check("thousandth_ratio", m.thousandth_ratio, least, upper=False),
                _check("max_bound_ratio", m.max_bound_ratio, limits["max_bound_ratio"]), *_bias_checks(m, limits)]


class ErrorBound(Standard):
    """Each element within a bound that grows with the computation, no baseline needed.

    bound = u·|golden| + sqrt(K)·u_acc·scale, where u is the output dtype's unit roundoff, u_acc the
    accumulator's, K the reduction length and scale the L2 norm of the summed terms plus |golden|
    (or, without term norms, the larger of |golden| and the golden's RMS); ops that round
    intermediates to the output dtype add u·scale per rounding. The ratio error/bound is judged at
    its maximum and its mean; the mean signed ratio (an offset) and the mean magnitude ratio
    (|actual| against |golden|: scaling, truncation) catch a bias hidden under a loose bound.
    """

    name, worst = "error_bound", "bound"

    def applies(self, subject: Subject) -> bool:
        return True  # the fallback for every float output

    def checks(self, m, limits, baseline, floor):
        checks = [
            _check("max_bound_ratio", m.max_bound_ratio, limits["max_bound_ratio"]),
            _check("mean_bound_ratio", m.mean_bound_ratio, limits["mean_bound_ratio"]),
            *_bias_checks(m, limits),
        ]
        if m.mean_residual_ratio is not None:  # a normalization's rows: see metrics._row_statistics
            checks.append(_check("max_residual_ratio", m.max_residual_ratio, limits["max_residual_ratio"]))
            checks.append(_check("mean_residual_ratio", m.mean_residual_ratio,
                                 _residual_limit(m, limits["mean_residual_ratio"])))
        if m.row_order_ratio is not None:  # a row statistic's sum: no fair order errs more than a sequential one
            checks.append(_check("row_order_ratio", m.row_order_ratio, limits["row_order_ratio"]))
        if m.order_rmse:  # a plain sum: no fair order of its additions errs more than a sequential one
            checks.append(_check("order_rmse_ratio", m.rmse / fair_order_rmse(m), limits["order_rmse_ratio"]))
        return checks


# A fair row's residual is a few roundings to nearest, each erring uniformly within its share of the
# elementwise bound, and independently of the others: each rounds a different value. At least two are
# counted, and two at their full share average 1/3 of their bound (|U1 + U2| for U uniform on [-1, 1]
# averages 2/3); more, or smaller ones, average less: the table's limit. A subnormal result rounds to an
# absolute quantum against a floor of (1/2 + roundings) quanta, up to 1/2 (SUBNORMAL_RESIDUAL), and the
# limit rises with their share. A mean of n such ratios, each in [0, 1], strays above its expectation by
# 6 standard errors, 3/sqrt(n), with a chance under 1e-7 (Hoeffding); and never beyond 1, where every
# element errs its most.
RESIDUAL_SIGMAS = 6
SUBNORMAL_RESIDUAL = 0.5


def _residual_limit(m: Metrics, limit: Limit) -> Limit:
    samples = m.independent(m.finite)
    judged = m.normal_count + m.small_count
    subnormal = m.small_count / judged if judged else 0.0
    expected = limit.error + subnormal * max(SUBNORMAL_RESIDUAL - limit.error, 0.0)
    chance = RESIDUAL_SIGMAS * 0.5 / math.sqrt(samples) if samples else math.inf
    return _at_least(limit, min(max(expected, 1.0), expected + chance))


def fair_order_rmse(m: Metrics) -> float:
    """The largest RMSE a fair order of a plain sum makes, by chance: a sequential sum's expected RMSE
    (Metrics.order_rmse), widened to 4 sigma of a mean of n squares, 1 + 2·sqrt(2/n), where n counts
    the sums that err independently (a prefix sum's run errs as one; a scalar loss, n = 1: 3.8 times).

    The bound's mean (half of sqrt(K)·u·scale) admits several times what a sequential sum errs over
    terms of either sign: 64 ulp of noise over a sum of 8192 of them, or a 32-eps scaling, stay
    under it, while a pairwise sum errs a few ulp and a sequential one about 25."""
    return m.order_rmse * order_widening(_samples(m, grouped=True))


def _bias_checks(m: Metrics, limits: dict[str, Limit]) -> list[Check]:
    return [_check("bound_bias", abs(m.bound_bias), _bias_limit(m, limits["bound_bias"], m.bias_spread)),
            _check("magnitude_bound_bias", abs(m.magnitude_bound_bias),
                   _bias_limit(m, limits["magnitude_bound_bias"], m.magnitude_bias_spread))]


def _at_least(limit: Limit, floor: float) -> Limit:
    return Limit(max(limit.error, floor), None if limit.warning is None else max(limit.warning, floor))


def beside_baseline(own: Standard, m: Metrics, baseline: Metrics, limits: dict[str, Limit],
                    floor: float) -> tuple[list[Check], list[str]]:
    """The op's own standard, judged next to the benchmark ratios.

    The ratios alone let one wrong element hide under a baseline whose own errors are wide. So the
    device must still meet every limit of its own standard that the baseline meets: a baseline
    forgives only what it needs forgiven itself. Each limit the baseline breaks is left to the
    ratios, and said so in a note.
    """
    kept, forgiven = [], []
    # By metric: a baseline recorded before a check existed has none of it (order_rmse_ratio), and
    # then forgives nothing of it.
    base_checks = {c.metric: c for c in own.checks(baseline, limits, None, floor)}
    for device in own.checks(m, limits, None, floor):
        base = base_checks.get(device.metric)
        if base is None:
            kept.append(device)
        elif base.status is Status.ERROR and device.status is not Status.PASS:
            forgiven.append(f"{own.name}'s {device.describe()} is forgiven: the baseline's is {base.value:.6g}, "
                            f"past the limit too, so the benchmark ratios alone judge it")
        else:
            kept.append(dataclasses.replace(device, baseline=base.value))
    return kept, forgiven


STANDARDS: tuple[Standard, ...] = (Quantized(), Binary(), Benchmark(), AbsoluteThreshold(), Ulp(), Thousandth(), ErrorBound())
BY_NAME = {s.name: s for s in STANDARDS}


def select(subject: Subject, explicit: str | None = None) -> Standard:
    if explicit is not None:
        return BY_NAME[explicit]
    return next(s for s in STANDARDS if s.applies(subject))
