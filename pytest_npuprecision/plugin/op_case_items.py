"""The pytest layer of op cases: YAML files' items and the ``precision_case`` decorator.

pytest_npuprecision.plugin.collecting calls configure and makes OpCaseFile for the files options.is_case_file
picks; everything that decides anything lives in the core modules beside this one.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import pytest
import torch

from ..backends import Backend
from ..checks import baseline_label, golden_label
from ..opcases import (
    BrokenCase, CASE_DTYPES, ExampleResult, MAX_EXAMPLES, OpCase, OpCaseFailure, OpCaseSettings, OpCaseUsageError,
    Outcome, PROFILES, SchemaError, case_seed, check_case, count, dtype_name, op_label, parse_dtypes, parse_limits,
    parse_standard, render_outcome, write_regression,
)
from ..precision import Status
from ..reports import GATE, KnownFailureRegression, RECORD, new_record, output_record

_SETTINGS = pytest.StashKey[OpCaseSettings]()


def configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "npu_op_case: an op case (YAML or precision_case), searched by Hypothesis")
    config.pluginmanager.register(_Reporter(), "npu-precision-opcases")


def op_case_settings_for(config: pytest.Config) -> OpCaseSettings:
    """The op case settings of this run, made once from the options."""
    if _SETTINGS not in config.stash:
        from .settings import run_settings_for as run_settings  # the one reading of the device options

        run = run_settings(config)
        folder = config.getoption("npu_precision_regressions")
        if folder is None:  # op_cases/regressions of the rootdir (the rootdir may be op_cases/ itself)
            root = config.rootpath if config.rootpath.name == "op_cases" else config.rootpath / "op_cases"
            regressions: Path | None = root / "regressions"
        elif folder.lower() == "none":
            regressions = None
        else:
            regressions = config.invocation_params.dir / folder
        config.stash[_SETTINGS] = OpCaseSettings(
            device=run.device, golden=run.golden, rules=run.rules,
            baseline=run.baseline if isinstance(run.baseline, Backend) else None,  # a file holds dump cases
            profile=PROFILES[config.getoption("npu_precision_profile")], regressions=regressions,
            root=config.rootpath, strict_warnings=config.getoption("npu_precision_strict_warnings"),
            float32=run.float32, progress=_progress_line(config))
    return config.stash[_SETTINGS]


def _progress_line(config: pytest.Config):
    """Where a long search says what it is doing: the terminal, past pytest's output capture; an xdist
    worker has no terminal of its own (its test's line shows when it ends)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None or hasattr(config, "workerinput"):
        return None

    def say(line: str) -> None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"npu-precision op case {line}")

    return say


def check_and_keep(case: OpCase, dtype: torch.dtype, settings: OpCaseSettings) -> Outcome:
    """Check a case; write a searched case's failing example as a regression case."""
    outcome = check_case(case, dtype, settings)
    keep = outcome.result is not None and outcome.result.failed and not case.fixed
    if keep and settings.regressions is not None and outcome.call is not None:
        path = write_regression(case, dtype, outcome.call, settings.regressions, settings.root,
                                shrunk=outcome.examples > outcome.searched)
        outcome = dataclasses.replace(outcome, regression=path)
    return outcome


def _start_record(item: pytest.Item, case: OpCase, settings: OpCaseSettings) -> None:
    """The item's case record, so that known failures, JUnit and the reports see op cases too."""
    item.stash[RECORD] = new_record(
        kind="op_case", case_id=item.nodeid, key=item.name, api=op_label(case.op) or "?",
        direction="backward" if case.backward else "forward", order=0, location=case.source, source=case.source,
        seed=case_seed(case), device=settings.device.name, golden=golden_label(settings.golden),
        baseline=baseline_label(settings.baseline))
    item.stash[RECORD]["baseline_state"] = "none" if settings.baseline is None else "live"


def _finish(item: pytest.Item, outcome: Outcome, settings: OpCaseSettings) -> None:
    """Complete the record; then pass, or raise the failure (a regression past a known failure first)."""
    __tracebackhide__ = True
    record = item.stash[RECORD]
    if outcome.unavailable is not None:
        record.update(status="skip", reason="no-kernel", message=outcome.unavailable, seconds=outcome.seconds)
        pytest.skip(f"[no-kernel] {outcome.unavailable}")
    result = outcome.result
    status = "pass" if outcome.passed else "input-error" if outcome.problem is not None else _failed_status(result)
    record.update(status=status, api=outcome.op_name, seconds=outcome.seconds, examples=outcome.examples,
                  notes=list(outcome.notes),
                  outputs=[output_record(o.name, o.verdict, o.profile) for o in (result.outputs if result else ())])
    item.user_properties.append(("npu_precision_examples", outcome.examples))
    if outcome.passed:
        return
    record["message"] = message = render_outcome(outcome, settings, outcome.op_name, outcome.reference_label)
    gate = item.config.stash.get(GATE, None)
    worse = gate.regressions(record) if gate is not None else []
    if worse:
        raise KnownFailureRegression("\n".join(["worse than the accepted known failure:", *worse, message]))
    raise (OpCaseUsageError if outcome.problem is not None else OpCaseFailure)(message)


def _failed_status(result: ExampleResult | None) -> str:
    """error, or warning when only warnings failed the example (--npu-precision-strict-warnings)."""
    if result is None or result.problem is not None:
        return "error"
    return "warning" if all(o.verdict.status is Status.WARNING for o in result.failures) else "error"


class OpCaseFile(pytest.File):
    def collect(self) -> Iterable[pytest.Item]:
        from ..opcases import with_current_settings
        from ..opcases import load_case_file

        origins: dict = {}
        for case in load_case_file(self.path, self.config.rootpath):
            if isinstance(case, BrokenCase):
                yield BrokenCaseItem.from_parent(self, name=case.id, problem=case.problem)
                continue
            case = with_current_settings(case, self.config.rootpath, origins)
            for dtype in case.dtypes:
                yield OpCaseItem.from_parent(self, name=case.item_name(dtype), case=case, dtype=dtype)


class BrokenCaseItem(pytest.Item):
    """A case (or file) that cannot be read fails alone, with the schema error; the others still run."""

    def __init__(self, *, problem: str, **kwargs):
        super().__init__(**kwargs)
        self.problem = problem
        self.add_marker(pytest.mark.npu_op_case)

    def runtest(self) -> None:
        raise OpCaseUsageError(self.problem)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value)

    def reportinfo(self):
        return self.path, None, f"op case {self.nodeid} (unreadable)"


class OpCaseItem(pytest.Item):
    def __init__(self, *, case: OpCase, dtype: torch.dtype, **kwargs):
        super().__init__(**kwargs)
        self.case, self.dtype = case, dtype
        self.add_marker(pytest.mark.npu_op_case)

    def runtest(self) -> None:
        settings = op_case_settings_for(self.config)
        _start_record(self, self.case, settings)
        _finish(self, check_and_keep(self.case, self.dtype, settings), settings)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, (OpCaseFailure, OpCaseUsageError, KnownFailureRegression)):
            return str(excinfo.value)
        return f"harness error (please report it with this case):\n{super().repr_failure(excinfo, style)}"

    def reportinfo(self):
        return self.path, None, f"op case {self.nodeid}"  # its case id; why the prefix: DumpCaseItem.reportinfo


class _Reporter:
    @pytest.hookimpl
    def pytest_report_collectionfinish(self, config: pytest.Config, items) -> str | None:
        if not any(item.get_closest_marker("npu_op_case") for item in items):
            return None
        settings = op_case_settings_for(config)
        profile = settings.profile
        where = settings.regressions if settings.regressions is not None else "nowhere"
        from .settings import run_settings_for as run_settings

        unused = "" if settings.baseline is not None or run_settings(config).baseline is None else (
            " (the recorded baseline holds dump cases only: op cases run without it)")
        return (f"npu-precision op cases: profile {profile.name} ({profile.description}), device "
                f"{settings.compared}{unused}, failing examples written to {where}")


# ---------------------------------------------------------------- Python cases


def precision_case(op: str | Callable[..., Any], *, dtypes: Iterable[str] = ("float16", "bfloat16", "float32"),
                   reference: str | Callable[..., Any] | None = None, backward: bool = False,
                   standard: str | None = None, limits: Mapping[str, Mapping[str, Any]] | None = None,
                   reason: str | None = None, max_examples: int | None = None, roundings: int | None = None,
                   id: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., None]]:
    """Turn a function that draws an op's arguments into a pytest test, one per dtype.

    The decorated function takes Hypothesis's ``draw`` and the dtype and returns ``call(*args, **kwargs)``
    (or a tuple of positional arguments); build the values with ``pytest_npuprecision.strategies``.
    ``op`` and ``reference`` are names (as in YAML) or callables; the other arguments mean what the
    YAML fields of the same name mean. Failing examples are shrunk and written as regression cases.
    """
    try:
        parsed = parse_dtypes(list(dtypes))
        standard = parse_standard(standard)
        limits_, reason = parse_limits(dict(limits) if limits else None, reason)
        max_examples = count(max_examples, "max_examples", minimum=1, maximum=MAX_EXAMPLES)
        roundings = count(roundings, "roundings", minimum=0)
        if roundings is not None and reason is None:
            raise SchemaError("reason", "is missing: a case that sets roundings must say which intermediates its "
                                        "kernel rounds, in reason=")
    except SchemaError as exc:
        raise ValueError(f"precision_case({op!r}): {exc}") from None

    def decorate(draw: Callable[..., Any]) -> Callable[..., None]:
        case = OpCase(id=id or draw.__name__, op=op, dtypes=parsed, source=draw.__module__, reference=reference,
                      standard=standard, limits=limits_, reason=reason, backward=backward,
                      max_examples=max_examples, roundings=roundings, draw=draw)

        @pytest.mark.npu_op_case
        @pytest.mark.parametrize("dtype", parsed, ids=dtype_name)
        def test(dtype: torch.dtype, request: pytest.FixtureRequest) -> None:
            __tracebackhide__ = True
            settings = op_case_settings_for(request.config)
            path = request.node.path
            source = path.relative_to(request.config.rootpath).as_posix() \
                if path.is_relative_to(request.config.rootpath) else str(path)
            placed = dataclasses.replace(case, source=source)
            _start_record(request.node, placed, settings)
            _finish(request.node, check_and_keep(placed, dtype, settings), settings)

        test.__name__, test.__qualname__, test.__doc__ = draw.__name__, draw.__qualname__, draw.__doc__
        test.__module__ = draw.__module__
        test.npu_precision_case = case  # type: ignore[attr-defined]
        return test

    return decorate


__all__ = ["CASE_DTYPES", "configure", "precision_case", "op_case_settings_for"]
