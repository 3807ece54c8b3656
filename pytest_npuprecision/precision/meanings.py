"""What a failed verdict means, told to people: each metric's one-line meaning (failure messages and the
HTML report's legend) and the docs section that explains a failure.

Plain text, so that the reports can be written where torch was never imported. The sections are
headings of docs/standards.md; tests/project/test_docs.py checks that each one exists.
"""

from __future__ import annotations

from typing import Iterable

STANDARDS_PAGE = "docs/standards.md"
GATE_SECTION = f"{STANDARDS_PAGE}#the-infnan-gate"
ROUNDING_SECTION = f"{STANDARDS_PAGE}#the-rounding-gate"
_GATES = {"nonfinite_mismatch": GATE_SECTION, "rounding_bias": ROUNDING_SECTION}


# Standards that judge a statistics dump, explained with the offline checks rather than the tensor standards.
_STATISTICS_SECTION = "docs/offline.md#statistics-dumps"
_ELSEWHERE = {"statistics-invariants": _STATISTICS_SECTION, "statistics-pair": _STATISTICS_SECTION,
              "checksum": _STATISTICS_SECTION}


def standard_section(standard: str) -> str:
    """'error_bound' -> 'docs/standards.md#error-bound': the heading's anchor as MkDocs and GitHub write it."""
    return _ELSEWHERE.get(standard) or f"{STANDARDS_PAGE}#{standard.replace('_', '-')}"


def failure_sections(standard: str, failed_metrics: Iterable[str]) -> tuple[str, ...]:
    """The sections for a verdict by ``standard`` ('benchmark+ulp' names two) whose checks ``failed_metrics`` failed.

    The gates (an inf or nan that disagrees with the golden, a rounding that leans) judge beside every
    standard: a failure of a gate alone points at the gate's section only.
    """
    failed = set(failed_metrics)
    gates = tuple(section for metric, section in _GATES.items() if metric in failed)
    if failed and failed <= _GATES.keys():
        return gates
    return gates + tuple(standard_section(name) for name in standard.split("+"))


METRIC_MEANINGS = {
    "nonfinite_mismatch": "elements whose inf or nan disagrees with the golden",
    "binary_mismatch": "elements not bit-equal to the golden rounded to the dtype",
    "quantized_mismatch": "integer or float8 elements that are not their exact value rounded to a nearest grid value",
    "rel_err_ratio": "share of elements whose relative error is past rtol",
    "small_value_err_ratio": "share of near-zero elements whose absolute error is past the small-value atol",
    "max_ulp_err": "largest error in units of the last place of the dtype",
    "mean_ulp_err": "mean error in units of the last place",
    "ulp_over_ratio": "share of elements more than the ulp threshold off",
    "thousandth_ratio": "share of elements within 0.1% of the golden",
    "max_bound_ratio": "largest error over the element's error bound, what a fair kernel may err there",
    "mean_bound_ratio": "mean error over the error bound",
    "bound_bias": "mean signed error over the bound: an offset hidden under a loose bound",
    "magnitude_bound_bias": "mean growth of |actual| over |golden|, over the bound: scaling or truncation",
    "rounding_bias": "share of elements rounded one way beyond the other (up or down, toward or away "
                     "from zero): truncation, a wrong rounding mode, or a scaling or offset that moves "
                     "every element the same way",
    "mean_residual_ratio": "mean error left once each row's common offset and scale are taken out, "
                           "over the per-element bound: noise",
    "max_residual_ratio": "largest error left once its row's common offset and scale are taken out, "
                          "over the per-element bound: one element far off",
    "row_order_ratio": "RMS of the rows' common errors (their sum's, log-sum-exp's or rsqrt's) over the most "
                       "a fair order of each row's sum errs: a statistic accumulated in low precision",
    "order_rmse_ratio": "RMSE over the most a fair order of the sum's additions errs (a sequential one's, "
                        "widened by chance): noise or a scaling no reordering makes",
    "rmse_ratio": "RMSE of the device over that of the baseline",
    "max_scaled_err_ratio": "largest error over its error bound, the device's over the baseline's",
    "mean_scaled_err_ratio": "mean error over its error bound, the device's over the baseline's",
    "small_value_err_ratio_ratio": "near-zero errors of the device over the baseline's",
    "error_balance_ratio": "one-sidedness of the device's errors over the baseline's",
}


def meaning(metric: str) -> str:
    """'max_bound_ratio' -> its one-line meaning; ratios against a baseline fall back to their base metric."""
    if metric in METRIC_MEANINGS:
        return METRIC_MEANINGS[metric]
    base = metric.removesuffix("_ratio")
    return f"{METRIC_MEANINGS[base]}, device over baseline" if base in METRIC_MEANINGS else ""
