"""Capture: write msprobe-format dumps from any PyTorch program (see docs/capture.md)."""

from .recorder import Capture, CaptureGapWarning, capture

__all__ = ["Capture", "CaptureGapWarning", "capture"]
