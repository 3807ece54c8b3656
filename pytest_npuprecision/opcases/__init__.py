"""Op cases: Hypothesis-driven precision tests of standard and custom ops, in YAML or Python.

Core (no pytest): spec (records), schema (YAML -> records), draw (records -> Hypothesis
strategies), run (one example: run and judge), search (Hypothesis search, profiles), regression
(failing examples -> fixed YAML cases), message (failure text). Custom ops are registered in
ops/registry.py. The pytest layer, YAML items and ``precision_case``, is plugin/op_case_items.py.

Layer: beside ``capturing``, over ``reports`` (docs/architecture.md); imports ``reports`` and below.
"""

from __future__ import annotations

from ..ops.registry import CustomOp, register_op, registered_op, unregister_op
from .spec import Call, OpCase, call

__all__ = ["Call", "CustomOp", "OpCase", "call", "register_op", "registered_op", "unregister_op"]

