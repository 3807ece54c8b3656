"""Case records: what became of one case, as a plain JSON-able dict with English keys.

A process that runs cases makes them (dump cases here, op cases in plugin/op_case_items.py) and puts them
on the call report, so that pytest-xdist can carry them to the controller, which alone writes the
reports (reports/report_files.py). Nothing here imports torch: the xdist controller makes a record too, for a
case whose worker died.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from .summary import ALL_CHECKS, worst_check

if TYPE_CHECKING:
    from ..checks import CaseResult, Settings
    from ..dump import DumpCase

RECORD = pytest.StashKey[dict]()  # an item's case record, carried to the controller on its call report


def new_record(*, kind: str, case_id: str, key: str, api: str, direction: str, order: int, location: str,
               source: str, seed: int | None, device: str, golden: str, baseline: str = "none",
               status: str = "harness-error", message: str = "") -> dict[str, Any]:
    """A case record before its outcome: who the case is and what it runs on.

    kind: "dump" for a dumped API call, "op_case" for a YAML or Python op case. The status starts as
    harness-error, so a case that dies of an unexpected exception is still reported as one.
    """
    return {
        "kind": kind, "case_id": case_id, "key": key, "api": api, "direction": direction, "order": order,
        "location": location, "source": source, "seed": seed, "device": device, "golden": golden,
        "baseline": baseline, "baseline_state": "", "fingerprint": None, "status": status, "reason": "",
        "message": message, "seconds": None, "op_seconds": None, "outputs": [], "guesses": [],
        "dtype_differences": [], "float32_mode": None, "error_data": None, "baseline_case": None, "parted": [],
        "unpaired": "",
    }


def case_record(case: DumpCase, settings: Settings, *, result: CaseResult | None = None, status: str = "",
                message: str = "", reason: str = "", framework: str | None = None) -> dict[str, Any]:
    """framework: the dump's, named where the device's side is the dump itself (offline checks)."""
    from ..backends import DumpedOutputs  # loaded wherever cases run; this module stays free of torch

    location, _, _ = case.case_id.rpartition("::")
    device = settings.device.name
    if isinstance(settings.device, DumpedOutputs):
        device = f"{device} (results recorded by {framework or 'an unnamed framework'} in {case.source.name})"
    record = new_record(kind="dump", case_id=case.case_id, key=case.key, api=case.api, direction=case.direction,
                        order=case.order, location=location, source=str(case.source), seed=case.seed,
                        device=device, golden=settings.golden_label, baseline=settings.baseline_label,
                        status=status, message=message)
    record["reason"] = reason
    if result is not None:
        record.update(status=result.status.value, seconds=result.seconds, op_seconds=result.op_seconds,
                      notes=list(result.notes), baseline_state=result.baseline, guesses=list(result.guesses),
                      dtype_differences=list(result.dtype_differences), float32_mode=result.float32_mode,
                      error_data=result.error_data,
                      fingerprint=None if result.fingerprint is None else result.fingerprint.as_dict(),
                      outputs=[output_record(o.name, o.verdict, o.profile) for o in result.outputs],
                      parted=list(result.parted), baseline_case=_partner_record(result.partner),
                      unpaired=result.unpaired)
    return record


def _partner_record(partner: CaseResult | None) -> dict[str, Any] | None:
    """A baseline dump's partner entry as judged on its own: which entry, and its outputs' verdicts and metrics."""
    if partner is None:
        return None
    return {"case_id": partner.case.case_id, "source": str(partner.case.source), "status": partner.status.value,
            "outputs": [output_record(o.name, o.verdict) for o in partner.outputs]}


def output_record(name: str, verdict, profile=None) -> dict[str, Any]:
    return {
        "name": name, "status": verdict.status.value, "standard": verdict.standard, "dtype": verdict.dtype,
        "shape": list(verdict.shape),
        "checks": [{"metric": c.metric, "value": c.value, "limit": c.limit, "status": c.status.value,
                    "upper": c.upper, "warning": c.warning, "baseline": c.baseline} for c in verdict.checks],
        "metrics": None if verdict.metrics is None else verdict.metrics.as_dict(),  # None: judged by statistics
        # The baseline's own metrics against the golden, where the benchmark standard judged beside one.
        "baseline_metrics": None if verdict.baseline_metrics is None else verdict.baseline_metrics.as_dict(),
        "worst": None if verdict.worst is None else {"index": list(verdict.worst.index), "actual": verdict.worst.actual,
                                                      "golden": verdict.worst.golden},
        "profile": None if profile is None else profile.as_dict(),
        # What the second look excused, where it turned a failure into a pass (precision/second_look.py).
        "excused": None if verdict.excused is None else dataclasses.asdict(verdict.excused),
    }


def junit_properties(record: dict) -> list[tuple[str, str]]:
    """A case's status and key metrics, as JUnit XML properties."""
    props = [("npu_precision_case_id", record["case_id"]), ("npu_precision_status", record["status"]),
             ("npu_precision_device", record["device"]), ("npu_precision_golden", record["golden"]),
             ("npu_precision_baseline", record["baseline"]), ("npu_precision_seed", str(record["seed"]))]
    if record["outputs"]:
        props += [("npu_precision_standard", ",".join(sorted({o["standard"] for o in record["outputs"]}))),
                  ("npu_precision_dtype", ",".join(sorted({o["dtype"] for o in record["outputs"]})))]
    worst = worst_check(record, ALL_CHECKS)
    if worst is not None:
        name, check = worst
        props += [("npu_precision_worst_output", name), ("npu_precision_worst_metric", check["metric"]),
                  ("npu_precision_worst_value", repr(check["value"])),
                  ("npu_precision_worst_limit", repr(check["limit"]))]
    if "known_failure" in record:
        props.append(("npu_precision_known_failure", record["known_failure"]["outcome"]))
    if record["seconds"] is not None:
        props.append(("npu_precision_seconds", f"{record['seconds']:.6f}"))
    return props


# Options that write or judge every record whole on the controller; without them it prints the summary alone.
_WHOLE_RECORDS = ("npu_precision_report", "npu_precision_html", "npu_precision_record", "npu_precision_known_failures")
_COUNTED_ONLY = ("pass", "skip")  # statuses the summary only counts, with their outputs' standards
_PAIRING = ("dump", "baseline-only")  # baseline states the summary counts; "unpaired" records travel whole


def carried(record: dict[str, Any], config: pytest.Config) -> dict[str, Any]:
    """What of a record its report carries to the controller (or a serial run's Collector): all of it
    where a report or the gate needs it or the summary names the case, else what the summary counts.
    Most cases of a large run pass, and a whole record costs a JSON encoding on the worker, a decoding
    on the controller and the bytes between them."""
    if (any(config.getoption(name) for name in _WHOLE_RECORDS) or record["status"] not in _COUNTED_ONLY
            or record.get("baseline_state") in ("missing", "unpaired")
            or any(o.get("excused") for o in record["outputs"])):
        return record
    return {"case_id": record["case_id"], "location": record["location"], "order": record["order"],
            "status": record["status"], **({"reason": record["reason"]} if record["reason"] else {}),
            # Beside a baseline dump, the summary counts the paired entries and those only the baseline holds,
            # and names the partners that fail their own standard.
            **({"baseline_state": record["baseline_state"]} if record["baseline_state"] in _PAIRING else {}),
            **({"baseline_case": {"case_id": record["baseline_case"]["case_id"],
                                  "status": record["baseline_case"]["status"]}} if record.get("baseline_case") else {}),
            "outputs": [{"standard": o["standard"], "status": o["status"]} for o in record["outputs"]]}
