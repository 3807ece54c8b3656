"""The rounding gate for float16 and bfloat16 outputs of ops that fair kernels compute in float32
(OpRecord.rounded_once_in_half): normalizations, softmax, gelu, attention. A kernel that casts
its float32 result toward zero errs by at most one ulp, which every loose limit admits; the gate
finds it. Where rows share a factor that a kernel may round in the half type, each row leans its
own way, and the rows are the gate's samples."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from benchmarks.defect_kernels import toward_zero
from pytest_npuprecision import Status, judge, render_message
from pytest_npuprecision.ops.catalogue import op_record
from pytest_npuprecision.common.torch_compat import optional
from pytest_npuprecision.precision.row_statistics import LEAN_ROWS

HALF = [torch.float16, torch.bfloat16]


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# op name as a dump names it: the torch callable, its float32 input x, and the call's (args, kwargs) of x
CALLS = {
    "Functional.gelu": (F.gelu, lambda: _x(64, 1024) * 3, lambda x: ((x,), {})),
    "Torch.softmax": (torch.softmax, lambda: _x(64, 1024) * 2, lambda x: ((x,), {"dim": -1})),
    "Torch.log_softmax": (torch.log_softmax, lambda: _x(64, 1024) * 2, lambda x: ((x,), {"dim": -1})),
    "Functional.layer_norm": (F.layer_norm, lambda: _x(64, 1024) + 0.5, lambda x: ((x, (1024,)), {})),
    "Functional.rms_norm": (optional(F, "rms_norm"), lambda: _x(64, 1024),
                            lambda x: ((x, (1024,), torch.full((1024,), 0.75, dtype=x.dtype), 1e-6), {})),
    "Functional.batch_norm": (F.batch_norm, lambda: _x(16, 32, 8, 8),
                              lambda x: ((x, None, None), {"training": True})),
    "Functional.scaled_dot_product_attention": (F.scaled_dot_product_attention, lambda: _x(2, 4, 64, 32),
                                                lambda x: ((x, x, x), {})),
}


def _run(name: str, dtype: torch.dtype, compute: torch.dtype | None = None) -> tuple:
    """The call's half-precision (args, kwargs), and the op run on them in ``compute`` (their own dtype
    if None), without autograd."""
    fn, make, call = CALLS[name]
    args, kwargs = call(make().to(dtype))
    cast = [a.to(compute) if compute and isinstance(a, torch.Tensor) else a for a in args]
    with torch.no_grad():
        return (args, kwargs), fn(*cast, **kwargs)


def _gate(verdict):
    return next((c for c in verdict.checks if c.metric == "rounding_bias"), None)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_torch_s_half_kernel_passes_the_gate(name, dtype):
    inputs, fair = _run(name, dtype)
    verdict = judge(fair, _run(name, dtype, torch.float64)[1], op=name, inputs=inputs)
    check = _gate(verdict)
    assert check is not None and verdict.metrics.rounding_elements > 1000, render_message(verdict)
    assert verdict.status is Status.PASS, render_message(verdict)


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_half_kernel_that_truncates_its_float32_result_fails(name, dtype):
    inputs, wide = _run(name, dtype, torch.float32)
    actual = toward_zero(wide.double(), dtype)
    verdict = judge(actual, _run(name, dtype, torch.float64)[1], op=name, inputs=inputs)
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
    truncated = toward_zero(F.rms_norm(x.float(), (8192,), w.float(), 1e-6).double(), torch.float16)
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
    assert op_record("gelu").is_rounded_once_in_half((x.half(),), {})
    assert op_record("layer_norm").is_rounded_once_in_half((x.bfloat16(), (4,)), {})
    assert not op_record("gelu").is_rounded_once_in_half((x,), {})  # float32: several roundings of its own
    assert not op_record("cumsum").is_rounded_once_in_half((x.half(), 0), {})  # a half cumsum may round its running sum
