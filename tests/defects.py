"""Planted defects: ways a device's output goes wrong, applied to a correct output."""

from __future__ import annotations

import math

import torch

from pytest_npuprecision.common.dtypes import float_format


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """One unit in the last place of each element of x, on x's own grid."""
    fmt = float_format(x.dtype)
    exponent = torch.frexp(x.double().abs().clamp(min=math.ldexp(1.0, fmt.min_exponent))).exponent - 1
    return torch.exp2((exponent - fmt.mantissa_bits).double())


def _pick(x: torch.Tensor, count: int, seed: int = 7) -> torch.Tensor:
    """Flat indices of `count` elements whose magnitude is at least typical (so a defect is visible)."""
    flat = x.double().reshape(-1).abs()
    finite = torch.isfinite(flat)
    candidates = torch.nonzero(finite & (flat >= flat[finite].median())).reshape(-1)
    order = torch.randperm(candidates.numel(), generator=torch.Generator().manual_seed(seed))
    return candidates[order[:count]]


def _edit(x: torch.Tensor, fn) -> torch.Tensor:
    out = x.clone().reshape(-1)
    fn(out)
    return out.reshape(x.shape)


def one_nan(x):
    return _edit(x, lambda f: f.__setitem__(_pick(x, 1), float("nan")))


def all_nan(x):
    return torch.full_like(x, float("nan"))


def inf_where_finite(x):
    return _edit(x, lambda f: f.__setitem__(_pick(x, 1), float("inf")))


def off_by_1000_ulp(x):
    def apply(flat):
        i = _pick(x, 1)
        flat[i] = (flat[i].double() + 1000 * _ulp(flat[i])).to(x.dtype)
    return _edit(x, apply)


def one_element_1pct(x):
    def apply(flat):
        i = _pick(x, 1)
        flat[i] = flat[i] * 1.01
    return _edit(x, apply)


def flip_sign_1pct(x):
    def apply(flat):
        i = _pick(x, max(1, x.numel() // 100))
        flat[i] = -flat[i]
    return _edit(x, apply)


def bias_32_eps(x):
    eps = torch.finfo(x.dtype).eps
    return (x.double() * (1 + 32 * eps)).to(x.dtype)


def noise_ulp(x, ulps: int):
    """Each element moved ``ulps`` ulp up or down, the signs seeded."""
    sign = torch.randint(0, 2, x.shape, generator=torch.Generator().manual_seed(3)) * 2 - 1
    return (x.double() + sign * ulps * _ulp(x)).to(x.dtype)


def noise_64_ulp(x):
    return noise_ulp(x, 64)


OUTPUT_DEFECTS = {
    "one_nan": one_nan,
    "all_nan": all_nan,
    "inf_where_finite": inf_where_finite,
    "off_by_1000_ulp": off_by_1000_ulp,
    "flip_sign_1pct": flip_sign_1pct,
    "bias_32_eps": bias_32_eps,
    "noise_64_ulp": noise_64_ulp,
}


def saturate(x: torch.Tensor) -> torch.Tensor:
    """NPU saturation mode: inf becomes the dtype's max."""
    top = torch.finfo(x.dtype).max
    return x.nan_to_num(posinf=top, neginf=-top)


def sequential_sum(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sum along dim in x's own dtype, one element at a time: no wider accumulator."""
    x = x.movedim(dim, -1)
    total = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for k in range(x.shape[-1]):
        total = total + x[..., k]
    return total


def low_precision_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b accumulated in the inputs' own dtype."""
    return sequential_sum(a.unsqueeze(-1) * b.unsqueeze(-3), dim=-2)


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x, approximate="tanh")
