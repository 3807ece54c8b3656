"""--npu-precision-save-error-data: each failing case's inputs, device output, golden and baseline as .pt
files under the report folder, their folder in cases.jsonl, bounded per case and per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pytest_npuprecision.checks import error_data
from pytest_npuprecision.reports.pages.html import MAX_PLOTTED

DEFECTS = Path(__file__).resolve().parents[2] / "examples" / "dumps" / "npu_llm_defects_tensor"


def _run(pytester, *extra):
    return pytester.runpytest("--npu-precision", str(DEFECTS), "--npu-precision-device", "dumped",
                              "--npu-precision-report", "r", "-p", "no:cacheprovider", *extra)


def test_each_failing_case_keeps_its_tensors_and_its_record_says_where(pytester):
    result = _run(pytester, "--npu-precision-save-error-data", "--npu-precision-html", "report.html")
    records = [json.loads(line) for line in (pytester.path / "r" / "cases.jsonl").read_text().splitlines()]
    failing = [r for r in records if r["status"] == "error"]
    assert failing and result.ret == pytest.ExitCode.TESTS_FAILED
    assert all(r["error_data"] is None for r in records if r["status"] in ("pass", "skip"))
    for record in failing:
        saved = record["error_data"]
        assert saved["saved"], saved
        folder = Path(saved["folder"])
        assert folder.parent == (pytester.path / "r" / "error_data").resolve()
        inputs = torch.load(folder / "inputs.pt", weights_only=True)
        assert any(isinstance(a, torch.Tensor) for a in inputs["args"])
        for output in record["outputs"]:
            device = torch.load(folder / f"{output['name']}.device.pt", weights_only=True)
            golden = torch.load(folder / f"{output['name']}.golden.pt", weights_only=True)
            assert list(device.shape) == output["shape"] and golden.dtype == torch.float64
    result.stdout.fnmatch_lines([f"error data: the tensors of {len(failing)} failing cases saved under *error_data*"])
    html = (pytester.path / "report.html").read_text()
    assert html.count("error data (torch.load(path, weights_only=True))") == min(len(failing), MAX_PLOTTED)
    assert (Path(failing[0]["error_data"]["folder"]) / "inputs.pt").as_uri() in html


def test_nothing_is_saved_without_the_option_and_the_option_needs_a_report_folder(pytester):
    _run(pytester)
    assert not (pytester.path / "r" / "error_data").exists()
    result = pytester.runpytest("--npu-precision", str(DEFECTS), "--npu-precision-save-error-data")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npu-precision-save-error-data saves under the report folder*"])


def test_a_case_past_its_budget_saves_nothing_and_says_why(tmp_path, monkeypatch):
    class Out:
        name, actual, golden, baseline = "output.0", torch.zeros(1024), torch.zeros(1024, dtype=torch.float64), None

    monkeypatch.setattr(error_data, "CASE_BYTES", 4096)
    told = error_data.save_error_data(tmp_path, "d/step0/rank0::Functional.gelu.0.forward", (torch.zeros(8),), {},
                                      [Out()])
    assert not told["saved"] and told["why"].startswith("its tensors need") and told["why"].endswith("a case")
    assert not list(tmp_path.iterdir())
    monkeypatch.setattr(error_data, "CASE_BYTES", 1 << 20)
    monkeypatch.setattr(error_data, "RUN_BYTES", 20000)
    monkeypatch.setattr(error_data, "_written", [0])
    first = error_data.save_error_data(tmp_path, "a::b", (), {}, [Out()])
    second = error_data.save_error_data(tmp_path, "a::c", (), {}, [Out()])
    assert first["saved"] and not second["saved"] and "this run already saved" in second["why"]
