"""Shared by the fused-reference tests: a relative closeness check that remembers the worst error."""

from __future__ import annotations

import os

import torch

RELATIVE_TOLERANCE = 1e-12


def assert_rel_close(actual, expected, tol: float = RELATIVE_TOLERANCE, what: str = "") -> float:
    """max |actual - expected| / max |expected| <= tol; returns that ratio."""
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    expected = expected.to(actual.dtype)
    scale = expected.abs().max().clamp(min=1e-300) if expected.numel() else torch.tensor(1.0)
    error = float(((actual - expected).abs().max() / scale).item()) if expected.numel() else 0.0
    if os.environ.get("FUSED_WORST_ERROR_LOG"):
        with open(os.environ["FUSED_WORST_ERROR_LOG"], "a") as log:
            log.write(f"{error:.3e} {what}\n")
    assert error <= tol, f"{what}: relative error {error:.3e} > {tol:.0e}"
    return error
