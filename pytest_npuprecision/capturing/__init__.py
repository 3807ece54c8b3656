"""Capture: write msprobe-format dumps from any PyTorch program (see docs/capture.md).

Layer: beside ``opcases``, over ``reports`` (docs/architecture.md): the recorder imports ``ops`` and
``common``; checking a captured dump imports ``checks`` and ``dump``.
"""

from .recorder import Capture, CaptureGapWarning, capture

__all__ = ["Capture", "CaptureGapWarning", "capture"]
