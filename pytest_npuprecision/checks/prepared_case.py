"""A dump case made ready to replay: its entries turned into one ``PreparedCall``, and what judging it reads.

The first of a dump case's four steps (checks/case_run.py): prepare, replay (replay.runner.replay),
judge, record. Preparing asks the catalogue whether the call draws random numbers, resolves the op
and its namesake, refuses what cannot run (an op this torch lacks, an unsafe argument, a backward with
nothing to differentiate, a case past the memory budget), rebuilds the arguments, fingerprints them,
finds the case in a recorded baseline and infers autocast. Each refusal is the CaseSkipped,
CaseInputError or BaselineMismatch the case reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..backends import DumpedOutputs
from ..common import format_size
from ..dump import (
    CallInputs, CaseEntries, DescriptorError, DumpCase, DumpDataError, InputFingerprint, NothingRecorded, fingerprint,
    forward_output_shapes, forward_output_tensors, inferred_autocast, materialize, recorded_dtypes, recorded_results,
)
from ..ops import (
    NoSingleNamesake, choose_namesake, golden_on_dtype_grid, op_segment, random_reason, resolve, unsafe_argument,
)
from ..replay import PreparedCall, case_bytes
from .baseline_dump import BaselineDump
from .outcomes import CaseInputError, CaseSkipped
from .recorded_baseline import RecordedBaseline, RecordedCase


class BaselineMismatch(CaseInputError):
    """The recorded baseline was made from other inputs or outputs than this run's: no fair comparison."""


@dataclass(frozen=True)
class PreparedCase:
    """A dump case's call, ready to replay, and what judging and recording the case read beside it."""

    call: PreparedCall
    host_inputs: CallInputs  # the arguments as rebuilt, before the dumped devices were replaced: saved on failure
    fingerprint: InputFingerprint
    recorded: RecordedCase | None  # the case's entry in a recorded baseline file
    guesses: tuple[str, ...]  # what rebuilding the arguments and inferring autocast assumed
    recorded_dtypes: list[torch.dtype] | None  # the float dtypes the dump recorded for what is compared


def check_random(case: DumpCase, entries: CaseEntries) -> None:
    """Skip a case whose recorded call draws random numbers, as the catalogue says: no golden can redraw them.
    ``entries``' call must decode (DumpCase.decoded_skip found nothing)."""
    call = entries.call
    # by its bare name: an aten key (Aten.native_dropout.default) names its overload last
    why = random_reason(op_segment(f"{case.prefix}.{case.name}"), call.args, call.kwargs)
    if why:
        raise CaseSkipped("random-op", case.skip_message_of(
            f"{case.name} draws random numbers ({why}), so device and golden cannot agree"))


def prepare(case: DumpCase, entries: CaseEntries, data_dir: Path, settings: Any) -> PreparedCase:
    """The case's call, ready to replay under ``settings`` (checks.case_run.Settings)."""
    op = resolve(case.api.rsplit(".", 1)[0])
    offline = isinstance(settings.device, DumpedOutputs)
    if op.unsupported and not (offline and op.reference is not None):
        raise CaseSkipped(op.unsupported_reason, op.unsupported)
    _check_budget(case, entries, settings)
    try:
        materialized = materialize(case, data_dir, entries=entries)
        results = recorded_results(case, entries, data_dir) if offline else None
    except (DumpDataError, DescriptorError) as exc:
        raise CaseInputError(str(exc)) from None
    except NothingRecorded as exc:
        raise CaseSkipped("no-recorded-output", str(exc)) from None
    if op.namesakes:  # Torch.svd: torch.svd or torch.linalg.svd, as the recorded call says
        try:
            op = choose_namesake(op, materialized.args, materialized.kwargs, forward_output_shapes(entries),
                                 lambda: forward_output_tensors(case, entries, data_dir))
        except NoSingleNamesake as exc:
            raise CaseSkipped("ambiguous-op", f"{case.key}: {exc}") from None
    unsafe = unsafe_argument(op.base_name, materialized.args, materialized.kwargs)
    if unsafe is not None:
        raise CaseSkipped("unsupported-op", f"{case.key}: {unsafe}")
    backward = case.direction == "backward"
    if backward and not materialized.requires_grad:
        raise CaseSkipped("no-differentiable-input", f"{case.key}: no input of the forward call requires grad")
    # Before the dumped devices are replaced: the fingerprint must not depend on this machine.
    prints = fingerprint(materialized)
    recorded = _recorded(case, prints, settings.baseline)
    inputs = materialized.with_device(settings.device.device)
    forward_dtypes = recorded_dtypes(entries.output(), "output")
    autocast, inferred = inferred_autocast(op.base_name, _leaves(inputs.args, inputs.kwargs), forward_dtypes,
                                           _has_dtype(inputs.args, inputs.kwargs), op.inplace)
    call = PreparedCall(op, inputs.args, inputs.kwargs, backward=backward,
                        grad_outputs=inputs.grad_outputs if backward else None, requires_grad=inputs.requires_grad,
                        seed=case.seed, autocast=autocast, recorded=results, float32=settings.float32,
                        golden_dtype=None if golden_on_dtype_grid(settings.rules, op.base_name) else torch.float64)
    compared_dtypes = recorded_dtypes(entries.output(backward=True), "output") if backward else forward_dtypes
    return PreparedCase(call, materialized, prints, recorded, (*inputs.guesses, *([inferred] if inferred else [])),
                        compared_dtypes)


def _leaves(args, kwargs) -> list[Any]:
    found: list[Any] = []
    stack = [*args, *kwargs.values()]
    while stack:
        value = stack.pop()
        if isinstance(value, (list, tuple)):
            stack.extend(value)
        else:
            found.append(value)
    return found


def _has_dtype(args, kwargs) -> bool:
    """A dtype argument chooses the output's dtype itself (sum(dtype=), softmax(dtype=), to)."""
    return any(isinstance(v, torch.dtype) for v in _leaves(args, kwargs))


def _check_budget(case: DumpCase, entries: CaseEntries, settings: Any) -> None:
    """Skip a case whose dumped shapes need more memory than the budget, before anything is allocated."""
    if settings.max_case_bytes is None:
        return
    # A baseline dump's partner is judged before the case, not beside it: it needs no room of its own.
    beside = settings.baseline is not None and not isinstance(settings.baseline, BaselineDump)
    need = case_bytes(entries, direction=case.direction, baseline=beside)
    if need > settings.max_case_bytes:
        raise CaseSkipped("too-large", f"{case.key}: its tensors need about {format_size(need)} on the host, the device "
                                       f"and the golden, past the budget of {format_size(settings.max_case_bytes)}; "
                                       f"raise --npu-precision-max-case-memory to run it")


def _recorded(case: DumpCase, prints: InputFingerprint, baseline) -> RecordedCase | None:
    """This case's entry in a recorded baseline; None when there is no file or the file lacks the case."""
    if not isinstance(baseline, RecordedBaseline):
        return None
    entry = baseline.cases.get(case.case_id)
    if entry is None:
        return None
    difference = prints.difference(entry.fingerprint)
    if difference:
        raise BaselineMismatch(
            f"{case.key} ({case.source}): the baseline {baseline.path} was recorded from other inputs: "
            f"{difference}. Compare runs of the same dump, with the same torch version (synthetic inputs "
            f"come from torch's generators), or record the baseline again")
    return entry
