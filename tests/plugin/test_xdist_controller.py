"""Under pytest-xdist the controller runs no case, so it never imports torch or Hypothesis (issue 19):
its workers start sooner, and its header, summary and reports still say what the workers compared."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import torch
import torch.nn.functional as F
from dump_writer import DumpWriter
from fixtures import fixture_dump

from pytest_npuprecision.backends import auto_backend
from pytest_npuprecision.checks.case_run import Settings

# Writes what the controller has imported once its reports are written, and again after its summary
# (where Hypothesis's own plugin would import Hypothesis: plugin/idle_hypothesis.py).
PROBE = '''
import sys
from pathlib import Path

import pytest

def _heavy(*names):
    return ",".join(name for name in names if name in sys.modules)

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if not hasattr(session.config, "workerinput"):
        Path("after_reports.txt").write_text(_heavy("torch", "hypothesis"))

@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    if not hasattr(config, "workerinput"):
        Path("at_exit.txt").write_text(_heavy("torch", "hypothesis"))
'''


def _parallel_run(tmp_path, *options: str, dump=None) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(PROBE)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                           "--npu-precision", str(dump or fixture_dump("mlp_tensor")), *options],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)


def test_the_controller_never_imports_torch_or_hypothesis_and_still_reports(tmp_path):
    done = _parallel_run(tmp_path, "--npu-precision-report", "report", "--junitxml", "junit.xml")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "after_reports.txt").read_text() == ""
    assert (tmp_path / "at_exit.txt").read_text() == ""

    expected = json.loads(json.dumps(Settings(device=auto_backend()).describe()))  # as JSON writes versions
    run = json.loads((tmp_path / "report" / "run.json").read_text())
    assert {key: run[key] for key in expected} == expected
    assert run["torch_threads"]["source"] in ("cores // workers", "OMP_NUM_THREADS")
    records = [json.loads(line) for line in (tmp_path / "report" / "cases.jsonl").read_text().splitlines()]
    assert len(records) == 46 and {r["status"] for r in records} == {"pass"}
    device = expected["device"]["name"]
    assert {r["device"] for r in records} == {device}
    junit = {prop.get("value") for prop in ET.parse(tmp_path / "junit.xml").iter("property")
             if prop.get("name") == "npu_precision_device"}
    assert junit == {device}

    lines = done.stdout.splitlines()
    # The header comes before any worker has loaded a backend; the summary names what they loaded.
    assert ("npu-precision: device auto (resolved by the xdist workers: see the end of the run), golden cpu float64, "
            "baseline none, seed crc32(case id) per case") in lines
    assert ("npu-precision: float32 policy as-run (--npu-precision-fp32); the device's modes: see the end of the "
            "run") in lines
    described = auto_backend().info().describe()
    assert any(line.startswith(f"npu-precision: the xdist workers ran device {described}, float32 ") for line in lines)
    if device == "cpu":
        assert any(line.startswith("npu-precision: --npu-precision-device auto found no NPU or GPU") for line in lines)


def test_the_probe_sees_a_controller_that_imports_torch(tmp_path):
    """The check above can fail: a controller that loads the backends (to check a rules file) shows torch."""
    (tmp_path / "rules.yaml").write_text("{}\n")
    done = _parallel_run(tmp_path, "--npu-precision-rules", "rules.yaml")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "after_reports.txt").read_text() == "torch"
    assert (tmp_path / "at_exit.txt").read_text() == "torch"


def test_a_workers_warning_does_not_import_torch_in_the_controller(tmp_path):
    """xdist rebuilds a worker's warning by importing its category's module: that module must not be
    the one that runs cases (it imported torch into the controller of every OpInfo dump's run)."""
    writer = DumpWriter(tmp_path / "dump")
    x = torch.randn(8).bfloat16()
    writer.call("Functional.gelu.0", (x,), outputs=(F.gelu(x).float(),))  # a float32 output no autocast explains
    writer.load()
    (tmp_path / "run").mkdir()
    done = _parallel_run(tmp_path / "run", dump=tmp_path / "dump")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "JudgedDtypeWarning: step0/rank0::Functional.gelu.0.forward" in done.stdout
    assert (tmp_path / "run" / "after_reports.txt").read_text() == ""


def test_an_option_only_loading_can_check_is_a_usage_error_before_any_worker_starts(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_tensor")), "-n", "2",
                                "--npu-precision-device", "no_such_backend", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --npu-precision-device: *no_such_backend*"])
    assert "node down" not in result.stdout.str() + result.stderr.str()


class _Payloads:
    """The case records as the reports carry them to the controller."""

    def __init__(self):
        self.records: list[dict] = []

    def pytest_runtest_logreport(self, report):
        if getattr(report, "npu_precision", None):
            self.records.append(json.loads(report.npu_precision))


def _summary(result) -> list[str]:
    lines = result.stdout.lines
    start = lines.index(next(line for line in lines if "npu-precision summary" in line)) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("=")), len(lines))
    return [line for line in lines[start:end] if not line.startswith("report written:")]


def test_passing_cases_travel_as_counts_unless_a_report_needs_them_whole(pytester):
    pytester.makefile(".yaml", rules="ops:\n  linear: {limits: {error_bound: {max_bound_ratio: 0.05}}}\n")
    common = ["--npu-precision", str(fixture_dump("mlp_tensor")), "--npu-precision-device", "cpu",
              "--npu-precision-rules", "rules.yaml", "-p", "no:cacheprovider"]
    whole, slim = _Payloads(), _Payloads()
    reported = pytester.runpytest(*common, "--npu-precision-report", "report", plugins=[whole])
    summarized = pytester.runpytest(*common, plugins=[slim])
    assert reported.ret == summarized.ret == 1
    assert _summary(summarized) == _summary(reported)
    assert {r["status"] for r in slim.records} == {"pass", "error"}
    by_id = {r["case_id"]: r for r in whole.records}
    timings = ("seconds", "op_seconds")
    for record in slim.records:
        if record["status"] == "error":
            assert sorted(record) == sorted(by_id[record["case_id"]])
            assert all(record[key] == by_id[record["case_id"]][key] for key in record if key not in timings)
        else:
            assert sorted(record) == ["case_id", "location", "order", "outputs", "status"]
            assert record["outputs"] == [{"standard": o["standard"], "status": o["status"]}
                                         for o in by_id[record["case_id"]]["outputs"]]
