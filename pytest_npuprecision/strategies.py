"""Hypothesis strategies for op inputs: shapes, and tensors holding exact values of their dtype.

Every float a strategy here produces is exactly representable in the target dtype, so the example
Hypothesis reports is the tensor the op sees, and shrinking moves through values of that dtype:

* float16, float32 and float64 draw ``st.floats(width=16/32/64)``, which are exact by construction;
* bfloat16 has no numpy dtype and no float width, so it draws ``st.floats(width=32)`` and maps
  each value to the nearest bfloat16 (round half to even) inside the requested range. The map is
  monotone and keeps the simple values Hypothesis shrinks towards (0, 1, 0.5, small integers)
  unchanged, so bfloat16 shrinks like float32. The value shown is always the mapped one.

Subnormals, ±0, the dtype's max, values near overflow, ±inf and NaN appear only when asked for
(``special=``): a device that flushes subnormals to zero should not fail an ordinary case. For the
same reason ordinary draws hold no value so tiny that its products are subnormal where a fair kernel
computes (below sqrt(float32's smallest normal), about 1e-19): such a value is drawn as 0.

A tensor is drawn element by element when it is small (up to ``DENSE_ELEMENTS`` elements), with
distinct values where the range holds enough of them. A larger tensor draws a seed for a
background of uniform values in the range (rounded to the dtype, so still exact values of it) and
then up to ``MAX_DRAWN`` elements at drawn positions, like ``hypothesis.extra.numpy.arrays`` with
a fill: Hypothesis spends its budget on the values that matter and still shrinks them.

Why distinct values and no constant fill: identical elements make identical rounding errors, and
the error-bound standard's bias checks assume that errors of different elements are independent;
a float32 gelu of a tensor of eighteen 1.0s fails them while every element is correctly rounded.
Zeros and other repeats still come on request (``special=["zero"]``) and from narrow ranges.
"""

from __future__ import annotations

import math
import struct
from typing import Any, Iterable, Sequence

import hypothesis.extra.numpy as hnp
import numpy as np
import torch
from hypothesis import strategies as st

from .common import nextafter, parse_dtype

SPECIAL_VALUES = ("zero", "subnormal", "max", "near_overflow", "inf", "nan")
DEFAULT_RANGE = (-8.0, 8.0)  # float inputs; wide enough to exercise an op, far from any overflow
DENSE_ELEMENTS = 64  # tensors up to this size draw every element
MAX_DRAWN = 32  # elements drawn over the background of a larger tensor
MAX_SPECIAL = 3  # special values placed in one tensor, at most

_NUMPY = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64,
          torch.bfloat16: np.float32,  # bfloat16 values travel in float32, which holds them exactly
          torch.int8: np.int8, torch.int16: np.int16, torch.int32: np.int32, torch.int64: np.int64,
          torch.uint8: np.uint8, torch.bool: np.bool_}
_WIDTH = {torch.float16: 16, torch.bfloat16: 32, torch.float32: 32, torch.float64: 64}

Shape = tuple[int, ...]


# ---------------------------------------------------------------- exact values of a dtype


def _float_dtype(dtype: Any) -> torch.dtype:
    parsed = parse_dtype(dtype)
    if parsed not in _WIDTH:
        raise ValueError(f"dtype {parsed} has no float strategy: use float16, bfloat16, float32 or float64")
    return parsed


def round_to_bfloat16(value: float) -> float:
    """The bfloat16 nearest to ``value`` (ties to even), as a Python float; inf and nan pass through."""
    if math.isnan(value) or math.isinf(value):
        return value
    bits = struct.unpack("<I", struct.pack("<f", value))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def _on_grid(value: float, dtype: torch.dtype, towards: float) -> float:
    """The dtype value nearest to ``value`` that does not pass it going away from ``towards``.

    A lower bound rounds up (towards=+inf) and an upper bound down, so the range only narrows;
    bounds beyond the dtype's max become its max.
    """
    top = torch.finfo(dtype).max
    value = max(-top, min(top, float(value)))
    t = torch.tensor(value, dtype=torch.float64).to(dtype)
    if (towards > 0 and t.item() < value) or (towards < 0 and t.item() > value):
        t = nextafter(t, torch.tensor(towards, dtype=dtype))
    return float(t.item())


def check_range(min_value: float, max_value: float, what: str = "range") -> None:
    for bound in (min_value, max_value):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or math.isnan(bound):
            raise ValueError(f"{what} bound {bound!r} is not a number: give [low, high] as numbers")
    if min_value > max_value:
        raise ValueError(f"{what} [{min_value}, {max_value}] is empty: give [low, high] with low <= high")


def floats(dtype: Any, *, min_value: float = DEFAULT_RANGE[0], max_value: float = DEFAULT_RANGE[1],
           min_magnitude: float = 0.0, allow_subnormal: bool = False) -> st.SearchStrategy[float]:
    """Python floats in [min_value, max_value] that are exact values of ``dtype``.

    The bounds are moved inwards onto the dtype's grid (0.1 becomes the float16 just above it).
    min_magnitude > 0 leaves out (-min_magnitude, min_magnitude), zero included: for kernels whose
    accuracy near zero is absolute rather than relative.
    """
    dtype = _float_dtype(dtype)
    check_range(min_value, max_value)
    if isinstance(min_magnitude, bool) or not isinstance(min_magnitude, (int, float)) or not min_magnitude >= 0:
        raise ValueError(f"min_magnitude {min_magnitude!r} is not a number >= 0: give one, or 0 for none")
    if min_magnitude > 0:
        sides = [(max(min_value, min_magnitude), max_value), (min_value, min(max_value, -min_magnitude))]
        parts = [floats(dtype, min_value=lo, max_value=hi, allow_subnormal=allow_subnormal)
                 for lo, hi in sides if lo <= hi and _on_grid(lo, dtype, math.inf) <= _on_grid(hi, dtype, -math.inf)]
        if not parts:
            raise ValueError(f"range [{min_value}, {max_value}] holds no value of magnitude >= {min_magnitude}: "
                             f"widen it or lower min_magnitude")
        return st.one_of(*parts)
    low, high = _on_grid(min_value, dtype, math.inf), _on_grid(max_value, dtype, -math.inf)
    if low > high:
        raise ValueError(f"range [{min_value}, {max_value}] holds no {str(dtype)[6:]} value: widen it")
    tiny = torch.finfo(dtype).tiny
    # Hypothesis refuses allow_subnormal=True for a range without subnormals: ask only where some exist.
    subnormal = allow_subnormal and low < tiny and high > -tiny and not (low == 0 == high)
    values = st.floats(low, high, width=_WIDTH[dtype], allow_nan=False, allow_infinity=False,
                       allow_subnormal=subnormal)
    if dtype == torch.bfloat16:
        values = values.map(lambda v: min(high, max(low, round_to_bfloat16(v))))
    floor = _product_floor(dtype)
    if not allow_subnormal and low <= 0 <= high and floor > tiny:
        values = values.map(lambda v: 0.0 if abs(v) < floor else v)
    return values


def _product_floor(dtype: torch.dtype) -> float:
    """The smallest magnitude whose products with other such values stay normal where a fair kernel
    computes (float32 for the 16-bit types): below it an ordinary draw becomes 0. A product of two
    float32 values near float32's smallest normal is subnormal, and CPU kernels (oneDNN) flush that
    to zero; subnormal results are drawn only when a case asks for them (special: [subnormal])."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    return math.sqrt(torch.finfo(wide).tiny)


def special_floats(dtype: Any, kinds: Iterable[str] = SPECIAL_VALUES) -> st.SearchStrategy[float]:
    """Values that break careless kernels, on request.

    zero: ±0. subnormal: the smallest and the largest subnormal, ±. max: ±the dtype's max.
    near_overflow: the largest values whose double (max/2), square (sqrt(max)) or exponential
    (log(max)) still fit, each rounded down onto the grid, ±. inf: ±inf. nan: NaN.
    """
    dtype = _float_dtype(dtype)
    return st.sampled_from(special_values(dtype, kinds))


def special_values(dtype: Any, kinds: Iterable[str] = SPECIAL_VALUES) -> list[float]:
    """The concrete values behind :func:`special_floats`, in a stable order."""
    dtype = _float_dtype(dtype)
    kinds = check_special(kinds)
    info = torch.finfo(dtype)
    smallest = float(nextafter(torch.tensor(0.0, dtype=dtype), torch.tensor(1.0, dtype=dtype)).item())
    largest_subnormal = float(nextafter(torch.tensor(info.tiny, dtype=dtype),
                                              torch.tensor(0.0, dtype=dtype)).item())
    near = [_on_grid(info.max / 2, dtype, -math.inf), _on_grid(math.sqrt(info.max), dtype, -math.inf),
            _on_grid(math.log(info.max), dtype, -math.inf)]
    table = {
        "zero": [0.0, -0.0],
        "subnormal": [smallest, -smallest, largest_subnormal, -largest_subnormal],
        "max": [float(info.max), -float(info.max)],
        "near_overflow": [v for x in near for v in (x, -x)],
        "inf": [math.inf, -math.inf],
        "nan": [math.nan],
    }
    return [v for kind in kinds for v in table[kind]]


def check_special(kinds: Iterable[str]) -> tuple[str, ...]:
    if isinstance(kinds, str):
        kinds = (kinds,)
    kinds = tuple(kinds)
    for kind in kinds:
        if kind not in SPECIAL_VALUES:
            raise ValueError(f"special value {kind!r} is unknown: use some of {', '.join(SPECIAL_VALUES)}")
    return kinds


# ---------------------------------------------------------------- shapes


def _check_sides(low: int, high: int, what: str) -> None:
    for value in (low, high):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{what} {value!r} is not a size: use whole numbers >= 0")
    if low > high:
        raise ValueError(f"{what} range [{low}, {high}] is empty: give [low, high] with low <= high")


def shapes(*, min_dims: int = 1, max_dims: int = 3, min_side: int = 1, max_side: int = 8) -> st.SearchStrategy[Shape]:
    """Tensor shapes, small by default; they shrink towards fewer and shorter dimensions."""
    _check_sides(min_dims, max_dims, "dims")
    _check_sides(min_side, max_side, "sides")
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def broadcastable_shapes(shape: Sequence[int], *, min_dims: int = 0) -> st.SearchStrategy[Shape]:
    """Shapes that broadcast *to* ``shape``: no more dimensions, each side 1 or the same.

    Use it for the second operand of an elementwise op whose result has ``shape`` (a bias).
    """
    shape = tuple(int(s) for s in shape)
    _check_sides(min_dims, len(shape), "dims")

    @st.composite
    def draw_shape(draw) -> Shape:
        # hypothesis.extra.numpy.broadcastable_shapes may also stretch a side of 1, so that the
        # result outgrows ``shape``; here every side is 1 or the side it lines up with.
        count = draw(st.integers(min_dims, len(shape)))
        aligned = shape[len(shape) - count:]
        return tuple(draw(st.sampled_from((1, side))) if side != 1 else 1 for side in aligned)

    return draw_shape()


def broadcastable_pairs(*, min_dims: int = 1, max_dims: int = 3, min_side: int = 1,
                        max_side: int = 8) -> st.SearchStrategy[tuple[Shape, Shape]]:
    """Two shapes that broadcast together (either may be the larger one, and the result may exceed both)."""
    _check_sides(min_dims, max_dims, "dims")
    _check_sides(min_side, max_side, "sides")
    return hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=min_dims, max_dims=max_dims,
                                             min_side=min_side, max_side=max_side).map(lambda b: b.input_shapes)


# ---------------------------------------------------------------- tensors


def tensors(dtype: Any, shape: Sequence[int] | st.SearchStrategy, *, min_value: float | None = None,
            max_value: float | None = None, min_magnitude: float = 0.0, special: Iterable[str] = (),
            requires_grad: bool = False) -> st.SearchStrategy[torch.Tensor]:
    """CPU tensors of ``dtype`` and ``shape`` (a tuple or a strategy of tuples).

    Floats lie in [min_value, max_value] (default [-8, 8]), at least ``min_magnitude`` away from
    zero, and are exact values of the dtype; up to three elements may be special values of the
    kinds in ``special``. Integer tensors take their bounds inclusive (default [0, 8]); bool
    tensors ignore them.
    """
    dtype = parse_dtype(dtype)
    if dtype not in _NUMPY:
        raise ValueError(f"dtype {dtype} has no tensor strategy: use a float, integer or bool dtype")
    kinds = check_special(special)
    if kinds and not dtype.is_floating_point:
        raise ValueError(f"special values {list(kinds)} need a float dtype, not {dtype}: drop special")
    if dtype.is_floating_point:
        low = DEFAULT_RANGE[0] if min_value is None else min_value
        high = DEFAULT_RANGE[1] if max_value is None else max_value
        elements = floats(dtype, min_value=low, max_value=high, min_magnitude=min_magnitude)
        low, high = _on_grid(low, dtype, math.inf), _on_grid(high, dtype, -math.inf)
        magnitude = _on_grid(min_magnitude, dtype, math.inf) if min_magnitude > 0 else 0.0
    elif dtype == torch.bool:
        elements, low, high, magnitude = st.booleans(), 0, 1, 0
    else:
        info = torch.iinfo(dtype)
        low = 0 if min_value is None else int(min_value)
        high = 8 if max_value is None else int(max_value)
        check_range(low, high)
        if low < info.min or high > info.max:
            raise ValueError(f"range [{low}, {high}] does not fit {dtype}: keep it within [{info.min}, {info.max}]")
        elements, magnitude = st.integers(low, high), 0
    if min_magnitude and not dtype.is_floating_point:
        raise ValueError(f"min_magnitude needs a float dtype, not {dtype}: narrow the range instead")
    specials = special_floats(dtype, kinds) if kinds else None
    shape_strategy = shape if isinstance(shape, st.SearchStrategy) else st.just(_check_shape(shape))

    @st.composite
    def draw_tensor(draw) -> torch.Tensor:
        size = draw(shape_strategy)
        numel = math.prod(size)
        if numel <= DENSE_ELEMENTS:
            unique = dtype.is_floating_point and _grid_size(low, high, dtype) >= 4 * numel
            flat = draw(hnp.arrays(_NUMPY[dtype], (numel,), elements=elements, fill=st.nothing(),
                                   unique=unique)).tolist()
        else:
            flat = _background(draw(st.integers(0, 2**32 - 1)), numel, dtype, low, high, magnitude)
            for index, value in draw(st.lists(st.tuples(st.integers(0, numel - 1), elements), max_size=MAX_DRAWN)):
                flat[index] = value
        if specials is not None and numel:
            for index, value in draw(st.lists(st.tuples(st.integers(0, numel - 1), specials), max_size=MAX_SPECIAL)):
                flat[index] = value
        tensor = torch.tensor(flat, dtype=torch.float64 if dtype.is_floating_point else dtype)
        tensor = tensor.to(dtype).reshape(size)
        return tensor.requires_grad_(True) if requires_grad else tensor

    return draw_tensor()


def _check_shape(shape: Sequence[int]) -> Shape:
    if isinstance(shape, int) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise ValueError(f"shape {shape!r} is not a tuple of sizes: write (2, 3), or pass a shape strategy")
    return tuple(shape)


_ORDINAL = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
            torch.float64: torch.int64}


def _ordinal(value: float, dtype: torch.dtype) -> int:
    """Position of a value on the dtype's grid: consecutive values get consecutive integers."""
    width = torch.iinfo(_ORDINAL[dtype]).bits
    bits = int(torch.tensor(value, dtype=dtype).view(_ORDINAL[dtype]).item()) & ((1 << width) - 1)
    magnitude = bits & ((1 << (width - 1)) - 1)  # sign and magnitude: -0.0 and 0.0 meet at 0
    return -magnitude if bits >> (width - 1) else magnitude


def _grid_size(low: float, high: float, dtype: torch.dtype) -> int:
    """How many values of the dtype lie in [low, high] (both on the grid)."""
    return _ordinal(high, dtype) - _ordinal(low, dtype) + 1


def _background(seed: int, numel: int, dtype: torch.dtype, low, high, magnitude: float = 0.0) -> list:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (numel,), generator=generator).bool().tolist()
    if not dtype.is_floating_point:
        return torch.randint(low, high + 1, (numel,), generator=generator).tolist()
    # Uniform in float64, then to the nearest dtype value: rounding is monotone and the bounds lie
    # on the grid, so every value stays in range; the tensor holds exactly these values.
    uniform = torch.rand(numel, generator=generator, dtype=torch.float64) * (high - low) + low
    values = uniform.to(dtype).double()
    if magnitude > 0:  # values too close to zero move out to the nearer allowed magnitude, inside the range
        outward = torch.where(values >= 0, magnitude, -magnitude)
        outward = torch.where((outward > high) | (outward < low), -outward, outward)
        values = torch.where(values.abs() < magnitude, outward, values)
    return values.tolist()


__all__ = [
    "DEFAULT_RANGE", "SPECIAL_VALUES", "broadcastable_pairs", "broadcastable_shapes", "floats",
    "round_to_bfloat16", "shapes", "special_floats", "special_values", "tensors",
]
