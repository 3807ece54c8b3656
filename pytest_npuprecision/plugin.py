"""The pytest layer: options in, one test item per dumped API call, verdicts out.

Everything that decides anything lives in the core modules; this file only translates.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import torch

from .cases import CaseInputError, CaseResult, CaseSkipped, Settings, run_case
from .dump import DumpCase, DumpFile, load_dump
from .report import Collector, case_record
from .rules import Rules
from .runner import default_device
from .verdict import render_message

_SETTINGS = pytest.StashKey[Settings]()
_RESULT = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("npuprecision", "single-operator precision checks of msprobe dumps")
    group.addoption("--npu-precision", action="append", default=[], metavar="DUMP",
                    help="a dump.json, rank, step or dump root folder: each API call becomes a test")
    group.addoption("--npu-precision-device", default="auto", metavar="DEVICE",
                    help="device under test: auto (npu, else cuda, else cpu), cpu, cuda[:N] or npu[:N]")
    group.addoption("--npu-precision-report", default=None, metavar="DIR",
                    help="write cases.jsonl and msprobe-compatible accuracy_checking_*.csv here")
    group.addoption("--npu-precision-rules", default=None, metavar="FILE",
                    help="YAML overrides of the threshold and op tables")


def _device(value: str) -> torch.device:
    if value == "auto":
        return default_device()
    try:
        return torch.device(value)
    except RuntimeError:
        raise pytest.UsageError(
            f"--npu-precision-device {value!r} is not a device: use auto, cpu, cuda[:N] or npu[:N]"
        ) from None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "npu_precision: a precision case from an msprobe dump")
    config.addinivalue_line("markers", "npu_forward: a forward API call from a dump")
    config.addinivalue_line("markers", "npu_backward: a backward API call from a dump")
    dumps = config.getoption("npu_precision")
    if not dumps:
        return
    for dump in dumps:
        if not Path(dump).exists():
            raise pytest.UsageError(f"--npu-precision {dump!r} does not exist: give a dump.json or a dump folder")
    rules = Rules.default()
    if config.getoption("npu_precision_rules"):
        try:
            rules = rules.merged(config.getoption("npu_precision_rules"))
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.stash[_SETTINGS] = Settings(device=_device(config.getoption("npu_precision_device")), rules=rules)
    config._npu_precision_roots = [Path(d).resolve() for d in dumps]  # type: ignore[attr-defined]
    if not config.option.file_or_dir:
        # `pytest --npu-precision DUMP` runs the dump, not the project's own tests. The paths stay
        # as the user wrote them so that node ids stay relative to the rootdir.
        config.args[:] = list(dumps)
    config.pluginmanager.register(Collector(config), "npu-precision-collector")


def _in_roots(config: pytest.Config, path: Path) -> bool:
    roots = getattr(config, "_npu_precision_roots", ())
    resolved = path.resolve()
    return any(resolved == root or root in resolved.parents for root in roots)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config):
    if collection_path.name == "dump_tensor_data" and _in_roots(config, collection_path):
        return True  # thousands of tensor files, none of them a test
    return None


def pytest_collect_file(file_path: Path, parent: pytest.Collector):
    if file_path.name == "dump.json" and _in_roots(parent.config, file_path):
        return DumpJsonFile.from_parent(parent, path=file_path)
    return None


def pytest_report_header(config: pytest.Config) -> str | None:
    if _SETTINGS not in config.stash:
        return None
    settings = config.stash[_SETTINGS]
    return (f"npu-precision: device {settings.device}, golden cpu float64, baseline none, "
            f"seed crc32(case id) per case")


class DumpJsonFile(pytest.File):
    def collect(self):
        dump = load_dump(self.path)
        if dump.error:
            yield BrokenDumpItem.from_parent(self, name="dump.json", problem=dump.error)
            return
        for case in dump.cases:
            yield DumpCaseItem.from_parent(self, name=case.key, case=case, dump=dump)


class BrokenDumpItem(pytest.Item):
    """A dump.json that cannot be read fails as one item; the other dumps still run."""

    def __init__(self, *, problem: str, **kwargs):
        super().__init__(**kwargs)
        self.problem = problem

    def runtest(self) -> None:
        raise CaseInputError(self.problem)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, "broken dump.json"


class PrecisionFailure(AssertionError):
    """A case whose device output is not precise enough."""


class DumpCaseItem(pytest.Item):
    def __init__(self, *, case: DumpCase, dump: DumpFile, **kwargs):
        super().__init__(**kwargs)
        self.case = case
        self.dump = dump
        self.add_marker(pytest.mark.npu_precision)
        self.add_marker(pytest.mark.npu_backward if case.direction == "backward" else pytest.mark.npu_forward)

    def runtest(self) -> None:
        settings = self.config.stash[_SETTINGS]
        try:
            result = run_case(self.case, self.dump.data_dir, settings)
        except CaseSkipped as skipped:
            self.stash[_RESULT] = case_record(self.case, settings, status="skip", message=str(skipped),
                                              reason=skipped.reason)
            pytest.skip(f"[{skipped.reason}] {skipped}")
        except CaseInputError as bad:
            self.stash[_RESULT] = case_record(self.case, settings, status="input-error", message=str(bad))
            raise
        self.stash[_RESULT] = case_record(self.case, settings, result=result)
        if result.failures:
            raise PrecisionFailure(self._message(result))

    def _message(self, result: CaseResult) -> str:
        parts = [f"{out.name}: {render_message(out.verdict)}" for out in result.failures]
        # An absolute file path works from any directory, unlike a rootdir-relative node id.
        node = f"{self.path.resolve()}::{self.name}"
        rerun = f"pytest --npu-precision {shlex.quote(str(self.path.resolve()))} {shlex.quote(node)}"
        device = self.config.stash[_SETTINGS].device
        parts.append(f"case {self.case.case_id}, seed {self.case.seed}, device {device} vs golden cpu float64")
        parts.append(f"rerun: {rerun}")
        return "\n".join(parts)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (PrecisionFailure, CaseInputError)):
            return str(excinfo.value)
        return f"harness error (please report it with this case):\n{super().repr_failure(excinfo, style)}"

    def reportinfo(self):
        return self.path, None, f"{self.case.case_id}"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    if call.when == "call" and isinstance(item, DumpCaseItem) and _RESULT in item.stash:
        record = item.stash[_RESULT]
        # Plain JSON on the report: xdist carries it to the controller, which writes the reports.
        report.npu_precision = json.dumps(record)
        item.user_properties.append(("npu_precision_status", record["status"]))
    return report
