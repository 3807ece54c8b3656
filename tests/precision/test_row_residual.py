"""Noise in a normalization shows at any row length (issue 12, class 4).

A fair normalization errs along a row through its shared statistics, which move the whole row
together, and per element by a few roundings. mean_residual_ratio takes each row's common offset
and scale out and judges the rest on the elementwise bound, so ±64-ulp noise or a normalized value
rounded to bfloat16 fails at K = 8192, where under the full bound (sqrt(K)·u_acc) it passed.
"""

from __future__ import annotations

import pytest
import torch

from defects import noise_64_ulp, noise_ulp, off_by_1000_ulp
from pytest_npuprecision import Status, check_call, judge, render_message

F = torch.nn.functional
DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _rows(k: int, dtype: torch.dtype, far: bool = False, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(16, k, generator=gen) + (100 if far else 0)
    weight = 1 + 0.1 * torch.randn(k, generator=gen)
    bias = 0.5 * torch.randn(k, generator=gen)
    return x.to(dtype), weight.to(dtype), bias.to(dtype)


def _fair_calls(k: int, dtype: torch.dtype):
    x, w, b = _rows(k, dtype)
    far, _, _ = _rows(k, dtype, far=True)
    yield "layer_norm", F.layer_norm, (x, (k,), w, b), {}
    yield "layer_norm far from its mean", F.layer_norm, (far, (k,), w, b), {}
    yield "rms_norm", F.rms_norm, (x, (k,), w), {}
    yield "softmax", F.softmax, (4 * x,), {"dim": -1}
    yield "log_softmax", F.log_softmax, (4 * x,), {"dim": -1}
    grouped = x.reshape(4, 16, -1)
    yield "group_norm", F.group_norm, (grouped, 4, w[:16], b[:16]), {}


@pytest.mark.parametrize("k", [64, 8192])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_fair_normalizations_leave_a_small_residual(dtype, k):
    for label, op, args, kwargs in _fair_calls(k, dtype):
        verdict = check_call(op, *args, **kwargs)
        assert verdict.status is Status.PASS, f"{label}: {verdict.message()}"
        (_, output), = verdict.outputs[:1]
        residual = output.metrics.mean_residual_ratio
        # limit 1/3 (rising to 1/2 with the subnormal share); softmax's float16 tail of 8192 is subnormal, where each rounding is up to half a
        # subnormal spacing against a bound relative to p (0.27)
        assert residual is not None and residual < 0.35, f"{label}: residual {residual}"


def _rms_norm_rounded_through_bfloat16(x, shape, weight):
    """x * rsqrt(mean(x^2) + eps) rounded to bfloat16 before the weight: float32 output, bfloat16 noise."""
    r = torch.rsqrt(x.float().square().mean(-1, keepdim=True) + torch.finfo(torch.float32).eps)
    return (x * r).to(torch.bfloat16).float() * weight


@pytest.mark.parametrize("k", [1024, 8192])
def test_noise_in_a_float32_normalization_fails_at_any_length(k):
    x, w, b = _rows(k, torch.float32)
    for op, args in ((F.layer_norm, (x, (k,), w, b)), (F.rms_norm, (x, (k,), w, 1e-6))):
        name = f"Functional.{op.__name__}"
        golden = op(*[a.double() if isinstance(a, torch.Tensor) else a for a in args])
        fair = op(*args)
        assert judge(fair, golden, op=name, inputs=(args, {})).status is Status.PASS
        verdict = judge(noise_64_ulp(fair), golden, op=name, inputs=(args, {}))
        assert verdict.status is Status.ERROR, render_message(verdict)
        failed = [c.metric for c in verdict.checks if c.status is Status.ERROR]
        assert "mean_residual_ratio" in failed, render_message(verdict)
    verdict = check_call(_rms_norm_rounded_through_bfloat16, x, (k,), w, reference=F.rms_norm)
    assert verdict.status is Status.ERROR, verdict.message()


def test_the_statistics_a_norm_returns_are_not_judged_as_rows():
    """native_layer_norm's mean and rstd are one value per row, each its own sum: not a row of outputs
    that share one factor, even where their count happens to equal the row length."""
    x, w, b = _rows(16, torch.float32)
    verdict = check_call(torch.native_layer_norm, x, (16,), w, b, 1e-5)
    assert verdict.status is Status.PASS, verdict.message()
    residuals = {name: v.metrics.mean_residual_ratio for name, v in verdict.outputs}
    assert residuals["output.1"] is None and residuals["output.2"] is None


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_rms_norm_default_eps_follows_the_kernels_dtype(dtype):
    """eps=None is the compute type's eps (float32's for every float up to 32 bits): a float64 golden
    that took float64's would be another function, a 1e-3 error at a mean square of 1e-4."""
    x = (torch.randn(16, 256, generator=torch.Generator().manual_seed(1)) * 0.01).to(dtype)
    verdict = check_call(F.rms_norm, x, (256,), backward=True)
    assert verdict.status is Status.PASS, verdict.message()
    verdict = check_call(F.rms_norm, x, (256,), eps=None)
    assert verdict.status is Status.PASS, verdict.message()


def _rms_norm_call(rows: int, k: int, seed: int = 0):
    x, w, _ = _rows(k, torch.float32, seed=seed)
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(seed))
    return (x, (k,), w), {"eps": 1e-6}


def _layer_norm_call():
    x, w, b = _rows(1024, torch.float32, seed=3)
    return (x, (1024,), w, b), {"eps": 1e-5}


def _batch_norm_call():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(16, 32, 8, 8, generator=gen)
    w, b = 1 + 0.1 * torch.randn(32, generator=gen), 0.1 * torch.randn(32, generator=gen)
    return (x, None, None, w, b), {"training": True, "eps": 1e-5}


@pytest.mark.parametrize("name, fn, make", [
    ("Functional.rms_norm", lambda *a, **k: F.rms_norm(*a, **k), lambda: _rms_norm_call(64, 1024)),
    ("Torch.softmax", torch.softmax, lambda: ((torch.randn(64, 1024, generator=torch.Generator().manual_seed(2)),),
                                              {"dim": -1})),
    ("Functional.layer_norm", lambda *a, **k: F.layer_norm(*a, **k), _layer_norm_call),
    ("Functional.batch_norm", lambda *a, **k: F.batch_norm(*a, **k), _batch_norm_call),
])
def test_4_ulp_noise_fails_a_float32_normalization(name, fn, make):
    """A fair row's residual is a few independent roundings to nearest: each element's ratio lies in
    [0, 1] and averages at most 1/3, whatever the kernel; ±4 ulp on every element averages past it
    (a layer_norm's or batch_norm's at 0.49, which the earlier limit of 1/2 let through)."""
    args, kwargs = make()
    golden = fn(*[a.double() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    fair = fn(*args, **kwargs)
    verdict = judge(fair, golden, op=name, inputs=(args, kwargs))
    assert verdict.status is Status.PASS, render_message(verdict)
    assert verdict.metrics.mean_residual_ratio < 0.25
    noisy = judge(noise_ulp(fair, 4), golden, op=name, inputs=(args, kwargs))
    assert "mean_residual_ratio" in {c.metric for c in noisy.failures}, render_message(noisy)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_few_elements_widen_the_residual_limit_towards_one(dtype, seed):
    """A mean of n ratios in [0, 1] strays 3/sqrt(n) above 1/3 by chance: rows of 3 get up to 1. Their
    common error carries the elements' own roundings too, which row_order_ratio's ceiling counts."""
    x = torch.randn(2, 3, generator=torch.Generator().manual_seed(seed)).to(dtype)
    for op, args in ((F.rms_norm, (x, (3,))), (F.softmax, (x, -1)), (F.log_softmax, (x, -1)),
                     (F.layer_norm, (x, (3,)))):
        verdict = check_call(op, *args)
        assert verdict.status is Status.PASS, verdict.message()
        (_, output), = verdict.outputs[:1]
        check = next(c for c in output.checks if c.metric == "mean_residual_ratio")
        assert check.limit == 1.0


@pytest.mark.parametrize("k", [1024, 8192])
def test_one_element_1000_ulp_off_fails_a_long_softmax(k):
    """Under the full bound, sqrt(K)·u_acc for the row's sum, one element 1000 ulp off sits at 4 times
    it over 8192 terms; once the row's common error is out, it is hundreds of times its elementwise
    bound, while a fair element never passes 1."""
    x = torch.randn(16, k, generator=torch.Generator().manual_seed(4))
    args, kwargs = (x,), {"dim": -1}
    golden = torch.softmax(x.double(), -1)
    fair = torch.softmax(x, -1)
    verdict = judge(fair, golden, op="Torch.softmax", inputs=(args, kwargs))
    assert verdict.status is Status.PASS and verdict.metrics.max_residual_ratio <= 1, render_message(verdict)
    verdict = judge(off_by_1000_ulp(fair), golden, op="Torch.softmax", inputs=(args, kwargs))
    assert "max_residual_ratio" in {c.metric for c in verdict.failures}, render_message(verdict)


def _batch_norm_call(dtype: torch.dtype, offset: float = 0.0):
    g = torch.Generator().manual_seed(6)
    x = (torch.randn(16, 32, 8, 8, generator=g) + offset).to(dtype)
    w, b = (1 + 0.1 * torch.randn(32, generator=g)).to(dtype), (0.1 * torch.randn(32, generator=g)).to(dtype)
    return (x, None, None, w, b), {"training": True, "eps": 1e-5}


@pytest.mark.parametrize("offset", [0.0, 20.0])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_a_batch_norm_s_channels_are_its_rows(dtype, offset):
    """A channel's elements share its rounded mean and rsqrt, though they are not consecutive: each
    channel is a row, so noise shows in the residual and one element far off in its maximum, which the
    bound's sqrt(N·H·W) share for the channel's statistics hid (64-ulp noise passed at 0.77 of it)."""
    args, kwargs = _batch_norm_call(dtype, offset)
    golden = F.batch_norm(*[a.double() if isinstance(a, torch.Tensor) else a for a in args], **kwargs)
    fair = F.batch_norm(*args, **kwargs)
    verdict = judge(fair, golden, op="Functional.batch_norm", inputs=(args, kwargs))
    assert verdict.status is Status.PASS, render_message(verdict)
    assert verdict.metrics.mean_residual_ratio is not None and verdict.metrics.max_residual_ratio <= 1
    if dtype != torch.float32 or offset:
        # a half type's rounding dwarfs both defects' ulps; values 20 sigma from their mean widen each
        # element's bound by the centring's u·|x| (bounds/terms/norm_terms.py), some 40 times
        return
    noisy = judge(noise_64_ulp(fair), golden, op="Functional.batch_norm", inputs=(args, kwargs))
    assert "mean_residual_ratio" in {c.metric for c in noisy.failures}, render_message(noisy)
    off = off_by_1000_ulp(fair)
    verdict = judge(off, golden, op="Functional.batch_norm", inputs=(args, kwargs))
    assert "max_residual_ratio" in {c.metric for c in verdict.failures}, render_message(verdict)
    # the decisive element is named where it lies in the output, not in the channel-first view
    assert verdict.metrics.worst.abs == int((off != fair).reshape(-1).nonzero()[0])
