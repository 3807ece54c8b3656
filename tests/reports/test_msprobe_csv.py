"""msprobe's result and details CSVs: one pair per dump, step and rank, one row per call, none lost.

msprobe's readers key rows by API name alone (api_precision_compare refuses a name listed twice), so
ranks and steps that share call names must not share a file (issue 42: a failing rank read as clean).
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dumps"
FAILING = {"error", "input-error", "harness-error", "overflow"}


@pytest.fixture
def ranks(pytester) -> Path:
    """Two dumps; one of them two steps of two ranks, where the planted defects sit on one rank per step."""
    root = pytester.path / "dumps"
    for place, example in (("step0/rank0", "npu_llm_defects_tensor"), ("step0/rank1", "npu_llm_tensor"),
                           ("step1/rank0", "npu_llm_tensor"), ("step1/rank1", "npu_llm_defects_tensor")):
        shutil.copytree(EXAMPLES / example / "step0" / "rank0", root / "llm" / place)
    shutil.copytree(EXAMPLES / "mlp_tensor", root / "mlp")
    return root


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        return list(csv.DictReader(handle))


def test_each_step_and_rank_keeps_its_failures_in_its_own_csvs(pytester, ranks):
    result = pytester.runpytest("--npu-precision", "dumps", "--npu-precision-device", "dumped",
                                "--npu-precision-report", "report", "-p", "no:cacheprovider")
    report = pytester.path / "report"
    records = [json.loads(line) for line in (report / "cases.jsonl").read_text().splitlines()]
    expected = {(r["location"], r["api"], r["direction"]) for r in records if r["status"] in FAILING}
    assert {location for location, _, _ in expected} == {"llm/step0/rank0", "llm/step1/rank1"}
    assert len(expected) == result.parseoutcomes()["failed"] == 16

    found, details = set(), 0
    for location in ("llm/step0/rank0", "llm/step0/rank1", "llm/step1/rank0", "llm/step1/rank1", "mlp/step0/rank0"):
        [result_csv] = (report / "msprobe" / location).glob("accuracy_checking_result_*.csv")
        rows = _rows(result_csv)
        assert len({row["API name"] for row in rows}) == len(rows)  # a name once per file, as msprobe reads it
        for row in rows:
            for direction, column in (("forward", "Forward Test Success"), ("backward", "Backward Test Success")):
                if row[column] not in ("pass", "warning", "SKIP", " "):
                    found.add((location, row["API name"], direction))
        names = [row["API Name"] for row in _rows(result_csv.with_name(result_csv.name.replace("result", "details")))]
        assert len(set(names)) == len(names)
        details += len(names)
    assert found == expected
    assert details == sum(len(r["outputs"]) or 1 for r in records)  # a skipped call has its reason's row
    listed = json.loads((report / "run.json").read_text())["msprobe_csv_files"]
    assert sorted(p.relative_to(report).as_posix() for p in report.rglob("*.csv")) == sorted(listed)


def test_a_report_folder_holds_one_run(pytester, ranks):
    """The previous run's CSVs go (they would sit beside a run.json that no longer describes them); yours stay."""
    report = pytester.path / "report"
    old = report / "msprobe" / "llm" / "step0" / "rank0" / "accuracy_checking_result_20200101000000.csv"
    old.parent.mkdir(parents=True)
    old.write_text("API name\n")
    mine = report / "accuracy_checking_result_notes.csv"
    mine.write_text("kept\n")
    (report / "run.json").write_text(json.dumps({"msprobe_csv_files": [old.relative_to(report).as_posix(),
                                                                       "../outside.csv"]}))
    (pytester.path / "outside.csv").write_text("kept\n")
    pytester.runpytest("--npu-precision", "dumps/mlp", "--npu-precision-device", "cpu",
                       "--npu-precision-report", "report", "-p", "no:cacheprovider")
    assert not old.exists()
    assert mine.exists() and (pytester.path / "outside.csv").exists()
    listed = json.loads((report / "run.json").read_text())["msprobe_csv_files"]
    assert sorted(p.relative_to(report).as_posix() for p in report.rglob("accuracy_checking_*_2*.csv")) == sorted(listed)


def test_a_skipped_call_has_a_details_row_with_its_reason_as_acc_check_writes_it(pytester, ranks):
    pytester.runpytest("--npu-precision", "dumps/llm/step0/rank1", "--npu-precision-device", "cpu",
                       "--npu-precision-report", "report", "-p", "no:cacheprovider")
    report = pytester.path / "report"
    records = {f"{r['api']}.{r['direction']}": r for r in
               (json.loads(line) for line in (report / "cases.jsonl").read_text().splitlines())}
    skipped = {name for name, r in records.items() if r["status"] == "skip"}
    assert skipped  # the NPU fused ops without torch_npu
    [details] = report.rglob("accuracy_checking_details_*.csv")
    rows = {row["API Name"]: row for row in _rows(details)}
    for name in skipped:
        row = rows[f"{name}.output.0"]
        assert (row["Status"], row["DEVICE Dtype"], row["余弦相似度"]) == ("SKIP", " ", " ")
        assert row["Message"] == " ".join(records[name]["message"].split())[:500] and row["Message"]
