"""The rounding gate for float16 and bfloat16 outputs of ops that fair kernels compute in float32
(accumulation.ROUNDED_ONCE_IN_HALF): normalizations, softmax, gelu, attention. A kernel that casts
its float32 result toward zero errs by at most one ulp, which every loose limit admits; the gate
finds it. Where rows share a factor that a kernel may round in the half type, each row leans its
own way, and the rows are the gate's samples."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import Status, judge, render_message
from pytest_npuprecision.accumulation import rounded_once_in_half
from pytest_npuprecision.metrics import LEAN_ROWS

HALF = [torch.float16, torch.bfloat16]


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _rms_norm(x, d=1024):
    return F.rms_norm(x, (d,), torch.ones(d, dtype=x.dtype) * 0.75, 1e-6)


# op name as a dump names it, the torch callable (x -> output) and its float32 input
CALLS = {
    "Functional.gelu": (F.gelu, lambda: _x(64, 1024) * 3),
    "Torch.softmax": (lambda x: torch.softmax(x, -1), lambda: _x(64, 1024) * 2),
    "Torch.log_softmax": (lambda x: torch.log_softmax(x, -1), lambda: _x(64, 1024) * 2),
    "Functional.layer_norm": (lambda x: F.layer_norm(x, (1024,)), lambda: _x(64, 1024) + 0.5),
    "Functional.rms_norm": (_rms_norm, lambda: _x(64, 1024)),
    "Functional.batch_norm": (lambda x: F.batch_norm(x, None, None, training=True), lambda: _x(16, 32, 8, 8)),
    "Functional.scaled_dot_product_attention": (lambda x: F.scaled_dot_product_attention(x, x, x),
                                                lambda: _x(2, 4, 64, 32)),
}
ARGS = {"Torch.softmax": {"dim": -1}, "Torch.log_softmax": {"dim": -1}}


def _inputs(name: str, dtype: torch.dtype):
    fn, make = CALLS[name]
    x = make().to(dtype)
    if name == "Functional.rms_norm":
        args = (x, (1024,), torch.ones(1024, dtype=dtype) * 0.75, 1e-6)
    elif name == "Functional.layer_norm":
        args = (x, (1024,))
    elif name == "Functional.batch_norm":
        args = (x, None, None)
        return fn, x, args, {"training": True}
    elif name == "Functional.scaled_dot_product_attention":
        args = (x, x, x)
    else:
        args = (x,)
    return fn, x, args, ARGS.get(name, {})


def _toward_zero(exact: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    nearest = exact.to(dtype)
    grew = nearest.double().abs() > exact.abs()
    return torch.where(grew, torch.nextafter(nearest, torch.zeros_like(nearest)), nearest)


def _gate(verdict):
    return next((c for c in verdict.checks if c.metric == "rounding_bias"), None)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_torch_s_half_kernel_passes_the_gate(name, dtype):
    fn, x, args, kwargs = _inputs(name, dtype)
    with torch.no_grad():
        golden, fair = fn(x.double()), fn(x)
    verdict = judge(fair, golden, op=name, inputs=(args, kwargs))
    check = _gate(verdict)
    assert check is not None and verdict.metrics.rounding_elements > 1000, render_message(verdict)
    assert verdict.status is Status.PASS, render_message(verdict)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_half_kernel_that_truncates_its_float32_result_fails(name, dtype):
    fn, x, args, kwargs = _inputs(name, dtype)
    with torch.no_grad():
        golden, wide = fn(x.double()), fn(x.float()).double()
    actual = _toward_zero(wide, dtype)
    verdict = judge(actual, golden, op=name, inputs=(args, kwargs))
    check = _gate(verdict)
    assert check is not None and check.status is Status.ERROR, render_message(verdict)


def _rounded_factor_rms_norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float32 inside, each row's rsqrt rounded to the half type once: a fair kernel that keeps rstd so."""
    factor = torch.rsqrt(x.float().square().mean(-1, keepdim=True) + 1e-6).to(x.dtype)
    return ((x.float() * factor.float()).to(x.dtype) * w)


@pytest.mark.parametrize("rows", [4, 64])
def test_a_row_factor_rounded_in_half_leans_each_row_its_own_way_and_passes(rows):
    x = _x(rows, 8192, seed=rows).half()
    w = torch.ones(8192, dtype=torch.float16)
    args = (x, (8192,), w, 1e-6)
    golden = F.rms_norm(x.double(), (8192,), w.double(), 1e-6)
    verdict = judge(_rounded_factor_rms_norm(x, w), golden, op="Functional.rms_norm", inputs=(args, {}))
    assert verdict.status is not Status.ERROR, render_message(verdict)


def test_too_few_rows_to_tell_a_rounded_factor_from_truncation_are_not_judged():
    """Four rows whose factors lean alike look like a truncating kernel: the gate needs LEAN_ROWS rows."""
    x = _x(4, 8192).half()
    w = torch.ones(8192, dtype=torch.float16)
    args = (x, (8192,), w, 1e-6)
    golden = F.rms_norm(x.double(), (8192,), w.double(), 1e-6)
    truncated = _toward_zero(F.rms_norm(x.float(), (8192,), w.float(), 1e-6).double(), torch.float16)
    verdict = judge(truncated, golden, op="Functional.rms_norm", inputs=(args, {}))
    assert 4 < LEAN_ROWS and verdict.metrics.rounding_bias > 0.4
    assert _gate(verdict).status is Status.PASS, render_message(verdict)


def test_a_float32_result_of_half_inputs_is_not_one_rounding():
    """Under autocast softmax returns float32 for a float16 input: several float32 roundings, no gate."""
    x = (_x(64, 1024) * 2).half()
    golden = torch.softmax(x.double(), -1)
    verdict = judge(torch.softmax(x.float(), -1), golden, op="Torch.softmax", inputs=((x,), {"dim": -1}))
    assert _gate(verdict) is None and verdict.metrics.rounding_elements == 0, render_message(verdict)


def test_which_calls_are_one_rounding_in_half():
    x = _x(4, 4)
    assert rounded_once_in_half("gelu", (x.half(),), {})
    assert rounded_once_in_half("layer_norm", (x.bfloat16(), (4,)), {})
    assert not rounded_once_in_half("gelu", (x,), {})  # float32: several roundings of its own
    assert not rounded_once_in_half("cumsum", (x.half(), 0), {})  # a half cumsum may round its running sum
