"""How far without a baseline the error bound reaches into float32 reductions (issue 12, class 4).

A fair kernel's error grows with the reduction length K, so the bound must too; a defect of a fixed
size in ulp is then seen only where K is small enough that fair kernels err well below it. Here the
fair kernels are torch's and a sequential float32 loop (the worst order a fair kernel may take:
it averages 0.11 to 0.22 of the bound at every K); the defects are ±64-ulp noise and a 32-eps bias.
Where the reach ends is pinned too, so a change that moves it shows, and docs/blind-spots.md says the same.
"""

from __future__ import annotations

import pytest
import torch
from defects import bias_32_eps, noise_64_ulp

from pytest_npuprecision import Status, judge, render_message
from pytest_npuprecision.common.torch_compat import optional

F = torch.nn.functional
NORMALIZED = object()  # the op takes normalized_shape=(K,)
LENGTHS = (64, 256, 1024, 4096, 8192)
OPS = {
    "Torch.sum": (torch.sum, {"dim": -1}),
    "Torch.mean": (torch.mean, {"dim": -1}),
    "Torch.cumsum": (torch.cumsum, {"dim": -1}),
    "Functional.layer_norm": (F.layer_norm, NORMALIZED),
    "Functional.rms_norm": (optional(F, "rms_norm"), NORMALIZED),
}
# The longest K at which each defect still fails, per op, on 64 rows of N(0, 1). A normalization's
# noise fails at every K: its rows' shared errors are taken out, and the rest is judged on the
# elementwise bound (mean_residual_ratio). A plain sum's noise fails at every K too: past K = 1024 it
# hides under the bound's mean, but not under what a sequential order errs (order_rmse_ratio).
NOISE_REACH = {name: max(LENGTHS) for name in OPS}
# A bias reaches every K: where it hides under the bound's share (a fifth of it at K = 8192), its
# 64 rows show it many standard errors from zero (standards.bound._bias_limit).
BIAS_REACH = {name: max(LENGTHS) for name in OPS}


def _call(name: str, k: int, positive: bool = False):
    fn, kwargs = OPS[name]
    x = torch.randn(64, k, generator=torch.Generator().manual_seed(k))
    if positive:
        x = x.abs() + 0.1
    kwargs = {"normalized_shape": (k,)} if kwargs is NORMALIZED else kwargs
    if fn is OPS["Functional.rms_norm"][0]:  # the float32 kernel's default eps, for the float64 golden too
        kwargs["eps"] = torch.finfo(torch.float32).eps
    return fn, x, kwargs


def _verdict(name: str, actual, x, kwargs, golden):
    return judge(actual, golden, op=name, inputs=((x,), kwargs))


def _sequential_sum(x: torch.Tensor) -> torch.Tensor:
    total = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for k in range(x.shape[-1]):
        total = total + x[..., k]
    return total


@pytest.mark.parametrize("positive", [False, True], ids=["normal", "positive"])
@pytest.mark.parametrize("k", LENGTHS)
def test_a_sequential_float32_sum_passes_at_every_length(k, positive):
    _, x, kwargs = _call("Torch.sum", k, positive)
    verdict = _verdict("Torch.sum", _sequential_sum(x), x, kwargs, x.double().sum(-1))
    assert verdict.status is Status.PASS, render_message(verdict)
    assert verdict.metrics.mean_bound_ratio < 0.3  # 3x below the mean limit, at any K


@pytest.mark.parametrize("k", LENGTHS)
@pytest.mark.parametrize("name", OPS)
def test_reach_of_noise_and_bias(name, k):
    fn, x, kwargs = _call(name, k)
    golden, fair = fn(x.double(), **kwargs), fn(x, **kwargs)
    assert _verdict(name, fair, x, kwargs, golden).status is Status.PASS
    for defect, reach in ((noise_64_ulp, NOISE_REACH[name]), (bias_32_eps, BIAS_REACH[name])):
        verdict = _verdict(name, defect(fair), x, kwargs, golden)
        expected = Status.ERROR if k <= reach else Status.PASS
        assert verdict.status is expected, f"{defect.__name__} at K={k}: " + render_message(verdict)
