"""The hostile-input corpus (tests/hostile/make_corpus.py) run as a user would: no payload runs, nothing
outside the dump is opened, time and memory stay bounded, every item ends as the one outcome it names,
the good entry beside it passes, the reports list every case, and no raw escape from a dump reaches the
terminal, JUnit or a report (issues 13, 18 and 40)."""

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/, where hostile/ is
sys.path.insert(0, str(HERE / "hostile"))
import make_corpus  # noqa: E402

LIMIT_SECONDS = 300
LIMIT_RSS = 2 * 2**30


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    base = tmp_path_factory.mktemp("hostile")
    for folder in ("dumps", "outside", "markers"):
        (base / folder).mkdir()
    items = make_corpus.build(base / "dumps", base / "outside", base / "markers")
    return base, items


def _audited(base: Path, name: str) -> tuple[Path, Path, dict[str, str]]:
    """A fresh folder to run pytest in, its audit log and the environment that writes it."""
    cwd = base / f"cwd-{name}"
    cwd.mkdir()
    audit = base / f"audit-{name}.log"  # subprocess.Popen logs its executable: argv[0]
    # This checkout's package first: an editable install elsewhere would otherwise be the one tested.
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "NPU_PRECISION_AUDIT_LOG": str(audit),
           "PYTHONPATH": os.pathsep.join([str(HERE / "hostile"), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
    return cwd, audit, env


def _started(events: list[str]) -> set[str]:
    return {e.split("\t", 1)[1] for e in events if not e.startswith("open\t")}


def _started_without_the_plugin(base: Path, name: str, *options: str) -> set[str]:
    """The processes a run with the same workers starts with the plugin off: other installed plugins'
    (pytest-cov's git, ...), which are none of the harness's doing."""
    cwd, audit, env = _audited(base, f"{name}-without")
    subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "audit_plugin",
                    "-p", "no:npuprecision", *options], cwd=cwd, env=env, capture_output=True, text=True,
                   timeout=LIMIT_SECONDS, stdin=subprocess.DEVNULL)
    return _started(audit.read_text().splitlines() if audit.exists() else [])


def _run(base: Path, name: str, *options: str) -> tuple[subprocess.CompletedProcess, list[dict], list[str]]:
    cwd, audit, env = _audited(base, name)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "audit_plugin",
         f"--npu-precision={base / 'dumps'}", "--npu-precision-device", "cpu", "--npu-precision-report", "report",
         "--npu-precision-max-case-memory", "256MiB", "--junitxml", "junit.xml", "--npu-precision-html",
         "report.html", *options],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=LIMIT_SECONDS, stdin=subprocess.DEVNULL)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    assert peak < LIMIT_RSS or peak <= before * 1024, f"peak RSS {peak / 2**30:.1f} GiB"
    records = [json.loads(line) for line in (cwd / "report" / "cases.jsonl").read_text().splitlines()]
    events = audit.read_text().splitlines() if audit.exists() else []
    return result, records, events


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_every_hostile_item_ends_as_it_should_and_harms_nothing(corpus, workers):
    base, items = corpus
    name = "xdist" if workers else "serial"
    result, records, events = _run(base, name, *workers)
    assert result.returncode == pytest.ExitCode.TESTS_FAILED, result.stdout[-3000:] + result.stderr[-3000:]
    assert "INTERNALERROR" not in result.stdout + result.stderr
    # An escape in a dump's key is shown escaped: not in the terminal, not in JUnit, not in any report.
    written = [base / f"cwd-{name}" / "junit.xml", base / f"cwd-{name}" / "report.html",
               *(p for p in (base / f"cwd-{name}" / "report").rglob("*") if p.is_file())]
    assert [p.name for p in written if b"\x1b" in p.read_bytes()] == []
    assert "\x1b" not in result.stdout + result.stderr
    # No payload ran: no marker, no process started.
    assert sorted(p.name for p in (base / "markers").iterdir()) == []
    # The only processes are the harness's own (platform's `uname`, and xdist's workers) and those the
    # same run starts without the plugin.
    others = _started_without_the_plugin(base, name, *workers)
    assert _started(events) - others <= {"uname", sys.executable}
    # Nothing outside the dumps was opened: not the secret files, not the linked folders.
    outside = str(base / "outside")
    assert [e for e in events if e.startswith("open\t") and e.split("\t", 1)[1].startswith(outside)] == []
    # One record per case: a link loop multiplies nothing; no harness error anywhere.
    ids = [r["case_id"] for r in records]
    assert len(ids) == len(set(ids))
    assert [r["case_id"] for r in records if r["status"] == "harness-error"] == []
    by_item: dict[str, list[dict]] = {}
    for record in records:
        by_item.setdefault(record["case_id"].split("/", 1)[0], []).append(record)
    wrong = {}
    for item in items:
        mine = by_item.get(item.name, [])
        bad = [r for r in mine if r["key"] == item.key]
        good = [r for r in mine if r["key"] == make_corpus.GOOD_KEY]
        seen = [(r["status"], r["reason"]) for r in bad]
        if seen != [(item.status, item.reason)] or not (item.whole_file or (good and {g["status"] for g in good} ==
                                                                              {"pass"})):
            wrong[item.name] = [(r["key"], r["status"], r["reason"], r["message"][:200]) for r in mine]
        if item.status != "pass":
            assert all(r["message"] for r in bad), item.name  # every failure and skip says why
    assert wrong == {}


def test_messages_name_the_file_and_the_api(corpus):
    base, _ = corpus
    result, records, _ = _run(base, "messages")
    by_case = {r["case_id"]: r for r in records}
    truncated = by_case["truncated-pt/step0/rank0::Functional.relu.1.forward"]["message"]
    assert "Functional.relu.1.forward" in truncated and "bad.pt" in truncated and "truncated or corrupt" in truncated
    inflated = by_case["inflated-storage-pt/step0/rank0::Functional.relu.1.forward"]["message"]
    assert "far more than the float32 [8, 32] tensor that dump.json declares (1024 bytes)" in inflated
    large = by_case["shape-10-to-9/step0/rank0::Functional.relu.1.forward"]["message"]
    assert "past the budget of 256.0 MiB; raise --npu-precision-max-case-memory" in large
    fifo = by_case["fifo-dump-json/step0/rank0::dump.json"]["message"]
    assert fifo.endswith("is not a regular file; re-dump it with msprobe or remove it from the dump folder")
    system = by_case["os-system/step0/rank0::Torch.os.system.0.forward"]["message"]
    assert "not a known operator" in system
    # Issue 40: each names the file, the key and the fix, in one line, with the dump's text escaped.
    int_nan = by_case["int64-max-nan/step0/rank0::Functional.relu.1.forward"]["message"]
    assert "Functional.relu.1.forward input_args[0]" in int_nan and "dump.json says it has Max nan" in int_nan
    duplicated = by_case["duplicate-keys/step0/rank0::Functional.relu.1.forward"]["message"]
    assert "dump.json: the key 'Functional.relu.1.forward' appears 2 times" in duplicated
    assert "keep one entry under each key" in duplicated
    escaped = make_corpus.ANSI_KEY.encode("unicode_escape").decode()
    ansi = by_case[f"key-with-ansi-escape/step0/rank0::{escaped}"]["message"]
    assert f"dump.json: the key '{escaped}' holds control or unprintable characters" in ansi
    assert "re-dump the model or correct the key" in ansi
    ones = by_case["torch-ones-huge/step0/rank0::Torch.ones.0.forward"]["message"]
    assert "need about 44.7 GiB" in ones and "past the budget of 256.0 MiB" in ones
    assert all("\n" not in m and "\x1b" not in m for m in (int_nan, duplicated, ansi, ones))
