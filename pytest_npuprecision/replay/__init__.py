"""Replaying one call (a ``prepared.PreparedCall``): its sides (device under test, golden, baseline) prepared and
run forward and backward, the error bounds that need the golden, the golden's spread under input rounding, the
memory budget and the thread policy. Imports ``dump``, ``backends``, ``ops`` and everything below them."""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "error_bounds": ("accumulation_for",),
    "memory_budget": ("case_bytes", "default_budget", "input_elements"),
    "prepared": ("PreparedCall",),
    "runner": ("GoldenNotWide", "OpExecutionError", "RunOutput", "RunResult", "golden_runs", "replay", "run_call"),
})
