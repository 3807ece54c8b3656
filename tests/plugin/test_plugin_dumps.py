"""`pytest --npu-precision DUMP` end to end, on the real msprobe dumps and on broken copies of them."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest
import torch

from fixtures import fixture_dump
DUMPS = ["mlp_L0_tensor", "mlp_fp16_tensor", "mlp_statistics", "mlp_tensor", "transformer_bf16_tensor",
         "transformer_mix_statistics", "transformer_tensor"]


def records(folder: Path) -> dict[str, dict]:
    lines = (folder / "cases.jsonl").read_text().splitlines()
    return {r["case_id"]: r for r in map(json.loads, lines)}


@pytest.mark.parametrize("dump", DUMPS)
def test_every_fixture_dump_runs_on_cpu_without_harness_errors(pytester, dump):
    result = pytester.runpytest("--npu-precision", str(fixture_dump(dump)), "--npu-precision-device", "cpu",
                                "--npu-precision-report", "report", "-rs", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, result.stdout.str()[-3000:]
    cases = records(pytester.path / "report")
    assert len(cases) == sum(outcomes.get(k, 0) for k in ("passed", "skipped"))
    for record in cases.values():
        if record["status"] == "skip":
            assert record["reason"] and record["message"], record  # every skip says why
    if dump == "mlp_L0_tensor":
        assert {r["reason"] for r in cases.values()} == {"module-entry"}


def test_masked_fill_with_minus_inf_passes_where_msprobe_errs(pytester):
    """msprobe's acc_check marks this fp32 masked_fill an error; the output is bit-exact."""
    dump = fixture_dump("transformer_tensor/step0/rank0/dump.json")
    result = pytester.runpytest("--npu-precision", str(dump), "-k", "masked_fill", "--npu-precision-report", "r",
                                "--npu-precision-device", "cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    forward = records(pytester.path / "r")["step0/rank0::Tensor.masked_fill.0.forward"]
    assert forward["outputs"][0]["standard"] == "binary"
    assert forward["outputs"][0]["metrics"]["inf_actual"] > 0


def test_node_ids_keep_step_rank_and_api_name(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_tensor")), "--collect-only", "-q",
                                "-p", "no:cacheprovider")
    ids = [line for line in result.stdout.lines if "::" in line]
    assert any(i.endswith("mlp_tensor::step0/rank0::Functional.gelu.0.forward") for i in ids)
    assert any(i.endswith("mlp_tensor::step1/rank0::Functional.linear.2.backward") for i in ids)


def _ids_and_metrics(pytester, *extra) -> dict[str, float]:
    folder = f"report{len(list(pytester.path.glob('report*')))}"
    pytester.runpytest("--npu-precision", str(fixture_dump("mlp_statistics")), "--npu-precision-device", "cpu",
                       "--npu-precision-report", folder, "-p", "no:cacheprovider", *extra)
    return {cid: r["outputs"][0]["metrics"]["golden_rms"]
            for cid, r in records(pytester.path / folder).items() if r["outputs"]}


def test_statistics_inputs_are_identical_in_full_filtered_and_parallel_runs(pytester):
    full = _ids_and_metrics(pytester)
    filtered = _ids_and_metrics(pytester, "-k", "linear or gelu")
    parallel = _ids_and_metrics(pytester, "-n", "2")
    assert filtered and all(full[cid] == value for cid, value in filtered.items())
    assert parallel == full


def _copy_mlp(pytester) -> Path:
    target = pytester.path / "dump" / "step0" / "rank0"
    shutil.copytree(fixture_dump("mlp_tensor/step0/rank0"), target)
    for path in target.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    return target


def _edit_entry(folder: Path, key: str, edit) -> None:
    path = folder / "dump.json"
    data = json.loads(path.read_text())
    edit(data["data"][key])
    path.write_text(json.dumps(data))


BAD_INPUTS = {
    "missing tensor file": (
        lambda d: (d / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pt").unlink(),
        "Functional.gelu.0.forward", "failed", "Functional.gelu.0.forward.input.0.pt"),
    "truncated tensor file": (
        lambda d: (d / "dump_tensor_data" / "Functional.relu.0.forward.input.0.pt").write_bytes(
            (d / "dump_tensor_data" / "Functional.relu.0.forward.input.0.pt").read_bytes()[:100]),
        "Functional.relu.0.forward", "failed", "Functional.relu.0.forward.input.0.pt"),
    "pickle that is not a plain tensor": (
        lambda d: torch.save({"not": "a tensor", "obj": Path("x")},
                             d / "dump_tensor_data" / "Functional.layer_norm.0.forward.input.0.pt"),
        "Functional.layer_norm.0.forward", "failed", "Functional.layer_norm.0.forward.input.0.pt"),
    "data_name outside the dump": (
        lambda d: _edit_entry(d, "Functional.linear.1.forward",
                              lambda e: e["input_args"][0].update(data_name="../../../../etc/passwd")),
        "Functional.linear.1.forward", "failed", "../../../../etc/passwd"),
    "shape that disagrees with the tensor": (
        lambda d: _edit_entry(d, "Functional.linear.2.forward", lambda e: e["input_args"][0].update(shape=[3, 3])),
        "Functional.linear.2.forward", "failed", "Functional.linear.2.forward.input.0.pt"),
    "malformed entry": (
        lambda d: _edit_entry(d, "Functional.relu.0.forward", lambda e: e.update(input_args="oops")),
        "Functional.relu.0.forward", "skipped", "Functional.relu.0.forward"),
}


@pytest.mark.parametrize("problem", BAD_INPUTS)
def test_bad_input_fails_one_case_names_file_and_api_and_others_run(pytester, problem):
    folder = _copy_mlp(pytester)
    break_it, key, outcome, named = BAD_INPUTS[problem]
    break_it(folder)
    result = pytester.runpytest("--npu-precision", str(pytester.path / "dump"), "--npu-precision-report", "r",
                                "--npu-precision-device", "cpu", "-rs", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes.get(outcome, 0) >= 1 and outcomes.get("passed", 0) >= 15, result.stdout.str()[-2000:]
    text = result.stdout.str()
    assert key in text and named in text
    assert "harness error" not in text
    assert (pytester.path / "r" / "cases.jsonl").exists()  # reports are still written


def test_unknown_api_is_skipped_with_its_name(pytester):
    folder = _copy_mlp(pytester)
    path = folder / "dump.json"
    data = json.loads(path.read_text())
    data["data"]["Functional.not_a_real_op.0.forward"] = data["data"]["Functional.relu.0.forward"]
    path.write_text(json.dumps(data))
    result = pytester.runpytest("--npu-precision", str(path), "-rs", "-p", "no:cacheprovider", "-k", "not_a_real")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*unsupported-op*Functional.not_a_real_op*"])


def test_malformed_dump_json_is_one_failing_item_and_other_dumps_run(pytester):
    _copy_mlp(pytester)
    broken = pytester.path / "dump" / "step1" / "rank0"
    broken.mkdir(parents=True)
    (broken / "dump.json").write_text('{"task": "tensor", "data": ')
    result = pytester.runpytest("--npu-precision", str(pytester.path / "dump"), "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["passed"] >= 15
    result.stdout.fnmatch_lines(["*step1/rank0/dump.json*"])


def test_a_failing_case_says_by_how_much_and_how_to_rerun_it(pytester):
    """Limits nobody can meet make every float case fail: the message and summary are what users see."""
    pytester.makefile(".yaml", strict="standards:\n  error_bound: {max_bound_ratio: 1.0e-9}\n")
    dump = fixture_dump("mlp_tensor/step0/rank0/dump.json")
    result = pytester.runpytest("--npu-precision", str(dump), "--npu-precision-rules", "strict.yaml",
                                "-k", "linear.0.forward", "--npu-precision-device", "cpu", "-p", "no:cacheprovider")
    assert result.ret == 1
    text = result.stdout.str()
    assert "output.0: Functional.linear.0.forward [float32, 8x32]: error by the error_bound standard" in text
    assert "max_bound_ratio = " in text and "> limit 1e-09  [error]" in text
    assert "case step0/rank0::Functional.linear.0.forward, seed " in text
    rerun = next(line for line in result.stdout.lines if line.startswith("rerun: pytest --npu-precision"))
    assert rerun == (f"rerun: pytest --npu-precision {dump.resolve()} --npu-precision-device cpu --npu-precision-rules "
                     f"{pytester.path / 'strict.yaml'} --npu-precision-case step0/rank0::Functional.linear.0.forward")
    pytester.mkdir("elsewhere")
    os.chdir(pytester.path / "elsewhere")  # the command works from any directory
    again = pytester.runpytest(*shlex.split(rerun.removeprefix("rerun: pytest ")), "-p", "no:cacheprovider")
    again.assert_outcomes(failed=1)  # the command reruns exactly that case, with its rules
    result.stdout.fnmatch_lines(["*first failing API in step0/rank0: Functional.linear.0.forward (max_bound_ratio*"])


def test_bad_options_are_usage_errors(pytester):
    result = pytester.runpytest("--npu-precision", "no/such/dump")
    result.stderr.fnmatch_lines(["*--npu-precision 'no/such/dump' does not exist: give a dump.json or a dump folder*"])
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_tensor")), "--npu-precision-device", "gpu0")
    result.stderr.fnmatch_lines(["*--npu-precision-device: 'gpu0' is not a device or backend (did you mean cuda:0?): "
                                 "use auto, dumped, cpu, cuda[[]:N], npu[[]:N], module:object, or an installed backend*"])
