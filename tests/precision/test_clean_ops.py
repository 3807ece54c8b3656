"""No false alarms: common ops computed by torch on CPU pass against float64 goldens."""

from __future__ import annotations

import pytest

from clean_ops import CLEAN_OPS, DTYPES, evaluate
from pytest_npuprecision import Status, judge, render_message

CASES = [
    pytest.param(spec, dtype, id=f"{spec.name}-{spec.inputs()[0].shape[-1]}-{str(dtype)[6:]}")
    for spec in CLEAN_OPS
    for dtype in DTYPES
]


def test_the_table_covers_at_least_25_ops():
    assert len({spec.name for spec in CLEAN_OPS}) >= 25
    assert max(spec.reduction(spec.inputs()) for spec in CLEAN_OPS if spec.name == "matmul") == 8192


@pytest.mark.parametrize("spec, dtype", CASES)
def test_clean_op_passes_without_a_baseline(spec, dtype):
    run = evaluate(spec, dtype)
    verdict = judge(run.actual, run.golden, op=spec.name, accumulation=run.accumulation)
    assert verdict.status is Status.PASS, render_message(verdict)


@pytest.mark.parametrize("spec, dtype", CASES)
def test_clean_op_passes_against_a_fair_baseline(spec, dtype):
    run = evaluate(spec, dtype)
    verdict = judge(run.actual, run.golden, op=spec.name, baseline=run.baseline, accumulation=run.accumulation)
    assert verdict.status is Status.PASS, render_message(verdict)
    # The benchmark ratios, and the op's own standard wherever the baseline meets it.
    assert verdict.standard == "binary" or verdict.standard.startswith("benchmark+"), verdict.standard
