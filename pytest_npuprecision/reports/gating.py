"""The pytest side of gating merges: the options, and known failures as strict xfails.

Listed cases are marked ``xfail(strict=True, raises=<the failure they were accepted with>)``, so a
case that starts passing fails as XPASS(strict) and a case that fails differently fails. Items
ask :meth:`KnownFailureGate.regressions` before raising, and raise a regression (not an accepted
failure) when their metrics got worse. Under pytest-xdist each worker marks its own items and
sends the case ids it collected through ``workeroutput``; the controller alone judges stale
entries and rewrites the file, once, at the end of the session.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Mapping

import pytest

from . import known_failures
from .known_failures import KnownFailure, Update
from .summary import is_failing

GATE = pytest.StashKey["KnownFailureGate"]()


class KnownFailureRegression(AssertionError):
    """A listed known failure whose checks got worse than accepted: not the failure the file accepts."""


def case_id_of(item: pytest.Item) -> str | None:
    """The id known failures use: a dump case's own id, an op case's node id; None for other tests."""
    case_id = getattr(getattr(item, "case", None), "case_id", None)
    if case_id is None and item.get_closest_marker("npu_op_case") is not None:
        return item.nodeid
    return case_id
_COLLECTED = pytest.StashKey[set]()
_WORKER_KEY = "npu_precision_case_ids"


def collected_case_ids(config: pytest.Config) -> set[str]:
    """Every case id collected in this process, before -k, -m or --deselect drop any."""
    return config.stash.setdefault(_COLLECTED, set())


Expected = Mapping[str, "type[BaseException] | tuple[type[BaseException], ...]"]


def configure(config: pytest.Config, expected: Expected | None = None) -> None:
    """Check the gating options and register the known-failures gate when a file is given.

    expected: the exception each accepted status raises, for the strict xfail marks of the items; the
    xdist controller, which collects no item, gives none.
    """
    path = config.getoption("npu_precision_known_failures")
    update = config.getoption("npu_precision_update_known_failures")
    if path is None:
        if update:
            raise pytest.UsageError("--npu-precision-update-known-failures needs a file to write: "
                                    "add --npu-precision-known-failures FILE")
        return
    path = Path(path)
    try:
        entries = {} if update and not path.exists() else known_failures.load(path)
    except known_failures.KnownFailuresError as exc:
        raise pytest.UsageError(f"--npu-precision-known-failures: {exc}") from None
    gate = KnownFailureGate(config, path, entries, expected or {})
    config.stash[GATE] = gate
    config.pluginmanager.register(gate, "npu-precision-known-failures")


class KnownFailureGate:
    def __init__(self, config: pytest.Config, path: Path, entries: dict[str, KnownFailure], expected: Expected):
        self.config = config
        self.path = path
        self.entries = entries
        self.expected = expected
        self.margin: float = config.getoption("npu_precision_known_failures_margin")
        self.strict_warnings: bool = config.getoption("npu_precision_strict_warnings")
        self.stale: tuple[str, ...] = ()
        self.stale_unchecked = ""  # why staleness was not judged, if it was not
        self.update: Update | None = None

    def pytest_report_header(self) -> str:
        update = ", rewritten at the end" if self.config.getoption("npu_precision_update_known_failures") else ""
        return (f"npu-precision known failures: {self.path}, {len(self.entries)} entries, "
                f"margin {self.margin * 100:g}%{update}")

    # ------------------------------------------------------------------ on the process that collects

    @pytest.hookimpl(tryfirst=True)  # before -k, -m and --deselect drop items
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            case_id = case_id_of(item)
            if case_id is None:
                continue
            collected_case_ids(self.config).add(case_id)
            entry = known_failures.lookup(self.entries, case_id)
            if entry is not None:
                reason = (f"known failure {case_id} ({entry.status}, accepted {entry.accepted}): "
                          f"{entry.reason or 'no reason given'}")
                item.add_marker(pytest.mark.xfail(strict=True, raises=self.expected[entry.status], reason=reason))

    def regressions(self, record: dict) -> list[str]:
        """What got worse than the listed failure accepts; empty for unlisted cases."""
        entry = known_failures.lookup(self.entries, record["case_id"])
        if entry is None or entry.status != record["status"]:
            return []
        return known_failures.regressions(entry, record, self.margin, self.strict_warnings)

    def annotate(self, record: dict, report: pytest.TestReport) -> None:
        """Put what became of a listed case into its record: xfail, regression, fixed, changed or skipped."""
        entry = known_failures.lookup(self.entries, record["case_id"])
        if entry is None:
            return
        worse = self.regressions(record)
        if report.skipped:
            outcome = "xfail" if hasattr(report, "wasxfail") else "skipped"
        elif not is_failing(record, self.strict_warnings):
            outcome = "fixed"
        else:
            outcome = "regression" if worse else "changed"  # changed: another kind of failure, a harness error
        record["known_failure"] = {"outcome": outcome, "reason": entry.reason, "status": entry.status,
                                   "accepted": entry.accepted, "regressions": worse}

    def pytest_sessionfinish(self) -> None:
        if hasattr(self.config, "workeroutput"):  # an xdist worker: the controller judges
            self.config.workeroutput[_WORKER_KEY] = sorted(collected_case_ids(self.config))

    # ------------------------------------------------------------------ on the controller (or a serial run)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        collected_case_ids(self.config).update(getattr(node, "workeroutput", {}).get(_WORKER_KEY, ()))

    def finish(self, records: list[dict]) -> None:
        """Judge stale entries and, when asked, rewrite the file. Called once, where reports are written."""
        collected = collected_case_ids(self.config)
        if self.config.getoption("lf", False) or self.config.getoption("stepwise", False):
            self.stale_unchecked = "--lf and --sw collect only part of the cases"
        else:
            self.stale = tuple(known_failures.stale_entries(self.entries, collected))
        if self.config.getoption("npu_precision_update_known_failures"):
            today = datetime.date.today().isoformat()
            keep = collected if not self.stale_unchecked else collected | set(self.entries)  # no entry is stale
            self.update = known_failures.updated(self.entries, records, keep, today, self.strict_warnings)
            known_failures.dump(self.update.entries, self.path)

    @property
    def fails_run(self) -> bool:
        """Stale entries fail the run unless warned, or unless the update just removed them."""
        return bool(self.stale) and self.update is None and not self.config.getoption("npu_precision_warn_stale")
