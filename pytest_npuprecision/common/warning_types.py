"""The warning categories the plugin emits, in a module that imports nothing heavy: xdist's controller
rebuilds each warning a worker sends by importing its category's module, and must not import torch."""

from __future__ import annotations


class JudgedDtypeWarning(UserWarning):
    """A case's output was judged in another dtype than its dump recorded."""


class CaptureGapWarning(UserWarning):
    """Some computation inside a capture was not recorded; the message says where."""
