"""Where the second look may not excuse, and a chain of sums bounded by its own lengths.

The second look (precision/second_look.py) excuses an error within a few spreads: how far the float64 result
moves when the inputs move by a rounding. That rounding must be one a fair kernel makes. An add of
two tensors rounds only its exact result, so no input rounding explains its error however far the
sum cancels; a half-precision sum, softmax or gelu that a fair kernel computes in float32 rounds
only float32 steps inside. Planted defects at cancelling inputs were excused before (issue 12's
suite missed them): they fail now, and fair kernels at the same inputs still pass.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.defect_kernels import OPS, toward_zero
from pytest_npuprecision import Status, input_spread, judge, render_message
from pytest_npuprecision.ops.catalogue import op_record
from pytest_npuprecision.checks.one_call import _resolved
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.replay.error_bounds import accumulation_for
from pytest_npuprecision.replay.runner import run_call

F = torch.nn.functional


def _randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _cancelling(dtype):
    """x and nearly -x: their sum keeps about 1e-3 of them."""
    x = _randn(4096)
    return x.to(dtype), (-x * (1 + 1e-3 * _randn(4096, seed=1))).to(dtype)


def _one_off(t: torch.Tensor, ulps: int) -> torch.Tensor:
    """t with its largest element moved by ``ulps`` of its own spacing."""
    out = t.clone().reshape(-1)
    i = int(out.double().abs().argmax())
    out[i] = out[i].double() + ulps * torch.finfo(t.dtype).eps * out[i].double().abs()
    return out.reshape(t.shape)


def _biased(t: torch.Tensor, eps: float) -> torch.Tensor:
    return (t.double() * (1 + eps * torch.finfo(t.dtype).eps)).to(t.dtype)


def _judged(op: str, fn, actual, args, kwargs=None):
    kwargs = kwargs or {}
    golden = fn(*(a.double() if torch.is_tensor(a) else a for a in args), **kwargs)
    spread = input_spread(fn, args, kwargs, golden=golden, op=resolve(op).base_name)
    return judge(actual, golden, op=op, inputs=(args, kwargs), spread=spread)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_a_cancelling_add_is_judged_on_its_one_rounding(dtype):
    x, y = _cancelling(dtype)
    fair = torch.add(x, y)
    assert judge(fair, x.double() + y.double(), op="Torch.add").status is Status.PASS
    for defect in (_one_off(fair, 1000), _biased(fair, 4)):
        verdict = _judged("Torch.add", torch.add, defect, (x, y))
        assert verdict.status is Status.ERROR, render_message(verdict)
        assert verdict.excused is None
        assert any(n.startswith("second look not taken: the op rounds its exact result once") for n in verdict.notes)


def _dump_case_output(op, *args):
    """The forward output as a dump case runs it: its golden, accumulation and spread."""
    return run_call(_resolved(op), args, {}, device="cpu").outputs[0]


def test_a_dump_case_takes_no_second_look_at_an_add_of_tensors():
    out = _dump_case_output(torch.add, *_cancelling(torch.float16))
    assert out.accumulation.exactly_rounded
    verdict = judge(_one_off(out.actual, 1000), out.golden, op="Torch.add", accumulation=out.accumulation,
                    spread=out.spread)
    assert verdict.status is Status.ERROR and verdict.excused is None, render_message(verdict)


def test_an_add_that_rounds_alpha_times_other_first_keeps_its_second_look():
    # x + alpha * y where x nearly cancels alpha * y: a fair kernel rounds alpha * y to float16 first,
    # and that rounding, amplified by the cancellation, is what the second look excuses
    y = _randn(4096).half()
    x = (1e-3 * y.double() * (1 + 1e-3 * _randn(4096, seed=1))).half()
    unfused = x + (y * -1e-3)
    first = judge(unfused, x.double() - 1e-3 * y.double(), op="Torch.add", inputs=((x, y), {"alpha": -1e-3}))
    assert first.status is Status.ERROR, "the example no longer needs a second look: " + render_message(first)
    verdict = _judged("Torch.add", torch.add, unfused, (x, y), {"alpha": -1e-3})
    assert verdict.status is Status.PASS, render_message(verdict)
    assert verdict.excused is not None


@pytest.mark.parametrize("args, kwargs, exact", [
    ((torch.ones(3).half(), torch.ones(3).half()), {}, True),
    ((torch.ones(3).half(), torch.ones(3)), {}, True),  # float32 out: the float16 operand is exact there
    ((torch.ones(3).half(), torch.ones(3).bfloat16()), {}, True),  # both exact in the float32 result
    ((torch.ones(3).half(), torch.tensor(1.0)), {}, False),  # a 0-dim float32 operand is rounded to float16
    ((torch.ones(3).half(), torch.ones(3).half()), {"alpha": 2}, False),
    ((torch.ones(3).half(), torch.ones(3).half()), {"alpha": 1}, True),
    ((torch.ones(3).half(), 0.1), {}, False),
    ((torch.ones(3).half(), torch.ones(3, dtype=torch.int32)), {}, False),
])
def test_only_an_unscaled_add_of_float_tensors_its_result_holds_is_exactly_rounded(args, kwargs, exact):
    assert op_record("add").is_exactly_rounded(args, kwargs) is exact
    assert op_record("sub").is_exactly_rounded(args, kwargs) is exact
    assert not op_record("mul").is_exactly_rounded(args, kwargs)


def _cancelling_rows(dtype):
    """Rows of 1024 terms of about 1 that sum to about 1: 1/800 of the sum of their magnitudes."""
    x = _randn(64, 1024)
    return (x - x.mean(-1, keepdim=True) + _randn(64, 1, seed=1) / 1024).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name, fn", [("Torch.sum", torch.sum), ("Torch.mean", torch.mean)])
def test_a_half_sum_of_cancelling_terms_is_judged_on_float32_steps(dtype, name, fn):
    x = _cancelling_rows(dtype)
    fair = fn(x, -1)
    assert _judged(name, fn, fair, (x, -1)).status is Status.PASS
    for defect in (_biased(fair, 4), toward_zero(fn(x.float(), -1), dtype)):
        verdict = _judged(name, fn, defect, (x, -1))
        assert verdict.status is Status.ERROR, render_message(verdict)


def test_the_draws_of_a_half_op_computed_in_float32_move_by_float32_rounding():
    x = _cancelling_rows(torch.float16)
    own = input_spread(torch.sum, (x, -1))
    computed = input_spread(torch.sum, (x, -1), op="sum")
    assert float(own.max()) > 0  # float16's rounding, amplified by the cancellation
    assert float(computed.max()) < float(own.max()) / 1000
    dump_case = _dump_case_output(torch.sum, x, -1).spread()  # a dump case's draws, the same way
    assert float(dump_case.max()) < float(own.max()) / 1000


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_half_softmax_of_wide_scores_rounded_toward_zero_fails(dtype):
    x = (_randn(64, 1024) * 8).to(dtype)
    assert _judged("Torch.softmax", torch.softmax, torch.softmax(x, -1), (x, -1)).status is Status.PASS
    verdict = _judged("Torch.softmax", torch.softmax, toward_zero(torch.softmax(x.float(), -1), dtype), (x, -1))
    assert verdict.status is Status.ERROR, render_message(verdict)


# --- a chain of sums -----------------------------------------------------------------------------

# the seeded-defect suite's fair kernels: torch's, a gathering one and log_softmax then nll_loss
CROSS_ENTROPY = next(op for op in OPS if op.name == "Functional.cross_entropy").fair


def test_cross_entropy_sums_its_classes_then_its_batch():
    x, target = torch.randn(256, 1000), torch.randint(0, 1000, (256,))
    assert accumulation_for(resolve("Functional.cross_entropy"), (x, target)).length == 1000 + 256


@pytest.mark.parametrize("scale", [1.0, 8.0, 1e-3])
def test_a_float32_cross_entropy_off_by_32_eps_fails_where_fair_ones_pass(scale):
    g = torch.Generator().manual_seed(0)
    x, target = torch.randn(256, 1000, generator=g) * scale, torch.randint(0, 1000, (256,), generator=g)
    golden = F.cross_entropy(x.double(), target)
    for name, kernel in CROSS_ENTROPY.items():
        verdict = judge(kernel(x, target), golden, op="Functional.cross_entropy", inputs=((x, target), {}))
        assert verdict.status is Status.PASS, name + ": " + render_message(verdict)
    biased = _biased(F.cross_entropy(x, target), 32)
    verdict = judge(biased, golden, op="Functional.cross_entropy", inputs=((x, target), {}))
    assert verdict.status is Status.ERROR, render_message(verdict)
