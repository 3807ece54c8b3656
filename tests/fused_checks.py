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


BIG = 2147483647  # pre_tokens and next_tokens that limit nothing


def dense_mask(mode, sq, skv, pre=BIG, nxt=BIG, given=None, prefix=0):
    """[sq, skv] bool, True = masked, from the documented sparse_mode rules, one pair at a time."""
    rows = []
    for i in range(sq):
        row = []
        for j in range(skv):
            if mode == 0:
                out = bool(given[i][j]) or j - i > nxt or i - j > pre
            elif mode == 1:
                out = bool(given[i][j])
            elif mode == 2:
                out = j > i
            elif mode == 3:
                out = j > i + skv - sq
            elif mode == 4:
                out = j - i - (skv - sq) > nxt or (i + skv - sq) - j > pre
            else:  # 6: prefix
                out = j > i + skv - sq and j >= prefix
            row.append(out)
        rows.append(row)
    return torch.tensor(rows)
