"""The record every fused reference ships with, and the one error a golden cannot get past."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


class RandomFusedCall(Exception):
    """The call draws random numbers (dropout with keep_prob < 1): no golden can reproduce it."""


class UnjudgedFusedCall(Exception):
    """The call uses a mode the reference does not compute (an undocumented rounding, a packed
    format): its case skips as no-reference, naming the mode, never blaming the dump."""


@dataclass(frozen=True)
class TopKSelection:
    """Which outputs of a top-k selecting op are the selected values and indices, and the golden's view
    of every candidate, so that a replay accepts a fair kernel's pick between tied candidates
    (replay/tie_alignment.py) and judges the values at the kernel's own indices."""

    values: int | None  # the selected values' position among the outputs; None: the op returns indices only
    indices: int  # the selected indices' position among the outputs (the same shape as the values)
    # Called as the reference (float64 arguments): (score, magnitude) of every candidate, [..., candidates],
    # the score ranked, the magnitude the size of the terms it is computed from; None where the call
    # selects nothing (indices given by a table).
    scores: Callable[..., Any]
    # values_at(indices, *args, **kwargs): the values output the reference gives for these indices.
    values_at: Callable[..., Any] | None = None
    # With no values output: called with the arguments as the device got them, the dtype a fair kernel
    # may hold its scores in, whose rounding sizes a tie (the values output's dtype otherwise).
    score_dtype: Callable[..., Any] | None = None
    # False where the op promises a set, not an order: rows are compared best score first, pads (-1) last.
    ordered: bool = True


@dataclass(frozen=True)
class FusedOp:
    """One torch_npu fused op and its pure-torch reference."""

    name: str  # "npu_rms_norm", as after "NPU." in msprobe names
    reference: Callable[..., Any]  # called exactly as torch_npu's op: same positional order and keyword names
    signature: str  # the torch_npu signature implemented, as in the docstring
    outputs: str  # what the outputs are, e.g. "y, rstd"
    unsupported: str = ""  # what is not supported and why (for the docs table, docs/generate.py)
    selection: TopKSelection | None = None  # for a top-k selecting op: which outputs the tie rule aligns
