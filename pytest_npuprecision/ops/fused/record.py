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
class FusedOp:
    """One torch_npu fused op and its pure-torch reference."""

    name: str  # "npu_rms_norm", as after "NPU." in msprobe names
    reference: Callable[..., Any]  # called exactly as torch_npu's op: same positional order and keyword names
    signature: str  # the torch_npu signature implemented, as in the docstring
    outputs: str  # what the outputs are, e.g. "y, rstd"
    unsupported: str = ""  # what is not supported and why (for the docs table, docs/generate.py)
