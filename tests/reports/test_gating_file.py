"""The known-failures file and its rules, without pytest: the margin rule, the update, the round trip."""

from __future__ import annotations

import math

import pytest

from pytest_npuprecision.reports.known_failures import (
    AcceptedCheck, KnownFailure, dump, entry_from_record, load, regressions, updated,
)
from pytest_npuprecision.reports.summary import excess


@pytest.mark.parametrize("value, limit, upper, expected", [
    (40.0, 8.0, True, 5.0),  # a maximum: value / limit
    (3, 0, True, 4),  # a count that must be 0: one more than the count, so that any count is past 1
    (0, 0, True, 0),
    (0.99, 0.999, False, 10.0),  # a minimum share: 1 % bad where 0.1 % is allowed
    (math.nan, 1.0, True, math.inf),  # a metric that broke down is infinitely far
])
def test_excess_grows_as_a_check_gets_worse(value, limit, upper, expected):
    assert excess(value, limit, upper) == pytest.approx(expected)


def record(case_id: str, status: str, checks=()) -> dict:
    return {"case_id": case_id, "status": status, "message": "",
            "outputs": [{"name": "output.0", "status": status, "checks": list(checks)}] if checks else []}


def check(metric: str, value: float, limit: float, upper: bool = True, status: str = "error") -> dict:
    return {"metric": metric, "value": value, "limit": limit, "upper": upper, "status": status}


def accepted(case_id: str, *checks: AcceptedCheck, status: str = "error", reason: str = "") -> KnownFailure:
    return KnownFailure(case_id, reason, status, "2026-01-01", {"output.0": checks} if checks else {})


def test_a_minimum_share_regresses_by_its_share_of_bad_elements():
    entry = accepted("c", AcceptedCheck("thousandth_ratio", 0.99, 0.999))
    assert not regressions(entry, record("c", "error", [check("thousandth_ratio", 0.9895, 0.999, False)]), 0.1)
    [worse] = regressions(entry, record("c", "error", [check("thousandth_ratio", 0.985, 0.999, False)]), 0.1)
    assert worse == ("output.0: thousandth_ratio = 0.985 (limit 0.999) is 1.5x as far past its limit as accepted "
                     "(0.99, limit 0.999); the margin is 10%")


def test_warnings_count_as_failing_checks_only_when_strict():
    entry = accepted("c", AcceptedCheck("max_bound_ratio", 20, 8))
    now = record("c", "error", [check("max_bound_ratio", 20, 8), check("mean_bound_ratio", 0.9, 1, status="warning")])
    assert regressions(entry, now, 0.1) == []
    assert regressions(entry, now, 0.1, strict_warnings=True) == [
        "output.0: mean_bound_ratio = 0.9 (limit 1) fails, but it did not when the failure was accepted"]


def test_the_update_lists_failures_and_keeps_what_this_run_did_not_judge():
    old = {case_id: accepted(case_id, AcceptedCheck("max_bound_ratio", 20, 8), reason=f"why {case_id}")
           for case_id in ("fixed", "skipped", "crashed", "deselected", "stale", "same", "worse")}
    records = [record("fixed", "pass"), record("skipped", "skip"), record("crashed", "harness-error"),
               record("same", "error", [check("max_bound_ratio", 20, 8)]),
               record("worse", "error", [check("max_bound_ratio", 30, 8)]),
               record("new", "error", [check("max_bound_ratio", 9, 8), check("bound_bias", 0.5, 0.2)])]
    update = updated(old, records, set(old) - {"stale"} | {"new"}, "2026-05-05")
    assert sorted(update.entries) == ["crashed", "deselected", "new", "same", "skipped", "worse"]
    assert (update.added, update.changed, update.fixed, update.stale) == (("new",), ("worse",), ("fixed",), ("stale",))
    assert update.entries["same"] is old["same"]  # unchanged: date kept
    assert update.entries["worse"].reason == "why worse" and update.entries["worse"].accepted == "2026-05-05"
    # The worst check first: bound_bias is 2.5x its limit, max_bound_ratio 1.125x.
    assert [c.metric for c in update.entries["new"].outputs["output.0"]] == ["bound_bias", "max_bound_ratio"]


def test_the_file_round_trips_sorted_with_one_check_per_line(tmp_path):
    entries = {
        "b::x": accepted("b::x", AcceptedCheck("max_ulp_err", 7.0, 4.0), AcceptedCheck("mean_ulp_err", 1.5, 1.0),
                         reason="known"),
        "a::y": entry_from_record({**record("a::y", "input-error"), "message": "a.pt is missing\nmore"}, "",
                                  "2026-02-02"),
    }
    path = tmp_path / "kf.json"
    dump(entries, path)
    assert load(path) == entries
    text = path.read_text()
    assert text.index('"a::y"') < text.index('"b::x"') and text.endswith("}\n")
    assert '        {"metric": "max_ulp_err", "value": 7.0, "limit": 4.0},\n' in text
    assert '"message": "a.pt is missing"' in text
