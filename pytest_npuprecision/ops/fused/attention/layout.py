"""Fusion attention's input layouts, to and from the one layout the reference computes in (BNSD).

BSH and SBH pack the heads into H: query H = N1 * D gives D, and key/value H divided by D gives
N2 (GQA/MQA). TND packs variable-length sequences along T; actual_seq_*len hold cumulative ends.
"""

from __future__ import annotations

import torch

LAYOUTS = ("BSH", "SBH", "BSND", "BNSD", "TND")


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise ValueError(f"input_layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    return layout


# Layouts one permutation away from [B, N, S, D] (TND: [N, T, D]); each is its own inverse.
_SWAPS = {"BNSD": None, "BSND": (0, 2, 1, 3), "TND": (1, 0, 2)}


def to_bnsd(t: torch.Tensor, layout: str, head_dim: int) -> torch.Tensor:
    """[B, N, S, D] for the 3-D and 4-D batch layouts; [N, T, D] for TND."""
    if layout in _SWAPS:
        return t if _SWAPS[layout] is None else t.permute(*_SWAPS[layout])
    if layout == "BSH":
        b, s, h = t.shape
        return t.reshape(b, s, h // head_dim, head_dim).permute(0, 2, 1, 3)
    s, b, h = t.shape  # SBH
    return t.reshape(s, b, h // head_dim, head_dim).permute(1, 2, 0, 3)


def from_bnsd(t: torch.Tensor, layout: str) -> torch.Tensor:
    """The inverse of ``to_bnsd`` for an output [B, N, S, Dv] (or [N, T, Dv] for TND)."""
    if layout in _SWAPS:
        return to_bnsd(t, layout, 0)
    b, n, s, d = t.shape
    if layout == "BSH":
        return t.permute(0, 2, 1, 3).reshape(b, s, n * d)
    return t.permute(2, 0, 1, 3).reshape(s, b, n * d)  # SBH


def query_head_dim(query: torch.Tensor, layout: str, head_num: int) -> int:
    if layout in ("BSH", "SBH"):
        if query.shape[-1] % head_num:
            raise ValueError(f"query hidden size {query.shape[-1]} is not a multiple of head_num {head_num}")
        return query.shape[-1] // head_num
    return query.shape[-1]


def segments(cumulative: list[int] | None, total: int, name: str) -> list[tuple[int, int]]:
    """(start, stop) per sequence from TND's cumulative lengths.

    A zero after a non-zero end marks a trailing sequence that takes no part ([2, 5, 9, 0, 0]);
    a repeated end is an empty sequence ([2, 4, 4, 6]). Rows past the last end stay out of every
    sequence.
    """
    if cumulative is None:
        raise ValueError(f"input_layout 'TND' needs {name} (cumulative sequence lengths)")
    bounds, end = [], 0
    for value in cumulative:
        if value == 0 and end > 0:
            bounds.append((end, end))
            continue
        if value < end or value > total:
            raise ValueError(f"{name} {cumulative} is not non-decreasing within T={total}")
        bounds.append((end, value))
        end = value
    return bounds
