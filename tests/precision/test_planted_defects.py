"""Planted defects fail: every way a device output goes wrong is caught, in every dtype.

Where a standard cannot see a defect by design, the exclusion is listed here with its reason
and docs/blind-spots.md says the same.
"""

from __future__ import annotations

import math

import pytest
import torch
from clean_ops import CLEAN_OPS, DTYPES, OpSpec, evaluate, spread
from defects import OUTPUT_DEFECTS, gelu_tanh, low_precision_matmul, saturate, sequential_sum

from pytest_npuprecision import Accumulation, Status, input_spread, judge, render_message

FLOAT_OPS = [spec for spec in CLEAN_OPS if spec.name != "argmax"]
SCALAR_LOSSES = {"cross_entropy", "mse_loss"}
LARGE_K_REDUCTIONS = {"softmax", "rms_norm", "sum", "mean"}

# Defects a standard cannot tell from a fair implementation's own error, without a baseline.
BLIND_SPOTS = {
    # The thousandth standard (conv) admits 0.1 % of elements beyond 1e-3, by design (HF32); an element
    # 64x past its error bound fails (one off by 1000 ulp does), a float32 offset or noise of tens of ulp not.
    ("conv2d", "bias_32_eps"): (torch.float32,),
    ("conv2d", "noise_64_ulp"): (torch.float32,),
    # A float32 reduction over thousands of terms fairly errs by tens of ulp.
    **{(op, "noise_64_ulp"): (torch.float32,) for op in LARGE_K_REDUCTIONS | SCALAR_LOSSES},
    # One scalar cannot show a bias against a reduction of 64 000 terms.
    **{(op, "bias_32_eps"): (torch.float32,) for op in SCALAR_LOSSES},
}


def _large_k(spec: OpSpec) -> bool:
    return spec.name == "matmul" and spec.reduction(spec.inputs()) >= 8192


def _blind(spec: OpSpec, defect: str, dtype: torch.dtype) -> bool:
    if defect in ("noise_64_ulp", "bias_32_eps") and dtype == torch.float32 and _large_k(spec):
        return True  # a float32 sum of 8192 products fairly errs by about 90 ulp
    return dtype in BLIND_SPOTS.get((spec.name, defect), ())


def _cases(with_blind_spots: bool):
    for spec in FLOAT_OPS:
        for dtype in DTYPES:
            for defect in OUTPUT_DEFECTS:
                if with_blind_spots or not _blind(spec, defect, dtype):
                    k = spec.reduction(spec.inputs())
                    yield pytest.param(spec, dtype, defect, id=f"{spec.name}-{k}-{str(dtype)[6:]}-{defect}")


def _judge(spec, dtype, defect, baseline: bool, second_look: bool = False):
    run = evaluate(spec, dtype)
    return judge(OUTPUT_DEFECTS[defect](run.actual), run.golden, op=spec.name, accumulation=run.accumulation,
                 baseline=run.baseline if baseline else None, spread=spread(spec, dtype) if second_look else None)


# With the second look, a failing output is judged again against the spread that rounding its inputs
# causes (precision/second_look.py): no planted defect may hide in it.
@pytest.mark.parametrize("second_look", [False, True], ids=["", "second-look"])
@pytest.mark.parametrize("spec, dtype, defect", list(_cases(with_blind_spots=False)))
def test_defect_fails_without_a_baseline(spec, dtype, defect, second_look):
    verdict = _judge(spec, dtype, defect, baseline=False, second_look=second_look)
    assert verdict.status is Status.ERROR, render_message(verdict)


def _unbiased_within_reordering(spec: OpSpec, defect: str, dtype: torch.dtype) -> bool:
    """Noise under a float32 sum of thousands of terms: no offset, and within the device's own bound
    with the floors' margin, as a fair kernel that sums in another order errs against a pairwise one.
    A scalar loss over tens of thousands of terms cannot show an offset at all: one element says
    nothing of chance, and a sequential float32 sum of that many positive terms errs as much as a
    32-eps bias or 64-ulp noise (about sqrt(K/3) u)."""
    k = spec.reduction(spec.inputs())
    if dtype != torch.float32 or defect not in ("noise_64_ulp", "bias_32_eps"):
        return False
    scalar_loss = spec.name in ("cross_entropy", "mse_loss") and k >= 32768
    return scalar_loss or (defect == "noise_64_ulp" and spec.name in ("matmul", "sum", "mean") and k >= 4096)


@pytest.mark.parametrize("spec, dtype, defect", list(_cases(with_blind_spots=True)))
def test_defect_fails_against_a_fair_baseline(spec, dtype, defect):
    verdict = _judge(spec, dtype, defect, baseline=True)
    if _unbiased_within_reordering(spec, dtype=dtype, defect=defect):
        # Not silent: the RMSE ratio warns (--npu-precision-strict-warnings fails it).
        assert verdict.status is Status.WARNING, render_message(verdict)
        assert {c.metric for c in verdict.failures} == {"rmse_ratio"}
        return
    assert verdict.status is Status.ERROR, render_message(verdict)


@pytest.mark.parametrize("defect", ["one_nan", "all_nan", "inf_where_finite"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_inf_nan_gate_names_the_first_mismatch(defect, dtype):
    verdict = _judge(FLOAT_OPS[0], dtype, defect, baseline=True)
    assert verdict.checks[0].metric == "nonfinite_mismatch"
    assert verdict.checks[0].status is Status.ERROR
    assert verdict.worst is not None and verdict.worst.index


@pytest.mark.parametrize("dtype, top", [(torch.float16, 12.0), (torch.bfloat16, 90.0), (torch.float32, 90.0)])
def test_npu_saturation_of_an_overflow_fails(dtype, top):
    x = torch.linspace(-4, top, 4096).to(dtype)
    golden = torch.exp(x.double())
    fair = torch.exp(x)
    assert torch.isinf(fair).any()  # the exact result overflows the dtype
    assert judge(fair, golden, op="exp").status is Status.OVERFLOW  # fair: its own status, passing
    verdict = judge(saturate(fair), golden, op="exp")
    assert verdict.status is Status.ERROR
    assert verdict.worst.actual == torch.finfo(dtype).max


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("k", [1024, 4096])
def test_sum_without_a_float32_accumulator_fails(dtype, k):
    x = torch.randn(16, k, generator=torch.Generator().manual_seed(k)).to(dtype)
    golden = x.double().sum(-1)
    accumulation = Accumulation(k, x.double().square().sum(-1).sqrt())
    assert judge(x.sum(-1), golden, op="sum", accumulation=accumulation).status is Status.PASS
    verdict = judge(sequential_sum(x), golden, op="sum", accumulation=accumulation)
    assert verdict.status is Status.ERROR, render_message(verdict)
    spread = input_spread(lambda t: t.sum(-1), (x,))
    verdict = judge(sequential_sum(x), golden, op="sum", accumulation=accumulation, spread=spread)
    assert verdict.status is Status.ERROR, render_message(verdict)
    with_baseline = judge(sequential_sum(x), golden, op="sum", accumulation=accumulation, baseline=x.sum(-1))
    assert with_baseline.status is Status.ERROR


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_matmul_without_a_float32_accumulator_fails(dtype):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(8, 1024, generator=generator).to(dtype)
    b = torch.randn(1024, 8, generator=generator).to(dtype)
    golden = a.double() @ b.double()
    accumulation = Accumulation(1024, (a.double().square() @ b.double().square()).sqrt())
    assert judge(a @ b, golden, op="matmul", accumulation=accumulation).status is Status.PASS
    verdict = judge(low_precision_matmul(a, b), golden, op="matmul", accumulation=accumulation)
    assert verdict.status is Status.ERROR, render_message(verdict)
    verdict = judge(low_precision_matmul(a, b), golden, op="matmul", accumulation=accumulation,
                    spread=input_spread(torch.matmul, (a, b)))
    assert verdict.status is Status.ERROR, render_message(verdict)


def test_gelu_tanh_approximation_in_place_of_erf_fails_in_float32():
    x = torch.randn(64, 256, generator=torch.Generator().manual_seed(0))
    golden = torch.nn.functional.gelu(x.double())
    assert judge(torch.nn.functional.gelu(x), golden, op="Functional.gelu").status is Status.PASS
    verdict = judge(gelu_tanh(x), golden, op="Functional.gelu")
    assert verdict.status is Status.ERROR, render_message(verdict)
    verdict = judge(gelu_tanh(x), golden, op="Functional.gelu", spread=input_spread(torch.nn.functional.gelu, (x,)))
    assert verdict.status is Status.ERROR, render_message(verdict)
    assert judge(gelu_tanh(x), golden, op="Functional.gelu", baseline=torch.nn.functional.gelu(x)).status is Status.ERROR


def test_integer_output_with_one_wrong_element_fails():
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(0))
    golden = x.double().argmax(-1)
    wrong = x.argmax(-1).clone()
    wrong[5] += 1
    assert judge(x.argmax(-1), golden, op="Torch.argmax").status is Status.PASS
    verdict = judge(wrong, golden, op="Torch.argmax")
    assert verdict.status is Status.ERROR and verdict.standard == "binary"
    assert verdict.worst.index == (5,)


def test_one_wrong_element_cannot_hide_under_the_baselines_ratios():
    x = 3 * torch.randn(64, 512, generator=torch.Generator().manual_seed(3))
    golden = torch.nn.functional.gelu(x.double())
    # A fair float32 gelu that cancels in 1 + erf(x / sqrt(2)) where x is very negative: a baseline
    # whose own worst relative error is wide (8 %, out in the tail).
    cancelling = x * 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    flat = golden.reshape(-1).abs()
    typical = int((flat - flat.median()).abs().argmin())
    wrong = cancelling.clone().reshape(-1)
    wrong[typical] = (wrong[typical].double() * (1 + 1000 * 2.0**-23)).float()  # ~1000 ulp off
    wrong = wrong.reshape(x.shape)

    # msprobe's relative-error ratios alone would pass it: one element 1000 ulp off is nothing next
    # to the tail. Errors in units of their own bound see it.
    alone = judge(wrong, golden, baseline=cancelling, op="gelu", standard="benchmark")
    assert alone.metrics.max_rel_err <= alone.baseline_metrics.max_rel_err
    assert [c.metric for c in alone.failures] == ["max_scaled_err_ratio"], render_message(alone)
    verdict = judge(wrong, golden, baseline=cancelling, op="gelu")
    assert verdict.standard == "benchmark+error_bound"
    assert [c.metric for c in verdict.failures] == ["max_scaled_err_ratio", "max_bound_ratio"], render_message(verdict)
    assert verdict.failures[0].baseline < 8  # the baseline meets the bound, so the device must
    assert verdict.worst.index == tuple(int(i) for i in torch.unravel_index(torch.tensor(typical), x.shape))


def test_a_baseline_forgives_only_what_it_needs_forgiven_itself():
    x = torch.randn(16, 4096, generator=torch.Generator().manual_seed(5)).to(torch.float16)
    golden = x.double().sum(-1)
    accumulation = Accumulation(4096, x.double().square().sum(-1).sqrt())
    baseline = sequential_sum(x)  # a float16 accumulator: far past the error bound
    assert judge(baseline, golden, op="sum", accumulation=accumulation).status is Status.ERROR

    # Another kernel as coarse as the baseline passes: the bound it breaks is left to the ratios ...
    alike = judge(sequential_sum(x.flip(-1)), golden, baseline=baseline, op="sum", accumulation=accumulation)
    assert alike.status is Status.PASS, render_message(alike)
    assert {c.metric for c in alike.checks} >= {"rmse_ratio", "bound_bias"}
    assert "max_bound_ratio" not in {c.metric for c in alike.checks}
    assert any(note.startswith("error_bound's max_bound_ratio = ") and "is forgiven" in note for note in alike.notes)
    # ... which still fail a kernel clearly coarser than the baseline.
    coarser = judge(sequential_sum(x.to(torch.bfloat16)).to(torch.float16), golden, baseline=baseline, op="sum",
                    accumulation=accumulation)
    assert coarser.status is Status.ERROR and "rmse_ratio" in {c.metric for c in coarser.failures}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("defect", ["times_10", "off_by_1000_ulp"])
def test_one_gross_outlier_in_a_conv_fails_without_a_baseline(dtype, defect):
    """The thousandth standard's 0.1 % allowance is for rounding: one element far past its bound fails."""
    spec = next(s for s in CLEAN_OPS if s.name == "conv2d")
    run = evaluate(spec, dtype)
    fair = judge(run.actual, run.golden, op=spec.name, accumulation=run.accumulation)
    assert fair.status is Status.PASS and fair.metrics.max_bound_ratio < 64 / 4
    bad = run.actual.clone()
    if defect == "times_10":
        bad.view(-1)[7] *= 10
    else:
        bad = OUTPUT_DEFECTS["off_by_1000_ulp"](run.actual)
    verdict = judge(bad, run.golden, op=spec.name, accumulation=run.accumulation)
    assert verdict.status is Status.ERROR
    assert "max_bound_ratio" in {c.metric for c in verdict.failures}, render_message(verdict)
