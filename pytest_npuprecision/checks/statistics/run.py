"""One case of a statistics dump judged offline: by the invariants its op's definition puts on its statistics,
beside a baseline dump also by how far its outputs' statistics part from its partner's beyond what their
inputs' parting explains, and by checksums where the dumps have them."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...dump import CaseEntries, DescriptorError, DumpCase
from ...ops import op_record, resolve
from ...precision import Status
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
        own, why_none = _invariants(op, entries.call, ours, backward)
    except DescriptorError as exc:
        raise CaseInputError(f"{case.key} ({case.source}): {exc}") from None
    notes: list[str] = []
    theirs, partner_own = None, {}
    if partner is not None:
        try:
            theirs = call_summaries(partner.entries, backward)
            partner_own, _ = _invariants(op, partner.entries.call, theirs, backward)
        except DescriptorError as exc:  # the partner's fault: this entry is judged on its own
            partner, unpaired = None, ("partner-not-judged", f"no baseline: its partner {partner.case.case_id} "
                                                             f"cannot be read: {exc}")
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
    outputs = _verdicts(case, ours, ((INVARIANTS, own), (PAIRED, parted), (CHECKSUM, sums)), tuple(notes))
    # Where the dumps part: an invariant the device breaks and its partner keeps, a statistic parted beyond what
    # its inputs explain, or bits that differ from the same bits in.
    broken = [mine for name, found in own.items() for mine, other in zip(found, partner_own.get(name, []))
              if mine.check.status is not Status.PASS and other.check.status is Status.PASS]
    blamed = [*broken, *(f for found in parted.values() for f in found if f.check.status is not Status.PASS),
              *(f for found in sums.values() for f in found if f.check.metric == "parted_bits")]
    judged_partner = None
    if partner is not None:  # its own verdict: the invariants it keeps or breaks
        alone = _verdicts(partner.case, theirs, ((INVARIANTS, partner_own),), ())
        judged_partner = CaseResult(partner.case, Status.worst(o.verdict.status for o in alone), alone, (), 0.0, 0.0)
    state = "dump" if partner is not None else "unpaired" if unpaired is not None else "none"
    return CaseResult(case, Status.worst(o.verdict.status for o in outputs), outputs, tuple(notes),
                      time.perf_counter() - started, 0.0, baseline=state, partner=judged_partner,
                      unpaired=unpaired[0] if unpaired else "", parted=tuple(f"{f.output}: {f.text}" for f in blamed))


def _verdicts(case: DumpCase, summaries: CallSummaries, parts, notes: tuple[str, ...]) -> tuple[OutputVerdict, ...]:
    """One verdict per output that any part judged, naming the standards that judged it."""
    verdicts = []
    for out in summaries.outputs:
        found = [f for _, part in parts for f in part.get(out.name, [])]
        if found:
            standard = "+".join(name for name, part in parts if part.get(out.name))
            verdicts.append(OutputVerdict(out.name, verdict_of(found, standard, case.key, out.dtype_name, out.shape,
                                                               notes)))
    return tuple(verdicts)


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
