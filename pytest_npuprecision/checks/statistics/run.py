"""One case of a statistics dump judged offline: by the invariants its op's definition puts on its statistics,
beside a baseline dump also by how far its outputs' statistics part from its partner's beyond what their
inputs' parting explains, and by checksums where the dumps have them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...dump.descriptors import CaseEntries, DescriptorError
from ...dump.dump_cases import DumpCase
from ...ops.catalogue import op_record
from ...ops.resolution import resolve
from ...precision.verdict import Status
from ..outcomes import CaseInputError, CaseResult, CaseSkipped, OutputVerdict
from .checksums import checksum_findings
from .invariants import NoInvariant, check_invariants
from .propagation import NoPropagation, parting_findings
from .summaries import CallSummaries, call_summaries
from .verdicts import CHECKSUM, INVARIANTS, PAIRED, Finding, verdict_of


@dataclass(frozen=True)
class StatisticsPartner:
    """The case's partner in the baseline dump: its entry, read, and the folder its tensor files would be in."""

    case: DumpCase
    entries: CaseEntries
    data_dir: Path


def run_statistics_case(case: DumpCase, entries: CaseEntries, settings: Any, partner: StatisticsPartner | None,
                        unpaired: tuple[str, str] | None) -> CaseResult:
    """Judge one case from its statistics; ``partner``: its baseline dump's entry, where the pair holds one.
    Raise CaseSkipped where nothing can be judged (the reason names what is missing)."""
    started = time.perf_counter()
    backward = case.direction == "backward"
    op = resolve(case.api.rsplit(".", 1)[0])
    try:
        ours = call_summaries(entries, backward)
        call = entries.call
        theirs = None if partner is None else call_summaries(partner.entries, backward)
    except DescriptorError as exc:
        raise CaseInputError(f"{case.key} ({case.source}): {exc}") from None
    notes: list[str] = []
    own, why_none = _invariants(op, call, ours, backward)
    parted: dict[str, list[Finding]] = {}
    sums: dict[str, list[Finding]] = {}
    if theirs is not None:
        sums = checksum_findings(ours, theirs, op)
        try:
            parted = parting_findings(case, partner, ours, theirs, op, settings, notes)
        except NoPropagation as exc:
            notes.append(f"not compared with its partner by statistics: {exc}")
    if unpaired is not None:
        notes.append(unpaired[1])
    if not own and not parted and not sums:
        reason = "no-invariant" if theirs is None else "no-statistics-judgement"
        raise CaseSkipped(reason, f"{case.key}: {why_none}" + (f"; {'; '.join(notes)}" if notes else ""))
    outputs = []
    for out in ours.outputs:
        found = own.get(out.name, []) + parted.get(out.name, []) + sums.get(out.name, [])
        if not found:
            continue
        standard = "+".join(s for s, part in ((INVARIANTS, own), (PAIRED, parted), (CHECKSUM, sums))
                            if part.get(out.name))
        outputs.append(OutputVerdict(out.name, verdict_of(found, standard, case.key, out.dtype_name, out.shape,
                                                          tuple(notes))))
    status = Status.worst(o.verdict.status for o in outputs)
    broken = _broken_here(op, own, partner, theirs, backward) if theirs is not None else []
    blamed = tuple(f"{f.output}: {f.text}" for f in broken) + \
        tuple(f"{name}: {f.text}" for name, found in parted.items() for f in found if f.check.status is not Status.PASS)
    bits = tuple(f"{name}: {f.text}" for name, found in sums.items() for f in found if f.check.metric == "parted_bits")
    state = "none" if partner is None and unpaired is None else "dump" if partner is not None else "unpaired"
    return CaseResult(case, status, tuple(outputs), tuple(notes), time.perf_counter() - started, 0.0,
                      baseline=state, unpaired=unpaired[0] if unpaired else "", parted=blamed + bits)


def _broken_here(op, own: dict[str, list[Finding]], partner: StatisticsPartner, theirs: CallSummaries,
                 backward: bool) -> list[Finding]:
    """The device's failing invariants that its partner meets: there the dumps part, whatever drifted upstream."""
    try:
        partner_own, _ = _invariants(op, partner.entries.call, theirs, backward)
    except DescriptorError:
        partner_own = {}
    return [mine for name, found in own.items() for mine, other in zip(found, partner_own.get(name, []))
            if mine.check.status is not Status.PASS and other.check.status is Status.PASS]


def _invariants(op, call, ours: CallSummaries, backward: bool) -> tuple[dict[str, list[Finding]], str]:
    """Each output's invariant checks by name, or ({}, why there are none)."""
    try:
        found = check_invariants(op_record(op.base_name).statistics, op, call, ours, backward)
    except NoInvariant as exc:
        return {}, str(exc)
    return by_output(found), ""


def by_output(found: list[Finding]) -> dict[str, list[Finding]]:
    grouped: dict[str, list[Finding]] = {}
    for item in found:
        grouped.setdefault(item.output, []).append(item)
    return grouped
