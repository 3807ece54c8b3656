"""Precision standards: small objects that say whether they apply and judge metrics against limits.

Each standard owns its metrics, its allowance and how it counts failing elements (base.Standard); the
registry (:data:`STANDARDS`) knows which exist and chooses among them, the first that applies to a subject
winning. Judging, verdicts, the tables and the op catalogue ask the standards and compare no name. Every
float standard sits behind the inf/nan gate: an inf or NaN the golden (rounded to the output dtype) does
not have, or the reverse, is an error whatever the other metrics say.

A new standard is a ``Standard`` subclass in a module here, registered below (or by
``STANDARDS.register`` from outside), its limits in data/thresholds.yaml and its section of
docs/standards.md.
"""

from __future__ import annotations

from .base import ROUNDING_BIAS, Standard, Subject, check, inf_nan_gate, rounding_gate
from .benchmark import Benchmark, beside_baseline
from .bound import SCALED_FLOORS, ErrorBound, Thousandth, fair_order_rmse
from .elementwise import AbsoluteThreshold, Ulp
from .exact import Binary, Quantized
from .registry import Standards

STANDARDS = Standards()
STANDARDS.register(Binary())
STANDARDS.register(Quantized(), before="binary")  # a quantizer's integer output is on its grid, not bit-exact
STANDARDS.register(AbsoluteThreshold())
STANDARDS.register(Ulp())
STANDARDS.register(Thousandth())
STANDARDS.register(ErrorBound())
# Beside a baseline, before the op table's own standards; the exact ones need no baseline to compare.
STANDARDS.register(Benchmark(), before="absolute")

__all__ = ["STANDARDS", "Standards", "Standard", "Subject", "check", "inf_nan_gate", "rounding_gate",
           "ROUNDING_BIAS", "SCALED_FLOORS", "beside_baseline", "fair_order_rmse", "Binary", "Quantized",
           "AbsoluteThreshold", "Ulp", "Thousandth", "ErrorBound", "Benchmark"]
