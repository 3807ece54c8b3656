"""Op cases: Hypothesis-driven precision tests of standard and custom ops, in YAML or Python.

Core (no pytest): spec (records), schema (YAML -> records), draw (records -> Hypothesis
strategies), run (one example: run and judge), search (Hypothesis search, profiles), regression
(failing examples -> fixed YAML cases), message (failure text). Custom ops are registered in
ops/registry.py. The pytest layer, YAML items and ``precision_case``, is plugin/op_case_items.py.

Layer: beside ``capturing``, over ``reports`` (docs/architecture.md); imports ``reports`` and below.
"""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "failures": ("OpCaseFailure", "OpCaseUsageError"),
    "message": ("render_outcome",),
    "regression": ("with_current_settings", "write_regression"),
    "run": ("ExampleResult", "case_seed"),
    "schema": (
        "CASE_DTYPES", "MAX_EXAMPLES", "SchemaError", "count", "load_case_file", "parse_dtypes", "parse_limits",
        "parse_standard",
    ),
    "search": ("OpCaseSettings", "Outcome", "PROFILES", "check_case"),
    "spec": ("BrokenCase", "Call", "OpCase", "call", "dtype_name", "op_label"),
})
