"""A pinned slice of the seeded-defect suite (benchmarks/defect_suite.py): fair kernels pass, gross
defects fail, judged as dump cases judge them, with no baseline, against the fair kernel itself and
against a fair peer. The whole suite, with subtle defects and recall, is the benchmark; this slice
is the op's normal regime in every dtype, for a few ops of each family.

The fair kernels that false-alarm today against a peer are listed in PEER_FALSE_ALARMS with the
class of issue 12 they belong to, as strict xfails: when the engine stops failing them, the test
says so and the entry goes.
"""

from __future__ import annotations

import pytest
import torch

from benchmarks.defect_kernels import OPS
from benchmarks.defect_suite import DTYPES, MODES, Cell, judged, outputs

PINNED = ("Torch.matmul", "Torch.sum", "Torch.softmax", "Functional.layer_norm", "Functional.rms_norm",
          "Functional.gelu", "Torch.exp", "Torch.div", "Functional.cross_entropy", "Torch.amax")
CELLS = [Cell(op, dtype, "normal") for op in OPS if op.name in PINNED for dtype in DTYPES]

# (op, dtype, fair kernel): why a peer baseline fails it today (issue 12, class 3: a ratio of two
# fair errors read as a difference in accuracy).
PEER_FALSE_ALARMS: dict[tuple[str, str, str], str] = {}


def _id(cell: Cell) -> str:
    return f"{cell.op.name.split('.')[-1]}-{str(cell.dtype)[6:]}"


def _fair_cases():
    for cell in CELLS:
        for impl in cell.fair_kernels():
            for mode in MODES:
                known = PEER_FALSE_ALARMS.get((cell.op.name, str(cell.dtype)[6:], impl)) if mode == "peer" else None
                marks = [pytest.mark.xfail(strict=True, reason=f"issue 12: {known}")] if known else []
                yield pytest.param(cell, impl, mode, id=f"{_id(cell)}-{impl}-{mode}", marks=marks)


@pytest.mark.parametrize("cell, impl, mode", list(_fair_cases()))
def test_fair_kernels_pass(cell, impl, mode):
    output = next(o for o in outputs(cell) if o.severity == "fair" and o.impl == impl)
    result = judged(output, mode)
    assert not result.failed, f"{cell.label} {impl} [{mode}]: {result.checks}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("cell", CELLS, ids=_id)
def test_gross_defects_fail(cell, mode):
    gross = [o for o in outputs(cell) if o.severity == "gross"]
    assert len(gross) >= 5
    passed = [o.impl for o in gross if not judged(o, mode).failed]
    assert not passed, f"{cell.label} [{mode}]: gross defects passed: {passed}"


def test_a_defect_is_planted_in_torchs_own_kernel_and_changes_it():
    cell = Cell(next(op for op in OPS if op.name == "Torch.softmax"), torch.float16, "normal")
    torch_kernel = cell.fair["torch"]
    for output in outputs(cell):
        if output.severity != "fair":
            assert output.source == "torch" and not torch.equal(output.actual, torch_kernel), output.impl


# Fair kernels that a peer baseline used to fail, each for one of these reasons:
# - too few outputs to tell an order's noise from a bias: 16 row sums, a scalar loss;
# - errors that move together within a row or channel (a prefix sum's run, a shared factor, a batch
#   norm's rounded statistics), so a small common lean is not beyond chance;
# - a sign pattern with no bias in magnitude (gelu's erf against erfc);
# - a vectorized erf that errs a few ulp near -1 (torch's float32 gelu in the left tail);
# - terms that vanish whole in a sequential sum, which lean every row one way (a float32 softmax over
#   wide scores loses the terms under u of its sum: 10 u in every row, 5.9x torch's RMSE).
FORMER_PEER_FALSE_ALARMS = [
    ("Torch.softmax", torch.float32, "wide", "sequential_f32"),
    ("Torch.sum", torch.float32, "long", "sequential_f32"),
    ("Torch.cumsum", torch.float32, "long", "blocked64"),
    ("Torch.softmax", torch.float32, "near_uniform", "torch"),
    ("Torch.log_softmax", torch.float32, "near_uniform", "torch"),
    ("Functional.layer_norm", torch.float32, "offset", "divide"),
    ("Functional.gelu", torch.bfloat16, "left_tail", "erf"),
    ("Functional.gelu", torch.float32, "left_tail", "torch"),
    ("Functional.cross_entropy", torch.float16, "confident", "torch"),
    ("Functional.cross_entropy", torch.float16, "near_uniform", "torch"),
    ("Functional.cross_entropy", torch.bfloat16, "near_uniform", "torch"),
    ("Functional.batch_norm", torch.float16, "offset", "torch"),
    ("Functional.batch_norm", torch.bfloat16, "offset", "torch"),
]


@pytest.mark.parametrize("name, dtype, regime, impl", FORMER_PEER_FALSE_ALARMS,
                         ids=lambda v: str(v).removeprefix("torch."))
def test_former_peer_false_alarms_pass_in_every_mode(name, dtype, regime, impl):
    cell = Cell(next(op for op in OPS if op.name == name), dtype, regime)
    output = next(o for o in outputs(cell) if o.severity == "fair" and o.impl == impl)
    results = [judged(output, mode) for mode in MODES]
    failed = {r.mode: r.checks for r in results if r.failed}
    assert not failed, f"{cell.label} {impl}: {failed}"


# The float32 result of the half-precision ops that fair kernels compute wide, cast toward zero: only
# the rounding gate sees it, in every mode.
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["Functional.gelu", "Functional.layer_norm", "Functional.rms_norm",
                                  "Functional.scaled_dot_product_attention"])
def test_truncation_in_half_precision_fails_in_every_mode(name, mode):
    cell = Cell(next(op for op in OPS if op.name == name), torch.float16, "normal")
    output = next(o for o in outputs(cell) if o.impl == "round_toward_zero")
    result = judged(output, mode)
    assert result.failed and "rounding_bias" in result.checks, f"{cell.label} [{mode}]: {result.checks}"
