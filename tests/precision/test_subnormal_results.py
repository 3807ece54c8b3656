"""Results below a dtype's smallest normal number: a fair formula that rounds several times errs a few
subnormal quanta there, whatever the result's size (issue 37), and a kernel that flushes them to zero
still fails."""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision import judge
from pytest_npuprecision.common.dtypes import float_format
from pytest_npuprecision.precision.element_bound import small_value_rule, subnormal_floor
from pytest_npuprecision.precision.verdict import Status

QUANTUM = float_format(torch.float16).smallest_subnormal  # 2^-24


def _divisor_gradient(seed: int = 66):
    """autograd's float16 gradient of x / y with respect to y, -g·((x/y)/y), 8x1, about 1.3e-5: below
    float16's smallest normal 6.1e-5; and the same in float64."""
    generator = torch.Generator().manual_seed(seed)
    x = (torch.rand(8, 1, generator=generator) * 2e-5 + 1e-5).to(torch.float16).requires_grad_()
    y = (torch.rand(8, 1, generator=generator) + 1.5).to(torch.float16).requires_grad_()
    grad = (torch.rand(8, 1, generator=generator) * 2 + 1).to(torch.float16)
    (x / y).backward(grad)
    x64, y64 = (t.detach().double().requires_grad_() for t in (x, y))
    (x64 / y64).backward(grad.double())
    return y.grad, y64.grad


def test_a_subnormal_gradient_of_several_roundings_passes():
    actual, golden = _divisor_gradient()
    assert golden.abs().max() < torch.finfo(torch.float16).tiny
    assert (actual.double() - golden).abs().max() > QUANTUM  # more than one rounding's half quantum
    verdict = judge(actual, golden, op="Tensor.__truediv__.0.backward")
    # half a quantum for the output's rounding alone made mean_bound_ratio 1.10
    assert verdict.status is Status.PASS, verdict.checks
    assert verdict.metrics.mean_bound_ratio < 0.5


@pytest.mark.parametrize("defect", ["x10", "flushed to zero"])
def test_a_subnormal_gradient_still_fails_for_a_planted_defect(defect):
    actual, golden = _divisor_gradient()
    wrong = actual * 10 if defect == "x10" else torch.zeros_like(actual)
    verdict = judge(wrong, golden, op="Tensor.__truediv__.0.backward")
    assert verdict.status is Status.ERROR
    assert verdict.metrics.max_bound_ratio > 20


def test_the_floor_counts_a_quantum_per_intermediate_rounding():
    fmt = float_format(torch.float16)
    assert subnormal_floor(fmt, 0) == QUANTUM / 2
    assert subnormal_floor(fmt, 2) == 2.5 * QUANTUM


@pytest.mark.parametrize("dtype, quanta", [(torch.float16, 1), (torch.bfloat16, 0.5), (torch.float32, 8)])
def test_the_small_value_rule_follows_the_dtypes_range(dtype, quanta):
    """Below the smallest normal number, rtol of it: what rtol allows the smallest normal result, in
    quanta of the subnormal spacing (float16's rtol is 2u, bfloat16's u, float32's 16u); a quantum per
    rounding more."""
    fmt = float_format(dtype)
    rtol = {torch.float16: 2.0**-10, torch.bfloat16: 2.0**-8, torch.float32: 2.0**-20}[dtype]
    assert small_value_rule(fmt, rtol, 0) == (torch.finfo(dtype).tiny, quanta * fmt.smallest_subnormal)
    assert small_value_rule(fmt, rtol, 1)[1] == (quanta + 1) * fmt.smallest_subnormal


def test_a_flushed_subnormal_product_fails_the_absolute_standard():
    """float16 products of 3e-6 to 9e-6, subnormal: msprobe's rule (|golden| < 2^-10 within 2^-16) passed
    them flushed to zero."""
    x = torch.full((64,), 1e-2, dtype=torch.float16)
    y = torch.linspace(3e-4, 9e-4, 64, dtype=torch.float64).to(torch.float16)
    golden = x.double() * y.double()
    assert judge(x * y, golden, op="Tensor.__mul__").status is Status.PASS
    flushed = judge(torch.zeros(64, dtype=torch.float16), golden, op="Tensor.__mul__")
    assert flushed.status is Status.ERROR and flushed.standard == "absolute"
