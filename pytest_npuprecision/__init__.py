"""pytest-npuprecision: single-operator precision verification for PyTorch devices."""

from .judge import assert_precise, judge
from .metrics import Accumulation, Metrics
from .rules import Rules
from .verdict import Check, Element, Status, Verdict, render_message

__all__ = [
    "Accumulation", "Check", "Element", "Metrics", "Rules", "Status", "Verdict",
    "assert_precise", "judge", "render_message",
]
__version__ = "0.1.0"
