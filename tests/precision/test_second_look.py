"""The second look: fair kernels on ill-conditioned inputs pass, planted defects at the same inputs fail.

A failing output without a baseline is judged again against how far the float64 result moves when
its inputs move by their dtype's rounding (precision/second_look.py, replay/perturbed.py). Each fair example below
fails the first look: the op amplifies rounding there more than the standards' bounds know.
"""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npuprecision import Status, check_call, input_spread, judge, render_message
from pytest_npuprecision.checks.one_call import _resolved
from pytest_npuprecision.precision.second_look import MULTIPLE, widened
from pytest_npuprecision.replay.runner import run_call


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)


def _near_one(dtype, width):
    return (1 - torch.rand(400, generator=_generator()) * width).to(dtype)


# (name, op, args, kwargs, backward, the compared result that fails the first look)
FAIR = [
    ("asin float32 backward near 1", torch.asin, (_near_one(torch.float32, 1e-3),), {}, True, "grad.input_args[0]"),
    ("asin float16 backward near 1", torch.asin, (_near_one(torch.float16, 1e-2),), {}, True, "grad.input_args[0]"),
    ("atanh float32 backward near 1", torch.atanh, (_near_one(torch.float32, 1e-3),), {}, True, "grad.input_args[0]"),
    ("polygamma between poles", torch.polygamma,
     (1, -3.5 + torch.rand(100, generator=_generator()) * 0.98 - 0.49), {}, False, "output.0"),
    ("logit near 0.5", torch.logit, (torch.linspace(0.49, 0.51, 1000),), {}, False, "output.0"),
]


def _run(op, args, kwargs, backward):
    requires = [i for i, a in enumerate(args) if torch.is_tensor(a) and a.is_floating_point()] if backward else ()
    run = run_call(_resolved(op), args, kwargs, device="cpu", backward=backward, requires_grad=requires)
    return {out.name: out for out in (*run.outputs, *run.grads)}, _resolved(op).api_name


def _key(api: str, name: str) -> str:
    return api if name.startswith("output") else api + ".0.backward"


@pytest.mark.parametrize("name, op, args, kwargs, backward, result", FAIR, ids=[f[0] for f in FAIR])
def test_a_fair_kernel_on_ill_conditioned_inputs_passes_on_the_second_look(name, op, args, kwargs, backward, result):
    outputs, api = _run(op, args, kwargs, backward)
    out = outputs[result]
    first = judge(out.actual, out.golden, op=_key(api, result), accumulation=out.accumulation)
    assert first.status is Status.ERROR, "the example no longer needs a second look: " + render_message(first)
    second = judge(out.actual, out.golden, op=_key(api, result), accumulation=out.accumulation, spread=out.spread)
    assert second.status is Status.PASS, render_message(second)
    assert second.excused is not None and second.excused.count > 0
    assert second.excused.error <= MULTIPLE * second.excused.spread
    assert any(n.startswith(f"second look: {second.excused.count} of {out.actual.numel()} elements excused")
               for n in second.notes)
    # check_call takes the second look by itself, as dump cases do.
    verdicts = dict(check_call(op, *args, device="cpu", backward=backward, **kwargs).outputs)
    assert verdicts[result].status is Status.PASS


def _one_wrong(y):
    out = y.clone()
    out.view(-1)[out.numel() // 2] *= 10
    return out


def _one_nan(y):
    out = y.clone()
    out.view(-1)[out.numel() // 3] = float("nan")
    return out


def _logit_in_float16(p):
    return torch.logit(p.half()).to(p.dtype)


# Defects planted at the same ill-conditioned inputs: far outside what rounding the inputs explains.
DEFECTS = [
    ("logit with one element x10", lambda p: _one_wrong(torch.logit(p)), torch.logit, FAIR[4][2]),
    ("logit with a NaN", lambda p: _one_nan(torch.logit(p)), torch.logit, FAIR[4][2]),
    ("logit computed in float16", _logit_in_float16, torch.logit, FAIR[4][2]),
    ("polygamma with one element x10", lambda n, x: _one_wrong(torch.polygamma(n, x)), torch.polygamma, FAIR[3][2]),
    ("asin float16 biased by 8 ulp", lambda x: (torch.asin(x).double() * (1 + 8 * 2.0**-10)).half(), torch.asin,
     FAIR[1][2]),
]


@pytest.mark.parametrize("name, kernel, reference, args", DEFECTS, ids=[d[0] for d in DEFECTS])
def test_a_planted_defect_at_the_same_inputs_still_fails(name, kernel, reference, args):
    verdict = dict(check_call(kernel, *args, device="cpu", reference=reference).outputs)["output.0"]
    assert verdict.status is Status.ERROR, render_message(verdict)
    assert verdict.excused is None


def test_the_spread_is_measured_only_for_a_failing_output():
    x = torch.randn(64, generator=_generator())
    calls = []

    def spread():
        calls.append(1)
        return torch.ones(64)

    assert judge(torch.exp(x), torch.exp(x.double()), op="exp", spread=spread).status is Status.PASS
    assert calls == []


def test_no_second_look_beside_a_baseline_for_binary_outputs_or_a_nan():
    p = torch.linspace(0.49, 0.51, 1000)
    actual, golden = torch.logit(p), torch.logit(p.double())
    spread = input_spread(torch.logit, (p,), golden=golden)
    assert judge(actual, golden, op="Torch.logit", spread=spread).status is Status.PASS
    # A baseline's own error shows what these inputs allow: it judges, not the spread.
    beside = judge(_one_wrong(actual), golden, op="Torch.logit", spread=spread, baseline=actual)
    assert beside.status is Status.ERROR and beside.excused is None
    nan = judge(_one_nan(actual), golden, op="Torch.logit", spread=spread)
    assert nan.status is Status.ERROR and not any("second look" in n for n in nan.notes)
    ints = torch.arange(10)
    wrong = ints.clone()
    wrong[3] += 1
    assert judge(wrong, ints, spread=torch.full((10,), 5.0)).status is Status.ERROR


def test_widened_excuses_only_whole_errors_within_the_multiple_and_never_a_nan():
    golden = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    actual = torch.tensor([1.0, 1.0 + MULTIPLE * 0.01, 1.0 + MULTIPLE * 0.02, math.nan, 1.5])
    spread = torch.tensor([0.01, 0.01, 0.01, 1.0, 0.01], dtype=torch.float64)
    moved, excused = widened(actual, golden, spread)
    # Equal already; within MULTIPLE spreads: excused whole; past them: the whole error stays.
    assert moved.tolist()[:3] == [1.0, pytest.approx(float(actual[1])), 1.0]
    assert math.isnan(actual[3]) and moved[3] == 1.0 and moved[4] == 1.0
    assert (excused.count, excused.numel, excused.index) == (1, 5, (1,))
    assert excused.error == pytest.approx(MULTIPLE * 0.01, rel=1e-6) and excused.spread == 0.01
    assert widened(golden.float(), golden, spread) == (golden, None)


def test_a_failure_the_spread_cannot_explain_says_so():
    x = torch.randn(256, generator=_generator())
    golden = torch.exp(x.double())
    verdict = judge(torch.exp(x) * 1.01, golden, op="exp", spread=input_spread(torch.exp, (x,), golden=golden))
    assert verdict.status is Status.ERROR
    assert "second look: the op's conditioning at these inputs explains no element's error" in verdict.notes

