"""The Ascend-style example dumps, checked offline with torch_npu absent: every NPU.* case is judged
against its float64 reference, the fair stand-ins pass, and the four planted defects fail."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fixtures import made_with_this_torch
from npu_llm_example import PLANTED

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dumps"


def offline(pytester, name: str) -> dict[str, dict]:
    report = pytester.path / name
    pytester.runpytest("--npu-precision", str(EXAMPLES / name), "--npu-precision-device", "dumped",
                       "--npu-precision-report", str(report), "-p", "no:cacheprovider")
    return {r["key"]: r for r in map(json.loads, (report / "cases.jsonl").read_text().splitlines())}


def test_torch_npu_is_absent_here():
    assert importlib.util.find_spec("torch_npu") is None


def test_every_npu_case_of_the_fair_dump_is_judged_and_passes(pytester):
    records = offline(pytester, "npu_llm_tensor")
    npu = {k: r for k, r in records.items() if k.startswith("NPU.")}
    assert len(npu) == 14
    assert {r["status"] for r in npu.values()} == {"pass"}, {k: r["message"] for k, r in npu.items()}
    assert all(r["outputs"] for r in npu.values())
    # The other entries were recorded by this example's recorder, whose backward records the arguments'
    # gradients rather than msprobe's node gradients: some cannot be placed, and say so.
    assert {r["status"] for r in records.values()} <= {"pass", "skip"}
    assert all(r["reason"] == "no-recorded-output" for r in records.values() if r["status"] == "skip")


def test_the_planted_defects_fail_and_nothing_else_does(pytester):
    records = offline(pytester, "npu_llm_defects_tensor")
    failed = {k for k, r in records.items() if r["status"] == "error"}
    assert PLANTED <= failed
    # Backward cases downstream of a planted defect fail too (the NaN reaches swiglu's gradient, and
    # the flipped rotary's gradient is flipped as well); every other case passes.
    assert failed - PLANTED <= {"NPU.npu_swiglu.0.backward", "NPU.npu_rotary_mul.0.backward",
                                "NPU.npu_rotary_mul.1.backward"}
    assert all(records[k]["status"] in ("pass", "skip") for k in records.keys() - failed)
    saturated = records["NPU.npu_linear.0.forward"]["outputs"][0]
    assert saturated["metrics"]["nonfinite_mismatch"] > 0


def test_attention_summed_in_bfloat16_does_not_hide_in_the_second_look(pytester, monkeypatch):
    # Its float32 softmax statistics come from bfloat16 scores: rounding the bfloat16 inputs moves
    # them by about as much as summing 8 terms in bfloat16 does. Only elements the op amplifies
    # rounding into (AMPLIFIED times the inputs' roundoff) may be excused, and these are not.
    key = "NPU.npu_fusion_attention.0.forward"
    assert offline(pytester, "npu_llm_defects_tensor")[key]["status"] == "error"
    from pytest_npuprecision.replay import perturbed

    monkeypatch.setattr(perturbed, "AMPLIFIED", 0.0)
    loose = offline(pytester, "npu_llm_defects_tensor")[key]
    assert loose["status"] == "pass" and any(o["excused"] for o in loose["outputs"])


def test_the_references_are_the_golden_of_npu_ops_without_torch_npu():
    from pytest_npuprecision.ops.resolution import resolve

    op = resolve("NPU.npu_fusion_attention")
    assert op.func is None and op.reference is not None
    assert "--npu-precision-device dumped" in op.unsupported


@made_with_this_torch()
@pytest.mark.parametrize("name", ["npu_llm_tensor", "npu_llm_defects_tensor"])
def test_the_example_generator_reproduces_the_shipped_dumps(tmp_path, name):
    # A subprocess, as a user runs it: the optimizer imports torch._dynamo, which must not share a worker.
    done = subprocess.run([sys.executable, str(EXAMPLES.parent / "make_npu_llm_dump.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    shipped = json.loads((EXAMPLES / name / "step0" / "rank0" / "dump.json").read_text())
    made = json.loads((tmp_path / name / "step0" / "rank0" / "dump.json").read_text())
    assert made["data"] == shipped["data"]
