"""The benchmark: the device's errors against those of a baseline (the same op on a trusted device), beside
the op's own standard."""

from __future__ import annotations

import dataclasses
import math

from ..metrics import Limit, Metrics
from ..verdict import Check, Status
from .base import Standard, Subject, check
from .bound import SCALED_FLOORS, over_bound, scaled_floor, unbiased, within_floors


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
    # Its ratios, in the order it judges them (the last ends them in a verdict's checks).
    metrics = ("small_value_err_ratio", "rmse_ratio", "max_scaled_err_ratio", "mean_scaled_err_ratio",
               "error_balance_ratio")
    needs_baseline = limits_by_level = True

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
        margin = within_floors(m)
        excused = {"small_value_err_ratio"} if margin else set()
        if margin and (m.reduction_length <= 1 or unbiased(m)):
            excused |= {"rmse_ratio", "error_balance_ratio"}
        checks = []
        for metric, (device, base, least) in pairs.items():
            if metric in SCALED_FLOORS:
                least = scaled_floor(metric, m.finite)
                device = max(device, least)
            denominator = max(base, least)
            ratio = device / denominator if denominator > 0 else (0.0 if device == 0 else math.inf)
            judged = check(metric, ratio, limits[metric], baseline=base)
            if metric in excused and judged.status is Status.ERROR:
                judged = dataclasses.replace(judged, status=Status.WARNING)
            checks.append(judged)
        return checks

    def mismatched(self, m):
        return over_bound(m)  # its ratios count no elements: those past their error bound


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
