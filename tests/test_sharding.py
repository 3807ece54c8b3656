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
