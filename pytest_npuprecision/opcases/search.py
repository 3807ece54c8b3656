"""Check one op case in one dtype: search it with Hypothesis, or run its fixed inputs once.

A search runs each example through run_example, tells Hypothesis the worst metric-to-limit ratio
with ``target()`` so that it steers towards the largest error, and on a failure lets Hypothesis
shrink the inputs; the last failing example it ran is the shrunk one, and it is kept (and written
as a regression case by the caller). Profiles fix how much searching a run does.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch
from hypothesis import HealthCheck, Phase, Verbosity, given, seed
from hypothesis import settings as hypothesis_settings
from hypothesis import target
from hypothesis.database import DirectoryBasedExampleDatabase
from hypothesis.errors import FailedHealthCheck, Flaky, HypothesisException, Unsatisfiable

from ..backends import Backend, load_backend
from ..checks import baseline_label, golden_label
from ..common import DEFAULT_POLICY
from ..precision import Rules
from .draw import CaseInputError, call_strategy, fixed_call
from .run import CaseSpecError, ExampleResult, OpUnavailable, Target, prepare, run_example
from .schema import SchemaError
from .spec import Call, OpCase, op_label


@dataclass(frozen=True)
class Profile:
    """How hard to search: chosen with --npu-precision-profile."""

    name: str
    max_examples: int  # per case and dtype, unless the case sets max_examples
    scale: int  # multiplies a case's own max_examples
    derandomize: bool  # the same examples on every run, from the case id
    database: bool  # remember failing examples in <rootdir>/.hypothesis/npu-precision and replay them first
    description: str
    # Shrinking a failure runs the op again for every smaller example Hypothesis tries: hundreds to
    # thousands of runs. Past these, the smallest failing example found so far stands.
    shrink_examples: int = 100
    shrink_seconds: float = 60.0


PROFILES = {
    "ci": Profile("ci", 25, 1, True, False, "deterministic, no example database, bounded examples and shrinking",
                  shrink_examples=100, shrink_seconds=60.0),
    "dev": Profile("dev", 50, 2, False, True, "random examples, failures replayed from a local database",
                   shrink_examples=200, shrink_seconds=120.0),
    "thorough": Profile("thorough", 1000, 20, False, True, "many random examples, local database",
                        shrink_examples=2000, shrink_seconds=600.0),
}


@dataclass(frozen=True)
class OpCaseSettings:
    device: Backend  # a torch.device or device string is turned into its backend
    rules: Rules = field(default_factory=Rules.default)
    profile: Profile = PROFILES["ci"]
    regressions: Path | None = None  # where failing examples are written; None: nowhere
    root: Path = field(default_factory=Path.cwd)  # paths in messages and in regression files are relative to it
    golden: Backend = field(default_factory=lambda: Backend("cpu"))
    strict_warnings: bool = False  # a warning fails an example too (--npu-precision-strict-warnings)
    baseline: Backend | None = None  # a live device running each example in its dtype too
    float32: str = DEFAULT_POLICY  # how float32 ops run in TF32 or HF32 are judged (math_modes.POLICIES)
    # Told what a long search is doing, every PROGRESS_SECONDS: a line for the terminal; None: nothing said.
    progress: Callable[[str], None] | None = field(default=None, compare=False)

    @property
    def compared(self) -> str:
        """'cpu vs golden cpu float64, baseline cuda:0 same dtype'."""
        baseline = "" if self.baseline is None else f", baseline {baseline_label(self.baseline)}"
        return f"{self.device.name} vs golden {golden_label(self.golden)}{baseline}"

    def __post_init__(self) -> None:
        if not isinstance(self.device, Backend):
            object.__setattr__(self, "device", load_backend(self.device))


@dataclass(frozen=True)
class Outcome:
    """What checking one case in one dtype came to."""

    case: OpCase
    dtype: torch.dtype
    examples: int  # examples run, shrinking included
    seconds: float
    op_name: str  # the op as the verdicts name it
    reference_label: str  # what the golden computes: "torch.nn.functional.gelu in float64"
    call: Call | None = None  # the failing example (shrunk), when one failed
    result: ExampleResult | None = None
    problem: str | None = None  # the case cannot run as written: a usage error, not a precision failure
    unavailable: str | None = None  # this torch lacks the op or its kernel for the dtype: a skip
    notes: tuple[str, ...] = ()
    regression: Path | None = None  # the regression case written for the failing example
    searched: int = 0  # examples run before the failing one was found; the rest shrank it
    worst_seen: float = 0.0  # the largest metric-to-limit ratio of any failing example
    shrink_stopped: str | None = None  # why shrinking stopped before Hypothesis finished it

    @property
    def passed(self) -> bool:
        return self.problem is None and self.unavailable is None and (self.result is None or not self.result.failed)


class _ExampleFailed(Exception):
    """Raised inside the Hypothesis test so that it shrinks; carries nothing the caller needs."""


def examples_for(case: OpCase, profile: Profile) -> int:
    return case.max_examples * profile.scale if case.max_examples else profile.max_examples


def hypothesis_settings_for(case: OpCase, profile: Profile, root: Path) -> hypothesis_settings:
    database = DirectoryBasedExampleDatabase(root / ".hypothesis" / "npu-precision") if profile.database else None
    return hypothesis_settings(
        max_examples=examples_for(case, profile), derandomize=profile.derandomize, database=database,
        deadline=None, report_multiple_bugs=False, print_blob=False, verbosity=Verbosity.quiet,
        # explain traces every line of a failing example (slow); the regression file is the reproduction.
        phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
        suppress_health_check=(HealthCheck.too_slow,),
    )


def check_case(case: OpCase, dtype: torch.dtype, settings: OpCaseSettings) -> Outcome:
    """Check one case in one dtype; usage problems come back in ``problem``, what this torch lacks in
    ``unavailable``, never raised."""
    started = time.perf_counter()
    try:
        target_ = prepare(case, settings.rules)
    except SchemaError as exc:
        return Outcome(case, dtype, 0, time.perf_counter() - started, op_label_of(case), "",
                       problem=f"{case.source}, case {case.id!r}, {exc}")
    except OpUnavailable as exc:
        return Outcome(case, dtype, 0, time.perf_counter() - started, op_label_of(case), "", unavailable=str(exc))

    def outcome(examples: int, **found) -> Outcome:
        if "problem" in found:
            found["problem"] = f"{case.source}, case {case.id!r}: {found['problem']}"
        return Outcome(case, dtype, examples, time.perf_counter() - started, target_.op.api_name,
                       target_.reference_label, **found)

    try:
        if case.fixed:
            try:
                call = fixed_call(case, dtype)
                result = run_example(case, target_, call, settings.device, settings.golden, settings.baseline,
                                     strict_warnings=settings.strict_warnings, float32=settings.float32)
                return outcome(1, call=call, result=result)
            except (CaseInputError, CaseSpecError) as exc:
                return outcome(1, problem=str(exc))
        return _search(case, dtype, target_, settings, outcome)
    except OpUnavailable as exc:
        return outcome(1, unavailable=str(exc))


def op_label_of(case: OpCase) -> str:
    return op_label(case.op) or "?"


# A search that runs longer than this says what it is doing, and again after each as long.
PROGRESS_SECONDS = 5.0


# A failure shrinks only while it stays this far past its limit: shrinking a 3x failure down to a
# 1.003x one would make a real bug read like chance. Failures closer to the limit are kept aside.
CLEAR_MARGIN = 2.0


def _search(case: OpCase, dtype: torch.dtype, target_: Target, settings: OpCaseSettings, outcome) -> Outcome:
    last: list[tuple[Call, ExampleResult | None, str | None]] = []
    count = [0]
    searched: list[int] = []
    worst: list[float] = [0.0]
    marginal: list[tuple[Call, ExampleResult]] = []

    profile = settings.profile
    shrinking = _ShrinkBudget(profile.shrink_examples, profile.shrink_seconds)
    started, said = time.perf_counter(), [time.perf_counter()]
    planned = examples_for(case, profile)
    seen = [0.0]  # the worst example's severity, failing or not

    def tell() -> None:
        now = time.perf_counter()
        if settings.progress is None or now - said[0] < PROGRESS_SECONDS:
            return
        said[0] = now
        doing = (f"shrinking a failure {worst[0]:.3g}x past its limit" if shrinking.started is not None else
                 f"searching, the worst example so far at {seen[0]:.3g}x its limit")
        settings.progress(f"{case.item_name(dtype)}: {doing}; {count[0]} examples run (the profile asks for "
                          f"{planned}) in {now - started:.0f} s")

    def check(example: Call) -> None:
        tell()
        if not shrinking.spent():
            count[0] += 1
            try:
                result = run_example(case, target_, example, settings.device, settings.golden, settings.baseline,
                                     strict_warnings=settings.strict_warnings, float32=settings.float32)
            except CaseSpecError as exc:
                last.append((example, None, str(exc)))
                raise
            target(result.severity, label="worst metric / limit")
            seen[0] = max(seen[0], result.severity)
            if not result.failed:
                return
            worst[0] = max(worst[0], result.severity)
            if 1.0 <= result.severity < CLEAR_MARGIN:
                if not marginal or result.severity > marginal[0][1].severity:
                    marginal[:] = [(example, result)]
                return  # not a failure to shrink: the search goes on for a clear one
            searched[:1] = searched[:1] or [count[0]]
            last.append((example, result, None))
            shrinking.start()
        # Past the budget every example "fails" without running, from this one raise (Hypothesis tells
        # failures apart by where they are raised): its shrinker ends in microseconds, and the smallest
        # real failure found so far (last) is the one reported.
        raise _ExampleFailed

    # Tells the cases' otherwise identical test functions apart in the database (the attribute
    # Hypothesis's own pytest plugin sets for parametrized tests).
    case_key = f"{case.source}::{case.item_name(dtype)}".encode()
    check._hypothesis_internal_add_digest = case_key  # type: ignore[attr-defined]
    test = given(call_strategy(case, dtype))(hypothesis_settings_for(case, settings.profile, settings.root)(check))
    if settings.profile.derandomize:
        # The seed comes from the case alone. derandomize would also hash this function's source, so
        # that any edit here would draw other examples for every case (and move CI's verdicts).
        test = seed(zlib.crc32(case_key))(test)
    notes: tuple[str, ...] = ()
    try:
        test()
    except (_ExampleFailed, CaseSpecError):
        pass
    except Flaky:
        notes = ("the failing example did not fail again when replayed: the op is not deterministic",)
    except (CaseInputError, Unsatisfiable, FailedHealthCheck) as exc:
        return outcome(count[0], problem=f"Hypothesis cannot draw its inputs ({type(exc).__name__}: "
                                         f"{_first_line(exc)}): make its shapes smaller or its ranges wider")
    except HypothesisException as exc:
        return outcome(count[0], problem=f"{type(exc).__name__}: {_first_line(exc)}")
    if not last and marginal:
        call, result = marginal[0]
        notes += (f"every failing example is within {CLEAR_MARGIN:g}x of its limit (the worst shown, at "
                  f"{result.severity:.3g}x): barely over, so it may be chance; it is not shrunk",)
        return outcome(count[0], call=call, result=result, notes=notes, searched=count[0], worst_seen=worst[0])
    if not last:
        return outcome(count[0])
    call, result, spec_problem = last[-1]
    if spec_problem is not None:
        return outcome(count[0], call=call, problem=spec_problem)
    return outcome(count[0], call=call, result=result, notes=notes, searched=searched[0] if searched else count[0],
                   worst_seen=worst[0], shrink_stopped=shrinking.why())


class _ShrinkBudget:
    """Examples and seconds a failure may spend shrinking, counted from the first clear failure."""

    def __init__(self, examples: int, seconds: float):
        self.examples, self.seconds = examples, seconds
        self.started: float | None = None
        self.runs = 0
        self.stopped: str | None = None

    def start(self) -> None:
        if self.started is None:
            self.started = time.perf_counter()

    def spent(self) -> bool:
        if self.started is None or self.stopped is not None:
            return self.stopped is not None
        self.runs += 1
        if self.runs > self.examples:
            self.stopped = f"after {self.examples} examples"
        elif time.perf_counter() - self.started > self.seconds:
            self.stopped = f"after {self.seconds:g} s"
        return self.stopped is not None

    def why(self) -> str | None:
        return None if self.stopped is None else f"shrinking stopped early, {self.stopped} (the profile's bound)"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


__all__ = ["PROFILES", "OpCaseSettings", "Outcome", "Profile", "check_case"]
