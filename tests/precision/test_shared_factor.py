"""Normalizations share one rounded factor per row: their errors correlate along it (issue 12, class 1).

rms_norm and layer_norm scale a row by one rsqrt, softmax divides it by one sum, log_softmax
subtracts one log-sum-exp. A fair kernel that rounds that factor to the output dtype errs by a
common relative amount over the whole row, which a bias check counting every element as
independent reads as a biased kernel. The bias is judged across the rows instead
(Accumulation.shared), and the factor's rounding counts as one intermediate rounding (its record's roundings).
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import Accumulation, Status, judge, render_message
from pytest_npuprecision.precision.measuring import compute_metrics
from pytest_npuprecision.precision.rules import Rules

HALF = [torch.float16, torch.bfloat16]


def _rms_norm_inputs(rows: int, dtype, seed: int, width: int = 8192):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, width, generator=g).to(dtype), (1 + 0.1 * torch.randn(width, generator=g)).to(dtype)


def rms_norm_with_a_rounded_factor(x, w):
    """Fair: float32 inside, with the row's rsqrt rounded once to the output dtype."""
    inside = x.float()
    factor = torch.rsqrt(inside.square().mean(-1, keepdim=True) + 1e-6).to(x.dtype)
    return (inside * factor.float()).to(x.dtype) * w


def rms_norm_accumulated_in_half(x, w):
    """Defect: the mean square summed in the input's own dtype."""
    total = torch.zeros(x.shape[:-1] + (1,), dtype=x.dtype)
    for k in range(x.shape[-1]):
        total = total + x[..., k:k + 1] * x[..., k:k + 1]
    return (x.float() * torch.rsqrt(total.float() / x.shape[-1] + 1e-6)).to(x.dtype) * w


def _judge_rms_norm(actual, x, w):
    golden = F.rms_norm(x.double(), x.shape[-1:], w.double(), eps=1e-6)
    # The accumulation comes from the call, as a dump case derives it.
    return judge(actual, golden, op="Functional.rms_norm", inputs=((x, x.shape[-1:], w), {"eps": 1e-6}))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("rows", [1, 2, 4])
def test_a_fair_rms_norm_over_8192_with_one_rounded_factor_per_row_passes(dtype, rows):
    for seed in range(10):
        x, w = _rms_norm_inputs(rows, dtype, seed)
        verdict = _judge_rms_norm(rms_norm_with_a_rounded_factor(x, w), x, w)
        assert verdict.status is Status.PASS, f"seed {seed}: " + render_message(verdict)


@pytest.mark.parametrize("dtype", HALF)
def test_rms_norm_accumulated_in_half_precision_still_fails(dtype):
    x, w = _rms_norm_inputs(4, dtype, 0)
    verdict = _judge_rms_norm(rms_norm_accumulated_in_half(x, w), x, w)
    assert verdict.status is Status.ERROR, render_message(verdict)


@pytest.mark.parametrize("dtype", HALF)
def test_a_bias_over_many_rows_still_fails(dtype):
    # Every element 4 eps too large: past what one rounded factor per row explains.
    x, w = _rms_norm_inputs(64, dtype, 0, width=512)
    biased = (F.rms_norm(x.float(), (512,), w.float(), eps=1e-6).double() * (1 + 4 * torch.finfo(dtype).eps))
    verdict = _judge_rms_norm(biased.to(dtype), x, w)
    assert verdict.status is Status.ERROR, render_message(verdict)
    assert any(c.metric in ("bound_bias", "magnitude_bound_bias", "mean_bound_ratio") for c in verdict.failures)


def test_only_a_common_error_up_to_the_factors_rounding_is_taken_out_of_the_bias():
    params = Rules.default().params(torch.float32)
    golden = torch.rand(256, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 0.5
    u = 2.0**-24

    def bias(relative: float, shared: bool) -> float:
        actual = (golden * (1 + relative)).float()
        return compute_metrics(actual, golden, params, Accumulation(16, shared=shared)).magnitude_bound_bias

    # Rows scaled by (1 + u), as by a factor rounded to the dtype: no bias left once it is shared.
    assert bias(u, shared=False) > 0.1 and abs(bias(u, shared=True)) < 0.2 * bias(u, shared=False)
    # Past the factor's own rounding the rest stays: of 8 u of common error, 7 u.
    assert bias(8 * u, shared=True) == pytest.approx(7 / 8 * bias(8 * u, shared=False), rel=0.1)


@pytest.mark.parametrize("op, dtype", [(torch.softmax, torch.float32), (torch.log_softmax, torch.float16)])
def test_near_uniform_rows_of_1024_pass(op, dtype):
    # Inputs of order 2**-20: every probability sits at 1/1024, and the row's one rounded normalizer
    # moves them all together.
    for seed in range(5):
        x = (torch.rand(4, 1024, generator=torch.Generator().manual_seed(seed)) * 2.0**-20).to(dtype)
        verdict = judge(op(x, -1), op(x.double(), -1), op=f"Torch.{op.__name__}", inputs=((x, -1), {}))
        assert verdict.status is Status.PASS, f"seed {seed}: " + render_message(verdict)


def _toward_zero(wide: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    nearest = wide.to(dtype)
    away = nearest.double().abs() > wide.double().abs()
    return torch.where(away, torch.nextafter(nearest, torch.zeros_like(nearest)), nearest)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", ["layer_norm", "batch_norm"])
def test_rounding_toward_zero_fails_where_values_sit_far_from_their_mean(op, dtype):
    """Rows 50 sigma from their mean: the bound's share for the row's statistics dwarfs the output's
    one rounding, so no element counted as rounding-dominated and a kernel that rounds toward zero
    passed. Its rows as the gate's samples allow for the common error; left out of the elementwise
    bound, each element's one rounding decides again: the fair kernel passes, the truncating one fails."""
    g = torch.Generator().manual_seed(1)
    if op == "layer_norm":
        x = (50 + torch.randn(64, 1024, generator=g)).to(dtype)
        w = (1 + 0.1 * torch.randn(1024, generator=g)).to(dtype)
        b = (0.1 * torch.randn(1024, generator=g)).to(dtype)
        args, kwargs, fn = (x, (1024,), w, b), {"eps": 1e-5}, F.layer_norm
    else:
        x = (50 + torch.randn(16, 32, 8, 8, generator=g)).to(dtype)
        w, b = (1 + 0.1 * torch.randn(32, generator=g)).to(dtype), (0.1 * torch.randn(32, generator=g)).to(dtype)
        args, kwargs, fn = (x, None, None, w, b), {"training": True, "eps": 1e-5}, F.batch_norm
    wide = fn(*[a.float() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    golden = fn(*[a.double() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    name = f"Functional.{op}"
    fair = judge(fn(*args, **kwargs), golden, op=name, inputs=(args, kwargs))
    assert fair.status is Status.PASS, render_message(fair)
    truncated = judge(_toward_zero(wide, dtype), golden, op=name, inputs=(args, kwargs))
    assert "rounding_bias" in {c.metric for c in truncated.failures}, render_message(truncated)


def _row_sum(x: torch.Tensor, bits: int | None = None) -> torch.Tensor:
    """x summed along its last dim one term at a time in float32; each partial sum kept to ``bits``
    significant bits where given (a narrower accumulator), else float32's own 24 (a fair order)."""
    total = torch.zeros(x.shape[:-1], dtype=torch.float32)
    for k in range(x.shape[-1]):
        total = total + x[..., k]
        if bits is not None:
            mantissa, exponent = torch.frexp(total.double())
            total = torch.ldexp(torch.round(torch.ldexp(mantissa, torch.full_like(exponent, bits))),
                                exponent - bits).float()
    return total.unsqueeze(-1)


def _softmax(x, bits=None):
    e = (x - x.amax(-1, keepdim=True)).exp()
    return e / _row_sum(e, bits)


def _log_softmax(x, bits=None):
    shifted = x - x.amax(-1, keepdim=True)
    return shifted - _row_sum(shifted.exp(), bits).log()


def _rms_norm(x, bits=None):
    return x * torch.rsqrt(_row_sum(x * x, bits) / x.shape[-1] + 1e-6)


ROW_SUMS = {"Torch.softmax": (_softmax, lambda x: torch.softmax(x, -1)),
            "Torch.log_softmax": (_log_softmax, lambda x: torch.log_softmax(x, -1)),
            "Functional.rms_norm": (_rms_norm, lambda x: F.rms_norm(x, x.shape[-1:], eps=1e-6))}


@pytest.mark.parametrize("name", ROW_SUMS)
def test_a_row_statistic_summed_in_a_narrower_accumulator_fails_where_any_fair_order_passes(name):
    """float32 rows of 1024 whose statistic (softmax's sum, log_softmax's log-sum-exp, rms_norm's mean
    square) is summed one term at a time, the fair order that errs most: the rows' common error stays
    under the ceiling row_order_ratio allows. Three bits short of float32 (8x its unit roundoff), the
    same order fails it, though the error bound, residual and bias checks all pass."""
    kernel, torch_kernel = ROW_SUMS[name]
    x = torch.randn(64, 1024, generator=torch.Generator().manual_seed(8))
    args, kwargs = ((x, -1), {}) if name != "Functional.rms_norm" else ((x, (1024,)), {"eps": 1e-6})
    golden = torch_kernel(x.double())
    for fair in (torch_kernel(x), kernel(x)):
        verdict = judge(fair, golden, op=name, inputs=(args, kwargs))
        assert verdict.status is Status.PASS, render_message(verdict)
        assert verdict.metrics.row_order_ratio < 0.75
    narrow = judge(kernel(x, bits=21), golden, op=name, inputs=(args, kwargs))
    assert {c.metric for c in narrow.failures} == {"row_order_ratio"}, render_message(narrow)


@pytest.mark.parametrize("name", ROW_SUMS)
def test_fair_row_statistics_pass_at_every_length_and_scale(name):
    """torch's own float32 kernels over rows of 2 to 333 elements, 1 or 16 rows, values 0.01 to 30:
    rows of a few nearly equal values (a log_softmax over 2 of 0.01) once split their common error
    into a huge offset and a huge scale; the statistic's own coefficient, and the share of the
    elements' roundings it carries, keep row_order_ratio under its limit everywhere."""
    _, torch_kernel = ROW_SUMS[name]
    for k, rows, scale, seed in itertools.product([2, 3, 5, 16, 333], [1, 16], [0.01, 1.0, 30.0], range(4)):
        x = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed)) * scale
        args, kwargs = ((x, -1), {}) if name != "Functional.rms_norm" else ((x, (k,)), {"eps": 1e-6})
        verdict = judge(torch_kernel(x), torch_kernel(x.double()), op=name, inputs=(args, kwargs))
        assert verdict.status is Status.PASS, f"{k}x{rows} at {scale}, seed {seed}: " + render_message(verdict)


def test_a_row_with_an_infinite_input_keeps_a_finite_ceiling():
    """OpInfo's log_softmax of [x, -inf, ...]: the -inf outputs match the golden's and leave the row;
    the rest are judged, not turned into a NaN ceiling that read as an infinite ratio."""
    x = torch.tensor([[-1.8, -float("inf"), -2.5, 0.3, -float("inf")]])
    verdict = judge(torch.log_softmax(x, -1), torch.log_softmax(x.double(), -1), op="Torch.log_softmax",
                    inputs=((x, -1), {}))
    assert verdict.status is Status.PASS, render_message(verdict)
    assert verdict.metrics.row_order_ratio is not None and verdict.metrics.row_order_ratio < 1


def _layer_norm_kernel(one_pass: bool, folded: bool = False, bits: int | None = None):
    """float32 layer_norm kernels over the last dim whose sums run one term at a time (_row_sum): the
    variance in one pass, E[x²] - mean², or two, the mean of (x - mean)²; applied as (x - mean)·rstd·w
    + b, or folded into x·a + (b - mean·a), a = rstd·w, as torch's CPU group_norm applies it."""
    def kernel(x, w, b, eps=1e-5):
        k = x.shape[-1]
        mean = _row_sum(x, bits) / k
        var = _row_sum(x * x, bits) / k - mean * mean if one_pass else _row_sum((x - mean).square(), bits) / k
        rstd = torch.rsqrt(var + eps)
        if folded:
            a = rstd * w
            return x * a + (b - mean * a)
        return (x - mean) * rstd * w + b
    return kernel


@pytest.mark.parametrize("offset", [0.0, 3.0, 50.0])
def test_a_centring_norm_is_held_to_the_one_pass_variance_it_may_take(offset):
    """A centring norm's rows err through their mean (an offset) and their variance (a scale). Taken in
    one pass, E[x²] - mean², the variance errs with the values' distance r from their mean, squared,
    and the mean's own error enters 2r times: the ceiling on the rows' common error allows that.
    Every fair form passes, summed one term at a time in float32: two passes, folded or not, and one
    pass where the values sit within a few spreads of zero (at r = 50 a sequential one-pass kernel
    over 1024 values errs about 1e-3 of each value, past the error bound itself). Summed three bits
    short of float32, the two-pass form fails row_order_ratio alone: at r = 0 through its scale, at
    r = 50 through its mean."""
    g = torch.Generator().manual_seed(11)
    x = offset + torch.randn(64, 1024, generator=g)
    w, b = 1 + 0.1 * torch.randn(1024, generator=g), 0.1 * torch.randn(1024, generator=g)
    args, kwargs = (x, (1024,), w, b), {"eps": 1e-5}
    golden = F.layer_norm(x.double(), (1024,), w.double(), b.double(), eps=1e-5)
    forms = [(False, False), (False, True)] + ([(True, False), (True, True)] if offset <= 3 else [])
    for fair in [F.layer_norm(*args, **kwargs)] + [_layer_norm_kernel(*form)(x, w, b) for form in forms]:
        verdict = judge(fair, golden, op="Functional.layer_norm", inputs=(args, kwargs))
        assert verdict.status is Status.PASS, render_message(verdict)
        assert verdict.metrics.row_order_ratio < 0.8
    narrow = judge(_layer_norm_kernel(False, bits=21)(x, w, b), golden, op="Functional.layer_norm",
                   inputs=(args, kwargs))
    assert {c.metric for c in narrow.failures} == {"row_order_ratio"}, render_message(narrow)


def test_a_sequential_softmax_over_wide_scores_leans_as_a_fair_order_may():
    """A sum of many terms far under its largest loses them in a fair order that adds them last: a
    sequential float32 softmax over scores of spread 8 leans about 10 u in every row, 5.9x torch's RMSE,
    which against torch as baseline read as a bias until the lean those vanishing terms explain
    (row_order_lean) was allowed. Over scores of spread 1 nothing vanishes, and a 4-eps bias against
    the same baseline still fails."""
    g = torch.Generator().manual_seed(5)
    wide, normal = 8 * torch.randn(64, 1024, generator=g), torch.randn(64, 1024, generator=g)
    verdict = judge(_softmax(wide), torch.softmax(wide.double(), -1), op="Torch.softmax", inputs=((wide, -1), {}),
                    baseline=torch.softmax(wide, -1))
    assert verdict.status is not Status.ERROR, render_message(verdict)
    assert verdict.metrics.row_order_lean > 0.01
    fair = torch.softmax(normal, -1)
    biased = (fair.double() * (1 + 4 * torch.finfo(torch.float32).eps)).float()
    verdict = judge(biased, torch.softmax(normal.double(), -1), op="Torch.softmax", inputs=((normal, -1), {}),
                    baseline=fair)
    assert verdict.metrics.row_order_lean < 1e-6
    assert verdict.status is Status.ERROR, render_message(verdict)


def test_centred_rows_without_their_offset_are_read_as_centred():
    """An Accumulation a user builds for a centring norm may name its rows' sums without the values'
    offset from zero: the ceiling then takes them as centred (r = 0) rather than failing to run."""
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(2))
    verdict = judge(F.layer_norm(x, (64,)), F.layer_norm(x.double(), (64,)),
                    accumulation=Accumulation(64, shared=True, row_sum="centred"))
    assert verdict.status is Status.PASS and verdict.metrics.row_order_ratio is not None, render_message(verdict)
