"""Float32 math modes (TF32, HF32): a fair kernel in a reduced mode passes as run and fails as IEEE,
naming the mode; a defect on top fails both ways; every reader of a device's mode says what its
switches say; the run's header, run.json and cases.jsonl carry the mode."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from reduced_float32 import ReducedFloat32Cpu

from pytest_npuprecision import Backend, check_call
from pytest_npuprecision.backends import DumpedOutputs
from pytest_npuprecision.backends.cuda import process_modes
from pytest_npuprecision.backends.npu import hf32_modes, hf32_off
from pytest_npuprecision.common.math_modes import IEEE, Float32Modes, declared_modes, round_mantissa
from pytest_npuprecision.ops.catalogue import op_record
from pytest_npuprecision.precision.verdict import Status

REPO = Path(__file__).resolve().parents[2]
CNN_DUMP = REPO / "examples" / "cnn_float32_tensor"


def _calls():
    generator = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=generator)

    return {
        "conv2d": (F.conv2d, (randn(2, 32, 8, 8), randn(64, 32, 3, 3) * 0.05), {"padding": 1}),
        "conv2d on ReLU outputs": (F.conv2d, (randn(2, 32, 8, 8).relu(), randn(64, 32, 3, 3).abs() * 0.05),
                                   {"padding": 1}),
        "linear": (F.linear, (randn(16, 256), randn(128, 256) * 0.05, randn(128)), {}),
        "matmul of positives": (torch.matmul, (torch.rand(32, 512, generator=generator),
                                               torch.rand(512, 64, generator=generator)), {}),
    }


CALLS = _calls()


def _check(name, device, float32="as-run"):
    op, args, kwargs = CALLS[name]
    return check_call(op, *args, device=device, backward=True, float32=float32, **kwargs)


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("mode", ["tf32", "hf32"])
def test_a_fair_reduced_mode_kernel_passes_as_run_forward_and_backward(name, mode):
    verdict = _check(name, ReducedFloat32Cpu(mode))
    assert verdict.status is Status.PASS, verdict.message()
    for _, output in verdict.outputs:
        assert output.metrics.max_bound_ratio < 2.5 and output.metrics.mean_bound_ratio < 0.5
        assert any(f"in {mode.upper()}" in note and "against float32's own bound it would fail" in note
                   for note in output.notes)


@pytest.mark.parametrize("name", CALLS)
def test_the_same_kernel_fails_as_ieee_naming_the_mode_and_its_switch(name):
    verdict = _check(name, ReducedFloat32Cpu("tf32"), float32="ieee")
    assert all(output.status is Status.ERROR for _, output in verdict.outputs), verdict.message()
    message = verdict.message()
    assert "the device ran this float32 op in TF32" in message
    assert "Turn it off in training with `ReducedFloat32Cpu(...).pin_ieee_float32()`" in message
    assert "--npu-precision-fp32 as-run" in message


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("error", [0.01, 0.001])
@pytest.mark.parametrize("float32", ["as-run", "ieee"])
def test_a_defect_on_top_of_tf32_fails_either_way(name, error, float32):
    verdict = _check(name, ReducedFloat32Cpu("tf32", error=error), float32=float32)
    assert all(output.status is Status.ERROR for _, output in verdict.outputs), verdict.message()


def test_an_ieee_kernel_passes_either_way_and_no_mode_is_noted():
    for float32 in ("as-run", "ieee"):
        verdict = _check("conv2d", "cpu", float32=float32)
        assert verdict.status is Status.PASS
        assert not any("TF32" in note for _, output in verdict.outputs for note in output.notes)


def test_half_outputs_and_other_ops_are_not_widened():
    """TF32 rounds float32 inputs only: a float16 matmul, or a float32 add, keeps its own bound."""
    device = ReducedFloat32Cpu("tf32")
    a, b = torch.randn(16, 64, dtype=torch.float16), torch.randn(64, 8, dtype=torch.float16)
    verdict = check_call(torch.matmul, a, b, device=device)
    assert verdict.status is Status.PASS and not any("TF32" in n for _, v in verdict.outputs for n in v.notes)
    assert op_record("add").math_family is None and op_record("conv_transpose2d").math_family == "conv"
    assert op_record("lstm").math_family == "rnn"


def test_round_mantissa_rounds_to_nearest_ties_to_even_and_keeps_inf_and_nan():
    ulp = 2.0**-10
    x = torch.tensor([1 + ulp / 2 + ulp / 8, 1 + ulp / 2, 1 + 3 * ulp / 2, -(1 + ulp / 2 + ulp / 8),
                      float("inf"), float("nan"), 3.0e-39])
    got = round_mantissa(x, 10)
    assert got[:4].tolist() == [1 + ulp, 1.0, 1 + 2 * ulp, -(1 + ulp)]
    assert got[4] == float("inf") and got[5].isnan() and got[6] > 0
    assert round_mantissa(x, 23) is x


# ---------------------------------------------------------------- reading a device's modes


@pytest.fixture
def cuda_switches():
    """torch.backends' TF32 switches, put back as they were (they exist on CPU builds too)."""
    modules = [torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn]
    saved = [m.fp32_precision for m in modules]
    yield modules
    for module, value in zip(modules, saved):
        module.fp32_precision = value


@pytest.mark.skipif(not hasattr(torch.backends.cudnn, "conv"), reason="torch before 2.9 has no fp32_precision")
def test_the_cuda_reader_follows_each_switch(cuda_switches):
    matmul, conv, rnn = cuda_switches
    matmul.fp32_precision, conv.fp32_precision, rnn.fp32_precision = "ieee", "tf32", "ieee"
    modes = process_modes()
    assert (modes.matmul, modes.conv.name, modes.rnn) == (IEEE, "tf32", IEEE)
    assert modes.conv.switch_off == "torch.backends.cudnn.conv.fp32_precision = 'ieee'"
    matmul.fp32_precision = "tf32"
    assert process_modes().matmul.name == "tf32"
    conv.fp32_precision = "ieee"
    assert process_modes().describe() == "float32 matmul tf32, conv ieee, rnn ieee"


def test_the_cuda_reader_reads_the_legacy_flags_on_older_torch(monkeypatch):
    from pytest_npuprecision.backends import cuda

    monkeypatch.setattr(cuda, "_has_fp32_precision", lambda: False)
    monkeypatch.setattr(cuda.torch.backends, "cuda", types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=False)))
    monkeypatch.setattr(cuda.torch.backends, "cudnn", types.SimpleNamespace(allow_tf32=True))
    modes = cuda.process_modes()
    assert (modes.matmul, modes.conv.name, modes.rnn.name) == (IEEE, "tf32", "tf32")
    assert modes.conv.switch_off == "torch.backends.cudnn.allow_tf32 = False"


def test_the_npu_reader_follows_torch_npus_hf32_switches():
    npu = types.SimpleNamespace(matmul=types.SimpleNamespace(allow_hf32=False),
                                conv=types.SimpleNamespace(allow_hf32=True))
    modes = hf32_modes(npu)
    assert (modes.matmul, modes.conv.name, modes.conv.mantissa_bits) == (IEEE, "hf32", 11)
    assert modes.conv.switch_off == "torch.npu.conv.allow_hf32 = False"
    with hf32_off(npu):
        assert not hf32_modes(npu).reduced
    assert npu.conv.allow_hf32 is True
    npu.matmul.allow_hf32 = True
    assert hf32_modes(npu).describe() == "float32 matmul hf32, conv hf32, rnn ieee"
    # An older torch_npu without the switches: its documented defaults (HF32 for convolutions only).
    assert hf32_modes(types.SimpleNamespace()).describe() == "float32 matmul ieee, conv hf32, rnn ieee"


@pytest.mark.skipif(not hasattr(torch.backends.mkldnn, "matmul"), reason="torch before 2.9 has no mkldnn fp32_precision")
def test_the_cpu_reports_onednn_bfloat16_and_pins_it_off():
    switch = torch.backends.mkldnn.matmul
    saved, switch.fp32_precision = switch.fp32_precision, "bf16"  # as set_float32_matmul_precision("medium")
    try:
        cpu = Backend("cpu")
        assert cpu.float32_modes().matmul.name == "bfloat16"
        cpu.pin_ieee_float32()
        assert not cpu.float32_modes().reduced
        with cpu.running(0):
            assert switch.fp32_precision == "ieee"
        assert switch.fp32_precision == "bf16"
    finally:
        switch.fp32_precision = saved


def test_declared_modes_take_families_or_a_cann_precision_mode():
    assert declared_modes("conv=hf32").describe() == "float32 matmul ieee, conv hf32, rnn ieee"
    assert declared_modes("allow_fp32_to_fp16").describe() == "float32 matmul float16, conv float16, rnn ieee"
    assert declared_modes("must_keep_origin_dtype") == Float32Modes()
    for bad in ("conv=fp19", "attention=tf32", "conv", ""):
        with pytest.raises(ValueError, match="FAMILY=MODE|names no family"):
            declared_modes(bad)


def test_a_backend_that_cannot_pin_ieee_says_so():
    with pytest.raises(Exception, match="cannot be pinned"):
        DumpedOutputs().pin_ieee_float32()
    device = ReducedFloat32Cpu("hf32")
    device.pin_ieee_float32()
    assert _check("linear", device, float32="ieee").status is Status.PASS


# ---------------------------------------------------------------- a dump, end to end


@pytest.fixture
def emulating(pytester, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "tests"))
    return "reduced_float32:ReducedFloat32Cpu"


def test_a_float32_conv_dump_on_a_tf32_device_passes_as_run_and_says_so(pytester, emulating):
    result = pytester.runpytest("--npu-precision", str(CNN_DUMP), "--npu-precision-device", emulating,
                                "--npu-precision-report", "r", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["npu-precision: device tf32-emulating cpu (*), golden cpu float64, *",
                                 "npu-precision: float32 matmul tf32, conv tf32, rnn ieee on the device; policy as-run *",
                                 "float32 math modes: 20 in tf32 *"])
    run = json.loads((pytester.path / "r" / "run.json").read_text())
    assert run["float32"] == {"policy": "as-run",
                              "device_modes": {"matmul": "tf32", "conv": "tf32", "rnn": "ieee", "known": True}}
    records = [json.loads(line) for line in (pytester.path / "r" / "cases.jsonl").read_text().splitlines()]
    modes = {r["key"]: r["float32_mode"] for r in records}
    assert modes["Functional.conv2d.0.forward"] == modes["Functional.linear.0.backward"] == "tf32"
    assert modes["Functional.batch_norm.0.forward"] is None


def test_the_same_dump_fails_every_conv_as_ieee_and_the_message_names_tf32(pytester, emulating):
    result = pytester.runpytest("--npu-precision", str(CNN_DUMP), "--npu-precision-device", emulating,
                                "--npu-precision-fp32", "ieee", "-k", "conv2d", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 18 and "passed" not in outcomes, result.stdout.str()
    result.stdout.fnmatch_lines(["*the device ran this float32 op in TF32*"])


def test_run_ieee_pins_the_device_and_every_case_passes(pytester, emulating):
    result = pytester.runpytest("--npu-precision", str(CNN_DUMP), "--npu-precision-device", emulating,
                                "--npu-precision-fp32", "run-ieee", "-k", "conv2d", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] == 18 and "failed" not in outcomes, result.stdout.str()
    result.stdout.fnmatch_lines(["npu-precision: device tf32-emulating cpu (*)*",
                                 "npu-precision: float32 ieee on the device; policy run-ieee *"])


def test_an_offline_check_says_no_mode_was_recorded_until_told(pytester):
    common = ("--npu-precision", str(CNN_DUMP), "--npu-precision-device", "dumped", "-k", "conv2d.0.forward",
              "--npu-precision-report", "r", "-p", "no:cacheprovider")
    result = pytester.runpytest(*common)
    result.stdout.fnmatch_lines(["npu-precision: float32 modes not recorded, taken as ieee; policy as-run *",
                                 "float32 math modes: 1 float32 matmul, conv or rnn cases with no recorded mode*"])
    told = pytester.runpytest(*common, "--npu-precision-fp32-modes", "conv=hf32")
    told.stdout.fnmatch_lines(["npu-precision: float32 matmul ieee, conv hf32, rnn ieee on the device; policy as-run *"])
    record = json.loads((pytester.path / "r" / "cases.jsonl").read_text().splitlines()[0])
    assert record["float32_mode"] == "hf32" and record["status"] == "pass"


def test_bad_mode_options_are_usage_errors(pytester):
    result = pytester.runpytest("--npu-precision", str(CNN_DUMP), "--npu-precision-fp32-modes", "conv=fp19")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*conv=fp19*FAMILY=MODE*"])
    result = pytester.runpytest("--npu-precision", str(CNN_DUMP), "--npu-precision-device", "dumped",
                                "--npu-precision-fp32", "run-ieee", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*run-ieee*cannot be pinned*"])


def test_an_ieee_baseline_does_not_judge_a_tf32_kernel_but_its_own_standard_still_does():
    """A cpu (or TF32-off cuda) baseline errs as an IEEE kernel: the benchmark ratios would fail every
    fair TF32 call, so the op's own standard judges it, at TF32's rounding, and a defect still fails."""
    op, args, kwargs = CALLS["conv2d"]
    fair = check_call(op, *args, device=ReducedFloat32Cpu("tf32"), baseline="cpu", backward=True, **kwargs)
    assert fair.status is Status.PASS, fair.message()
    assert all(not output.standard.startswith("benchmark") for _, output in fair.outputs)
    assert any("the baseline is not compared" in note for _, output in fair.outputs for note in output.notes)
    broken = check_call(op, *args, device=ReducedFloat32Cpu("tf32", error=0.001), baseline="cpu", backward=True,
                        **kwargs)
    assert all(output.status is Status.ERROR for _, output in broken.outputs)
    ieee = check_call(op, *args, device=ReducedFloat32Cpu("tf32"), baseline="cpu", float32="ieee", **kwargs)
    assert ieee.status is Status.ERROR and ieee.outputs[0][1].standard.startswith("benchmark")


OP_CASE = """
defaults:
  dtypes: [float32]
  backward: true
cases:
  - op: Functional.linear
    dims: {M: [8, 16], K: [64, 128], N: [16, 32]}
    inputs:
      - shape: [M, K]
      - shape: [N, K]
      - shape: [N]
"""


@pytest.mark.parametrize("float32, outcome", [("as-run", "passed"), ("ieee", "failed"), ("run-ieee", "passed")])
def test_op_cases_are_judged_by_the_same_policy(pytester, emulating, float32, outcome):
    pytester.makefile(".yaml", **{"op_cases/linear": OP_CASE})
    result = pytester.runpytest("op_cases", "--npu-precision-device", emulating, "--npu-precision-fp32", float32,
                                "--npu-precision-regressions", "none", "-p", "no:cacheprovider")
    assert result.parseoutcomes().get(outcome) == 1, result.stdout.str()
    if outcome == "failed":
        result.stdout.fnmatch_lines(["*the device ran this float32 op in TF32*"])
