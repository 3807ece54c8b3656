"""The trapezoidal rule judged with its terms: torch rounds each spacing, pair sum and product to the
dtype before summing (OpInfo's bfloat16 trapz erred 2.3 bounds of its plain K = 1 bound), and the
sum cancels where y or the spacing changes sign. Fair kernels pass; a bias or a wrong element fails."""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision import Status, judge, render_message

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
OPS = {"Torch.trapezoid": torch.trapezoid, "Torch.trapz": torch.trapz,
       "Torch.cumulative_trapezoid": torch.cumulative_trapezoid}


def _calls(dtype):
    gen = torch.Generator().manual_seed(11)
    y = torch.randn(8, 257, generator=gen)
    x = torch.randn(8, 257, generator=gen).cumsum(-1)  # uneven spacings, some negative
    yield "x", (y.to(dtype), x.to(dtype)), {}
    yield "1-D x over dim 0", (y.T.contiguous().to(dtype), x[0].to(dtype)), {"dim": 0}
    yield "dx", (y.to(dtype),), {"dx": 0.37}
    yield "positive y", ((y.abs() + 1).to(dtype),), {}


def _judge(name, actual, args, kwargs):
    golden = OPS[name](*(a.double() for a in args), **kwargs)
    return judge(actual, golden, op=name, inputs=(args, kwargs))


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_torch_s_trapezoid_passes(name, dtype):
    for label, args, kwargs in _calls(dtype):
        verdict = _judge(name, OPS[name](*args, **kwargs), args, kwargs)
        assert verdict.status is Status.PASS, f"{label}: {render_message(verdict)}"


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_planted_defects_in_trapezoid_fail(name, dtype):
    eps = torch.finfo(dtype).eps
    label, args, kwargs = list(_calls(dtype))[-1]  # positive y: no cancellation to hide in
    fair = OPS[name](*args, **kwargs)
    biased = (fair.double() * (1 + 16 * eps)).to(dtype)
    wrong = fair.clone()
    wrong.view(-1)[3] = (wrong.view(-1)[3].double() * (1 + 1000 * eps)).to(dtype)
    for defect, actual in (("bias of 16 eps", biased), ("one element 1000 eps off", wrong)):
        verdict = _judge(name, actual, args, kwargs)
        assert verdict.status is Status.ERROR, f"{defect}: {render_message(verdict)}"
