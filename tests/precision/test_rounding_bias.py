"""A kernel that rounds toward zero (or always down) errs by at most one ulp, which every standard's
loose limit admits, yet it shifts a whole tensor one way: summed downstream, that bias grows with the
sum where a fair kernel's rounding errors cancel. Where the output is one rounding of a wider
computation (Accumulation.rounded_once), the rounding-dominated elements of a fair kernel lean
neither way, and a truncating kernel leans half of them: the rounding_bias gate."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import Status, judge, render_message
from pytest_npuprecision.ops.catalogue import op_record
from pytest_npuprecision.precision.metrics import Metrics
from pytest_npuprecision.precision.standards import ROUNDING_BIAS

DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _x(*shape, seed=0, low=None):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return x.abs() + low if low is not None else x


# op name as a dump names it, the torch callable, and its float64 inputs
CALLS = {
    "Torch.exp": (torch.exp, lambda: (_x(64, 256),)),
    "Torch.log": (torch.log, lambda: (_x(64, 256, low=0.1),)),
    "Torch.tanh": (torch.tanh, lambda: (_x(64, 256),)),
    "Torch.sigmoid": (torch.sigmoid, lambda: (_x(64, 256),)),
    "Functional.silu": (F.silu, lambda: (_x(64, 256),)),
    "Torch.mul": (torch.mul, lambda: (_x(64, 256), _x(64, 256, seed=1))),
    "Torch.div": (torch.div, lambda: (_x(64, 256), _x(64, 256, seed=1, low=0.5))),
    "Torch.matmul": (torch.matmul, lambda: (_x(64, 128), _x(128, 96, seed=1))),
    "Functional.linear": (F.linear, lambda: (_x(64, 128), _x(96, 128, seed=1), _x(96, seed=2))),
    "Functional.conv2d": (F.conv2d, lambda: (_x(4, 8, 20, 20), _x(16, 8, 3, 3, seed=1))),
}


def _toward_zero(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """exact rounded to dtype toward zero: to nearest, then one step back where that grew it."""
    nearest = exact.to(dtype)
    grew = nearest.double().abs() > exact.abs()
    return torch.where(grew, torch.nextafter(nearest, torch.zeros_like(nearest)), nearest)


def _down(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    nearest = exact.to(dtype)
    return torch.where(nearest.double() > exact, torch.nextafter(nearest, torch.full_like(nearest, -math.inf)), nearest)


def _call(name: str, dtype: torch.dtype):
    fn, make = CALLS[name]
    exact_inputs = make()
    inputs = tuple(t.to(dtype) for t in exact_inputs)
    with torch.no_grad():
        golden = fn(*(t.double() for t in inputs))
        # a half type computes in float32 and rounds once, as torch's CPU kernels do
        wide = fn(*(t.float() for t in inputs)).double() if dtype != torch.float32 else golden
        fair = fn(*inputs)
    return inputs, golden, wide, fair


def _rounding_check(verdict):
    return next((c for c in verdict.checks if c.metric == "rounding_bias"), None)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_torch_s_kernel_leans_neither_way(name, dtype):
    inputs, golden, _, fair = _call(name, dtype)
    verdict = judge(fair, golden, op=name, inputs=(inputs, {}))
    assert verdict.status is Status.PASS, render_message(verdict)
    check = _rounding_check(verdict)
    if dtype != torch.float32 or name not in ("Torch.matmul", "Functional.linear", "Functional.conv2d"):
        # a float32 sum's bound is its accumulation, not its rounding: no element is rounding-dominated there
        assert check is not None and verdict.metrics.rounding_elements > 1000
        assert check.value < ROUNDING_BIAS.error / 2


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("rounding", [_toward_zero, _down], ids=["toward_zero", "down"])
def test_a_kernel_with_the_wrong_rounding_mode_fails(name, dtype, rounding):
    inputs, golden, wide, _ = _call(name, dtype)
    if dtype == torch.float32 and name in ("Torch.matmul", "Functional.linear", "Functional.conv2d"):
        pytest.skip("a float32 sum errs by its accumulation, far more than by its rounding: nothing to see there")
    actual = rounding(wide, dtype)
    verdict = judge(actual, golden, op=name, inputs=(inputs, {}))
    check = _rounding_check(verdict)
    assert verdict.status is Status.ERROR and check is not None and check.status is Status.ERROR, \
        render_message(verdict)
    assert check.value > 0.4  # half the elements, give or take the ones the two modes round alike


def test_only_one_rounding_without_a_rounded_constant_is_judged_so():
    x = _x(8, 8)
    assert op_record("mul").is_rounded_once((x, x), {})
    assert op_record("mul").is_rounded_once((x, 0.5), {})  # exact in float32
    assert not op_record("mul").is_rounded_once((x, 0.1), {})  # every element times one rounded 0.1: a fair lean
    assert not op_record("add").is_rounded_once((x, x), {"alpha": 0.1})
    assert not op_record("rms_norm").is_rounded_once((x, (8,)), {})  # a rounded rsqrt shared by each row


def test_a_fair_float32_product_with_a_rounded_constant_is_not_judged_for_lean():
    """x * 0.1 in float32 multiplies by 0.1 rounded to float32, a common relative error of up to u: the
    elements lean with it, fairly, so the gate must not look."""
    x = _x(256, 256)
    golden = x.double() * 0.1
    actual = x * 0.1
    leaning = (torch.sign(actual.double() - golden.to(torch.float32).double()) != 0).sum().item()
    assert leaning > 0  # the constant's rounding shows
    verdict = judge(actual, golden, op="Torch.mul", inputs=((x, 0.1), {}))
    assert verdict.status is Status.PASS, render_message(verdict)
    assert _rounding_check(verdict) is None


def test_few_elements_are_judged_against_chance():
    """Six sigma of a fair coin: 16 elements all leaning one way is not yet a bias."""
    x = _x(4, 4)
    golden = torch.exp(x.double())
    verdict = judge(_toward_zero(golden, torch.float16), golden, op="Torch.exp", inputs=((x.half(),), {}))
    check = _rounding_check(verdict)
    assert check is not None and check.limit == pytest.approx(6 / math.sqrt(verdict.metrics.rounding_elements))
    assert check.status is Status.PASS


def test_records_written_before_the_gate_still_load():
    verdict = judge(torch.ones(3), torch.ones(3, dtype=torch.float64))
    data = verdict.metrics.as_dict()
    del data["rounding_elements"], data["rounding_bias"]
    assert Metrics.from_dict(data).rounding_bias == 0.0
