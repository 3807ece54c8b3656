"""The standards that judge each element against its error bound, which grows with the computation: the
error bound itself, and the thousandth tolerance of convolutions; and the bias checks they share."""

from __future__ import annotations

import math

from ...common import float_format
from ..element_bound import order_widening, small_value_rule
from ..metrics import Limit, Metrics
from ..verdict import Check
from .base import Standard, at_least, check

# The scaled ratios compare errors in units of each element's error bound (u times its scale), which
# knows the size of the terms even where the golden cancels to nothing; msprobe's relative errors
# measure that cancellation instead (gelu's 1 + erf(x / sqrt 2) at x = -4.6: a ratio of 10 000
# between two fair kernels). Below these floors an error meets its own bound with a wide margin,
# and no ratio of it fails: half the bound on average, half the error bound standard's maximum.
SCALED_FLOORS = {"max_scaled_err_ratio": 4.0, "mean_scaled_err_ratio": 0.5}


def scaled_floor(metric: str, finite: int) -> float:
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
    coarse = at_least(limit, _chance(m))
    samples = _samples(m, grouped=True)
    if samples < BIAS_SAMPLES:
        return coarse
    fine = max(FINE_BIAS * limit.error, BIAS_SIGMAS * spread / math.sqrt(samples)) + m.constant_share
    return Limit(min(coarse.error, fine), coarse.warning)


def unbiased(m: Metrics) -> bool:
    """No offset or scaling beyond chance, or beyond what the row statistic's terms that vanish whole
    explain (Metrics.row_order_lean): otherwise reordering a sum changes its noise, not its centre. A
    few elements (a scalar loss, 16 row sums) leave chance wide: one fair order's error may then be many
    times another's, and nothing tells a bias from it."""
    return max(abs(m.bound_bias), abs(m.magnitude_bound_bias)) <= _chance(m, grouped=True) + m.row_order_lean


def within_floors(m) -> bool:
    """The device meets its own error bound with the floors' wide margin."""
    return m.max_bound_ratio <= SCALED_FLOORS["max_scaled_err_ratio"] and \
        m.mean_bound_ratio <= scaled_floor("mean_scaled_err_ratio", m.finite)


def _bias_checks(m: Metrics, limits: dict[str, Limit]) -> list[Check]:
    return [check("bound_bias", abs(m.bound_bias), _bias_limit(m, limits["bound_bias"], m.bias_spread)),
            check("magnitude_bound_bias", abs(m.magnitude_bound_bias),
                  _bias_limit(m, limits["magnitude_bound_bias"], m.magnitude_bias_spread))]


def over_bound(m: Metrics) -> tuple[int, int, str] | None:
    """The elements past their error bound, of those finite on both sides."""
    return None if not m.finite else (m.over_bound, m.finite, "past their error bound")


class Thousandth(Standard):
    """At least 99.9 % of the elements within the dtype's thousandth tolerance or their own error bound
    (convolutions; below 1000 elements, all but one), no element far past its error bound (the 0.1 %
    allowance is for rounding, not for a gross outlier) and no bias: the thousandth tolerance admits
    a scaling of every element by 32 eps, which fast convolutions (Winograd, FFT) err around, not by."""

    name, worst = "thousandth", "rel"
    metrics = ("thousandth_ratio", "max_bound_ratio", "bound_bias", "magnitude_bound_bias")
    scales_with_accumulation = True

    def checks(self, m, limits, baseline, floor):
        share = limits["thousandth_ratio"]  # a minimum: below 1000 elements, one element may miss it
        least = Limit(min(share.error, 1 - 1 / m.finite) if m.finite else share.error, share.warning)
        return [check("thousandth_ratio", m.thousandth_ratio, least, upper=False),
                check("max_bound_ratio", m.max_bound_ratio, limits["max_bound_ratio"]), *_bias_checks(m, limits)]

    def mismatched(self, m):
        return None if not m.finite else (m.finite - round(m.thousandth_ratio * m.finite), m.finite,
                                          "off by more than 0.1%")

    def allowed(self, element, m, params, limits, dtype, roundings):
        _, small_value_atol = small_value_rule(float_format(dtype) if dtype.is_floating_point else None,
                                               params.rtol, roundings)
        return params.thousandth_rtol * abs(element.golden) + small_value_atol


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
    metrics = ("max_bound_ratio", "mean_bound_ratio", "bound_bias", "magnitude_bound_bias", "max_residual_ratio",
               "mean_residual_ratio", "row_order_ratio", "order_rmse_ratio")
    scales_with_accumulation = noise_in_bounds = True
    fallback = True  # every float output no other standard takes

    def checks(self, m, limits, baseline, floor):
        checks = [
            check("max_bound_ratio", m.max_bound_ratio, limits["max_bound_ratio"]),
            check("mean_bound_ratio", m.mean_bound_ratio, limits["mean_bound_ratio"]),
            *_bias_checks(m, limits),
        ]
        if m.mean_residual_ratio is not None:  # a normalization's rows: see metrics._row_statistics
            checks.append(check("max_residual_ratio", m.max_residual_ratio, limits["max_residual_ratio"]))
            checks.append(check("mean_residual_ratio", m.mean_residual_ratio,
                                _residual_limit(m, limits["mean_residual_ratio"])))
        if m.row_order_ratio is not None:  # a row statistic's sum: no fair order errs more than a sequential one
            checks.append(check("row_order_ratio", m.row_order_ratio, limits["row_order_ratio"]))
        if m.order_rmse:  # a plain sum: no fair order of its additions errs more than a sequential one
            checks.append(check("order_rmse_ratio", m.rmse / fair_order_rmse(m), limits["order_rmse_ratio"]))
        return checks

    def mismatched(self, m):
        return over_bound(m)

    def allowed(self, element, m, params, limits, dtype, roundings):
        if "max_bound_ratio" not in limits or not m.max_bound_ratio > 0:
            return None
        # The worst element is the one of the largest error/bound: its bound is its error over that ratio.
        bound = abs(element.actual - element.golden) / m.max_bound_ratio
        return limits["max_bound_ratio"].error * bound


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
    return at_least(limit, min(max(expected, 1.0), expected + chance))


def fair_order_rmse(m: Metrics) -> float:
    """The largest RMSE a fair order of a plain sum makes, by chance: a sequential sum's expected RMSE
    (Metrics.order_rmse), widened to 4 sigma of a mean of n squares, 1 + 2·sqrt(2/n), where n counts
    the sums that err independently (a prefix sum's run errs as one; a scalar loss, n = 1: 3.8 times).

    The bound's mean (half of sqrt(K)·u·scale) admits several times what a sequential sum errs over
    terms of either sign: 64 ulp of noise over a sum of 8192 of them, or a 32-eps scaling, stay
    under it, while a pairwise sum errs a few ulp and a sequential one about 25."""
    return m.order_rmse * order_widening(_samples(m, grouped=True))
