"""Issue 12, round 2 of its classes 3 and 4: ratios against a fair peer that measure the peer's care
rather than the device's fault only warn where the device meets its own bound with a wide margin (and,
for a reduction's RMSE, where its errors show no offset);
softmax's bound is relative however small a probability is; an op that sums nothing needs no
reduction length from a Python caller. Each fair case has a planted defect beside it that fails."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from benchmarks.defect_kernels import OPS
from benchmarks.defect_suite import Cell, outputs
from pytest_npuprecision import Accumulation, Status, judge, render_message

GEN = torch.Generator().manual_seed(3)


def _verdict(op, actual, golden, args, kwargs=None, baseline=None):
    return judge(actual, golden, op=op, inputs=(args, kwargs or {}), baseline=baseline)


def _status(verdict, metric):
    return next(c for c in verdict.checks if c.metric == metric).status


def _gelu_left_tail():
    x = -torch.linspace(3.5, 5.5, 4096, dtype=torch.float64)
    golden = F.gelu(x)
    erf_kernel = (0.5 * x.float() * (1 + torch.erf(x.float() / math.sqrt(2))))  # 1 + erf cancels
    careful = (0.5 * x * torch.special.erfc(-x / math.sqrt(2))).float()
    return x.float(), golden, erf_kernel, careful


def test_an_elementwise_kernel_that_cancels_only_warns_against_a_careful_peer():
    x, golden, erf_kernel, careful = _gelu_left_tail()
    verdict = _verdict("Functional.gelu", erf_kernel, golden, (x,), baseline=careful)
    assert verdict.status is not Status.ERROR, render_message(verdict)
    assert _status(verdict, "rmse_ratio") is Status.WARNING  # 1 + erf's cancellation, still shown
    assert "a warning: the device meets its own error bound" in render_message(verdict)
    half_erf = 0.5 * x * (1 + torch.erf(x.bfloat16() / math.sqrt(2)).float())  # erf to bfloat16's 8 bits
    assert _verdict("Functional.gelu", half_erf, golden, (x,), baseline=careful).status is Status.ERROR


def test_an_unfused_bias_passes_against_a_fused_peer_and_a_half_precision_sum_fails():
    x = torch.randn(64, 512, generator=GEN).half()
    w = (torch.randn(256, 512, generator=GEN) / 24).half()
    b = torch.randn(256, generator=GEN).half()
    golden = F.linear(x.double(), w.double(), b.double())
    fused = F.linear(x.float(), w.float(), b.float()).half()
    unfused = (F.linear(x.float(), w.float()).half().float() + b.float()).half()
    verdict = _verdict("Functional.linear", unfused, golden, (x, w, b), baseline=fused)
    assert verdict.status is not Status.ERROR, render_message(verdict)
    assert _status(verdict, "small_value_err_ratio") is not Status.ERROR
    partial = torch.zeros_like(golden, dtype=torch.float16)
    for k in range(0, 512, 8):  # a float16 accumulator (torch's CPU kernel widens: summed by hand)
        partial = (partial.float() + F.linear(x[:, k:k + 8].float(), w[:, k:k + 8].float())).half()
    low = (partial.float() + b.float()).half()
    assert _verdict("Functional.linear", low, golden, (x, w, b), baseline=fused).status is Status.ERROR


def test_a_reduction_keeps_its_rmse_ratio():
    """A 4-eps bias in a float32 sum sits under the bound of K = 4096; the RMSE ratio finds it."""
    x = torch.randn(64, 4096, generator=GEN)
    golden = x.double().sum(-1)
    fair = x.sum(-1)
    biased = fair + 4 * torch.finfo(torch.float32).eps * golden.abs().float()
    verdict = _verdict("Torch.sum", biased, golden, (x, -1), baseline=fair)
    assert verdict.status is Status.ERROR and _status(verdict, "rmse_ratio") is Status.ERROR, render_message(verdict)


def _sequential_sum(x: torch.Tensor) -> torch.Tensor:
    """Each row summed one term at a time in float32: a fair order, far less careful than torch's pairwise sum."""
    total = torch.zeros(x.shape[0])
    for column in x.T:
        total = total + column
    return total


@pytest.mark.parametrize("rows", [64, 256])
def test_a_sum_in_another_order_only_warns_against_a_pairwise_peer(rows):
    """Reordering a sum changes its noise, not its centre: no offset beyond chance, and the device within
    its own bound's margin, so the RMSE ratio (5-10x) warns; the same order with a 4-eps bias still fails."""
    x = torch.randn(rows, 2048, generator=torch.Generator().manual_seed(rows))
    golden, pairwise, sequential = x.double().sum(-1), x.sum(-1), _sequential_sum(x)
    verdict = _verdict("Torch.sum", sequential, golden, (x, -1), baseline=pairwise)
    rmse = next(c for c in verdict.checks if c.metric == "rmse_ratio")
    assert rmse.value > 2 and rmse.status is Status.WARNING, render_message(verdict)
    assert verdict.status is Status.WARNING, render_message(verdict)
    biased = sequential + 4 * torch.finfo(torch.float32).eps * golden.abs().float()
    verdict = _verdict("Torch.sum", biased, golden, (x, -1), baseline=pairwise)
    assert verdict.status is Status.ERROR and _status(verdict, "rmse_ratio") is Status.ERROR, render_message(verdict)


def test_few_sums_leave_chance_wide_and_only_warn():
    """16 row sums say too little to tell a fair order's 4-9x from a bias: within the device's own bound
    the RMSE ratio warns; past the floors of that bound (a 1000-eps bias) it fails."""
    x = torch.randn(16, 8192, generator=torch.Generator().manual_seed(5))
    golden, pairwise, sequential = x.double().sum(-1), x.sum(-1), _sequential_sum(x)
    verdict = _verdict("Torch.sum", sequential, golden, (x, -1), baseline=pairwise)
    assert _status(verdict, "rmse_ratio") is Status.WARNING and verdict.status is Status.WARNING, \
        render_message(verdict)
    biased = sequential + 1000 * torch.finfo(torch.float32).eps * golden.abs().float()
    verdict = _verdict("Torch.sum", biased, golden, (x, -1), baseline=pairwise)
    assert _status(verdict, "rmse_ratio") is Status.ERROR, render_message(verdict)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])  # float16's 1e-9 is no normal number
def test_a_tiny_probability_ten_times_too_large_fails_without_a_baseline(dtype):
    s = (torch.randn(64, 1024, generator=GEN) * 8).to(dtype)
    golden = torch.softmax(s.double(), -1)
    fair = torch.softmax(s, -1)
    assert _verdict("Torch.softmax", fair, golden, (s, -1)).status is Status.PASS
    # a probability near 1e-9, made ten times larger: under an absolute floor of sqrt(K) u times the
    # output's RMS it passed
    flat = golden.flatten()
    i = int(((flat.log() - math.log(1e-9)).abs()).argmin())
    planted = fair.clone().flatten()
    planted[i] = planted[i] * 10
    verdict = _verdict("Torch.softmax", planted.reshape(fair.shape), golden, (s, -1))
    assert verdict.status is Status.ERROR, render_message(verdict)


def test_a_scalar_s_mean_error_is_judged_like_its_maximum():
    """The mean over one element is that element: its floor rises to 0.5 + 1 / sqrt(n). A fair float16
    cross_entropy of near-uniform logits errs 0.94 of its bound, a fair peer 0.14: no fault."""
    cell = Cell(next(op for op in OPS if op.name == "Functional.cross_entropy"), torch.float16, "near_uniform")
    (args, kwargs), fair = cell.call, cell.fair
    verdict = judge(fair["torch"], cell.golden, op=cell.op.name, inputs=(args, kwargs), baseline=fair["gathered"])
    assert verdict.metrics.mean_bound_ratio > 0.5 and verdict.metrics.finite == 1
    assert _status(verdict, "mean_scaled_err_ratio") is Status.PASS, render_message(verdict)
    wrong = (fair["torch"].float() * (1 + 2.0 ** -6)).half()  # 16 ulp: past its bound
    assert judge(wrong, cell.golden, op=cell.op.name, inputs=(args, kwargs), baseline=fair["gathered"]).status \
        is Status.ERROR


def test_an_op_that_sums_nothing_needs_no_reduction_length():
    x = torch.randn(1000, generator=GEN)
    assert judge(F.gelu(x), F.gelu(x.double()), op="gelu").status is Status.PASS
    with pytest.raises(ValueError, match="reduces"):
        judge(x, x.double(), op="matmul")


ROUNDED_STEPS = ("Functional.linear", "Functional.batch_norm", "Functional.gelu")


@pytest.mark.parametrize("name", ROUNDED_STEPS)
def test_fair_kernels_that_round_an_intermediate_pass_without_a_baseline(name):
    """An unfused bias rounds the product, half-precision batch_norm rounds its statistics, gelu's
    1 + erf cancels in the left tail: every fair kernel of the suite, every regime and dtype."""
    op = next(op for op in OPS if op.name == name)
    alarms = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        for regime in op.regimes:
            cell = Cell(op, dtype, regime)
            args, kwargs = cell.call
            for impl, actual in cell.fair.items():
                verdict = judge(actual, cell.golden, op=name, inputs=(args, kwargs))
                if verdict.status is Status.ERROR:
                    alarms.append(f"{cell.label} {impl}: {'; '.join(c.describe() for c in verdict.failures)}")
    assert not alarms, "\n".join(alarms)


def _suite_cell(name, dtype, regime):
    return Cell(next(op for op in OPS if op.name == name), dtype, regime)


def test_a_softmax_s_rows_leaning_to_their_factor_s_side_are_noise_and_truncation_is_not():
    """A fair float32 softmax's rows each lean to the side of their rounded sum (balance 0.25 against
    a peer's 0.09); the rows are the samples there. A kernel that truncates leans the same way in
    every row and still fails against the same peer."""
    cell = _suite_cell("Torch.softmax", torch.float32, "long")
    (args, kwargs), fair = cell.call, cell.fair
    verdict = judge(fair["reciprocal"], cell.golden, op=cell.op.name, inputs=(args, kwargs), baseline=fair["torch"])
    assert verdict.metrics.error_balance_noise > 0.03
    assert verdict.status is not Status.ERROR, render_message(verdict)
    half = _suite_cell("Torch.softmax", torch.float16, "normal")
    (args, kwargs), fair = half.call, half.fair
    truncated = next(o.actual for o in outputs(half) if o.impl == "round_toward_zero")
    verdict = judge(truncated, half.golden, op=half.op.name, inputs=(args, kwargs), baseline=fair["torch"])
    assert _status(verdict, "error_balance_ratio") is Status.ERROR, render_message(verdict)


def test_one_small_value_is_no_evidence_against_a_peer_and_many_are():
    """A share of one small value is 0 or 1: torch's float16 conv2d on an AVX2 CPU errs 1.5 subnormal
    quanta at its one subnormal result where a peer errs none, a ratio of 2048 by the dtype's floor.
    Past one element's share the ratio counts again: every small value off fails."""
    golden = torch.cat([torch.full((999,), 0.5, dtype=torch.float64), torch.tensor([2.0955e-05])])
    fair = golden.half()
    peer = fair.clone()
    fair[-1] = torch.tensor(2.0862e-05).half()  # 1.5 quanta off, within its bound of a sum
    acc = Accumulation(64, golden.abs() * 8)
    verdict = judge(fair, golden, op="conv2d", baseline=peer, accumulation=acc)
    assert _status(verdict, "small_value_err_ratio") is Status.PASS, render_message(verdict)
    golden = torch.linspace(1e-6, 5e-5, 1000, dtype=torch.float64)
    peer = golden.half()
    shifted = (golden * 1.02).half()  # every small value 2 % off: 40 quanta at the top
    verdict = judge(shifted, golden, op="conv2d", baseline=peer, accumulation=Accumulation(64, golden.abs() * 8))
    assert _status(verdict, "small_value_err_ratio") is not Status.PASS, render_message(verdict)
