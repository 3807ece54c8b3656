"""Run one dump case end to end and keep what happened as a plain record.

dump case -> concrete inputs -> device and golden runs -> one verdict per compared tensor. This
module knows nothing of pytest; the plugin turns a CaseResult into a pass, skip or failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .arguments import DescriptorError, DumpDataError, materialize
from .dump import DumpCase
from .error_profile import ErrorProfile, error_profile
from .judge import judge
from .ops import resolve
from .rules import Rules
from .runner import OpExecutionError, RunOutput, run_call
from .verdict import Status, Verdict


class CaseSkipped(Exception):
    """The case cannot be run here; the message says why (one of the documented reasons)."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


class CaseInputError(Exception):
    """The dump itself is unusable for this case: the message names the file and the API."""


@dataclass(frozen=True)
class Settings:
    device: torch.device
    rules: Rules = field(default_factory=Rules.default)


@dataclass(frozen=True)
class OutputVerdict:
    name: str  # "output.0", "grad.input_args[0]"
    verdict: Verdict
    profile: ErrorProfile | None = None  # the error distribution, for outputs that do not pass


@dataclass(frozen=True)
class CaseResult:
    case: DumpCase
    status: Status
    outputs: tuple[OutputVerdict, ...]
    notes: tuple[str, ...]
    seconds: float  # the whole case: inputs, both runs, metrics
    op_seconds: float  # the op itself on device and golden


def run_case(case: DumpCase, data_dir: Path, settings: Settings) -> CaseResult:
    """Run and judge one case; raise CaseSkipped or CaseInputError when it cannot be judged."""
    started = time.perf_counter()
    if case.skip is not None:
        raise CaseSkipped(case.skip.value, case.skip_message)
    op = resolve(case.api.rsplit(".", 1)[0])
    if op.unsupported:
        raise CaseSkipped("unsupported-op", op.unsupported)
    try:
        inputs = materialize(case, data_dir).with_device(settings.device)
    except (DumpDataError, DescriptorError) as exc:
        raise CaseInputError(str(exc)) from None
    backward = case.direction == "backward"
    if backward and not inputs.requires_grad:
        raise CaseSkipped("no-differentiable-input", f"{case.key}: no input of the forward call requires grad")
    try:
        run = run_call(op, inputs.args, inputs.kwargs, device=settings.device, backward=backward,
                       grad_outputs=inputs.grad_outputs if backward else None,
                       requires_grad=inputs.requires_grad, seed=case.seed)
    except OpExecutionError as exc:
        raise CaseInputError(f"{case.key} ({case.source}): {exc}") from None
    if run.error:
        raise CaseInputError(f"{case.key} ({case.source}): {run.error}")
    compared = run.grads if backward else run.outputs
    if not compared:
        raise CaseSkipped("nothing-to-compare", f"{case.key}: the call produced no tensor to compare")
    outputs = tuple(_judged(out, case, settings, run.notes) for out in compared)
    status = Status.worst(o.verdict.status for o in outputs)
    return CaseResult(case, status, outputs, run.notes, time.perf_counter() - started,
                      run.device_seconds + run.golden_seconds)


def _judged(out: RunOutput, case: DumpCase, settings: Settings, notes: tuple[str, ...]) -> OutputVerdict:
    verdict = judge(out.actual, out.golden, op=case.key, accumulation=out.accumulation, rules=settings.rules,
                    notes=notes)
    profile = None if verdict.status is Status.PASS else error_profile(out.actual, out.golden)
    return OutputVerdict(out.name, verdict, profile)
