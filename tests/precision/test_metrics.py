"""Metrics against values computed by hand on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npuprecision.precision.measuring import compute_metrics
from pytest_npuprecision.precision.metrics import Accumulation
from pytest_npuprecision.precision.rules import Rules

RULES = Rules.default()
FLOATS = [torch.float16, torch.bfloat16, torch.float32]
MANTISSA = {torch.float16: 10, torch.bfloat16: 7, torch.float32: 23}


def metrics(actual, golden, accumulation=None):
    return compute_metrics(actual, golden, RULES.params(actual.dtype), accumulation)


def test_every_metric_of_a_small_float32_tensor():
    actual = torch.tensor([1.0, 2.0, -3.0, 0.0])
    golden = torch.tensor([1.0, 2.5, -3.0, 1e-9], dtype=torch.float64)
    m = metrics(actual, golden)
    u = 2.0**-24
    rms = math.sqrt((1 + 6.25 + 9 + 1e-18) / 4)
    # 1e-9 is a normal float32 number: judged by its relative error, which is 1 (no small values)
    assert (m.numel, m.finite, m.normal_count, m.small_count) == (4, 4, 4, 0)
    assert m.max_abs_err == 0.5 and m.worst.abs == 1
    assert m.mean_abs_err == pytest.approx((0.5 + 1e-9) / 4)
    assert m.rmse == pytest.approx(math.sqrt((0.25 + 1e-18) / 4))
    assert m.max_rel_err == pytest.approx(1.0) and m.worst.rel == 3
    assert m.mean_rel_err == pytest.approx(1.2 / 4)
    assert m.rel_err_ratio == pytest.approx(2 / 4)  # 0.2 and 1 > rtol 2**-20
    assert m.small_value_err_ratio == 0.0
    assert m.error_balance == -0.5  # two elements below their rounded golden
    # 1e-9 lies within its bound of zero (u*rms): its sign is not settled, so its growth is not counted
    assert m.magnitude_balance == -0.25
    # ULP on the float32 grid: 2.5 lies in [2, 4), spacing 2**-22; 1e-9 in [2**-30, 2**-29), spacing 2**-53.
    assert m.max_ulp_err == pytest.approx(1e-9 * 2.0**53) and m.worst.ulp == 3
    assert m.mean_ulp_err == pytest.approx((0.5 * 2.0**22 + 1e-9 * 2.0**53) / 4)
    assert m.ulp_over_ratio == 0.5  # both wrong elements exceed 32 ulp
    # 2.5 is off by 20 %; 1e-9 against 0 is past the thousandth tolerance but within its error bound.
    assert m.thousandth_ratio == 0.75
    assert m.cosine == pytest.approx(15 / math.sqrt(14 * (16.25 + 1e-18)))
    # Error bound, K = 1, no term norm: u*|g| + u*max(|g|, rms).
    assert m.max_bound_ratio == pytest.approx(0.5 / (u * 2.5 + u * 2.5))
    assert m.worst.bound == 1
    assert m.golden_rms == pytest.approx(rms)
    assert m.nonfinite_mismatch == m.binary_mismatch - 2 == 0
    assert m.worst.binary == 1 and m.worst.nonfinite == -1


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("ulps", [1, 3, 1000])
def test_ulp_relative_and_absolute_error_of_k_ulps_above_one(dtype, ulps):
    step = 2.0 ** -MANTISSA[dtype]
    actual = torch.full((8,), 1 + ulps * step, dtype=torch.float64).to(dtype)
    golden = torch.ones(8, dtype=torch.float64)
    m = metrics(actual, golden)
    expected = float(actual[0].double()) - 1  # what the dtype could hold of 1 + ulps*step
    assert m.max_ulp_err == pytest.approx(expected / step)
    assert m.max_abs_err == pytest.approx(expected)
    assert m.max_rel_err == pytest.approx(expected)
    assert m.error_balance == m.magnitude_balance == 1.0
    assert m.binary_mismatch == 8


@pytest.mark.parametrize("dtype", FLOATS)
def test_ulp_of_a_zero_golden_is_the_smallest_subnormal(dtype):
    """msprobe measures a zero golden in units of ULP(1.0); the dtype's own grid is finer."""
    info = torch.finfo(dtype)
    tiniest = info.tiny * info.eps  # smallest subnormal
    m = metrics(torch.tensor([tiniest], dtype=dtype), torch.zeros(1, dtype=torch.float64))
    assert m.max_ulp_err == pytest.approx(1.0)


@pytest.mark.parametrize("dtype", FLOATS)
def test_a_correctly_rounded_result_has_at_most_half_an_ulp(dtype):
    golden = torch.linspace(-3, 3, 1001, dtype=torch.float64) / 7
    m = metrics(golden.to(dtype), golden)
    assert m.max_ulp_err <= 0.5
    assert m.binary_mismatch == 0 and m.error_balance == 0
    assert m.max_bound_ratio <= 1


def test_inf_and_nan_counts_and_agreement():
    actual = torch.tensor([float("nan"), float("inf"), 1.0, float("-inf"), 2.0])
    golden = torch.tensor([float("nan"), 1e40, 1.0, 5.0, float("nan")], dtype=torch.float64)
    m = metrics(actual, golden)
    assert (m.nan_actual, m.nan_golden, m.inf_actual, m.inf_golden) == (1, 2, 2, 1)
    # nan/nan and inf/overflow agree; -inf vs 5 and 2 vs nan do not.
    assert m.nonfinite_mismatch == 2 and m.worst.nonfinite == 3
    assert m.finite == 1 and m.max_abs_err == 0


@pytest.mark.parametrize(
    "device_value, golden_value, mismatch",
    [
        (65504.0, 70000.0, 1),  # saturation: the exact result overflows float16, the device clamps
        (float("inf"), 70000.0, 0),  # a fair overflow
        (float("inf"), 65510.0, 0),  # rounds to 65504 but reaches the dtype's max: overflow is fair
        (float("inf"), 65000.0, 1),  # overflow well inside the range
        (float("-inf"), 70000.0, 1),  # inf of the wrong sign
    ],
)
def test_overflow_that_a_correct_float16_kernel_would_produce_is_not_a_mismatch(device_value, golden_value, mismatch):
    m = metrics(torch.tensor([device_value], dtype=torch.float16), torch.tensor([golden_value], dtype=torch.float64))
    assert m.nonfinite_mismatch == mismatch


def test_integer_outputs_count_mismatches():
    m = metrics(torch.tensor([1, 2, 3, 4]), torch.tensor([1, 2, 5, 4]))
    assert m.binary_mismatch == 1 and m.worst.binary == 2 and m.nonfinite_mismatch == 0


def test_bool_outputs_count_mismatches():
    m = metrics(torch.tensor([True, False, True]), torch.tensor([True, True, True]))
    assert m.binary_mismatch == 1 and m.worst.binary == 1


def test_empty_and_scalar_tensors():
    empty = metrics(torch.empty(0, 3), torch.empty(0, 3, dtype=torch.float64))
    assert empty.numel == 0 and empty.finite == 0 and empty.cosine == 1.0
    scalar = metrics(torch.tensor(2.0), torch.tensor(2.0, dtype=torch.float64))
    assert scalar.shape == () and scalar.max_abs_err == 0 and scalar.worst.abs == -1


def test_term_norm_and_length_scale_the_bound():
    actual = torch.tensor([1.0, -2.0])
    golden = torch.tensor([1.0 + 2**-20, -2.0], dtype=torch.float64)
    u = 2.0**-24
    norm = torch.tensor([3.0, 4.0], dtype=torch.float64)
    m = metrics(actual, golden, Accumulation(length=16, term_norm=norm))
    bound = u * golden[0].item() + 4 * u * (3.0 + golden[0].item())
    assert m.max_bound_ratio == pytest.approx(2**-20 / bound)
    rounded = metrics(actual, golden, Accumulation(length=16, term_norm=norm, roundings=2))
    assert rounded.max_bound_ratio == pytest.approx(2**-20 / (bound + 2 * u * (3.0 + golden[0].item())))


def test_relative_errors_skip_elements_whose_sum_cancelled():
    """|error| / |golden| where the golden is 1/16 of its terms' norm or less measures the
    cancellation, not the kernel: such elements leave the relative metrics and keep the rest."""
    golden = torch.tensor([1.0, 0.01, 2.0], dtype=torch.float64)
    actual = torch.tensor([1.0 + 2**-20, 0.01 + 2**-16, 2.0])
    norm = torch.tensor([4.0, 4.0, 4.0], dtype=torch.float64)  # 0.01 is 1/400 of its terms: cancelled
    judged = metrics(actual, golden, Accumulation(length=16, term_norm=norm))
    assert judged.normal_count == 2
    assert judged.max_rel_err == pytest.approx(2**-20, rel=1e-3)
    every = metrics(actual, golden)  # no term norms: nothing is known to have cancelled
    assert every.normal_count == 3
    assert every.max_rel_err == pytest.approx((actual[1].double() - 0.01).abs().item() / 0.01)
    assert judged.rmse == every.rmse  # the absolute metrics keep every element


def test_chunked_metrics_equal_whole_tensor_formulas():
    """Big enough for several chunks; the worst elements sit in different chunks."""
    n = 3 * (1 << 20) + 5
    generator = torch.Generator().manual_seed(1)
    golden = torch.randn(n, generator=generator, dtype=torch.float64)
    actual = golden.float()
    actual[2_500_000] += 0.25
    actual[17] = float("nan")
    m = metrics(actual, golden)
    g = golden.clone()
    a = actual.double()
    finite = ~torch.isnan(a)
    err = (a - g).abs()[finite]
    assert m.worst.abs == 2_500_000 and m.worst.nonfinite == 17
    assert m.finite == n - 1
    assert m.mean_abs_err == pytest.approx(err.mean().item(), rel=1e-9)
    assert m.rmse == pytest.approx(err.square().mean().sqrt().item(), rel=1e-9)
    assert m.golden_rms == pytest.approx(g.square().mean().sqrt().item(), rel=1e-9)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_float8_outputs_are_measured_on_their_own_grid(dtype):
    golden = torch.linspace(-3, 3, 101, dtype=torch.float64)
    rounded = metrics(golden.to(dtype), golden)
    assert rounded.max_ulp_err <= 0.5 and rounded.binary_mismatch == 0
    wrong = golden.to(dtype).clone()
    wrong[50] = torch.tensor(2.0).to(dtype)  # golden is 0 there
    m = metrics(wrong, golden)
    info = torch.finfo(dtype)
    assert m.max_ulp_err == pytest.approx(2.0 / (info.tiny * info.eps)) and m.worst.ulp == 50
