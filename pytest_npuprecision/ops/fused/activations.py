"""Elementwise activations, gated activations and the scaled masked softmax."""

from __future__ import annotations

import math

import torch

from .opmath import opmath_dtype
from .record import FusedOp, UnjudgedFusedCall

_FAST_GELU = 1.702
_SOFTMAX_MASK_FILL = -10000.0  # what the kernel writes into masked logits (torch_npu's own test uses it)


def _computed(x: torch.Tensor, fn) -> torch.Tensor:
    return fn(x.to(opmath_dtype(x.dtype))).to(x.dtype)


def _gelu(x: torch.Tensor, approximate: str) -> torch.Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate {approximate!r} is not 'none' or 'tanh'")
    return torch.nn.functional.gelu(x, approximate=approximate)


def npu_swiglu(input, dim=-1):
    """torch_npu.npu_swiglu(input, dim=-1) -> Tensor: A * sigmoid(A) * B for (A, B) = halves along dim."""
    def swiglu(x):
        a, b = x.chunk(2, dim=int(dim))
        return a * torch.sigmoid(a) * b
    return _computed(input, swiglu)


def npu_geglu(self, dim=-1, approximate=1, activate_left=False):
    """torch_npu.npu_geglu(self, dim=-1, approximate=1, activate_left=False) -> (y, gelu)

    (left, right) = halves along dim; gelu runs on the right half (the left one with
    activate_left=True) and y = the other half * gelu. approximate 0 is erf, 1 tanh, as the signature
    documents; torch_npu's own test compares approximate=1 with an erf gelu, so which one the kernel
    runs is ambiguous.
    """
    dtype = opmath_dtype(self.dtype)
    left, right = self.to(dtype).chunk(2, dim=int(dim))
    gated, other = (left, right) if activate_left else (right, left)
    activated = _gelu(gated, "tanh" if int(approximate) == 1 else "none")
    return (other * activated).to(self.dtype), activated.to(self.dtype)


def npu_fast_gelu(input):
    """torch_npu.npu_fast_gelu(input) -> Tensor: x * sigmoid(1.702 x).

    The docs' first formula has exp(0.851 x (x - |x|)); with the stray x dropped it is this one.
    """
    return _computed(input, lambda x: x * torch.sigmoid(_FAST_GELU * x))


def fast_gelu(self):
    """torch_npu.fast_gelu(self) -> Tensor: npu_fast_gelu's formula (its documented example, 0.5991 -> 0.4403,
    is x * sigmoid(1.702 x))."""
    return npu_fast_gelu(self)


def npu_gelu_mul(input, *, approximate='none'):
    """torch_npu.npu_gelu_mul(input, *, approximate='none') -> Tensor: gelu(x1) * x2 for (x1, x2) the halves of
    the last dim, gelu in its erf ('none') or tanh form."""
    def gelu_mul(x):
        first, second = x.chunk(2, dim=-1)
        return _gelu(first, str(approximate)) * second
    return _computed(input, gelu_mul)


def npu_clipped_swiglu(x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0, interleaved=True):
    """torch_npu.npu_clipped_swiglu(x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0,
    interleaved=True) -> Tensor

    x split along dim into A and B (its even and odd elements when interleaved, else its halves); A clamped
    above at limit, B to [-limit, limit]; y = A * sigmoid(alpha * A) * (B + bias)."""
    axis = int(dim) % x.dim()
    if interleaved and axis != x.dim() - 1:
        # the kernel interleaves the dims from dim on flattened, not dim alone: not computed here
        raise UnjudgedFusedCall("an interleaved split along a dim other than the last has no reference here")
    if group_index is not None:
        rows = int(torch.as_tensor(group_index).sum())
        if rows < math.prod(x.shape[:axis]):
            raise UnjudgedFusedCall(f"group_index covers {rows} rows of {math.prod(x.shape[:axis])}: the kernel "
                                    f"leaves the rest unwritten, which no golden can judge")

    def clipped(values):
        a, b = (values[..., 0::2], values[..., 1::2]) if interleaved else values.chunk(2, dim=axis)
        a, b = a.clamp(max=float(limit)), b.clamp(-float(limit), float(limit))
        return a * torch.sigmoid(float(alpha) * a) * (b + float(bias))
    return _computed(x, clipped)


def npu_gelu(input, approximate='none'):
    """torch_npu.npu_gelu(input, approximate='none') -> Tensor: x * Phi(x), erf or tanh form."""
    return _computed(input, lambda x: _gelu(x, str(approximate)))


def npu_mish(self):
    """torch_npu.npu_mish(self) -> Tensor: x * tanh(softplus(x))."""
    return _computed(self, lambda x: x * torch.tanh(torch.nn.functional.softplus(x)))


def npu_silu(self):
    """torch_npu.npu_silu(self) -> Tensor: x * sigmoid(x)."""
    return _computed(self, lambda x: x * torch.sigmoid(x))


def npu_scaled_masked_softmax(x, mask, scale=1.0, fixed_triu_mask=False):
    """torch_npu.npu_scaled_masked_softmax(x, mask, scale=1.0, fixed_triu_mask=False) -> Tensor

    softmax over the last dim of x * scale with masked (True) logits set to -10000, so a fully masked
    row is uniform, not NaN. fixed_triu_mask (documented as reserved) replaces mask by the strict
    upper triangle of the last two dims, as torch_npu's test does.
    """
    dtype = opmath_dtype(x.dtype)
    if fixed_triu_mask:
        rows, cols = x.shape[-2:]
        mask = torch.ones(rows, cols, dtype=torch.bool, device=x.device).triu(1)
    logits = (x.to(dtype) * float(scale)).masked_fill(mask.bool(), _SOFTMAX_MASK_FILL)
    return torch.softmax(logits, dim=-1).to(x.dtype)


OPS = (
    FusedOp("npu_swiglu", npu_swiglu, "npu_swiglu(input, dim=-1)", "output"),
    FusedOp("npu_geglu", npu_geglu, "npu_geglu(self, dim=-1, approximate=1, activate_left=False)", "y, gelu",
            "approximate=1 is taken as tanh (the signature's docs); torch_npu's test compares it with erf"),
    FusedOp("npu_fast_gelu", npu_fast_gelu, "npu_fast_gelu(input)", "output"),
    FusedOp("fast_gelu", fast_gelu, "fast_gelu(self)", "output"),
    FusedOp("npu_gelu_mul", npu_gelu_mul, "npu_gelu_mul(input, *, approximate='none')", "output"),
    FusedOp("npu_clipped_swiglu", npu_clipped_swiglu,
            "npu_clipped_swiglu(x, *, group_index=None, dim=-1, alpha=1.702, limit=7.0, bias=1.0, interleaved=True)",
            "output", "an interleaved split along a dim other than the last; group_index leaving rows unwritten"),
    FusedOp("npu_gelu", npu_gelu, "npu_gelu(input, approximate='none')", "output"),
    FusedOp("npu_mish", npu_mish, "npu_mish(self)", "output"),
    FusedOp("npu_silu", npu_silu, "npu_silu(self)", "output"),
    FusedOp("npu_scaled_masked_softmax", npu_scaled_masked_softmax,
            "npu_scaled_masked_softmax(x, mask, scale=1.0, fixed_triu_mask=False)", "output"),
)
