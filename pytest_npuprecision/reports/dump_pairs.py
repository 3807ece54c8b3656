"""Two dumps judged side by side: how their entries paired, and where they first part.

Read from the case records alone (checks/case_run.py sets ``baseline_state``, ``unpaired`` and
``parted``; plugin/collecting.py records the baseline's entries the device dump lacks), so the xdist
controller tells it as a serial run does.
"""

from __future__ import annotations

from collections import Counter

from ..common import shown_key

_LISTED = 3
# Why a device entry had no partner (CaseResult.unpaired), as the summary says it.
_WHY = {"absent": "not in the baseline dump", "no-such-dump": "no baseline dump of their step and rank",
        "arguments-differ": "argument shapes or dtypes differ", "partner-not-judged": "the partner cannot be judged"}


def has_dump_baseline(records: list[dict]) -> bool:
    return any(r.get("baseline_state") in ("dump", "unpaired", "baseline-only") for r in records)


def pairing_line(records: list[dict]) -> str | None:
    """'pairing: 40 of 44 judged entries paired with the baseline dump; 4 judged on their own (...); ...'."""
    if not has_dump_baseline(records):
        return None
    states = Counter(r.get("baseline_state") for r in records)
    judged = states["dump"] + states["unpaired"]
    line = f"pairing: {states['dump']} of {judged} judged entries paired with the baseline dump"
    unpaired = [r for r in records if r.get("baseline_state") == "unpaired"]
    if unpaired:
        why = Counter(r.get("unpaired", "") for r in unpaired)
        parts = [f"{n} {_WHY.get(kind, kind)} ({_named([r for r in unpaired if r.get('unpaired', '') == kind])})"
                 for kind, n in why.most_common()]
        line += f"; {len(unpaired)} judged on their own standard: " + ", ".join(parts)
    only = [r for r in records if r.get("baseline_state") == "baseline-only"]
    if only:
        line += f"; {len(only)} only in the baseline dump ({_named(only)})"
    failing = baseline_failures(records)
    if failing:
        line += (f"; the baseline dump's own entry fails its standard in {len(failing)} pairs "
                 f"({', '.join(_partner_ids(failing))})")
    return line


def paired_nothing(records: list[dict]) -> bool:
    """A baseline dump was given, entries were judged, and not one paired: two dumps of different models."""
    states = Counter(r.get("baseline_state") for r in records)
    return has_dump_baseline(records) and states["unpaired"] > 0 and not states["dump"]


def nothing_paired_line(records: list[dict]) -> str:
    unpaired = [r for r in records if r.get("baseline_state") == "unpaired"]
    return (f"NOTHING PAIRED: none of the {len(unpaired)} judged entries has a partner in the baseline dump, so "
            f"nothing was compared with it; are they dumps of the same model, step and rank? Each entry was "
            f"judged on its own standard")


def baseline_failures(records: list[dict]) -> list[dict]:
    """The paired records whose partner in the baseline dump fails its own standard, in execution order."""
    return sorted((r for r in records if (r.get("baseline_case") or {}).get("status") in ("error", "warning")),
                  key=lambda r: (r["location"], r["order"]))


def _partner_ids(records: list[dict]) -> list[str]:
    shown = [r["baseline_case"]["case_id"] for r in records[:_LISTED]]
    return shown + ([f"and {len(records) - _LISTED} more"] if len(records) > _LISTED else [])


def first_parting(records: list[dict]) -> dict[str, dict]:
    """Per step and rank, the first record in execution order whose device errs worse than the baseline
    dump beyond the benchmark's limits."""
    firsts: dict[str, dict] = {}
    for record in sorted(records, key=lambda r: (r["location"], r["order"])):
        if record.get("parted"):
            firsts.setdefault(record["location"] or record["source"], record)
    return dict(sorted(firsts.items()))


def parting_lines(records: list[dict]) -> list[str]:
    """'where the dumps first part in step0/rank0: Functional.layer_norm.0.forward (output.0: ...)'."""
    if not has_dump_baseline(records):
        return []
    firsts = first_parting(records)
    failing = baseline_failures(records)
    caveat = (f"; but the baseline dump fails its own standard in {len(failing)} pairs, first "
              f"{failing[0]['baseline_case']['case_id']}: where both err, the pair does not part"
              if failing else "")
    if not firsts:
        return ["where the dumps part: nowhere; no API errs worse than its baseline dump's beyond the benchmark "
                f"limits{caveat}"]
    return [f"where the dumps first part in {location or 'dump'}: {shown_key(record['key'])} "
            f"({record['parted'][0]})" for location, record in firsts.items()]


def _named(records: list[dict]) -> str:
    shown = ", ".join(r["case_id"] for r in records[:_LISTED])
    return shown + (f" and {len(records) - _LISTED} more" if len(records) > _LISTED else "")
