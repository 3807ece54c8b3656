"""Rotary position embedding: out = x * cos + rotate(x) * sin, rotate per rotary_mode."""

from __future__ import annotations

import torch

from .opmath import opmath_dtype
from .record import FusedOp


def _rotated(x: torch.Tensor, mode: str) -> torch.Tensor:
    """'half': (x1, x2) = halves of D -> (-x2, x1); 'interleave': pairs (x[2i], x[2i+1]) -> (-x[2i+1], x[2i])."""
    if mode == "half":
        first, second = x.chunk(2, dim=-1)
        return torch.cat((-second, first), dim=-1)
    if mode == "interleave":
        even, odd = x[..., ::2], x[..., 1::2]
        return torch.stack((-odd, even), dim=-1).flatten(-2)
    raise NotImplementedError(f"rotary_mode {mode!r} is not supported: use 'half' or 'interleave'")


def _embedded(x, cos, sin, mode: str, rotate=None):
    dtype = opmath_dtype(x.dtype)
    xs = x.to(dtype)
    turned = xs @ rotate.to(dtype) if rotate is not None else _rotated(xs, mode)
    return (xs * cos.to(dtype) + turned * sin.to(dtype)).to(x.dtype)


def npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None):
    """torch_npu.npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None) -> Tensor

    input * r1 + rotate(input) * r2, r1/r2 broadcast over input (11SD, 1S1D, B1SD, ... as documented).
    With rotate (a D x D matrix) rotate(input) = input @ rotate; torch_npu has no backward then,
    the reference still differentiates.
    """
    return _embedded(input, r1, r2, str(rotary_mode), rotate)


def npu_apply_rotary_pos_emb(query, key, cos, sin, *, layout='BSND', rotary_mode='half'):
    """torch_npu.npu_apply_rotary_pos_emb(query, key, cos, sin, *, layout='BSND', rotary_mode='half')
    -> (query_out, key_out)

    The same rotation on query and key; cos and sin broadcast in the given layout (BSND (B,S,1,D),
    TND (T,1,D), ...). torch_npu updates query and key in place; the reference returns new tensors.
    The 'quarter' mode is not documented beyond its name, and a cos narrower than D is not
    supported either: both raise.
    """
    if cos.shape[-1] != query.shape[-1]:
        raise NotImplementedError(f"cos with D={cos.shape[-1]} narrower than query's D={query.shape[-1]}")
    return _embedded(query, cos, sin, str(rotary_mode)), _embedded(key, cos, sin, str(rotary_mode))


def npu_interleave_rope(x, cos, sin):
    """torch_npu.npu_interleave_rope(x, cos, sin) -> Tensor

    x (B, N, S, D) is first de-interleaved, its pairs' first elements then their second (reshape to
    (..., D/2, 2), transpose the last two dims), then rotated by halves: q * cos + (-q2, q1) * sin, with
    cos and sin (B, 1, S or 1, D) broadcast. The result stays in the de-interleaved order."""
    q = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2).transpose(-1, -2).reshape(x.shape)
    return _embedded(q, cos, sin, "half")


OPS = (
    FusedOp("npu_rotary_mul", npu_rotary_mul, "npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None)",
            "output (input's dtype)"),
    FusedOp("npu_apply_rotary_pos_emb", npu_apply_rotary_pos_emb,
            "npu_apply_rotary_pos_emb(query, key, cos, sin, *, layout='BSND', rotary_mode='half')",
            "query_out, key_out (new tensors, not in place)",
            "rotary_mode 'quarter' (undocumented) and cos/sin narrower than D"),
    FusedOp("npu_interleave_rope", npu_interleave_rope, "npu_interleave_rope(x, cos, sin)",
            "output (x's dtype, its last dim de-interleaved)"),
)
