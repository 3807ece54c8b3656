"""Op cases: Hypothesis-driven precision tests of standard and custom ops, in YAML or Python.

Core (no pytest): spec (records), schema (YAML -> records), draw (records -> Hypothesis
strategies), run (one example: run and judge), search (Hypothesis search, profiles), regression
(failing examples -> fixed YAML cases), message (failure text), registry (custom ops). The pytest
layer is opcases.plugin; ``precision_case`` lives there and is imported on first use.
"""

from __future__ import annotations

from typing import Any

from .registry import CustomOp, register_op, registered_op, unregister_op
from .spec import Call, OpCase, call

__all__ = ["Call", "CustomOp", "OpCase", "call", "precision_case", "register_op", "registered_op", "unregister_op"]


def __getattr__(name: str) -> Any:
    if name == "precision_case":  # the pytest layer: importing pytest_npuprecision stays free of it
        from .plugin import precision_case

        return precision_case
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
