"""What real models dump and a CPU device must judge fairly: autocast entries, positional Tensor.to,
rounded Python scalars, overflowing float16, one element of a tiny tensor. Each dump here is written
in msprobe's tensor format from real torch calls, and each fair case is paired with a planted defect."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from dump_writer import DumpWriter

from pytest_npuprecision.checks.case_run import CaseSkipped, Settings, run_case
from pytest_npuprecision.checks.judging import judge
from pytest_npuprecision.dump.autocast import inferred_autocast
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.precision.verdict import Status, render_message
from pytest_npuprecision.replay.runner import run_call


def results(dump):
    settings = Settings(device="cpu")
    found = {}
    for case in dump.cases:
        try:
            found[case.key] = run_case(case, dump.data_dir, settings)
        except CaseSkipped as skipped:
            found[case.key] = skipped
    return found


def _linear_under_autocast(x, w, b):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return F.linear(x, w, b)


# ---------------------------------------------------------------- autocast


def test_autocast_is_inferred_only_where_dtypes_need_it():
    bf16, f32 = torch.bfloat16, torch.float32
    x, w = torch.ones(2, dtype=bf16), torch.ones(2)
    assert inferred_autocast("linear", [x, w], [bf16], False)[0] is bf16  # two input dtypes
    assert inferred_autocast("linear", [w, w], [bf16], False)[0] is bf16  # float32 in, bfloat16 out
    assert inferred_autocast("cross_entropy", [x], [f32], False)[0] is bf16  # bfloat16 in, float32 out
    assert inferred_autocast("to", [w], [bf16], False) == (None, None)  # a cast says its dtype itself
    assert inferred_autocast("sum", [x], [f32], True) == (None, None)  # so does a dtype argument
    assert inferred_autocast("add", [w, w.double()], [torch.float64], False) == (None, None)  # no half type
    assert inferred_autocast("gelu", [x], [bf16], False) == (None, None)
    # x.add_(y): an in-place op keeps self's dtype, its float32 operand unrounded (OpInfo's add_ sample)
    assert inferred_autocast("add", [x, w], [bf16], False, inplace=True) == (None, None)


def test_autocast_entries_are_replayed_under_autocast_and_judged_in_the_recorded_dtype(tmp_path):
    torch.manual_seed(0)
    writer = DumpWriter(tmp_path)
    x_low, x = torch.randn(4, 16).bfloat16(), torch.randn(4, 16)
    w, b = torch.randn(8, 16, requires_grad=True), torch.randn(8)
    mixed = _linear_under_autocast(x_low, w, b)  # bfloat16 activation, float32 weight
    grad = torch.randn_like(mixed)
    gx = torch.autograd.grad(mixed, (w,), grad)[0]
    writer.call("Functional.linear.0", (x_low, w, b), outputs=(mixed,), grad_in=(grad,),
                grad_out=(None, gx, None), grad_inputs=(1,))
    writer.call("Functional.linear.1", (x, w, b), outputs=(_linear_under_autocast(x, w, b),))
    logits, target = torch.randn(4, 10).bfloat16(), torch.randint(0, 10, (4,))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = F.cross_entropy(logits, target)
    writer.call("Functional.cross_entropy.0", (logits, target), outputs=(loss,))
    found = results(writer.load())

    for key in ("Functional.linear.0.forward", "Functional.linear.0.backward", "Functional.linear.1.forward",
                "Functional.cross_entropy.0.forward"):
        result = found[key]
        assert result.status is Status.PASS, (key, result)
        assert any("run under autocast(bfloat16)" in note for note in result.guesses), key
        assert not result.dtype_differences
    assert found["Functional.linear.1.forward"].outputs[0].verdict.dtype == "bfloat16"  # float32 in, bf16 judged
    assert found["Functional.cross_entropy.0.forward"].outputs[0].verdict.dtype == "float32"


def test_an_in_place_add_of_a_wider_operand_is_not_autocast(tmp_path):
    """OpInfo's bfloat16 sample x.add_(y) with a float32 y: added in float32, then rounded once. Judged
    as if autocast had rounded y to bfloat16 first, a fair kernel failed by 13 ulp of a cancelled sum."""
    writer = DumpWriter(tmp_path)
    x, y = torch.tensor(1.2265625, dtype=torch.bfloat16), torch.tensor(-1.1203272342681885)
    writer.call("Tensor.add_.0", (x, y), outputs=(x.clone().add_(y),))
    result = results(writer.load())["Tensor.add_.0.forward"]
    assert result.status is Status.PASS, result
    assert not any("autocast" in note for note in result.guesses)


def test_a_judged_dtype_the_dump_did_not_record_is_said(tmp_path):
    """A dump whose gelu output claims float32 for a bfloat16 input: no autocast explains it."""
    writer = DumpWriter(tmp_path)
    x = torch.randn(8).bfloat16()
    writer.call("Functional.gelu.0", (x,), outputs=(F.gelu(x).float(),))
    result = results(writer.load())["Functional.gelu.0.forward"]
    assert result.dtype_differences == ("output.0 is judged in bfloat16 but the dump recorded float32: this replay "
                                        "did not run the call as the model did",)


def test_a_device_that_cannot_replay_a_call_skips_instead_of_blaming_the_dump(tmp_path, monkeypatch):
    writer = DumpWriter(tmp_path)
    x = torch.randn(4, 16).bfloat16()
    w = torch.randn(8, 16)
    writer.call("Functional.linear.0", (x, w), outputs=(_linear_under_autocast(x, w, None),))
    dump = writer.load()
    monkeypatch.setattr("pytest_npuprecision.checks.prepared_case.inferred_autocast", lambda *a: (None, None))  # replay as before
    with pytest.raises(CaseSkipped) as skipped:
        run_case(dump.cases[0], dump.data_dir, Settings(device="cpu"))
    assert skipped.value.reason == "replay-error"
    assert "the float64 golden runs the same inputs, so the dump is not at fault" in str(skipped.value)


# ---------------------------------------------------------------- Tensor.to with a positional dtype or device


@pytest.mark.parametrize("output_dtype, expected", [(torch.float32, "rebuilt as torch.float32"),
                                                    (torch.bfloat16, "it was a device")])
def test_positional_to_is_rebuilt_from_the_recorded_output(tmp_path, output_dtype, expected):
    writer = DumpWriter(tmp_path)
    x = torch.randn(2, 8).bfloat16()
    writer.call("Tensor.to.0", (x, None), outputs=(x.to(output_dtype),), raw_args={1: {}})
    result = results(writer.load())["Tensor.to.0.forward"]
    assert result.status is Status.PASS
    assert any(expected in note for note in result.guesses), result.guesses
    assert result.outputs[0].verdict.dtype == str(output_dtype).removeprefix("torch.")


def test_an_empty_argument_the_record_cannot_explain_skips_saying_so(tmp_path):
    writer = DumpWriter(tmp_path)
    x = torch.randn(2, 8)
    writer.call("Tensor.to.0", (x, None, None, None), outputs=(x,), raw_args={1: {}, 3: {}})
    case = writer.load().cases[0]
    assert case.skip is not None and "is written as {}" in case.skip_detail


# ---------------------------------------------------------------- scalars, tiny tensors, overflow


def test_an_optimizer_scalar_is_rounded_in_the_golden_as_the_kernel_rounds_it():
    torch.manual_seed(0)
    exp_avg_sq, grad = torch.rand(100_000) * 1e-3, torch.randn(100_000)
    run = run_call(resolve("Tensor.addcmul_"), (exp_avg_sq, grad, grad), {"value": 0.001}, device="cpu")
    out = run.outputs[0]
    verdict = judge(out.actual, out.golden, op="Tensor.addcmul_", accumulation=out.accumulation)
    bias = next(c for c in verdict.checks if c.metric == "magnitude_bound_bias")
    assert verdict.status is Status.PASS and bias.value < 0.1 * bias.limit  # was 0.94 of the limit


def test_a_scalar_off_by_more_than_its_rounding_still_fails():
    torch.manual_seed(0)
    exp_avg_sq, grad = torch.rand(100_000) * 1e-3, torch.randn(100_000)
    op = resolve("Tensor.addcmul_")
    from dataclasses import replace
    defective = replace(op, func=lambda t, a, b, value=1: torch.Tensor.addcmul_(t, a, b, value=value * (1 + 2**-20)))
    run = run_call(defective, (exp_avg_sq, grad, grad), {"value": 0.001}, device="cpu", reference=op.func)
    out = run.outputs[0]
    assert judge(out.actual, out.golden, op="Tensor.addcmul_", accumulation=out.accumulation).status is Status.ERROR


def test_one_element_of_a_tiny_tensor_does_not_fail_the_ulp_standard():
    """torch's bfloat16 rsqrt on 16 elements takes a scalar path that errs by up to 1.14 ulp."""
    x = torch.tensor([0.3086, 0.0312, 1.1719, 0.0405, 0.5273, 2.3906, 0.0908, 0.0064, 0.2451, 0.7422, 0.0162,
                      1.6250, 0.1133, 0.0481, 3.0156, 0.4102], dtype=torch.bfloat16).reshape(2, 8, 1)
    golden = x.double().rsqrt()
    actual = golden.to(torch.bfloat16)
    actual.view(-1)[5] = torch.nextafter(actual.view(-1)[5], torch.tensor(10.0, dtype=torch.bfloat16))
    verdict = judge(actual, golden, op="Torch.rsqrt")
    assert verdict.status is Status.PASS, verdict.checks
    actual.view(-1)[6] = actual.view(-1)[6] * 1.1  # a real error in one element still fails by max_ulp_err
    assert judge(actual, golden, op="Torch.rsqrt").status is Status.ERROR


def _exp_overflow_dump(tmp_path) -> Path:
    writer = DumpWriter(tmp_path)
    x = torch.tensor([1.0, 12.0, 2.0, -3.0], dtype=torch.float16, requires_grad=True)
    y = torch.exp(x)  # exp(12) = 162755 > 65504
    grad = torch.tensor([1.0, 0.2, 1.0, 1.0], dtype=torch.float16)
    gx, = torch.autograd.grad(y, x, grad)
    writer.call("Torch.exp.0", (x.detach(),), outputs=(y.detach(),), grad_in=(grad,), grad_out=(gx,),
                grad_inputs=(0,))
    writer.load()
    return tmp_path


def test_an_overflow_downstream_of_a_fair_one_is_an_overflow_not_an_error(tmp_path):
    found = results(load_dump(_exp_overflow_dump(tmp_path) / "step0" / "rank0" / "dump.json"))
    forward = found["Torch.exp.0.forward"]  # inf where the exact result is past 65504: the dtype's limit
    assert forward.status is Status.OVERFLOW
    assert "The result leaves float16's range" in render_message(forward.outputs[0].verdict)
    backward = found["Torch.exp.0.backward"]
    assert backward.status is Status.OVERFLOW
    text = render_message(backward.outputs[0].verdict)
    assert "float16 holds at most 65504" in text and "first at [1]: device inf, golden 32" in text


def test_an_inf_without_an_upstream_overflow_is_an_error():
    golden = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    actual = golden.to(torch.float16)
    actual[1] = float("inf")
    assert judge(actual, golden, op="Torch.exp").status is Status.ERROR


def test_overflow_cases_are_counted_apart_and_selectable(pytester, tmp_path):
    dump = _exp_overflow_dump(tmp_path)
    result = pytester.runpytest("--npu-precision", str(dump), "--npu-precision-device", "cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=0)
    result.stdout.fnmatch_lines(["*overflow: step0/rank0::Torch.exp.0.forward: output.0: 1 / 4 elements inf*past*"])
    result.stdout.fnmatch_lines(["*overflow: step0/rank0::Torch.exp.0.backward: grad.input_args[[]0]: 1 / 4 elements inf*",
                                 "*2 overflow*"])
    assert result.ret == 0
    # Both cases recorded an inf (exp's output, and its gradient): the marker comes from the dump's statistics.
    selected = pytester.runpytest("--npu-precision", str(dump), "--npu-precision-device", "cpu", "-m",
                                  "not npu_overflow", "-p", "no:cacheprovider")
    selected.stdout.fnmatch_lines(["*2 deselected*"])


def test_nan_free_metrics_when_device_and_golden_agree_on_infs():
    x = torch.randn(4, 8, dtype=torch.float16)
    x[0, 0], x[1, 1] = float("inf"), float("nan")
    w = torch.randn(3, 8, dtype=torch.float16)
    run = run_call(resolve("Functional.linear"), (x, w), {}, device="cpu", backward=True, requires_grad=(0, 1))
    for out in run.outputs + run.grads:
        verdict = judge(out.actual, out.golden, op="Functional.linear", accumulation=out.accumulation)
        assert verdict.status is Status.PASS
        assert all(c.value == c.value for c in verdict.checks)  # no NaN metric


def test_a_defective_kernel_under_autocast_still_fails():
    """A bfloat16 matmul that accumulates in bfloat16: autocast's rounding of the inputs excuses nothing more."""
    from dataclasses import replace
    torch.manual_seed(1)
    x, w = torch.randn(8, 512).bfloat16(), torch.randn(16, 512)

    def bf16_accumulation(a, b, bias=None):
        products = a.to(torch.bfloat16).unsqueeze(1) * b.to(torch.bfloat16).unsqueeze(0)
        total = torch.zeros(products.shape[:2], dtype=torch.bfloat16)
        for k in range(products.shape[-1]):
            total = total + products[..., k]
        return total

    op = resolve("Functional.linear")
    run = run_call(replace(op, func=bf16_accumulation), (x, w), {}, device="cpu", reference=op.func,
                   autocast=torch.bfloat16)
    out = run.outputs[0]
    assert out.actual.dtype == torch.bfloat16
    assert judge(out.actual, out.golden, op="Functional.linear", accumulation=out.accumulation).status is Status.ERROR
    fair = run_call(op, (x, w), {}, device="cpu", autocast=torch.bfloat16).outputs[0]
    assert judge(fair.actual, fair.golden, op="Functional.linear", accumulation=fair.accumulation).status is Status.PASS
