"""Offline checks: --npu-precision-device dumped judges the dump's recorded results, running nothing
on the device side. The fixture dumps were recorded on a CPU, so offline and cpu verdicts must agree."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from fixtures import dump_params, fixture_dump, judged_here

TENSOR_DUMPS = dump_params("mlp_tensor", "mlp_fp16_tensor", "transformer_tensor", "transformer_bf16_tensor")
REAL_MODELS = Path(__file__).resolve().parents[1] / "data" / "real-models"  # autocast, casts, an AdamW step, overflow
CPU_RECORDED = [*TENSOR_DUMPS, *(pytest.param(REAL_MODELS / name, id=name) for name in (
    "cnn_bn_1x1", "llama_block_bf16", "bert_autocast_bf16", "adamw_step", "fp16_overflow_mlp"))]


def run(pytester, dump: Path, device: str, *extra: str) -> dict[str, dict]:
    report = pytester.path / f"report-{device}"
    pytester.runpytest("--npu-precision", str(dump), "--npu-precision-device", device,
                       "--npu-precision-report", str(report), "-p", "no:cacheprovider", *extra)
    return {r["case_id"]: r for r in map(json.loads, (report / "cases.jsonl").read_text().splitlines())}


@pytest.mark.parametrize("dump", CPU_RECORDED)
def test_offline_verdicts_equal_cpu_verdicts_on_cpu_recorded_dumps(pytester, dump):
    path = dump if isinstance(dump, Path) else fixture_dump(dump)
    live = run(pytester, path, "cpu")
    offline = run(pytester, path, "dumped")
    assert live.keys() == offline.keys()
    live = judged_here(live)  # a case this torch's CPU has no kernel for has no live verdict to equal
    offline = {case_id: record for case_id, record in offline.items() if case_id in live}
    judged = 0
    for case_id, record in offline.items():
        if record["status"] == "skip":
            # msprobe records the gradients of the call's last autograd node; where that node's inputs are
            # computed inside the call (3-D linear's view, cross_entropy's log_softmax) nothing is an argument's.
            assert record["reason"] == "no-recorded-output", (case_id, record["message"])
            assert "computed inside the call" in record["message"] or "no" in record["message"]
            continue
        judged += 1
        assert record["status"] == live[case_id]["status"], (case_id, record["message"])
        assert [o["name"] for o in record["outputs"]] == [o["name"] for o in live[case_id]["outputs"]]
        assert record["device"].startswith("dumped (results recorded by pytorch in dump.json)")
    assert judged >= 0.75 * len(offline)


def test_a_statistics_dump_offline_is_judged_by_its_invariants(pytester):
    """Once refused (issue 42), a statistics dump is now judged by what its statistics prove (issue 55)."""
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_statistics")), "--npu-precision-device",
                                "dumped", "-p", "no:cacheprovider", "-rs")
    assert result.ret == 0
    assert any(line.startswith("outputs by standard: statistics-invariants") for line in result.outlines)
    assert "[no-invariant]" in result.stdout.str() and "linear has no invariant" in result.stdout.str()


def _copy(tmp_path: Path, dump: str) -> Path:
    target = tmp_path / dump
    shutil.copytree(fixture_dump(dump), target)
    return target


def _output_file(dump: Path, key: str) -> Path:
    document = json.loads((dump / "step0" / "rank0" / "dump.json").read_text())
    name = document["data"][key]["output"][0]["data_name"]
    return dump / "step0" / "rank0" / "dump_tensor_data" / name


@pytest.mark.parametrize("defect", ["nan", "bias", "one_element"])
def test_a_planted_defect_in_a_recorded_output_fails_offline(pytester, tmp_path, defect):
    dump = _copy(tmp_path, "mlp_tensor")
    path = _output_file(dump, "Functional.linear.1.forward")
    output = torch.load(path, weights_only=True)
    if defect == "nan":
        output.view(-1)[5] = float("nan")
    elif defect == "bias":
        output = output * (1 + 2**-12)
    else:
        output.view(-1)[5] += 0.05
    torch.save(output, path)
    offline = run(pytester, dump, "dumped")
    assert offline["step0/rank0::Functional.linear.1.forward"]["status"] == "error"
    assert offline["step0/rank0::Functional.linear.0.forward"]["status"] == "pass"


@pytest.mark.parametrize("damage, expected", [
    ("missing", "does not exist"), ("truncated", "Functional.linear.1.forward.output.0.pt"),
    ("dtype", "float64"), ("shape", "holds a float32 [2, 32] tensor but dump.json says float32 [8, 32]"),
])
def test_a_bad_recorded_output_is_that_case_s_input_error(pytester, tmp_path, damage, expected):
    dump = _copy(tmp_path, "mlp_tensor")
    path = _output_file(dump, "Functional.linear.1.forward")
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:100])
    elif damage == "dtype":
        torch.save(torch.load(path, weights_only=True).double(), path)
    else:
        torch.save(torch.load(path, weights_only=True)[:2], path)
    offline = run(pytester, dump, "dumped")
    bad = offline["step0/rank0::Functional.linear.1.forward"]
    assert bad["status"] == "input-error" and expected in bad["message"], bad["message"]
    others = [r for k, r in offline.items() if "Functional.linear.1." not in k]
    assert all(r["status"] in ("pass", "skip") for r in others)


def test_the_dumped_device_is_for_the_device_under_test_only(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_tensor")), "--npu-precision-device", "cpu",
                                "--npu-precision-baseline", "dumped")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*baseline cannot be dumped*"])


def test_the_header_says_the_device_side_is_the_dump(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_tensor")), "--npu-precision-device",
                                "dumped", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*device dumped (the results recorded in the dump, no op runs on this side; torch *"])
