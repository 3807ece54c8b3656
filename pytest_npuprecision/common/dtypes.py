"""Facts about floating-point formats that the metrics and standards need.

Everything is derived from ``torch.finfo`` so the float8 types work wherever torch has them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import torch

FLOAT_NAMES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
)

# Common spellings that are not torch attribute names.
_ALIASES = {"fp16": "float16", "half": "float16", "bf16": "bfloat16", "fp32": "float32",
            "float": "float32", "fp64": "float64", "double": "float64"}


@dataclass(frozen=True)
class FloatFormat:
    """The grid of one floating-point dtype."""

    dtype: torch.dtype
    mantissa_bits: int  # explicit fraction bits: 10 for float16, 7 for bfloat16
    min_exponent: int  # exponent of the smallest normal number
    max: float

    @property
    def name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    @property
    def unit_roundoff(self) -> float:
        """Largest relative error of one round-to-nearest step: 2**-(mantissa_bits + 1)."""
        return math.ldexp(1.0, -self.mantissa_bits - 1)

    @property
    def smallest_subnormal(self) -> float:
        return math.ldexp(1.0, self.min_exponent - self.mantissa_bits)

    @property
    def computed_wider(self) -> bool:
        """Whether careful kernels compute in a wider type (float32) and round results to this one."""
        return self.mantissa_bits < 23

    @property
    def accumulator(self) -> "FloatFormat":
        """The accumulator a careful kernel uses: float32 for every narrower type."""
        return float_format(torch.float32) if self.computed_wider else self


@lru_cache(maxsize=None)
def float_format(dtype: torch.dtype) -> FloatFormat:
    info = torch.finfo(dtype)
    return FloatFormat(
        dtype=dtype,
        mantissa_bits=round(-math.log2(info.eps)),
        min_exponent=round(math.log2(info.tiny)),
        max=float(info.max),
    )


def quantized_grid(dtype: torch.dtype) -> bool:
    """Whether a quantizer's output of this dtype is judged on its grid (the quantized standard): integers, and
    the one-byte float8 formats; a wider float output of a quantizer (a scale) is not."""
    return not dtype.is_floating_point or torch.finfo(dtype).bits == 8


def parse_dtype(value: object, *, what: str = "dtype") -> torch.dtype:
    """Accept a torch.dtype or its name ('float16', 'torch.float16'); reject anything else clearly."""
    if isinstance(value, torch.dtype):
        return value
    if isinstance(value, str):
        name = value.removeprefix("torch.")
        candidate = getattr(torch, name, None)
        if isinstance(candidate, torch.dtype):
            return candidate
        hint = _ALIASES.get(name.lower())
        fix = f"use {hint}" if hint else "use a torch dtype name such as float16, bfloat16 or float32"
        raise ValueError(f"{what} {value!r} is not a torch dtype: {fix}")
    raise TypeError(f"{what} must be a torch.dtype or its name, not {type(value).__name__} {value!r}")
