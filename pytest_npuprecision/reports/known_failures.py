"""Known failures: a reviewable JSON file of accepted precision failures, keyed by case id.

    {
      "step0/rank0::Functional.linear.0.forward": {
        "accepted": "2026-03-01",
        "reason": "fp16 accumulation in the vendor GEMM, ticket 123",
        "status": "error",
        "outputs": {
          "output.0": [
            {"metric": "max_bound_ratio", "value": 41.2, "limit": 8.0},
            {"metric": "mean_bound_ratio", "value": 1.7, "limit": 1.0}
          ]
        }
      }
    }

Each output lists its failing checks when the failure was accepted, the worst first. A listed case
regresses when one of its failing checks lies further past its limit than recorded by more than the
margin (summary.excess: value / limit for a maximum), or when a check fails that did not fail then.
This module reads and writes the file and compares records with it; it knows nothing of pytest.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping

from ..config import ConfigError, load_json, validate
from .summary import ACCEPTABLE, check_excess, excess, failing_checks, is_failing, number

# The reason an update writes for a new entry: every run warns about it until someone writes the real one.
REASON_PLACEHOLDER = "TODO: why is this failure accepted? (a ticket, the vendor kernel, a fix planned)"


class KnownFailuresError(ValueError):
    """The known-failures file cannot be used: the message names the file, the entry and the fix."""


@dataclass(frozen=True)
class AcceptedCheck:
    metric: str
    value: float
    limit: float


@dataclass(frozen=True)
class KnownFailure:
    case_id: str
    reason: str
    status: str
    accepted: str  # ISO date
    outputs: Mapping[str, tuple[AcceptedCheck, ...]] = field(default_factory=dict)
    message: str = ""  # first line of the failure message, for cases that fail without metrics

    def as_json(self) -> dict:
        out = {"accepted": self.accepted, "reason": self.reason, "status": self.status,
               "outputs": {name: [{"metric": c.metric, "value": c.value, "limit": c.limit} for c in checks]
                           for name, checks in self.outputs.items()}}
        if self.message:
            out["message"] = self.message
        return out


def load(path: Path) -> dict[str, KnownFailure]:
    """Read and validate the file; raise KnownFailuresError naming what is wrong and how to fix it."""
    if not os.path.lexists(path):
        raise KnownFailuresError(f"known-failures file {str(path)!r} does not exist: create it with "
                                 f"--npu-precision-update-known-failures")
    try:
        data = load_json(path, "known-failures file")
    except ConfigError as exc:
        raise KnownFailuresError(str(exc)) from None
    from .known_failures_schema import KnownFailuresFile

    try:
        entries = validate(KnownFailuresFile, data, path)
    except ConfigError as exc:
        raise KnownFailuresError(f"{exc}: fix the entry, or rewrite the file with "
                                 f"--npu-precision-update-known-failures") from None
    return {case_id: KnownFailure(case_id, e.reason, e.status, e.accepted,
                                  {name: tuple(AcceptedCheck(c.metric, float(c.value), float(c.limit)) for c in checks)
                                   for name, checks in e.outputs.items()}, e.message)
            for case_id, e in entries.items()}


def dump(entries: Mapping[str, KnownFailure], path: Path) -> None:
    """Write the file sorted by case id, indented, one check per line, so that a diff reviews well."""
    checks: list[str] = []

    def placeholder(check: dict) -> str:
        checks.append(json.dumps(check))
        return f"\0{len(checks) - 1}"

    data = {}
    for case_id in sorted(entries):
        entry = entries[case_id].as_json()
        entry["outputs"] = {name: [placeholder(c) for c in cs] for name, cs in entry["outputs"].items()}
        data[case_id] = entry
    text = json.dumps(data, indent=2, sort_keys=True)
    for index, check in enumerate(checks):
        text = text.replace(f'"\\u0000{index}"', check, 1)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n", encoding="utf-8")


def lookup(entries: Mapping[str, KnownFailure], case_id: str) -> KnownFailure | None:
    """The entry of a case: its own, else the first (by key) whose ``*`` wildcards cover it, so that one entry
    such as ``step*/rank*::Functional.gelu.0.forward`` accepts one kernel bug on every rank and step."""
    entry = entries.get(case_id)
    if entry is not None:
        return entry
    return next((entries[key] for key in sorted(entries) if "*" in key and _pattern(key).fullmatch(case_id)), None)


def stale_entries(entries: Mapping[str, KnownFailure], collected: set[str]) -> list[str]:
    """The keys that cover no collected case, sorted."""
    return sorted(key for key in entries if key not in collected and
                  not ("*" in key and any(_pattern(key).fullmatch(case_id) for case_id in collected)))


@functools.lru_cache(maxsize=256)
def _pattern(key: str) -> re.Pattern:
    """``*`` matches any run of characters, '/' and '::' included; everything else is literal."""
    return re.compile(".*".join(re.escape(part) for part in key.split("*")), re.DOTALL)


def regressions(entry: KnownFailure, record: dict, margin: float, strict_warnings: bool = False) -> list[str]:
    """How a listed case's failing checks are worse than accepted; empty when they are not."""
    found = []
    for output in record["outputs"]:
        accepted = {c.metric: c for c in entry.outputs.get(output["name"], ())}
        for check in failing_checks(output, strict_warnings):
            now = f"{check['metric']} = {number(check['value'])} (limit {number(check['limit'])})"
            was = accepted.get(check["metric"])
            if was is None:
                found.append(f"{output['name']}: {now} fails, but it did not when the failure was accepted")
                continue
            before = excess(was.value, was.limit, check.get("upper", True))
            if not check_excess(check) <= before * (1 + margin):
                growth = check_excess(check) / before if before > 0 else math.inf
                found.append(f"{output['name']}: {now} is {growth:.3g}x as far past its limit as accepted "
                             f"({number(was.value)}, limit {number(was.limit)}); the margin is {margin * 100:g}%")
    return found


def outcome_of(entry: KnownFailure, record: dict, margin: float, strict_warnings: bool = False) -> dict:
    """What became of a listed case, from its record alone (shard reports merged after their runs): the
    ``known_failure`` a gated run writes into the record."""
    worse = regressions(entry, record, margin, strict_warnings) if entry.status == record["status"] else []
    if record["status"] == "skip":
        kind = "skipped"
    elif not is_failing(record, strict_warnings):
        kind = "fixed"
    elif entry.status != record["status"]:
        kind = "changed"
    else:
        kind = "regression" if worse else "xfail"
    return {"outcome": kind, "reason": entry.reason, "status": entry.status, "accepted": entry.accepted,
            "regressions": worse}


def entry_from_record(record: dict, reason: str, accepted: str, strict_warnings: bool = False) -> KnownFailure:
    outputs = {}
    for output in record["outputs"]:
        checks = sorted(failing_checks(output, strict_warnings), key=check_excess, reverse=True)
        if checks:
            outputs[output["name"]] = tuple(AcceptedCheck(c["metric"], c["value"], c["limit"]) for c in checks)
    message = "" if outputs or not record["message"] else record["message"].splitlines()[0]
    return KnownFailure(record["case_id"], reason, record["status"], accepted, outputs, message)


@dataclass(frozen=True)
class Update:
    entries: dict[str, KnownFailure]
    added: tuple[str, ...]
    changed: tuple[str, ...]
    fixed: tuple[str, ...]
    stale: tuple[str, ...]


def updated(old: Mapping[str, KnownFailure], records: Iterable[dict], collected: set[str], today: str,
            strict_warnings: bool = False) -> Update:
    """The file as this run finds it: failing cases listed, passing ones dropped, unrun ones kept.

    A case that fails keeps its reason and, where its status and checks are unchanged, its date.
    Cases that were collected but not judged (deselected, skipped, a harness error) keep their
    entry; entries that match no collected case are stale and dropped.
    """
    stale = stale_entries(old, collected)
    entries = {case_id: entry for case_id, entry in old.items() if case_id not in stale}
    added, changed, fixed = [], [], []
    covered: dict[str, bool] = {}  # a wildcard entry: whether a case it covers still fails
    for record in records:
        case_id, previous = record["case_id"], lookup(old, record["case_id"])
        failing = record["status"] in ACCEPTABLE and is_failing(record, strict_warnings)
        if previous is not None and previous.case_id != case_id:  # a wildcard entry covers it: kept as written
            if failing or record["status"] in ("pass", "warning"):
                covered[previous.case_id] = covered.get(previous.case_id, False) or failing
            continue
        if failing:
            entry = entry_from_record(record, previous.reason if previous else REASON_PLACEHOLDER, today,
                                      strict_warnings)
            if previous is not None and _same(previous, entry):
                entry = previous
            elif previous is not None:
                changed.append(case_id)
            else:
                added.append(case_id)
            entries[case_id] = entry
        elif record["status"] in ("pass", "warning") and previous is not None:
            entries.pop(case_id, None)
            fixed.append(case_id)
    for key, still in covered.items():
        if not still:  # every case it covers that ran passed
            entries.pop(key, None)
            fixed.append(key)
    return Update(entries, tuple(sorted(added)), tuple(sorted(changed)), tuple(sorted(fixed)), tuple(stale))


def without_reason(entries: Mapping[str, KnownFailure]) -> list[str]:
    """The case ids of the entries whose reason is still empty or the update's placeholder, sorted."""
    return sorted(case_id for case_id, entry in entries.items()
                  if entry.reason.strip() in ("", REASON_PLACEHOLDER))


def _same(a: KnownFailure, b: KnownFailure) -> bool:
    return (a.status, dict(a.outputs), a.message) == (b.status, dict(b.outputs), b.message)
