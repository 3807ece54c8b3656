"""The pytest layer once the plugin is in play: one test item per dumped API call, op cases, verdicts
and reports out. plugin.py registers this module when a run checks a dump or an op case, or asks for
a report or a gate; a run that does neither never imports torch.

Everything that decides anything lives in the core modules; this file only translates.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from types import ModuleType

import pytest

from . import gating, threads
from .cases import CaseInputError, CaseSkipped, OutputVerdict, ReplayError, Settings, run_case
from .dump import DumpCase, DumpFile, DumpSource, find_dumps, load_dump, recorded_nonfinite, without_cyclic_gc
from .opcases.failures import OpCaseFailure, OpCaseUsageError
from .gating import KnownFailureRegression
from .report import RECORD, Collector, case_record, junit_properties, new_record
from .settings import rerun_command, settings_for, stashed
from .summary import STRICT_WARNINGS_NOTE, failing_outputs
from .verdict import Status, render_message

_DUMPS = pytest.StashKey["list[tuple[str, list[DumpSource]]]"]()


def run_header(settings: Settings) -> str:
    """The one line that says what this run compared: device, golden, baseline and seeds."""
    return (f"npu-precision: device {settings.device.info().describe()}, golden {settings.golden_label}, "
            f"baseline {settings.baseline_label}, seed crc32(case id) per case")


def pytest_configure(config: pytest.Config) -> None:
    """Run once, when plugin.py registers this module (pytest calls it then, even mid-collection)."""
    threads.apply(threads.for_run(config))
    failure = (PrecisionFailure, OpCaseFailure)
    gating.configure(config, expected={"error": failure, "warning": failure,
                                       "input-error": (CaseInputError, OpCaseUsageError)})
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(Collector(config), "npu-precision-collector")
    dumps = config.getoption("npu_precision")
    if not dumps:
        return
    dumps = list(dict.fromkeys(dumps))  # a path given twice is run once
    config.stash[_DUMPS] = _found_dumps(dumps)
    _refuse_dump_configuration(config, dumps)
    settings_for(config)
    if not config.option.file_or_dir:
        # `pytest --npu-precision DUMP` runs the dump, not the project's own tests. The dump is never
        # a path for pytest to collect: pytest would import a conftest.py or test_*.py inside it.
        config.args[:] = []


def _refuse_dump_configuration(config: pytest.Config, dumps: list[str]) -> None:
    """pytest looks for its ini file from every word it cannot place, ours included, so a pytest.ini or
    tox.ini inside a dump could configure the run. Refuse it; the one-word spelling avoids it."""
    inipath = config.inipath
    for dump in dumps:
        root = Path(dump).resolve()
        if inipath is not None and (inipath.resolve() == root or root in inipath.resolve().parents):
            raise pytest.UsageError(f"pytest took its configuration from {inipath}, inside the dump {dump!r}: a dump "
                                    f"must not configure the run. Write the option as one word, "
                                    f"--npu-precision={dump}, or give your own with -c")


def _found_dumps(dumps: list[str]) -> list[tuple[str, list[DumpSource]]]:
    """Each --npu-precision path with the dumps under it; a path without one, or ids that collide, is a usage error."""
    found, owner = [], {}
    for dump in dumps:
        try:
            sources = find_dumps(dump)
        except FileNotFoundError:
            raise pytest.UsageError(f"--npu-precision {dump!r} does not exist: give a dump.json or a dump folder") from None
        if not sources:
            raise pytest.UsageError(f"--npu-precision {dump!r} holds no dump.json: give a dump.json, or a rank, step "
                                    f"or dump root folder written by msprobe")
        for source in sources:
            other = owner.setdefault(source.label, dump)
            if other != dump:
                raise pytest.UsageError(f"--npu-precision {other!r} and {dump!r} both hold a dump labelled "
                                        f"{source.label!r}, so their case ids would collide: give their common "
                                        f"parent folder once instead")
        found.append((dump, sources))
    return found


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """The dumps join the session's top-level collectors: read as data, never walked by pytest."""
    report = yield
    if isinstance(collector, pytest.Session) and _DUMPS in collector.config.stash and report.passed:
        for dump, sources in collector.config.stash[_DUMPS]:
            report.result.append(DumpRoot.from_parent(collector, name=dump, path=Path(dump).resolve(),
                                                      nodeid=Path(dump).as_posix(), sources=sources))
    return report


def op_cases_in_play(config: pytest.Config) -> ModuleType:
    """The op cases' pytest layer (and Hypothesis), set up once a run has an op case."""
    from .opcases import plugin as opcases

    if not config.pluginmanager.has_plugin("npu-precision-opcases"):
        opcases.configure(config)
    return opcases


def op_case_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector:
    return op_cases_in_play(parent.config).OpCaseFile.from_parent(parent, path=file_path)


def fallback_note(config: pytest.Config) -> str | None:
    """What `auto` settled for when it found no accelerator: the run then checks CPU torch, not the dump's device."""
    settings = stashed(config)
    if settings is None or config.getoption("npu_precision_device") != "auto" or settings.device.name != "cpu":
        return None
    return ("npu-precision: --npu-precision-device auto found no NPU or GPU here, so these verdicts judge CPU "
            "torch's own kernels, not the device the dump was taken on; run on that device (npu, cuda) to check it")


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    """Say loudly what `auto` fell back to."""
    note = fallback_note(config)
    if note is not None:
        terminalreporter.write_line(note, yellow=True, bold=True)


def pytest_report_header(config: pytest.Config) -> str | None:
    settings = stashed(config)
    if settings is None:
        return None
    note = fallback_note(config)
    return [run_header(settings)] + ([note] if note else [])


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
        if dump.error:
            yield BrokenDumpItem.from_parent(self, name="dump.json", problem=dump.error, label=self.source.label)
            return
        # Every case of the file counts as collected for stale known failures, even when a node id picks one.
        gating.collected_case_ids(self.config).update(case.case_id for case in dump.cases)
        chosen = set(self.config.getoption("npu_precision_case"))
        with without_cyclic_gc():  # 100k items: each pass would walk every node made so far
            items = [DumpCaseItem.from_parent(self, name=case.key, case=case, dump=dump)
                     for case in dump.cases if not chosen or case.case_id in chosen]
        yield from items

    def reportinfo(self):
        return self.path, None, self.source.label


class BrokenDumpItem(pytest.Item):
    """A dump.json that cannot be read fails as one item; the other dumps still run."""

    def __init__(self, *, problem: str, label: str, **kwargs):
        super().__init__(**kwargs)
        self.problem = problem
        self.label = label

    def runtest(self) -> None:
        settings = settings_for(self.config)
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


class JudgedDtypeWarning(UserWarning):
    """A case's output was judged in another dtype than its dump recorded."""


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
        settings = settings_for(self.config)
        framework = self.dump.framework
        self.stash[RECORD] = case_record(self.case, settings, status="harness-error", framework=framework)
        try:
            result = run_case(self.case, self.dump.data_dir, settings)
        except CaseSkipped as skipped:
            self.stash[RECORD] = case_record(self.case, settings, status="skip", message=str(skipped),
                                              reason=skipped.reason, framework=framework)
            pytest.skip(f"[{skipped.reason}] {skipped}")
        except CaseInputError as bad:
            self.stash[RECORD] = case_record(self.case, settings, status="input-error", message=str(bad),
                                              framework=framework)
            raise
        self.stash[RECORD] = record = case_record(self.case, settings, result=result, framework=framework)
        for difference in result.dtype_differences:  # never silent, even where the case passes
            warnings.warn(JudgedDtypeWarning(f"{self.case.case_id}: {difference}"))
        failing = failing_outputs(result.outputs, self.config.getoption("npu_precision_strict_warnings"))
        if not failing:
            return
        gate = self.config.stash.get(gating.GATE, None)
        worse = gate.regressions(record) if gate is not None else []
        record["message"] = message = self._message(failing)
        if worse:
            raise KnownFailureRegression("\n".join(["worse than the accepted known failure:", *worse, message]))
        raise PrecisionFailure(message)

    def _message(self, failing: list[OutputVerdict]) -> str:
        parts = [f"{out.name}: {render_message(out.verdict)}" for out in failing]
        if any(out.verdict.status is Status.WARNING for out in failing):
            parts.append(STRICT_WARNINGS_NOTE)
        # An absolute dump path works from any directory; the case id picks the case under it.
        root = self.parent.parent.path
        rerun = rerun_command(self.config, "--npu-precision", str(root), "--npu-precision-case", self.case.case_id)
        settings = settings_for(self.config)
        parts.append(f"case {self.case.case_id}, seed {self.case.seed}, device {settings.device.name} vs golden "
                     f"{settings.golden_label}, baseline {settings.baseline_label}")
        parts.append(f"rerun: {rerun}")
        return "\n".join(parts)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (PrecisionFailure, KnownFailureRegression, CaseInputError)):
            return str(excinfo.value)
        if isinstance(excinfo.value, ReplayError):  # the message says what went wrong; no traceback of ours
            return f"harness error (please report it with this case):\n{excinfo.value}"
        return f"harness error (please report it with this case):\n{super().repr_failure(excinfo, style)}"

    def reportinfo(self):
        # No domain: pytest's verbose line would print one with its dots turned into '::'.
        return self.path, None, ""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
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
        report.npu_precision = json.dumps(record)
        report.npu_overflow = record["status"] == "overflow"
        # JUnit XML takes these from the teardown report, which copies the item's properties; without
        # it they would only lengthen every report that xdist serializes.
        if getattr(item.config.option, "xmlpath", None):
            item.user_properties.extend(junit_properties(record))
    return report


def pytest_report_teststatus(report, config):
    """An overflow passes, but is counted and shown apart: 'O' in the progress line, 'N overflow' at the end."""
    if report.when == "call" and report.passed and getattr(report, "npu_overflow", False):
        return "overflow", "O", ("OVERFLOW", {"yellow": True})
    return None


# Failures whose message says everything: shown without a traceback.
_CLEAN_FAILURES = (OpCaseFailure, OpCaseUsageError, KnownFailureRegression)

# What a case may end with; anything else is a harness error.
_CASE_OUTCOMES = (PrecisionFailure, KnownFailureRegression, CaseInputError, OpCaseFailure,
                  OpCaseUsageError, pytest.skip.Exception, pytest.fail.Exception)
