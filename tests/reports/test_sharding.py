"""A dump's cases split across CI jobs with pytest-split: the shards together run exactly the cases
that one run does, each once."""

from __future__ import annotations

import json

import pytest

from fixtures import fixture_dump

pytest.importorskip("pytest_split", reason="pytest-split is not installed (pip install -e '.[test]')")


def _case_ids(pytester, *options: str) -> list[str]:
    report = pytester.path / f"report{len(list(pytester.path.iterdir()))}"
    result = pytester.runpytest("--npu-precision", str(fixture_dump("transformer_tensor")), "--npu-precision-device",
                                "cpu", "--npu-precision-report", str(report), "-p", "no:cacheprovider", *options)
    assert result.ret == 0
    return [json.loads(line)["case_id"] for line in (report / "cases.jsonl").read_text().splitlines()]


def test_two_shards_run_exactly_the_cases_of_one_run(pytester):
    whole = _case_ids(pytester)
    first = _case_ids(pytester, "--splits", "2", "--group", "1")
    second = _case_ids(pytester, "--splits", "2", "--group", "2")
    assert first and second
    assert sorted(first + second) == sorted(whole)
    assert not set(first) & set(second)


def _shard(pytester, dump, report, *options: str):
    return pytester.runpytest("--npu-precision", str(dump), "--npu-precision-device", "dumped",
                              "--npu-precision-report", str(report), "-p", "no:cacheprovider", *options)


def test_the_shards_reports_merge_into_one_report_and_one_gate(pytester, tmp_path):
    from planted_dumps import forward_dump

    from pytest_npuprecision.reports.merge import main, merge

    dump = forward_dump(tmp_path / "planted", planted=True)
    known = tmp_path / "known.json"
    whole = _shard(pytester, dump, tmp_path / "whole", "--npu-precision-known-failures", str(known),
                   "--npu-precision-update-known-failures")
    accepted = json.loads(known.read_text())
    assert accepted and whole.ret == 1
    for group in ("1", "2"):
        _shard(pytester, dump, tmp_path / group, "--splits", "2", "--group", group)
    shards = [tmp_path / "1", tmp_path / "2"]

    lines, status = merge(tmp_path / "merged", shards)
    one = [json.loads(line) for line in (tmp_path / "whole" / "cases.jsonl").read_text().splitlines()]
    merged = [json.loads(line) for line in (tmp_path / "merged" / "cases.jsonl").read_text().splitlines()]
    assert sorted(r["case_id"] for r in merged) == sorted(r["case_id"] for r in one)
    assert status == 1 and lines[0] == f"merged: {len(one)} cases from 2 shard report folders"
    errors = sum(r["status"] == "error" for r in one)
    assert any(line.startswith(f"cases: {errors} error, ") for line in lines)
    assert (tmp_path / "merged" / "precision.html").is_file() and list((tmp_path / "merged").rglob("accuracy_checking_*.csv"))
    assert json.loads((tmp_path / "merged" / "run.json").read_text())["merged_shards"][1]["folder"] == str(shards[1])

    gated, status = merge(tmp_path / "gated", shards, known_failures=known)
    assert status == 0, gated
    assert any(line.startswith(f"known failures ({known}): {len(accepted)} xfail") for line in gated)

    known.write_text(json.dumps({**accepted, "step0/rank0::Functional.gone.0.forward": next(iter(accepted.values()))}))
    assert main([str(tmp_path / "stale"), *map(str, shards), "--known-failures", str(known)]) == 1
    assert main([str(tmp_path / "bad"), str(tmp_path / "no-such-shard")]) == 4
