"""Reading case records: what failed, by how much, and where to start. Shared by every report.

A record (see report.case_record) has a status: pass, warning, overflow (a result left its dtype's
range, never a failure), error, skip, input-error (the dump cannot be used for that case) or
harness-error (a bug of this tool). Each output holds its checks,
each a metric, its value, its limit and whether the limit is a maximum ("upper") or a minimum.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, Iterable

from ..common import shown_key

FAILING = ("error", "input-error", "harness-error")
ACCEPTABLE = ("error", "warning", "input-error")  # what a known failure may accept
STATUS_ORDER = ("error", "harness-error", "input-error", "warning", "overflow", "pass", "skip")


def is_failing(record: dict, strict_warnings: bool = False) -> bool:
    return record["status"] in FAILING or (strict_warnings and record["status"] == "warning")


def failing_statuses(strict_warnings: bool = False) -> tuple[str, ...]:
    """The statuses of the checks that make a case fail."""
    return ("error", "warning") if strict_warnings else ("error",)


def failing_outputs(outputs: Iterable[Any], strict_warnings: bool = False) -> list[Any]:
    """The judged outputs (each with a ``verdict``) that make their case fail."""
    statuses = failing_statuses(strict_warnings)
    return [o for o in outputs if o.verdict.status.value in statuses]


STRICT_WARNINGS_NOTE = "warnings fail this run: --npu-precision-strict-warnings"


def failing_checks(output: dict, strict_warnings: bool = False) -> list[dict]:
    """The checks of one output that make its case fail."""
    return [c for c in output["checks"] if c["status"] in failing_statuses(strict_warnings)]


def excess(value: float, limit: float, upper: bool = True) -> float:
    """How far a metric lies past its limit, growing as it gets worse; 1 is at the limit.

    A maximum: value / limit; where the limit is 0 (counts that must be 0), one more than the
    value, so that any count lies past 1 and a larger count further. A minimum that is a share of
    good elements (thousandth_ratio): the share of bad elements over the share allowed,
    (1 - value) / (1 - limit). A NaN metric is infinitely far. The known-failures margin, the
    summary's ordering and Hypothesis' search target all read this one measure.
    """
    if math.isnan(value):
        return math.inf
    if upper:
        if limit > 0:
            return value / limit
        return 1.0 + value if value > 0 else 0.0
    if 0 <= limit < 1:
        return (1 - value) / (1 - limit)
    return limit / value if value > 0 else math.inf


def check_excess(check: dict) -> float:
    return excess(check["value"], check["limit"], check.get("upper", True))


def times_limit(check: dict) -> str:
    """'19.5x the limit', or for a warning '5x the warning limit'; empty where a ratio says nothing."""
    bound, name = check["limit"], "the limit"
    if check["status"] == "warning" and check.get("warning"):
        bound, name = check["warning"], "the warning limit"
    ratio = excess(check["value"], bound, check.get("upper", True))
    return f"{number(ratio)}x {name}" if bound != 0 and math.isfinite(ratio) else ""


_CHECK_ORDER = ("pass", "overflow", "warning", "error")
ALL_CHECKS = _CHECK_ORDER


def _rank(check: dict) -> tuple[int, bool, float]:
    # Errors before warnings before passes; among failures, a limit of 0 (an inf/nan or bit
    # mismatch) is a hard break and ranks first; then the distance past the limit.
    hard = check["status"] != "pass" and check["limit"] == 0 and check.get("upper", True)
    return _CHECK_ORDER.index(check["status"]), hard, check_excess(check)


def worst_check(record: dict, statuses: tuple[str, ...] = ("error",)) -> tuple[str, dict] | None:
    """(output name, check) of the check furthest past its limit among checks with these statuses."""
    found = [(o["name"], c) for o in record["outputs"] for c in o["checks"] if c["status"] in statuses]
    return max(found, key=lambda pair: _rank(pair[1]), default=None)


def severity(record: dict) -> tuple[int, bool, float]:
    """A sort key for failing records: the larger, the worse. Failures without metrics rank first."""
    worst = worst_check(record, ("error", "warning"))
    return (len(_CHECK_ORDER), True, math.inf) if worst is None else _rank(worst[1])


def number(value: float) -> str:
    if isinstance(value, int) or (math.isfinite(value) and value == int(value) and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.4g}"


def describe(check: dict) -> str:
    """'max_bound_ratio 41.2 > 8' for a failing maximum, 'thousandth_ratio 0.98 < 0.999' for a minimum."""
    upper = check.get("upper", True)
    relation = (">" if upper else "<") if check["status"] != "pass" else ("<=" if upper else ">=")
    text = f"{check['metric']} {number(check['value'])} {relation} {number(check['limit'])}"
    if check["status"] == "warning" and check.get("warning") is not None:
        text = f"{check['metric']} {number(check['value'])} {relation} warning limit {number(check['warning'])}"
    return text


def worst_text(record: dict, statuses: tuple[str, ...] = ("error",)) -> str:
    """The worst check in words, or the first line of the message for cases without metrics."""
    worst = worst_check(record, statuses)
    if worst is None:
        return _first_line(record) if record["message"] else record["status"]
    name, check = worst
    prefix = f"{name}: " if len(record["outputs"]) > 1 else ""
    return prefix + describe(check)


def _first_line(record: dict) -> str:
    """The message's first line without the 'KEY (SOURCE): ' that the summary line already says."""
    line = record["message"].splitlines()[0]
    lead = f"{record['key']} ({record['source']}): "
    return line.removeprefix(lead).removeprefix(f"{record['key']}: ")


def first_failing(records: Iterable[dict], strict_warnings: bool = False) -> dict[str, dict]:
    """Per step and rank, the failing record that ran first in the dump: where to start debugging."""
    firsts: dict[str, dict] = {}
    for record in sorted(records, key=lambda r: (r["location"], r["order"])):
        if is_failing(record, strict_warnings):
            firsts.setdefault(record["location"] or record["source"], record)
    return dict(sorted(firsts.items()))


def known_outcome(record: dict) -> str:
    """What became of a listed known failure (xfail, regression, fixed, changed, skipped), or ''."""
    return record.get("known_failure", {}).get("outcome", "")


def op_name(record: dict) -> str:
    """'Functional.linear' for the API 'Functional.linear.0'; escaped where a dump's name is unprintable."""
    name, _, index = record["api"].rpartition(".")
    return shown_key(name if index.isdigit() else record["api"])


def counts(values: Iterable[str]) -> str:
    """'3 error, 40 pass' in the order of STATUS_ORDER, then alphabetically."""
    tally = Counter(values)
    order = sorted(tally, key=lambda s: (STATUS_ORDER.index(s) if s in STATUS_ORDER else len(STATUS_ORDER), s))
    return ", ".join(f"{tally[s]} {s}" for s in order)


def judged_nothing(records: list[dict]) -> bool:
    """Cases ran and every one skipped: the run checked no precision at all."""
    return bool(records) and all(r["status"] == "skip" for r in records)


def exit_reasons(records: list[dict], strict_warnings: bool, stale: int, updated: bool) -> list[str]:
    """Why the run's precision cases fail it, one phrase each; stale: the stale entries that fail it.

    updated: the known-failures file was just rewritten, so the next run judges against the new one.
    """
    listed = Counter(known_outcome(r) for r in records)
    unexpected = sum(1 for r in records if is_failing(r, strict_warnings) and not known_outcome(r))
    next_run = " (the update listed them: the next run accepts them)" if updated else ""
    reasons = [f"{unexpected} cases failed{next_run}"] if unexpected else []
    reasons += [f"{listed['regression']} known failures regressed"] if listed["regression"] else []
    reasons += [f"{listed['changed']} known failures failed differently"] if listed["changed"] else []
    if listed["fixed"]:
        removed = " (the update removed them: the next run passes)" if updated else ""
        reasons.append(f"{listed['fixed']} known failures now pass (XPASS strict){removed}")
    reasons += [f"{stale} stale known-failure entries match no collected case"] if stale else []
    return reasons
