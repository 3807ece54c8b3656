"""kl_div composed op by op in the dtype: exp(t) (t - x) with log_target, xlogy(t, t) - t x without,
each step rounded before the reduction. Fair kernels pass in every dtype and reduction; a bias
and one element 1000 eps off fail."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import Status, judge, render_message

pytestmark = pytest.mark.filterwarnings("ignore:reduction. 'mean' divides:UserWarning")  # torch's, for 'mean'


def _call(dtype, log_target, reduction, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.log_softmax(torch.randn(16, 64, generator=gen), -1)
    t = torch.softmax(torch.randn(16, 64, generator=gen), -1)
    t = t.log() if log_target else t
    args = (x.to(dtype), t.to(dtype))
    kwargs = {"reduction": reduction, "log_target": log_target}
    return args, kwargs, F.kl_div(*(a.double() for a in args), **kwargs)


@pytest.mark.parametrize("reduction", ["none", "sum", "mean", "batchmean"])
@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=lambda d: str(d)[6:])
def test_kl_div_passes_and_planted_defects_fail(dtype, log_target, reduction):
    for seed in range(3):
        args, kwargs, golden = _call(dtype, log_target, reduction, seed)
        fair = F.kl_div(*args, **kwargs)
        verdict = judge(fair, golden, op="Functional.kl_div", inputs=(args, kwargs))
        assert verdict.status is Status.PASS, render_message(verdict)
    eps = torch.finfo(dtype).eps
    # a float32 loss summing 1024 terms fairly errs tens of eps: there a bias shows from about 100
    # (docs/blind-spots.md: a 32-eps bias on one scalar loss needs a baseline)
    ulps = 256 if dtype == torch.float32 and reduction != "none" else 16
    biased = (golden * (1 + ulps * eps)).to(dtype)
    assert judge(biased, golden, op="Functional.kl_div", inputs=(args, kwargs)).status is Status.ERROR
    if reduction == "none":
        wrong = fair.clone()
        i = int(golden.abs().flatten().argmax())
        wrong.view(-1)[i] = (golden.view(-1)[i] * (1 + 1000 * eps)).to(dtype)
        assert judge(wrong, golden, op="Functional.kl_div", inputs=(args, kwargs)).status is Status.ERROR
