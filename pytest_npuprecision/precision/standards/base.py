"""What a standard is: the subject it chooses itself for, the interface judging and verdicts ask of it, and
the check of one metric against its limit that every standard makes."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..meanings import standard_section
from ..metrics import Limit, MetricParams, Metrics
from ..verdict import Check, Element, Status


@dataclass(frozen=True)
class Subject:
    """What is being judged, as far as choosing a standard is concerned."""

    table_standard: str | None  # the op table's standard for this output (rules.OpRule.standard_of)
    dtype: torch.dtype
    has_baseline: bool


class Standard:
    """One way of judging an output: whether it applies, its checks, and what it tells of the elements.

    Judging (checks/judging.py) and verdicts (precision/verdict.py) ask these attributes and methods and
    compare no name: a new standard is a subclass, registered once (standards.STANDARDS.register), with
    its limits in data/thresholds.yaml and its section of docs/standards.md (``section``).
    """

    name: str
    worst: str  # which WorstIndices field points at the decisive element
    metrics: tuple[str, ...] = ()  # the metrics it judges, in its order: the keys of its limits table
    # The op rounds nothing: no element may differ. So no rounding leans (no rounding gate), and no
    # conditioning of the inputs excuses an element (no second look).
    exact = False
    # Each element is right or wrong (its bits, its grid value): a failure has no scale or offset to describe.
    discrete = False
    # It judges one rounding per element: an op whose accumulation rule sums many terms contradicts it.
    one_rounding = False
    # Its limits grow with the accumulation: a reducing op it judges needs its reduction.
    scales_with_accumulation = False
    # It judges the device against a baseline, beside the op's own standard (which then lists second).
    needs_baseline = False
    # Its limits table is keyed by the op's level (L0, L1, L2), not by dtype.
    limits_by_level = False
    # A noisy failure is told as its mean error over the error bound, the unit it judges in.
    noise_in_bounds = False
    # It applies to every output no earlier standard takes: it stays last, and new standards go before it.
    fallback = False

    def applies(self, subject: Subject) -> bool:
        return self.fallback or subject.table_standard == self.name

    def checks(self, m: Metrics, limits: dict[str, Limit], baseline: Metrics | None, floor: float) -> list[Check]:
        raise NotImplementedError

    def mismatched(self, m: Metrics) -> tuple[int, int, str] | None:
        """(elements past this standard's per-element allowance, elements compared, what they are past),
        where the infs and nans agree; None where it counts no elements."""
        return None

    def allowed(self, element: Element, m: Metrics, params: MetricParams, limits: dict[str, Limit],
                dtype: torch.dtype, roundings: int) -> float | None:
        """The absolute error this standard allows at ``element`` (finite), in the tensor's own units; None
        where it judges no single element."""
        return None

    @property
    def section(self) -> str:
        """Where docs/standards.md explains it (tests/project/test_docs.py checks that the heading exists)."""
        return standard_section(self.name)

    def __repr__(self) -> str:
        return f"<standard {self.name}>"


def check(metric: str, value: float, limit: Limit, *, upper: bool = True, baseline: float | None = None) -> Check:
    """``metric`` at ``value`` judged against ``limit``: a maximum where ``upper``, else a minimum."""
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


def at_least(limit: Limit, floor: float) -> Limit:
    return Limit(max(limit.error, floor), None if limit.warning is None else max(limit.warning, floor))


def inf_nan_gate(m: Metrics) -> Check:
    return check("nonfinite_mismatch", m.nonfinite_mismatch, Limit(0))


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
    return check("rounding_bias", m.rounding_bias, at_least(ROUNDING_BIAS, ROUNDING_SIGMAS * chance))
