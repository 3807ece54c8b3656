"""The pytest layer of a process that collects and runs cases (a serial run, or an xdist worker): one
test item per dumped API call, op cases, and each case's record on its report. plugin/active.py registers
it there; the xdist controller never does, so it never imports torch.

Everything that decides anything lives in the core modules; this file only translates.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from ..checks import CaseInputError, CaseResult, CaseSkipped, DumpIndex, OutputVerdict, ReplayError, run_case
from ..common import JudgedDtypeWarning, shown_key
from ..dump import DumpCase, DumpFile, DumpSource, load_dump, recorded_nonfinite, without_cyclic_gc
from ..opcases import OpCaseFailure, OpCaseUsageError
from ..precision import Status, render_message
from ..replay import threads
from ..reports import (
    KnownFailureRegression, RECORD, STRICT_WARNINGS_NOTE, carried, case_record, failing_outputs, gating,
    junit_properties, new_record, run_facts,
)
from .dump_options import found_dumps
from .settings import local_facts, rerun_command, run_settings_for


def pytest_configure(config: pytest.Config) -> None:
    """Run once, when plugin/active.py registers this module."""
    threads.apply(threads.for_run(config))
    failure = (PrecisionFailure, OpCaseFailure)
    gating.configure(config, expected={"error": failure, "warning": failure,
                                       "input-error": (CaseInputError, OpCaseUsageError)})


# Every dump.json this process collected: a collective case reads its other ranks' entries from them.
DUMPS = pytest.StashKey[DumpIndex]()


def dumps_of(config: pytest.Config) -> DumpIndex:
    if DUMPS not in config.stash:
        config.stash[DUMPS] = DumpIndex()
    return config.stash[DUMPS]


def pytest_unconfigure(config: pytest.Config) -> None:
    threads.release()  # torch's count as the process had it: a pytest run inside a program, or a test's


def pytest_sessionfinish(session: pytest.Session) -> None:
    run_facts.send(session.config, local_facts(session.config))  # an xdist worker: the controller names the device from this


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """The dumps join the session's top-level collectors: read as data, never walked by pytest."""
    report = yield
    if isinstance(collector, pytest.Session) and report.passed:
        for dump, sources in found_dumps(collector.config):
            report.result.append(DumpRoot.from_parent(collector, name=dump, path=Path(dump).resolve(),
                                                      nodeid=Path(dump).as_posix(), sources=sources))
    return report


def op_cases_in_play(config: pytest.Config) -> ModuleType:
    """The op cases' pytest layer (and Hypothesis), set up once a run has an op case."""
    from . import op_case_items as opcases

    if not config.pluginmanager.has_plugin("npu-precision-opcases"):
        opcases.configure(config)
    return opcases


def op_case_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector:
    return op_cases_in_play(parent.config).OpCaseFile.from_parent(parent, path=file_path)


class DumpRoot(pytest.Collector):
    """One --npu-precision path: its dump.json files, found by find_dumps."""

    def __init__(self, *, sources: list[DumpSource], **kwargs):
        super().__init__(**kwargs)
        self.sources = sources

    def collect(self):
        for source in self.sources:
            yield DumpJsonFile.from_parent(self, name=source.label or source.path.name, path=source.path,
                                           source=source)


class DumpJsonFile(pytest.Collector):
    def __init__(self, *, source: DumpSource, **kwargs):
        super().__init__(**kwargs)
        self.source = source

    def collect(self):
        dump = load_dump(self.path, label=self.source.label, root=self.parent.path)
        dumps_of(self.config).add(dump)
        if dump.error:
            yield BrokenDumpItem.from_parent(self, name="dump.json", problem=dump.error, label=self.source.label)
            return
        # Every case of the file counts as collected for stale known failures, even when a node id picks one.
        gating.collected_case_ids(self.config).update(case.case_id for case in dump.cases)
        chosen = set(self.config.getoption("npu_precision_case"))
        with without_cyclic_gc():  # 100k items: each pass would walk every node made so far
            items = [DumpCaseItem.from_parent(self, name=shown_key(case.key), case=case, dump=dump)
                     for case in dump.cases if not chosen or case.case_id in chosen]
        yield from items
        yield from self._baseline_only(dump, chosen)

    def _baseline_only(self, dump: DumpFile, chosen: set[str]):
        """The baseline dump's entries of this step and rank that this dump lacks: each a skip that says so,
        so that the summary counts what did not pair on both sides."""
        if self.config.getoption("npu_precision_baseline") == "none":
            return
        pairing = getattr(run_settings_for(self.config).baseline, "pairing", None)
        if pairing is None:
            return
        for case in pairing.baseline_only(dump):
            case_id = f"{dump.location}::{shown_key(case.key)}" if dump.location else shown_key(case.key)
            if not chosen or case_id in chosen:
                yield BaselineOnlyItem.from_parent(self, name=f"{shown_key(case.key)} (baseline only)", case=case,
                                                   case_id=case_id, place=dump.location)

    def reportinfo(self):
        return self.path, None, self.source.label


class BaselineOnlyItem(pytest.Item):
    """An entry that only the baseline dump holds: the device made no such call, so there is nothing to judge."""

    def __init__(self, *, case: DumpCase, case_id: str, place: str, **kwargs):
        super().__init__(**kwargs)
        self.case, self.case_id, self.place = case, case_id, place  # place: "step0/rank0" (Item has a location)

    def runtest(self) -> None:
        settings = run_settings_for(self.config)
        message = (f"{shown_key(self.case.key)} is only in the baseline dump ({self.case.source}): the device's dump "
                   f"of {self.place or 'this step and rank'} made no such call, so it has nothing to judge")
        record = new_record(kind="dump", case_id=self.case_id, key=self.case.key, api=self.case.api,
                            direction=self.case.direction, order=self.case.order, location=self.place,
                            source=str(self.case.source), seed=None, device=settings.device.name,
                            golden=settings.golden_label, baseline=settings.baseline_label, status="skip",
                            message=message)
        record.update(reason="baseline-only", baseline_state="baseline-only")
        self.stash[RECORD] = record
        pytest.skip(f"[baseline-only] {message}")

    def reportinfo(self):
        return self.path, None, f"baseline-only entry {self.case_id}"


class BrokenDumpItem(pytest.Item):
    """A dump.json that cannot be read fails as one item; the other dumps still run."""

    def __init__(self, *, problem: str, label: str, **kwargs):
        super().__init__(**kwargs)
        self.problem = problem
        self.label = label

    def runtest(self) -> None:
        settings = run_settings_for(self.config)
        # A record too, so that cases.jsonl, the CSVs, JUnit and HTML list the file that could not run.
        self.stash[RECORD] = new_record(
            kind="dump", case_id=f"{self.label}::dump.json", key="dump.json", api="dump.json", direction="",
            order=-1, location=self.label, source=str(self.path), seed=None, device=settings.device.name,
            golden=settings.golden_label, baseline=settings.baseline_label, status="input-error",
            message=self.problem)
        raise CaseInputError(self.problem)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, "broken dump.json"


_DTYPE_ADVICE = ("Its verdict holds for the dtype judged, not for the one the model ran: if the model ran this "
                 "call under autocast or after a cast the dump does not show, see how such calls are rebuilt in "
                 "docs/real-models.md (a page of the pytest-npuprecision repository's docs), and the case's "
                 "notes in cases.jsonl")


class PrecisionFailure(AssertionError):
    """A case whose device output is not precise enough."""


# Made once: pytest builds a new decorator on each pytest.mark.<name> lookup, 17 us apiece for 100k items.
# Keyed by (direction is backward, recorded an overflow); each as add_marker would store it.
_MARKS = {(backward, overflow): tuple(mark.mark for mark in (
    pytest.mark.npu_precision, pytest.mark.npu_backward if backward else pytest.mark.npu_forward,
    *((pytest.mark.npu_overflow,) if overflow else ()))) for backward in (False, True) for overflow in (False, True)}


class DumpCaseItem(pytest.Item):
    def __init__(self, *, case: DumpCase, dump: DumpFile, **kwargs):
        super().__init__(**kwargs)
        self.case = case
        self.dump = dump
        marks = _MARKS[case.direction == "backward", recorded_nonfinite(case)]
        self.own_markers.extend(marks)  # what add_marker does, without its checks: 100k items
        self.keywords.update({mark.name: mark for mark in marks})

    def runtest(self) -> None:
        settings = run_settings_for(self.config)
        framework = self.dump.framework
        self.stash[RECORD] = case_record(self.case, settings, status="harness-error", framework=framework)
        try:
            result = run_case(self.case, self.dump.data_dir, settings, dumps_of(self.config))
        except CaseSkipped as skipped:
            self.stash[RECORD] = case_record(self.case, settings, status="skip", message=str(skipped),
                                              reason=skipped.reason, framework=framework)
            key = shown_key(self.case.key)
            shown = str(skipped) if key in str(skipped) else f"{key}: {skipped}"
            pytest.skip(f"[{skipped.reason}] {shown}")
        except CaseInputError as bad:
            self.stash[RECORD] = case_record(self.case, settings, status="input-error", message=str(bad),
                                              framework=framework)
            raise
        self.stash[RECORD] = record = case_record(self.case, settings, result=result, framework=framework)
        for difference in result.dtype_differences:  # never silent, even where the case passes
            # Located at the user's dump.json, not at this line of the plugin.
            warnings.warn_explicit(JudgedDtypeWarning(f"{self.case.case_id}: {difference}. {_DTYPE_ADVICE}"),
                                   JudgedDtypeWarning, str(self.case.source), 0)
        failing = failing_outputs(result.outputs, self.config.getoption("npu_precision_strict_warnings"))
        if not failing:
            return
        gate = self.config.stash.get(gating.GATE, None)
        worse = gate.regressions(record) if gate is not None else []
        record["message"] = message = self._message(failing, result.partner)
        if worse:
            raise KnownFailureRegression("\n".join(["worse than the accepted known failure:", *worse, message]))
        raise PrecisionFailure(message)

    def _message(self, failing: list[OutputVerdict], partner: CaseResult | None) -> str:
        parts = [f"{out.name}: {render_message(out.verdict)}" for out in failing]
        if any(out.verdict.status is Status.WARNING for out in failing):
            parts.append(STRICT_WARNINGS_NOTE)
        # An absolute dump path works from any directory; the case id picks the case under it.
        root = self.parent.parent.path
        rerun = rerun_command(self.config, "--npu-precision", str(root), "--npu-precision-case", self.case.case_id)
        settings = run_settings_for(self.config)
        # Beside a baseline dump: which entry of it was the baseline, and its own verdict.
        entry = f": its entry {partner.case.case_id}, on its own {partner.status.value}" if partner else ""
        parts.append(f"case {self.case.case_id}, seed {self.case.seed}, device {settings.device.name} vs golden "
                     f"{settings.golden_label}, baseline {settings.baseline_label}{entry}")
        parts.append(f"rerun: {rerun}")
        return "\n".join(parts)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (PrecisionFailure, KnownFailureRegression, CaseInputError)):
            return str(excinfo.value)
        if isinstance(excinfo.value, ReplayError):  # the message says what went wrong; no traceback of ours
            return f"harness error (please report it with this case):\n{excinfo.value}"
        return f"harness error (please report it with this case):\n{super().repr_failure(excinfo, style)}"

    def reportinfo(self):
        # The domain heads the failure block. A bare case id would end the node id, and pytest's verbose
        # line would then print it with its dots turned into '::'; the prefix keeps the line as it is.
        return self.path, None, f"dump case {self.case.case_id}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    if report.skipped and isinstance(item, (DumpCaseItem, BaselineOnlyItem)) and isinstance(report.longrepr, tuple):
        # -rs names the dump.json the entry is in, not the line of this plugin that skipped it
        report.longrepr = (str(item.case.source), None, report.longrepr[2])
    if report.failed and call.excinfo is not None and isinstance(call.excinfo.value, _CLEAN_FAILURES):
        # A Python op case fails with the op case's message, as a YAML one does: no traceback, no --full-trace hint.
        report.longrepr = str(call.excinfo.value)
    record = item.stash.get(RECORD, None) if call.when == "call" else None
    if record is not None:  # a dump case or an op case
        if call.excinfo is not None and not isinstance(call.excinfo.value, _CASE_OUTCOMES):
            record = {**record, "status": "harness-error", "outputs": [],
                      "message": f"{call.excinfo.typename}: {call.excinfo.value}"}
        gate = item.config.stash.get(gating.GATE, None)
        if gate is not None:
            gate.annotate(record, report)
        # Plain JSON on the report: xdist carries it to the controller, which writes the reports.
        report.npu_precision = json.dumps(carried(record, item.config))
        report.npu_overflow = record["status"] == "overflow"
        # JUnit XML takes these from the teardown report, which copies the item's properties; without
        # it they would only lengthen every report that xdist serializes.
        if getattr(item.config.option, "xmlpath", None):
            item.user_properties.extend(junit_properties(record))
    return report


# Failures whose message says everything: shown without a traceback.
_CLEAN_FAILURES = (OpCaseFailure, OpCaseUsageError, KnownFailureRegression)

# What a case may end with; anything else is a harness error.
_CASE_OUTCOMES = (PrecisionFailure, KnownFailureRegression, CaseInputError, OpCaseFailure,
                  OpCaseUsageError, pytest.skip.Exception, pytest.fail.Exception)
