"""The precision core: error metrics of an output against its golden, the standards that judge them, the
threshold table and a user's op rows, the verdicts and the second look. Pure functions of tensors and numbers;
imports only ``common`` and ``config``."""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "element_bound": ("error_bound", "flat_term_norm"),
    "error_profiles": ("ErrorProfile", "error_profile"),
    "meanings": ("METRIC_MEANINGS", "failure_sections", "meaning"),
    "measuring": ("compute_metrics", "compute_metrics_each"),
    "metrics": ("Accumulation", "Metrics", "element_index"),
    "rules": ("MAX_ROUNDINGS", "OpName", "OpRule", "Rules", "op_row", "parse_op_name", "schema_vocabulary"),
    "rules_schema": ("case_limits",),
    "second_look": ("widened",),
    "standards": ("STANDARDS", "Standard", "Subject", "beside_baseline", "inf_nan_gate", "rounding_gate"),
    "verdict": ("Check", "Element", "Judged", "Status", "Verdict", "render_message"),
})
