"""Capture: write msprobe-format dumps from any PyTorch program (see docs/capture.md).

Layer: beside ``opcases``, over ``reports`` (docs/architecture.md): the recorder imports ``ops`` and
``common``; checking a captured dump imports ``checks`` and ``dump``.
"""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "fixture": ("CaptureFixture",),
    "recorder": ("Capture", "CaptureGapWarning", "capture"),
})
