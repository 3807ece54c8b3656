"""Gating under pytest-xdist: the verdicts of a serial run, and files written once, by the controller."""

from __future__ import annotations

import json

import pytest
import torch
from fixtures import FIXTURES, needs_dumps

DUMP = FIXTURES / "mlp_tensor"  # two steps, 46 cases
pytestmark = needs_dumps(DUMP)
RULES = "ops:\n  linear: {limits: {error_bound: {max_bound_ratio: 0.05}}}\n"  # the 12 linear cases fail
STALE = "step9/rank0::Functional.gone.0.forward"


def run(pytester, folder: str, *args):
    pytester.makefile(".yaml", rules=RULES)
    return pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-device", "cpu",
                              "--npu-precision-rules", "rules.yaml", "--npu-precision-report", folder,
                              "--npu-precision-html", f"{folder}/report.html", "-p", "no:cacheprovider", *args)


def summary(result) -> list[str]:
    """The npu-precision summary section alone: pytest's short summary that follows lists failures as they
    finished, which under xdist is in no fixed order."""
    lines = result.stdout.lines
    start = lines.index(next(line for line in lines if "npu-precision summary" in line)) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("=")), len(lines))
    return [line for line in lines[start:end] if line.startswith(("cases:", "outputs", "first", "worst", "known", "  "))]


def verdicts(folder) -> dict[str, tuple]:
    lines = (folder / "cases.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len({r["case_id"] for r in records}) == len(records)  # each case once
    return {r["case_id"]: (r["status"], r.get("known_failure", {}).get("outcome"),
                           [(o["name"], o["status"], o["metrics"]["max_bound_ratio"], o["profile"])
                            for o in r["outputs"]])
            for r in records}


def plant_known_failures(pytester) -> None:
    """All linear failures accepted, but one unlisted, one accepted at half its ratio (a regression), one stale."""
    run(pytester, "accept", "--npu-precision-known-failures", "kf.json", "--npu-precision-update-known-failures")
    data = json.loads((pytester.path / "kf.json").read_text())
    del data["step1/rank0::Functional.linear.0.forward"]
    data["step1/rank0::Functional.linear.1.forward"]["outputs"]["output.0"][0]["value"] /= 2
    data[STALE] = {"accepted": "2026-01-01", "reason": "", "status": "error", "outputs": {}}
    (pytester.path / "kf.json").write_text(json.dumps(data))


@pytest.fixture
def one_thread(monkeypatch):
    """Every process sums with one thread: a sum's last bits follow the thread count, and xdist's
    workers would otherwise take cores // 2 each where the serial run takes all of them."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the workers start with it, and the plugin leaves it alone
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the serial run is this process
    yield
    torch.set_num_threads(threads)


@pytest.mark.usefixtures("one_thread")
def test_a_parallel_run_has_the_verdicts_summary_and_reports_of_a_serial_run(pytester):
    plant_known_failures(pytester)
    serial = run(pytester, "serial", "--npu-precision-known-failures", "kf.json")
    parallel = run(pytester, "parallel", "--npu-precision-known-failures", "kf.json", "-n", "2")
    outcomes = serial.parseoutcomes()
    assert outcomes == {"failed": 2, "passed": 34, "xfailed": 10}, serial.stdout.str()[-3000:]
    assert parallel.parseoutcomes() == outcomes
    assert serial.ret == parallel.ret == 1
    assert summary(parallel) == summary(serial)
    assert f"  stale: {STALE}: matches no collected case" in summary(parallel)
    assert "known failures (kf.json): 1 regression, 10 xfail" in summary(parallel)
    assert verdicts(pytester.path / "parallel") == verdicts(pytester.path / "serial")
    assert len(verdicts(pytester.path / "parallel")) == 46
    for folder in ("serial", "parallel"):
        # One result CSV per step and rank (the dump has step0 and step1), as msprobe writes them.
        assert len(list((pytester.path / folder).rglob("accuracy_checking_result_*.csv"))) == 2
        assert (pytester.path / folder / "report.html").stat().st_size > 10_000


def test_a_parallel_update_writes_the_file_a_serial_update_writes(pytester):
    plant_known_failures(pytester)
    planted = (pytester.path / "kf.json").read_text()
    run(pytester, "serial", "--npu-precision-known-failures", "kf.json", "--npu-precision-update-known-failures")
    serial = (pytester.path / "kf.json").read_text()
    (pytester.path / "kf.json").write_text(planted)
    result = run(pytester, "parallel", "--npu-precision-known-failures", "kf.json",
                 "--npu-precision-update-known-failures", "-n", "2")
    result.stdout.fnmatch_lines(["*rewrote kf.json: 12 entries; 1 added, 1 changed, 0 removed as fixed, "
                                 "1 stale removed"])
    assert (pytester.path / "kf.json").read_text() == serial
    assert STALE not in serial and len(json.loads(serial)) == 12
