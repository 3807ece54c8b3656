"""One call checked from Python: check_call runs the op on the device, the float64 golden and a
baseline, and judges outputs and gradients with the accumulation the harness derives; judge takes
the call's inputs, and refuses to bound a reduction without them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import Accumulation, Status, assert_call_precise, check_call, judge

torch.manual_seed(0)
A, B = torch.randn(64, 1024), torch.randn(1024, 32)


def test_a_fair_float32_matmul_with_a_long_reduction_passes_outputs_and_gradients():
    verdict = check_call(torch.matmul, A, B, backward=True)
    assert [name for name, _ in verdict.outputs] == ["output.0", "grad.input_args[0]", "grad.input_args[1]"]
    assert verdict.status is Status.PASS, verdict.message()
    assert verdict.op == "Torch.matmul"


@pytest.mark.parametrize("op, args", [
    ("Functional.gelu", (torch.randn(4096).bfloat16(),)),
    (F.linear, (torch.randn(16, 512).half(), torch.randn(64, 512).half(), torch.randn(64).half())),
    ("Torch.softmax", (torch.randn(16, 2048), -1)),
    (torch.sum, (torch.randn(4096).bfloat16(),)),
])
def test_fair_kernels_pass_by_name_or_function(op, args):
    assert check_call(op, *args, backward=True).status is Status.PASS


def test_a_kernel_that_accumulates_in_bfloat16_fails_against_its_reference():
    def sloppy(x, y):  # bfloat16 products and sums, returned in float32
        return (x.bfloat16() @ y.bfloat16()).float()

    verdict = check_call(sloppy, A, B, reference=torch.matmul)
    assert verdict.status is Status.ERROR
    with pytest.raises(AssertionError, match=r"output.0: \S*sloppy \[float32, 64x32\]: error"):
        assert_call_precise(sloppy, A, B, reference=torch.matmul)


def test_a_planted_nan_fails_and_a_baseline_is_judged_beside():
    def one_nan(x):
        y = torch.exp(x)
        y[3] = float("nan")
        return y

    assert check_call(one_nan, torch.randn(100), reference=torch.exp).status is Status.ERROR
    with_baseline = check_call("Torch.exp", torch.randn(100), baseline="cpu")
    assert with_baseline.status is Status.PASS
    assert with_baseline.verdict("output.0").standard.startswith("benchmark")


def test_judge_derives_the_accumulation_from_the_inputs():
    actual, golden = A @ B, A.double() @ B.double()
    with pytest.raises(ValueError, match=r"inputs=\(args, kwargs\)"):
        judge(actual, golden, op="Torch.matmul")
    assert judge(actual, golden, op="Torch.matmul", inputs=((A, B), {})).status is Status.PASS
    assert judge(actual, golden, op="Torch.matmul", accumulation=Accumulation(1024)).status is Status.PASS
    with pytest.raises(ValueError, match="not both"):
        judge(actual, golden, op="Torch.matmul", inputs=((A, B), {}), accumulation=Accumulation(1024))
    # A dump key names the same op: its length is still derived (it was 1, and the fair matmul failed).
    assert judge(actual, golden, op="Torch.matmul.0.forward", inputs=((A, B), {})).status is Status.PASS
    with pytest.raises(ValueError, match="cannot derive the accumulation"):
        judge(actual, golden, op="Torch.no_such_op", inputs=((A, B), {}))
    sloppy = (A.bfloat16() @ B.bfloat16()).float()
    assert judge(sloppy, golden, op="Torch.matmul", inputs=((A, B), {})).status is Status.ERROR


def test_an_unknown_name_is_a_value_error():
    with pytest.raises(ValueError, match="check_call"):
        check_call("Torch.no_such_op", torch.randn(3))


@pytest.mark.parametrize("function, name", [
    (F.scaled_dot_product_attention, "Functional.scaled_dot_product_attention"),  # a C function of torch._C._nn
    (F.linear, "Functional.linear"), (F.gelu, "Functional.gelu"), (torch.matmul, "Torch.matmul"),
    (torch.Tensor.add, "Tensor.add"),
])
def test_a_torch_function_is_judged_by_its_table_row(function, name):
    from pytest_npuprecision.checks.one_call import _resolved

    assert _resolved(function).api_name == name


def test_torch_linalg_functions_resolve_to_msprobes_names_and_rules():
    """torch.linalg.det is torch.det's computation (namesakes.SAME_FUNCTION), svd msprobe's Torch.svd,
    eigh (which msprobe does not hook) Torch.linalg.eigh: each gets its op's rule, not an unknown op's
    measured one, under which 2 of 160 random float32 determinants failed at up to 2.9."""
    a = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(38))
    for function, name in ((torch.linalg.det, "Torch.det"), (torch.linalg.svd, "Torch.svd"),
                           (torch.linalg.eigh, "Torch.linalg.eigh")):
        verdict = check_call(function, a @ a.mT if function is torch.linalg.eigh else a)
        assert verdict.op == name and verdict.status is Status.PASS, verdict.message()
