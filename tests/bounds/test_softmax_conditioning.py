"""softmax and log_softmax judged with their conditioning: torch's own kernels pass on rows of wide
scores, forward and backward, in every dtype, and planted defects in the same rows still fail."""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision import Status, check_call, judge
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.replay.runner import run_call

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
SPREADS = (1, 4, 20)  # the scores' standard deviation: 20 makes rows nearly one-hot


def scores(dtype: torch.dtype, spread: float, seed: int = 0) -> torch.Tensor:
    return (torch.randn(8, 1024, generator=torch.Generator().manual_seed(seed)) * spread).to(dtype)


@pytest.mark.parametrize("op", ["Functional.softmax", "Functional.log_softmax"])
@pytest.mark.parametrize("spread", SPREADS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_s_kernels_pass_forward_and_backward(op, dtype, spread):
    for seed in range(2):
        verdict = check_call(op, scores(dtype, spread, seed), -1, backward=True, seed=seed)
        assert verdict.status is Status.PASS, verdict.message()


def _softmax_grad(dtype, spread):
    """The harness's golden and accumulation for softmax's input gradient, and a fair kernel's result
    for the same output gradient: from the rounded output, computed in float32, rounded once."""
    x = scores(dtype, spread)
    g = torch.randn(8, 1024, generator=torch.Generator().manual_seed(3)).to(dtype)
    run = run_call(resolve("Functional.softmax"), (x, -1), {}, device="cpu", backward=True, requires_grad=(0,),
                   grad_outputs=[g])
    (grad,) = run.grads
    y, gf = torch.softmax(x, -1).float(), g.float()
    fair = (y * (gf - (y * gf).sum(-1, keepdim=True))).to(dtype)
    return grad, fair


def _judged(grad, actual):
    return judge(actual, grad.golden, op="Functional.softmax.0.backward", accumulation=grad.accumulation)


@pytest.mark.parametrize("spread", SPREADS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_gradient_defects_fail(dtype, spread):
    grad, fair = _softmax_grad(dtype, spread)
    assert _judged(grad, fair).status is Status.PASS
    worst = int(grad.golden.abs().argmax())
    # A wrong element: where the gradient does not cancel (not the one-hot row's peak at spread 20).
    one = fair.clone()
    i = worst if spread < 20 else int((grad.golden.abs() * (grad.golden.abs() < 0.5)).argmax())
    one.view(-1)[i] *= 1.5
    assert _judged(grad, one).status is Status.ERROR
    # An 8-eps offset hides in float32 (1024 terms fairly err by tens of ulp) and in a nearly one-hot row,
    # whose gradient is all cancellation.
    if dtype != torch.float32 and spread < 20:
        biased = (fair.float() + fair.float().abs() * 8 * torch.finfo(dtype).eps).to(dtype)
        assert _judged(grad, biased).status is Status.ERROR
    nan = fair.clone()
    nan.view(-1)[worst] = float("nan")
    assert _judged(grad, nan).status is Status.ERROR


@pytest.mark.parametrize("dtype", DTYPES)
def test_log_softmax_defects_fail(dtype):
    x = scores(dtype, 4)
    golden = torch.log_softmax(x.double(), -1)
    fair = torch.log_softmax(x, -1)
    base = dict(op="Functional.log_softmax", inputs=((x, -1), {}))
    assert judge(fair, golden, **base).status is Status.PASS
    if dtype == torch.float32:  # a half-precision sum's error is below a half-precision output's rounding
        shifted = x - x.amax(-1, keepdim=True)  # the log-sum-exp summed in bfloat16
        lse16 = torch.exp(shifted).to(torch.bfloat16).cumsum(-1)[..., -1:].float().log()
        assert judge(shifted - lse16, golden, **base).status is Status.ERROR
    one = fair.clone()
    one.view(-1)[int(golden.abs().argmax())] *= 1.1
    assert judge(one, golden, **base).status is Status.ERROR
