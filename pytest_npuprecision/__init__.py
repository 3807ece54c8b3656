"""pytest-npuprecision: single-operator precision verification for PyTorch devices."""

__version__ = "0.1.0"  # before the imports: the reports read it while the package loads

from .backends import Backend, BackendError, BackendInfo
from .judge import assert_precise, judge
from .metrics import Accumulation, Metrics
from .opcases import call, register_op, unregister_op
from .rules import Rules
from .verdict import Check, Element, Status, Verdict, render_message

__all__ = [
    "Accumulation", "Backend", "BackendError", "BackendInfo", "Check", "Element", "Metrics", "Rules", "Status", "Verdict",
    "assert_precise", "call", "judge", "precision_case", "register_op", "render_message", "unregister_op",
]


def __getattr__(name: str):
    if name == "precision_case":  # the pytest layer of op cases, imported on first use
        from .opcases.plugin import precision_case

        return precision_case
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
