"""Run one dump case end to end and keep what happened as a plain record.

A dump case runs in four steps, each a call into its own layer: prepare (checks/prepared_case.py: the
entries become one replay.prepared.PreparedCall), replay (replay.runner.replay: device, golden and
baseline runs), judge (checks/judging.py: one verdict per compared tensor) and record (a CaseResult).
This module knows nothing of pytest; the plugin turns a CaseResult into a pass, skip or failure.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..backends import Backend, DumpedOutputs, float32_modes_of, load_backend
from ..common import DEFAULT_POLICY, missing_kernel
from ..dump import CaseEntries, DescriptorError, DumpCase, EntryUnreadable, dtype_differences
from ..ops import unknown_keywords
from ..precision import Accumulation, Metrics, Rules, Status, error_profile
from ..replay import (
    GoldenNotWide, OpExecutionError, PreparedCall, RunOutput, RunResult, golden_runs, input_elements, replay, threads,
)
from .baseline_dump import BaselineDump
from .collectives.fused import FUSED
from .collectives.ranks import DumpIndex
from .collectives.run import run_collective
from .dump_pairing import Partner, argument_difference
from .error_data import save_error_data
from .judging import judge, parted_checks
from .outcomes import CaseInputError, CaseResult, CaseSkipped, OutputVerdict
from .prepared_case import BaselineMismatch, PreparedCase, check_random, prepare
from .recorded_baseline import RecordedBaseline, RecordedCase
from .statistics.run import StatisticsPartner, run_statistics_case
from .statistics.summaries import what_was_recorded


class ReplayError(Exception):
    """The harness replayed the call wrongly: a harness error, never the dump's fault. msprobe
    recorded the call after it ran, so arguments that do not bind to the op we call mean that our
    name resolution or argument reconstruction is wrong, not the dump."""


@dataclass(frozen=True)
class Settings:
    device: Backend  # a torch.device or device string is turned into its backend
    rules: Rules = field(default_factory=Rules.default)
    golden: Backend = field(default_factory=lambda: Backend("cpu"))  # computes in float64
    # A live device in the device's dtype, a file of recorded metrics, or a second dump judged offline.
    baseline: Backend | RecordedBaseline | BaselineDump | None = None
    max_case_bytes: int | None = None  # a case estimated to need more is skipped as too-large; None: no limit
    float32: str = DEFAULT_POLICY  # how float32 ops run in TF32 or HF32 are judged (math_modes.POLICIES)
    error_data: Path | None = None  # where a failing case's tensors are saved (checks/error_data.py); None: nowhere

    def __post_init__(self) -> None:
        if not isinstance(self.device, Backend):
            object.__setattr__(self, "device", load_backend(self.device))

    def describe(self) -> dict[str, Any]:
        """What this run compared, with every backend's versions and settings: the reports' run.json."""
        baseline = self.baseline.info().as_dict() if isinstance(self.baseline, Backend) else \
            self.baseline.describe() if isinstance(self.baseline, BaselineDump) else None
        return {"device": self.device.info().as_dict(), "golden": self.golden_label,
                "float32": {"policy": self.float32, "device_modes": float32_modes_of(self.device).as_dict()},
                "golden_backend": self.golden.info().as_dict(), "baseline": self.baseline_label,
                "baseline_backend": baseline, "seed": "crc32(case id) per case"}

    @property
    def golden_label(self) -> str:
        return golden_label(self.golden)

    @property
    def baseline_label(self) -> str:
        return baseline_label(self.baseline)


def golden_label(golden: Backend) -> str:
    """'cpu float64': how headers, messages and reports name the golden."""
    return f"{golden.name} float64"


def baseline_label(baseline: Backend | RecordedBaseline | BaselineDump | None) -> str:
    """'none', 'cuda:0 same dtype', the recorded file's or the baseline dump's label."""
    if baseline is None:
        return "none"
    if isinstance(baseline, (RecordedBaseline, BaselineDump)):
        return baseline.label
    return f"{baseline.name} same dtype"


def run_case(case: DumpCase, data_dir: Path, settings: Settings, dumps: DumpIndex | None = None) -> CaseResult:
    """Run and judge one case; raise CaseSkipped or CaseInputError when it cannot be judged. ``dumps``: every
    dump.json of the run, where a collective case finds its other ranks' entries (without it, it skips)."""
    try:
        if (case.prefix == "Distributed" or case.name in FUSED) and case.input_error is None and \
                case.known_skip is None:
            return run_collective(case, settings, dumps)
        return _run_case(case, data_dir, settings)
    except EntryUnreadable as exc:  # its entries are read from dump.json as it runs, and the file may have changed
        raise CaseInputError(str(exc)) from None


def _run_case(case: DumpCase, data_dir: Path, settings: Settings) -> CaseResult:
    started = time.perf_counter()
    if case.input_error is not None:
        raise CaseInputError(case.input_error)
    if case.known_skip is not None:  # its key or a missing entry says it: nothing is read
        raise CaseSkipped(case.skip.value, case.skip_message)
    entries = case.read()  # once: every stage below reads these
    skip = case.decoded_skip(entries)
    if skip is not None:
        raise CaseSkipped(skip[0].value, skip[1])
    check_random(case, entries)
    # Its threads by the size its dump declares, before anything is made (replay/threads.py).
    with threads.for_case(input_elements(entries)):
        return _replayed(case, entries, data_dir, settings, started)


def _replayed(case: DumpCase, entries: CaseEntries, data_dir: Path, settings: Settings, started: float) -> CaseResult:
    """prepare -> replay -> judge -> record, each a call into its own layer."""
    if isinstance(settings.device, DumpedOutputs) and _by_statistics(case, entries, settings):
        return _statistics_case(case, entries, settings)
    prepared = prepare(case, entries, data_dir, settings)
    # Beside a baseline dump, its partner there is judged on its own first: its metrics are the baseline.
    partner, unpaired = _partner(case, settings) if isinstance(settings.baseline, BaselineDump) else (None, None)
    run = _replay(case, prepared.call, settings)
    judged = _judge(case, prepared, run, settings, partner, unpaired)
    return _record(case, prepared, run, judged, settings, partner, unpaired, started)


def _replay(case: DumpCase, call: PreparedCall, settings: Settings) -> RunResult:
    """The call run on the device, the golden and a live baseline; a failure as the case reports it."""
    live = settings.baseline if isinstance(settings.baseline, Backend) else None
    try:
        run = replay(call, device=settings.device, golden=settings.golden, baseline=live)
    except OpExecutionError as exc:
        raise _replay_failure(case, call, exc, settings) from None
    except GoldenNotWide as exc:
        raise CaseInputError(f"{case.key} ({case.source}): {exc}") from None
    if run.error:
        raise CaseInputError(f"{case.key} ({case.source}): {run.error}")
    return run


@dataclass(frozen=True)
class _Judged:
    """A replayed case's verdicts, with the notes and guesses they were judged with."""

    outputs: tuple[OutputVerdict, ...]
    notes: tuple[str, ...]
    guesses: tuple[str, ...]
    differences: tuple[str, ...]  # outputs judged in another dtype than the dump recorded


def _judge(case: DumpCase, prepared: PreparedCase, run: RunResult, settings: Settings, partner: CaseResult | None,
           unpaired: tuple[str, str] | None) -> _Judged:
    """Each compared tensor judged against its golden, beside a recorded or partner baseline where there is one."""
    backward = prepared.call.backward
    compared = run.grads if backward else run.outputs
    if not compared and isinstance(settings.device, DumpedOutputs):
        why = "; ".join(n for n in run.notes if "dump" in n) or "none of its recorded tensors is an argument's"
        raise CaseSkipped("no-recorded-output", f"{case.key}: no recorded result can be judged offline: {why}")
    if not compared:
        raise CaseSkipped("nothing-to-compare", f"{case.key}: the call produced no tensor to compare")
    differences = dtype_differences({o.name: o.actual.dtype for o in compared if o.actual.is_floating_point()},
                                    prepared.recorded_dtypes)
    guesses = (*prepared.guesses, *differences)
    rules = prepared.call.op.own_rules(settings.rules)
    overflowed = run.overflowed if backward else None
    notes = (*guesses, *run.notes, *([unpaired[1]] if unpaired else []))
    float32 = prepared.call.float32
    outputs = tuple(_judged(out, case, rules, notes, _recorded_metrics(case, out, prepared.recorded, settings),
                            overflowed, float32) if partner is None else
                    _judged_beside(out, case, rules, notes, partner, overflowed, float32) for out in compared)
    return _Judged(outputs, notes, guesses, tuple(differences))


def _record(case: DumpCase, prepared: PreparedCase, run: RunResult, judged: _Judged, settings: Settings,
            partner: CaseResult | None, unpaired: tuple[str, str] | None, started: float) -> CaseResult:
    """The case's record: its verdicts, timings and baseline state, and its tensors saved where it fails."""
    outputs = judged.outputs
    compared = run.grads if prepared.call.backward else run.outputs
    status = Status.worst(o.verdict.status for o in outputs)
    saved = None
    if settings.error_data is not None and status in (Status.ERROR, Status.WARNING):
        inputs = prepared.host_inputs
        saved = save_error_data(settings.error_data, case.case_id, inputs.args, inputs.kwargs, compared)
    live = isinstance(settings.baseline, Backend)
    state = "none" if settings.baseline is None else "live" if live else "recorded" if prepared.recorded else \
        "dump" if partner else "unpaired" if unpaired else "missing"
    partner_seconds = partner.op_seconds if partner else 0.0
    return CaseResult(case, status, outputs, judged.notes, time.perf_counter() - started,
                      run.device_seconds + run.golden_seconds + run.baseline_seconds + partner_seconds,
                      prepared.fingerprint, state, guesses=judged.guesses, dtype_differences=judged.differences,
                      float32_mode=run.float32_mode if any(o.actual.dtype == torch.float32 for o in compared) else None,
                      error_data=saved, partner=partner, unpaired=unpaired[0] if unpaired else "",
                      parted=tuple(f"{o.name}: {c.describe()}" for o in outputs if partner
                                   for c in parted_checks(o.verdict)))


def _by_statistics(case: DumpCase, entries: CaseEntries, settings: Settings) -> bool:
    """Offline, a case whose results the dump has no file of (a statistics dump), or whose partner in a
    statistics baseline dump has none, is judged by its statistics."""
    try:
        saved, summarized = what_was_recorded(entries, case.direction == "backward")
        if not saved:
            return summarized
    except DescriptorError:
        return False  # the replay's path reports the malformed entry
    baseline = settings.baseline
    if isinstance(baseline, BaselineDump) and baseline.statistics:
        partner = baseline.pairing.partner(case)
        return partner is not None and partner.dump.path in baseline.statistics
    return False


def _statistics_case(case: DumpCase, entries: CaseEntries, settings: Settings) -> CaseResult:
    """The case judged by its statistics: its invariants, and beside a baseline dump its partner's."""
    partner, unpaired = None, None
    if isinstance(settings.baseline, BaselineDump):
        found, unpaired = _paired_entry(case, settings)
        if found is not None:
            try:
                partner = StatisticsPartner(found.case, found.case.read(), found.dump.data_dir)
            except EntryUnreadable as exc:  # the baseline dump's fault: this entry is judged on its own
                unpaired = ("partner-not-judged", f"no baseline: its partner {found.case.case_id} cannot be read: {exc}")
    return run_statistics_case(case, entries, settings, partner, unpaired)


def _replay_failure(case: DumpCase, call: PreparedCall, exc: OpExecutionError, settings: Settings) -> Exception:
    """The op raised. When the float64 golden runs the same inputs, the dump is fine and this run
    cannot replay the call on its device: a skip that says so. A TypeError on both sides is our
    replay binding the arguments wrongly: a ReplayError. Otherwise the dump's arguments do not fit
    the op: an input error of the dump."""
    op = call.op
    if type(exc.__cause__).__name__ == "RandomFusedCall":  # a fused op's own check: its dropout is on
        return CaseSkipped("random-op", f"{case.key}: {exc.__cause__}")
    if type(exc.__cause__).__name__ == "UnjudgedFusedCall":  # a mode its reference does not compute
        return CaseSkipped("no-reference", f"{case.key}: {op.api_name}: {exc.__cause__}; register a reference "
                                           f"for it with register_op to judge it")
    lacking = missing_kernel(op.api_name, exc.side, exc.__cause__) if exc.side.startswith("device") else None
    if lacking is not None:  # the device's torch is not built for this dtype: no fault of the dump or the replay
        return CaseSkipped("no-kernel", f"{case.key}: {lacking}")
    if exc.side.startswith("device") and golden_runs(op, call.args, call.kwargs, settings.golden):
        return CaseSkipped("replay-error", f"{case.key}: the device raised where the float64 golden runs the same "
                                           f"inputs, so the dump is not at fault: {exc}")
    # The arguments do not bind: the replay chose them, not the model. Unless the dump names a keyword
    # the op has no parameter for: no call of it could have been recorded so, and the dump is at fault.
    if isinstance(exc.__cause__, TypeError) and op.func is not None \
            and not unknown_keywords(op.func, call.kwargs):
        return ReplayError(f"{case.key} ({case.source}): the replay is at fault, not the dump: msprobe recorded "
                           f"this call as the model made it, but the replay's arguments do not bind: {exc}")
    return CaseInputError(f"{case.key} ({case.source}): {exc}")


def _paired_entry(case: DumpCase, settings: Settings) -> tuple[Partner | None, tuple[str, str] | None]:
    """(the case's entry in the baseline dump, None), or (None, (why in one word, why in a note)) where it has none:
    no such entry, no dump of its step and rank, or arguments of other kinds, shapes or dtypes."""
    pairing = settings.baseline.pairing
    partner = pairing.partner(case)
    where = settings.baseline.path
    if partner is None:
        if pairing.holds_place_of(case):
            return None, ("absent", f"no baseline: the baseline dump {where} holds no entry {case.key}")
        return None, ("no-such-dump", f"no baseline: the baseline dump {where} holds no dump of this step and rank")
    differs = argument_difference(case, partner.case)
    if differs:
        return None, ("arguments-differ", f"no baseline: not paired with {partner.case.case_id} of the baseline dump "
                                          f"{where}, whose arguments differ: {differs}")
    return partner, None


def _partner(case: DumpCase, settings: Settings) -> tuple[CaseResult | None, tuple[str, str] | None]:
    """(the case's partner in the baseline dump, judged on its own against the golden of its own
    recorded inputs, None), or (None, (why in one word, why in a note)) where it has none."""
    partner, unpaired = _paired_entry(case, settings)
    if partner is None:
        return None, unpaired
    own = dataclasses.replace(settings, device=DumpedOutputs(), baseline=None, error_data=None)
    try:
        return _run_case(partner.case, partner.dump.data_dir, own), None
    except (CaseSkipped, CaseInputError, EntryUnreadable) as exc:
        reason = f" [{exc.reason}]" if isinstance(exc, CaseSkipped) else ""
        return None, ("partner-not-judged", f"no baseline: its partner {partner.case.case_id} in the baseline dump "
                                            f"{settings.baseline.path} cannot be judged{reason}: {exc}")


def _judged_beside(out: RunOutput, case: DumpCase, rules: Rules, notes: tuple[str, ...], partner: CaseResult,
                   overflowed: str | None, float32: str) -> OutputVerdict:
    """An output judged beside its partner's metrics, where the partner has the same output in the same
    dtype and shape; else on its own, saying why."""
    dtype = str(out.judged_dtype or out.actual.dtype).removeprefix("torch.")
    theirs = next((o.verdict.metrics for o in partner.outputs if o.name == out.name), None)
    if theirs is None or theirs.dtype != dtype or tuple(theirs.shape) != tuple(out.actual.shape):
        was = "not judged" if theirs is None else f"{theirs.dtype}{list(theirs.shape)}"
        notes = (*notes, f"{out.name}: no baseline: its partner {partner.case.case_id}'s {out.name} is {was}, "
                         f"here {dtype}{list(out.actual.shape)}")
        theirs = None
    return _judged(out, case, rules, notes, theirs, overflowed, float32)


def _recorded_metrics(case: DumpCase, out: RunOutput, entry: RecordedCase | None,
                      settings: Settings) -> Metrics | None:
    if entry is None:
        return None
    recorded = entry.outputs.get(out.name)
    dtype = str(out.actual.dtype).removeprefix("torch.")
    if recorded is None or recorded.dtype != dtype or tuple(recorded.shape) != tuple(out.actual.shape):
        was = "absent" if recorded is None else f"{recorded.dtype}{list(recorded.shape)}"
        raise BaselineMismatch(
            f"{case.key} ({case.source}): {out.name} is {dtype}{list(out.actual.shape)} here but {was} in the "
            f"baseline {settings.baseline.path}: the recording ran another op or another dtype; record it again")
    return recorded.metrics


def _judged(out: RunOutput, case: DumpCase, rules: Rules, notes: tuple[str, ...],
            recorded: Metrics | None, overflowed: str | None, float32: str) -> OutputVerdict:
    baseline = out.baseline if out.baseline is not None else recorded
    verdict = judge(out.actual, out.golden, baseline=baseline, op=case.key, accumulation=out.accumulation or Accumulation(),
                    rules=rules, notes=notes, overflowed=overflowed, dtype=out.judged_dtype, spread=out.spread,
                    float32=float32)
    profile = None if verdict.status is Status.PASS else error_profile(out.actual, out.golden)
    return OutputVerdict(out.name, verdict, profile)
