"""The public API: judge, assert_precise, standard selection, messages and overrides."""

from __future__ import annotations

import pytest
import torch

import pytest_npuprecision as npp
from pytest_npuprecision import Accumulation, Rules, Status, assert_precise, judge, render_message

X = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)
EXACT = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
OFF = torch.tensor([1.0, 2.0, 3.01], dtype=torch.float64)


def test_failure_message_format_is_stable():
    verdict = judge(X, OFF, op="Tensor.__mul__.0.forward")
    assert render_message(verdict) == (
        "Tensor.__mul__.0.forward [float16, 3]: error by the absolute standard\n"
        "  the error: one element far off: the rest lie within what the standard allows them\n"
        "  rel_err_ratio = 0.333333 > limit 0  [error]\n"
        "      = share of elements whose relative error is past rtol\n"
        "  mismatched elements: 1 / 3 (33.3%) past their relative (or near-zero absolute) tolerance\n"
        "  worst element [2]: actual 3, golden 3.01\n"
        "    error there: 0.01 absolute, 0.00332 relative; the standard allows 0.00294\n"
        "  compared: actual vs golden\n"
        "  docs: docs/standards.md#absolute"
    )


def test_the_message_says_how_many_elements_fail_and_what_is_allowed_at_the_worst_in_the_tensors_units():
    golden = torch.linspace(0.5, 2.0, 256, dtype=torch.float64)
    actual = golden.float()
    actual[7] *= 1.001  # one element wrong by 0.1%
    text = render_message(judge(actual, golden, op="Functional.gelu"))
    assert "  mismatched elements: 1 / 256 (0.39%) past their error bound" in text
    worst = golden[7].item()
    bound_line = next(line for line in text.splitlines() if line.startswith("    error there: "))
    allowed = float(bound_line.rpartition("allows ")[2])
    error = float(bound_line.split()[2])
    assert error == pytest.approx(worst * 1e-3, rel=1e-2)
    # 8x the element's error bound: a few dozen float32 ulps of the tensor's scale, far below the 0.1% it is off by.
    rms = golden.square().mean().sqrt().item()
    assert 8 * 2**-24 * worst <= allowed <= 64 * 2**-24 * rms < error
    assert "      = largest error over the element's error bound, what a fair kernel may err there" in text


def test_passing_message_lists_every_check_and_the_baseline():
    verdict = judge(X, OFF, op="Tensor.__add__", baseline=X)
    text = render_message(verdict)
    assert text.splitlines()[0] == "Tensor.__add__ [float16, 3]: pass by the benchmark+error_bound standard"
    assert "  rmse_ratio = 1 <= limit 2 (baseline 0.0057735)" in text
    assert "worst element [2]: actual 3, golden 3.01, baseline 3\n  compared: actual vs golden and baseline vs golden" in text
    # The op's own standard judges beside the ratios, except where the baseline breaks it too.
    assert "  max_bound_ratio = 3.40168 <= limit 8 (baseline 3.40168)" in text
    assert text.endswith("  note: error_bound's mean_bound_ratio = 1.13389 > limit 1 is forgiven: the baseline's is "
                         "1.13389, past the limit too, so the benchmark ratios alone judge it")


def test_nan_gate_message_points_at_the_nan():
    actual = torch.tensor([[1.0, float("nan")]], dtype=torch.bfloat16)
    verdict = judge(actual, torch.tensor([[1.0, 2.0]], dtype=torch.float64), op="Torch.matmul",
                    accumulation=Accumulation(2))
    assert verdict.status is Status.ERROR
    assert "  nonfinite_mismatch = 1 > limit 0  [error]" in render_message(verdict)
    assert verdict.worst.index == (0, 1) and verdict.worst.golden == 2.0


def test_assert_precise_raises_with_the_message_and_returns_passing_verdicts():
    with pytest.raises(AssertionError, match=r"rel_err_ratio = 0.333333 > limit 0"):
        assert_precise(X, OFF, op="mul")
    assert assert_precise(X, EXACT, op="mul").status is Status.PASS


@pytest.mark.parametrize(
    "op, dtype, baseline, standard",
    [
        ("Functional.gelu.0.forward", torch.float16, False, "error_bound"),
        ("Functional.gelu.0.forward", torch.float16, True, "benchmark+error_bound"),
        ("Tensor.__imul__", torch.float32, False, "absolute"),
        ("Tensor.mul_.3.forward", torch.float32, False, "absolute"),
        ("Tensor.__rmul__", torch.float32, False, "absolute"),
        ("Tensor.add_.3.forward", torch.float32, False, "error_bound"),
        ("Tensor.__truediv__", torch.bfloat16, False, "absolute"),
        ("Torch.matmul", torch.float32, False, "error_bound"),
        ("Aten.mm.default", torch.float32, False, "error_bound"),
        ("NPU.npu_rms_norm", torch.float16, False, "error_bound"),
        ("Functional.conv2d", torch.float16, False, "thousandth"),
        ("Torch.exp", torch.float32, False, "ulp"),
        ("Functional.relu", torch.float32, True, "binary"),  # bit-exact ops stay binary with a baseline
        ("Tensor.masked_fill_", torch.float32, False, "binary"),
        ("Functional.relu.0.backward", torch.float32, False, "error_bound"),  # backward: table says nothing
        ("Torch.argmax", torch.int64, False, "binary"),
        ("Torch.gt", torch.bool, True, "binary"),
        ("Functional.not_in_the_table", torch.float32, False, "error_bound"),
        (None, torch.float16, False, "error_bound"),
    ],
)
def test_standard_selection(op, dtype, baseline, standard):
    actual = torch.ones(4, dtype=dtype)
    golden = torch.ones(4, dtype=torch.float64 if dtype.is_floating_point else dtype)
    # Accumulation(): one term per output (the selection does not depend on it; reductions require one).
    assert judge(actual, golden, op=op, baseline=actual if baseline else None,
                 accumulation=Accumulation()).standard == standard


def test_explicit_standard_wins():
    assert judge(X, EXACT, op="matmul", standard="ulp", accumulation=Accumulation(1)).standard == "ulp"


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: judge(X, EXACT[:2]), ValueError,
         "golden shape (2,) does not match actual shape (3,): pass the golden of the same output"),
        (lambda: judge(X, EXACT, baseline=X[:1]), ValueError,
         "baseline shape (1,) does not match actual shape (3,): pass the baseline of the same output"),
        (lambda: judge(X, EXACT, dtype="fp16"), ValueError, "dtype 'fp16' is not a torch dtype: use float16"),
        (lambda: judge(X, EXACT, dtype=16), TypeError, "dtype must be a torch.dtype or its name, not int 16"),
        (lambda: judge(X, EXACT, standard="ulpp"), ValueError,
         "standard 'ulpp' is unknown: use one of binary, quantized, absolute, ulp, thousandth, error_bound, benchmark"),
        (lambda: judge(X, EXACT, standard="benchmark"), ValueError,
         "standard 'benchmark' needs a baseline: pass baseline=<same op on a trusted device>"),
        (lambda: judge([1.0], EXACT), TypeError, "actual must be a torch.Tensor (or a Python number), not list"),
        (lambda: judge(torch.ones(2, dtype=torch.complex64), torch.ones(2, dtype=torch.complex128)), ValueError,
         "dtype torch.complex64 is complex: judge the real and imaginary parts separately"),
    ],
)
def test_bad_arguments_say_what_and_how_to_fix(call, error, message):
    with pytest.raises(error) as excinfo:
        call()
    assert str(excinfo.value) == message


def test_dtype_argument_judges_a_widened_output_in_its_own_dtype():
    widened = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float32)  # e.g. a bfloat16 result .float()
    verdict = judge(widened, EXACT, dtype="bfloat16")
    assert verdict.dtype == "bfloat16" and verdict.status is Status.PASS


def test_python_scalars_are_compared_with_a_tolerance():
    """msprobe compares Python float outputs with ==; 0.1 + 0.2 against 0.3 is a rounding, not an error."""
    assert judge(0.1 + 0.2, torch.tensor(0.3, dtype=torch.float64), dtype="float32").status is Status.PASS


def test_low_precision_golden_is_noted():
    verdict = judge(X, X)
    assert "golden is torch.float16, no more precise than the output: errors are understated" in verdict.notes


def test_yaml_overrides_change_the_standard_and_limits(tmp_path):
    overrides = tmp_path / "rules.yaml"
    overrides.write_text(
        "standards:\n  ulp: [my_fused_op]\n"
        "ops:\n  my_fused_op: {limits: {ulp: {max_ulp_err: 100}}}\n"
        "dtypes:\n  float16: {rtol: 0.01}\n"
    )
    rules = Rules.default().merged(overrides)
    actual = torch.tensor([1.0 + 3 * 2**-10], dtype=torch.float16)  # 0.29 % off
    one = torch.ones(1, dtype=torch.float64)
    verdict = judge(actual, one, op="NPU.my_fused_op", rules=rules)
    assert verdict.standard == "ulp"
    assert [c.limit for c in verdict.checks if c.metric == "max_ulp_err"] == [100.0]
    assert judge(actual, one, op="NPU.my_fused_op").standard == "error_bound"  # defaults untouched
    assert judge(actual, one, op="mul", rules=rules).status is Status.PASS  # within rtol 1 %
    assert judge(actual, one, op="mul").status is Status.ERROR  # beyond the default 2**-10
    assert rules.params(torch.float16).rtol == 0.01


def test_python_override_of_one_op():
    rules = Rules.default().with_op("Functional.gelu", standard="ulp", limits={"ulp": {"max_ulp_err": 1}})
    x = torch.randn(256, generator=torch.Generator().manual_seed(0))
    verdict = judge(torch.nn.functional.gelu(x), torch.nn.functional.gelu(x.double()), op="Functional.gelu.0.forward",
                    rules=rules)
    assert verdict.standard == "ulp"
    assert [c.limit for c in verdict.checks if c.metric == "max_ulp_err"] == [1.0]


def test_warning_limits_give_a_warning_not_an_error():
    rules = Rules.default().merged({"standards": {"benchmark": {"L0": {"rmse_ratio": {"error": 4, "warning": 1.1}}}}})
    baseline = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float16)
    actual = torch.tensor([1.0, 2.0, 2.998], dtype=torch.float16)
    golden = torch.tensor([1.0, 2.0, 3.0004], dtype=torch.float64)
    verdict = judge(actual, golden, op="neg_free_op", baseline=baseline, rules=rules)
    rmse = next(c for c in verdict.checks if c.metric == "rmse_ratio")
    assert rmse.status is Status.WARNING and rmse.value == pytest.approx(1.2878749851118023)
    assert "  rmse_ratio = 1.28787 > warning limit 1.1 (error limit 4) (baseline 0.00023094)  [warning]\n" in render_message(verdict)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"standardz": {}}, "override keys ['standardz'] are unknown: use dtypes, standards, levels, ops, backward_roundings or dtype_grid_golden"),
        ({"ops": {"gelu": {"standard": "fuzzy"}}},
         "standard 'fuzzy' in op 'gelu' is unknown: use one of binary, quantized, absolute, ulp, thousandth, error_bound, benchmark"),
        ({"ops": {"gelu": {"levle": "L2"}}},
         "op 'gelu' has unknown keys ['levle']: use standard, backward, level, roundings or limits"),
        ({"ops": {"gelu": {"limits": {"ulp": {"max_ulp_err": "big"}}}}},
         "limit gelu.ulp.max_ulp_err = 'big' is not a number: write a number or {error: x, warning: y}"),
        ({"levels": {"L9": ["gelu"]}}, "level 'L9' in the op table is unknown: use one of L0, L1, L2"),
    ],
)
def test_bad_overrides_are_rejected_clearly(overrides, message):
    with pytest.raises(ValueError) as excinfo:
        Rules.default().merged(overrides)
    assert str(excinfo.value) == message


def test_missing_rules_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="missing.yaml: the rules file cannot be read \\(No such file or directory\\)"):
        Rules.default().merged(tmp_path / "missing.yaml")


def test_public_names():
    assert {"judge", "assert_precise", "Verdict", "Status", "Accumulation", "Rules", "render_message"} <= set(npp.__all__)
