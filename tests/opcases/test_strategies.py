"""pytest_npuprecision.strategies: tensors hold exact values of their dtype, shapes stay small, and
special values come only on request."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from pytest_npuprecision import strategies as nst

DTYPES = [torch.float16, torch.bfloat16, torch.float32]
FEW = settings(max_examples=40, database=None, deadline=None, derandomize=True)


def exact_in(value: float, dtype: torch.dtype) -> bool:
    return math.isnan(value) or torch.tensor(value, dtype=torch.float64).to(dtype).item() == value


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_float_draws_are_exact_values_of_the_dtype(dtype):
    @FEW
    @given(nst.floats(dtype, min_value=-3.3, max_value=1000.1))
    def check(value):
        assert exact_in(value, dtype)
        assert -3.3 <= value <= 1000.1

    check()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_tensors_hold_exactly_the_values_drawn(dtype):
    @FEW
    @given(nst.tensors(dtype, nst.shapes(max_dims=2, max_side=12), min_value=-2, max_value=2))
    def check(t):
        assert t.dtype == dtype
        assert (t.abs() <= 2).all()
        as_float = t.double()
        assert torch.equal(as_float.to(dtype), t)  # nothing was rounded on the way in

    check()


def test_bfloat16_rounds_to_nearest_even_and_keeps_simple_values():
    assert nst.round_to_bfloat16(1.0) == 1.0
    assert nst.round_to_bfloat16(3.14159) == torch.tensor(3.14159).bfloat16().item() == 3.140625
    assert nst.round_to_bfloat16(1.00390625) == 1.0  # the tie between 1.0 and 1.0078125 goes to even
    assert nst.round_to_bfloat16(1.01171875) == 1.015625
    assert math.isinf(nst.round_to_bfloat16(math.inf))


def test_bounds_move_inwards_onto_the_grid():
    @FEW
    @given(nst.floats(torch.float16, min_value=0.1, max_value=0.2))
    def check(value):
        assert 0.1 <= value <= 0.2

    check()


def test_larger_tensors_draw_a_background_and_still_hold_distinct_values():
    @FEW
    @given(nst.tensors(torch.float32, (32, 32), min_value=-1, max_value=1))
    def check(t):
        assert t.unique().numel() > 512  # not one repeated fill value

    check()


def test_min_magnitude_keeps_values_away_from_zero():
    @FEW
    @given(nst.tensors(torch.bfloat16, nst.shapes(max_side=16), min_value=-4, max_value=4, min_magnitude=1e-3))
    def check(t):
        assert (t.abs() >= 1e-3).all()

    check()


def test_special_values_appear_only_when_asked():
    seen = {"plain": False, "special": False}

    @FEW
    @given(nst.tensors(torch.float16, (4,)), nst.tensors(torch.float16, (4,), special=["nan", "inf"]))
    def check(plain, special):
        assert torch.isfinite(plain).all()
        seen["special"] |= bool((~torch.isfinite(special)).any())

    check()
    assert seen["special"]


def test_special_values_of_float16():
    assert nst.special_values(torch.float16, ["zero", "max", "near_overflow"]) == [
        0.0, -0.0, 65504.0, -65504.0, 32752.0, -32752.0, 255.875, -255.875, 11.0859375, -11.0859375]
    smallest, _, largest, _ = nst.special_values(torch.float16, ["subnormal"])
    assert smallest == 2.0 ** -24 and largest == 2.0 ** -14 - 2.0 ** -24


def test_integer_tensors_take_inclusive_bounds():
    @FEW
    @given(nst.tensors(torch.int64, (50,), min_value=0, max_value=3))
    def check(t):
        assert t.dtype == torch.int64 and 0 <= t.min() and t.max() <= 3

    check()


def test_broadcastable_shapes_broadcast_to_the_given_shape():
    @FEW
    @given(nst.shapes(max_side=5).flatmap(lambda s: st.tuples(st.just(s), nst.broadcastable_shapes(s))))
    def check(pair):
        shape, other = pair
        assert torch.broadcast_shapes(shape, other) == torch.Size(shape)

    check()


def test_broadcastable_pairs_broadcast_together():
    @FEW
    @given(nst.broadcastable_pairs(max_side=5))
    def check(pair):
        torch.broadcast_shapes(*pair)  # raises if they do not

    check()


@pytest.mark.parametrize("call, message", [
    (lambda: nst.floats("fp16"), "dtype 'fp16' is not a torch dtype: use float16"),
    (lambda: nst.floats(torch.int32), "dtype torch.int32 has no float strategy: use float16, bfloat16, float32 or float64"),
    (lambda: nst.floats(torch.float16, min_value=4, max_value=-4), "range [4, -4] is empty: give [low, high] with low <= high"),
    (lambda: nst.floats(torch.float16, min_value=0.1, max_value=0.1), "range [0.1, 0.1] holds no float16 value: widen it"),
    (lambda: nst.tensors(torch.float16, (2,), special=["huge"]),
     "special value 'huge' is unknown: use some of zero, subnormal, max, near_overflow, inf, nan"),
    (lambda: nst.tensors(torch.int64, (2,), special=["nan"]), "special values ['nan'] need a float dtype, not torch.int64: drop special"),
    (lambda: nst.tensors(torch.float16, 3), "shape 3 is not a tuple of sizes: write (2, 3), or pass a shape strategy"),
    (lambda: nst.shapes(min_side=5, max_side=2), "sides range [5, 2] is empty: give [low, high] with low <= high"),
    (lambda: nst.floats(torch.float16, min_value=-1, max_value=1, min_magnitude=2),
     "range [-1, 1] holds no value of magnitude >= 2: widen it or lower min_magnitude"),
])
def test_bad_arguments_name_the_value_and_the_fix(call, message):
    with pytest.raises(ValueError) as raised:
        call()
    assert str(raised.value) == message


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_ordinary_draws_hold_no_value_whose_products_are_subnormal(dtype):
    """float32's smallest normal times anything below 1 is subnormal, which CPU kernels flush to zero: an
    ordinary case never draws it (a conv2d weight of 1.18e-38 failed the shipped bfloat16 op case)."""
    wide = torch.float64 if dtype == torch.float64 else torch.float32
    floor = math.sqrt(torch.finfo(wide).tiny)
    seen = []

    @settings(max_examples=300, derandomize=True, database=None)
    @given(nst.floats(dtype, min_value=-1.0, max_value=1.0))
    def draw(value):
        seen.append(value)
        assert value == 0 or abs(value) >= floor

    draw()
    assert any(value == 0 for value in seen)
    tiny = torch.finfo(dtype).tiny
    asked = []

    @settings(max_examples=300, derandomize=True, database=None)
    @given(nst.floats(dtype, min_value=tiny / 8, max_value=tiny, allow_subnormal=True))
    def draw_asked(value):
        asked.append(value)

    draw_asked()
    assert any(0 < value < floor for value in asked)  # asked for, tiny values still come
