"""pytest-npuprecision: single-operator precision verification for PyTorch devices.

The names below load on first use, so that pytest, which imports this package for its plugin, pays
for torch only in runs that check something.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Backend": "backends", "BackendError": "backends", "BackendInfo": "backends",
    "assert_precise": "checks.judging", "judge": "checks.judging",
    "Accumulation": "precision.metrics", "Metrics": "precision.metrics",
    "capture": "capturing.recorder", "Capture": "capturing.recorder", "CaptureGapWarning": "capturing.recorder",
    "CallVerdict": "checks.one_call", "assert_call_precise": "checks.one_call", "check_call": "checks.one_call",
    "call": "opcases.spec", "register_op": "ops.registry", "unregister_op": "ops.registry",
    "precision_case": "plugin.op_case_items",
    "input_spread": "replay.perturbed",
    "Rules": "precision.rules",
    "Check": "precision.verdict", "Element": "precision.verdict", "Status": "precision.verdict",
    "Verdict": "precision.verdict", "render_message": "precision.verdict",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
