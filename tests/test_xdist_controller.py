"""Under pytest-xdist the controller runs no case, so it never imports torch or Hypothesis (issue 19):
its workers start sooner, and its header, summary and reports still say what the workers compared."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from fixtures import fixture_dump
from pytest_npuprecision.backends import auto_backend
from pytest_npuprecision.cases import Settings

# Writes what the controller has imported once its reports are written, and again as it ends.
# Hypothesis's own pytest plugin imports Hypothesis in its terminal summary of every run, after
# sessionfinish; so the last look is for torch alone.
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
        Path("at_exit.txt").write_text(_heavy("torch"))
'''


def _parallel_run(tmp_path, *options: str) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(PROBE)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                           "--npu-precision", str(fixture_dump("mlp_tensor")), *options],
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
    assert ("npu-precision: device auto (resolved by the xdist workers: see the end of the run), golden cpu "
            "float64, baseline none, seed crc32(case id) per case") in lines
    described = auto_backend().info().describe()
    assert f"npu-precision: the xdist workers ran device {described}" in lines
    if device == "cpu":
        assert any(line.startswith("npu-precision: --npu-precision-device auto found no NPU or GPU") for line in lines)


def test_the_probe_sees_a_controller_that_imports_torch(tmp_path):
    """The check above can fail: a controller that loads the backends (to check a rules file) shows torch."""
    (tmp_path / "rules.yaml").write_text("{}\n")
    done = _parallel_run(tmp_path, "--npu-precision-rules", "rules.yaml")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "after_reports.txt").read_text() == "torch"
    assert (tmp_path / "at_exit.txt").read_text() == "torch"


def test_an_option_only_loading_can_check_is_a_usage_error_before_any_worker_starts(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_tensor")), "-n", "2",
                                "--npu-precision-device", "no_such_backend", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --npu-precision-device: *no_such_backend*"])
    assert "node down" not in result.stdout.str() + result.stderr.str()
