"""The reports made of case records (reports/records.py): JSON Lines, msprobe-compatible CSV, HTML, terminal summary.

Records are plain JSON-able dicts with English keys, so that pytest-xdist can carry them from the
workers to the controller, which alone writes the files, judges stale known failures and rewrites
the known-failures file. Nothing here imports torch: the controller never does (reports/run_facts.py).
"""

from __future__ import annotations

import json
import platform
import time
import zlib
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest

from .. import __version__
from ..checks import write_record
from ..common import shown_key
from ..precision import failure_sections
from ..replay import threads
from . import run_facts
from .dump_pairs import nothing_paired_line, paired_nothing, pairing_line, parting_lines
from .gating import GATE, KnownFailureGate
from .known_failures import REASON_PLACEHOLDER, without_reason
from .pages.html import Gating, write_html
from .pages.msprobe_csv import write_msprobe_csv
from .records import new_record
from .summary import (
    counts, exit_reasons, failing_statuses, first_failing, is_failing, judged_nothing, known_outcome, op_name,
    severity, times_limit, worst_check, worst_text,
)


def write_jsonl(records: list[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, sort_keys=True) + "\n")


_MSPROBE_FILES = "msprobe_csv_files"  # run.json's list of the CSVs its run wrote


def _remove_previous_run(folder: Path) -> None:
    """Removes the msprobe CSVs that the previous run.json in folder lists, so that a report folder holds one run.

    Only files that run wrote, inside folder: the user's own files stay.
    """
    try:
        previous = json.loads((folder / "run.json").read_text(encoding="utf-8")).get(_MSPROBE_FILES, [])
    except (OSError, ValueError, AttributeError):
        return
    for name in previous if isinstance(previous, list) else []:
        path = folder / str(name)
        if path.name.startswith("accuracy_checking_") and folder.resolve() in path.resolve().parents:
            path.unlink(missing_ok=True)


class Collector:
    """Gathers case records; writes the reports, settles the gate and prints the summary, once.

    Registered on the controller only (or in a serial run): xdist workers send their records to it
    on the reports.
    """

    def __init__(self, config: pytest.Config, facts: Callable[[], run_facts.RunFacts]):
        self.config = config
        self.facts = facts  # the run's facts, once the cases ran (the plugin layer knows where they are)
        self.records: list[dict] = []
        self.lost: list[tuple[str, str]] = []  # (node id, why) of dump cases whose worker died
        self.written: list[Path] = []
        self.strict_warnings: bool = config.getoption("npu_precision_strict_warnings")
        self.recorded: int | None = None  # cases written to --npu-precision-record
        self.last_line = ""  # why the run exits non-zero, printed after pytest's own last line

    @property
    def gate(self) -> KnownFailureGate | None:
        return self.config.stash.get(GATE, None)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        text = getattr(report, "npu_precision", None)
        if text and report.when == "call":
            self.records.append(json.loads(text))
        elif report.failed and report.when not in ("setup", "call", "teardown"):
            # xdist's report of a worker that died inside a case (a segfault, os._exit, the OOM killer).
            root, _, case_id = report.nodeid.partition("::")
            if root in {Path(d).as_posix() for d in self.config.getoption("npu_precision")} and "::" in case_id:
                # A dump case (DumpRoot's node id is the path as given, in posix form). Its record is made
                # at the end, when the workers have said what they ran on.
                self.lost.append((report.nodeid, str(report.longrepr)))

    def _lost_case(self, nodeid: str, why: str, facts: run_facts.RunFacts) -> dict:
        """A harness-error record for a dump case whose process died: every report still lists it."""
        root, _, case_id = nodeid.partition("::")
        location, _, key = case_id.rpartition("::")
        api, _, direction = key.rpartition(".")
        return new_record(kind="dump", case_id=case_id, key=key, api=api, direction=direction, order=-1,
                          location=location, source=root, seed=zlib.crc32(case_id.encode()),
                          device=facts.device_name, golden=facts.golden_label, baseline=facts.baseline_label,
                          message=f"the process running this case died ({why}); rerun it alone to see why")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.lost:
            facts = self.facts()
            self.records += [self._lost_case(nodeid, why, facts) for nodeid, why in self.lost]
            self.lost.clear()
        records = sorted(self.records, key=lambda r: (r["location"], r["order"], r["case_id"]))
        gate = self.gate
        if gate is not None:
            gate.finish(records)
        folder = self.config.getoption("npu_precision_report")
        if folder is not None:
            folder = Path(folder)
            folder.mkdir(parents=True, exist_ok=True)
            _remove_previous_run(folder)
            write_jsonl(records, folder / "cases.jsonl")
            csvs = write_msprobe_csv(records, folder, time.strftime("%Y%m%d%H%M%S"))
            self._write_run(folder / "run.json", [path.relative_to(folder).as_posix() for path in csvs])
            self.written += [folder / "run.json", folder / "cases.jsonl"] + ([folder / "msprobe"] if csvs else [])
        record_path = self.config.getoption("npu_precision_record")
        if record_path is not None:
            self._write_record(Path(record_path), records)
        html = self.config.getoption("npu_precision_html")
        if html is not None:
            write_html(records, Path(html), generated=time.strftime("%Y-%m-%d %H:%M:%S"), gating=self._gating())
            self.written.append(Path(html))
        if gate is not None and gate.fails_run and session.exitstatus in (pytest.ExitCode.OK,
                                                                          pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if (judged_nothing(records) or paired_nothing(records)) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED  # a gate that checked nothing is not green
        self.last_line = self._last_line(records, int(session.exitstatus))

    def _last_line(self, records: list[dict], exitstatus: int) -> str:
        """Why a run exits non-zero, where pytest's own last line may look green (xfails, skips)."""
        if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and judged_nothing(records):
            return (f"npu-precision: exit status 5: no case was judged, all {len(records)} skipped "
                    f"({_skip_reasons(records)})")
        if exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and paired_nothing(records):
            return "npu-precision: exit status 5: no entry paired with the baseline dump, so nothing was compared"
        gate = self.gate
        stale = len(gate.stale) if gate is not None and gate.fails_run else 0
        reasons = exit_reasons(records, self.strict_warnings, stale, gate is not None and gate.update is not None)
        if exitstatus != pytest.ExitCode.TESTS_FAILED or not reasons:
            return ""
        return f"npu-precision: exit status 1: {'; '.join(reasons)}"

    def pytest_unconfigure(self) -> None:
        # After pytest's own last line ("6 xfailed in 1.2s"), which does not say why the run failed.
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if self.last_line and reporter is not None:
            reporter.write_line(self.last_line, red=True, bold=True)

    def _write_run(self, path: Path, csvs: list[str]) -> None:
        """The header line in full: device, golden and baseline with their versions and settings.

        csvs: this run's msprobe CSVs, relative to the folder, so that the next run removes them.
        """
        described = self.facts().described
        # The policy of the processes that ran the cases; where none did, what the options make of it.
        policy = described.get("torch_threads") or threads.for_run(self.config).as_dict()
        run = {"pytest_npuprecision": __version__, "python": platform.python_version(),
               "machine": platform.machine(), **described, "torch_threads": policy, _MSPROBE_FILES: csvs}
        path.write_text(json.dumps(run, indent=1, sort_keys=True) + "\n", encoding="utf-8")

    def _write_record(self, path: Path, records: list[dict]) -> None:
        facts = self.facts()
        self.recorded = write_record(path, facts.described["device"], facts.golden_label, records)
        self.written.append(path)

    def _gating(self) -> Gating:
        gate = self.gate
        if gate is None:
            return Gating(strict_warnings=self.strict_warnings)
        return Gating(str(gate.path), gate.stale, gate.fails_run, self.strict_warnings, tuple(_gate_notes(gate)))

    def pytest_terminal_summary(self, terminalreporter) -> None:
        lines = summary_lines(self.records, self.gate, self.written, self.strict_warnings,
                              root=self.config.rootpath)
        if self.recorded is not None:
            lines.append(f"baseline recorded: {self.recorded} judged cases with their input fingerprints")
        if lines:
            terminalreporter.write_sep("=", "npu-precision summary")
            for line in lines:
                terminalreporter.write_line(line)


_LISTED = 5  # at most this many cases per kind of line


def _error_data_lines(records: list[dict]) -> list[str]:
    """Where --npu-precision-save-error-data put the failing cases' tensors, and what it had to leave out."""
    kept = [r for r in records if (r.get("error_data") or {}).get("saved")]
    left = [r for r in records if r.get("error_data") and not r["error_data"].get("saved")]
    lines = []
    if kept:
        folder = Path(kept[0]["error_data"]["folder"]).parent
        lines.append(f"error data: the tensors of {len(kept)} failing cases saved under {folder} "
                     f"(torch.load(path, weights_only=True))")
    lines += [f"error data not saved for {r['case_id']}: {r['error_data']['why']}" for r in left[:_LISTED]]
    return lines


def _math_mode_lines(records: list[dict]) -> list[str]:
    """How many float32 cases the device ran in a narrower math mode (TF32, HF32), and what that means."""
    reduced: dict[str, int] = {}
    for record in records:
        mode = record.get("float32_mode")
        if mode not in (None, "ieee", "unknown"):
            reduced[mode] = reduced.get(mode, 0) + 1
    unknown = sum(record.get("float32_mode") == "unknown" for record in records)
    lines = []
    if reduced:
        ran = ", ".join(f"{count} in {mode}" for mode, count in sorted(reduced.items()))
        lines.append(f"float32 math modes: {ran} (matmul, conv or rnn cases the device ran with narrower inputs); "
                     f"judged as the run's --npu-precision-fp32 says (docs/standards.md#float32-math-modes)")
    if unknown:
        lines.append(f"float32 math modes: {unknown} float32 matmul, conv or rnn cases with no recorded mode, "
                     f"judged as IEEE: tell the run with --npu-precision-fp32-modes (conv=hf32 for torch_npu's default)")
    return lines


def summary_lines(records: list[dict], gate: KnownFailureGate | None, written: list[Path],
                  strict_warnings: bool, root: Path | None = None) -> list[str]:
    """The terminal summary: short, and the same for the same records whatever the order they came in."""
    records = sorted(records, key=lambda r: r["case_id"])
    statuses = failing_statuses(strict_warnings)
    lines = []
    if records:
        skipped = [r for r in records if r["status"] == "skip"]
        why = f" ({_skip_reasons(skipped)})" if skipped else ""
        lines.append("cases: " + counts(r["status"] for r in records) + why)
    if judged_nothing(records):
        lines.append(f"NOTHING JUDGED: every one of the {len(records)} cases skipped ({_skip_reasons(records)}), so "
                     f"this run checked no precision and exits 5; `pytest -rs` shows each reason")
    by_standard: dict[str, list[str]] = {}
    for record in records:
        for output in record["outputs"]:
            by_standard.setdefault(output["standard"], []).append(output["status"])
    if by_standard:
        lines.append("outputs by standard: " + "; ".join(f"{s} {counts(v)}" for s, v in sorted(by_standard.items())))
    lines += _collective_lines(records)
    pairing = pairing_line(records)
    lines += [pairing] if pairing else []
    lines += [nothing_paired_line(records)] if paired_nothing(records) else []
    lines += parting_lines(records)
    for location, record in first_failing(records, strict_warnings).items():
        text = worst_text(record, statuses)
        if root is not None:  # paths in a dump's message, shown from where the user stands
            text = text.replace(f"{root.as_posix().rstrip('/')}/", "")
        lines.append(f"first failing API in {location or 'dump'}: {shown_key(record['key'])} ({text}){_known(record)}")
    unexpected = [r for r in records if is_failing(r, strict_warnings) and known_outcome(r) != "xfail"]
    by_api: dict[str, list[dict]] = {}  # one line per API name: the worst call, so a second defect shows
    for record in sorted(unexpected, key=severity, reverse=True):
        by_api.setdefault(op_name(record), []).append(record)
    for name, calls in list(by_api.items())[:_LISTED]:
        record = calls[0]
        others = f" (the worst of {len(calls)} failing {name} cases)" if len(calls) > 1 else ""
        lines.append(f"worst: {record['case_id']}: {worst_text(record, statuses)}{_times(record, statuses)}"
                     f"{_known(record)}{others}")
    lines += _more(list(by_api), "failing API names")
    sections = _docs_sections(unexpected, statuses)
    if sections:
        lines.append(f"docs: {', '.join(sections)}")
    second = [r for r in records if any(o.get("excused") for o in r["outputs"])]
    if second:
        lines.append(f"second look: {len(second)} cases pass because the op's conditioning at their inputs explains "
                     f"their error: " + ", ".join(r["case_id"] for r in second[:_LISTED]))
        lines += _more(second, "cases passed on the second look")
    lines += _math_mode_lines(records)
    lines += _error_data_lines(records)
    overflowed = [r for r in records if r["status"] == "overflow"]
    lines += [f"overflow: {r['case_id']}: {_overflow_text(r)}" for r in overflowed[:_LISTED]]
    lines += _more(overflowed, "overflows")
    if not strict_warnings:
        warned = [r for r in records if r["status"] == "warning"]
        lines += [f"warning: {r['case_id']}: {worst_text(r, ('warning',))}" for r in warned[:_LISTED]]
        lines += _more(warned, "warnings")
    missing = [r for r in records if r.get("baseline_state") == "missing"]
    if missing:
        lines.append(f"missing from the baseline {missing[0]['baseline']}: {len(missing)} cases, judged without "
                     f"it: " + ", ".join(r["case_id"] for r in missing[:_LISTED]))
        lines += _more(missing, "cases missing from the baseline")
    if gate is not None:
        lines += _gate_lines(records, gate)
    lines += [f"report written: {path}" for path in written]
    return lines


def _collective_lines(records: list[dict]) -> list[str]:
    """The collective cases counted apart: each is judged from every rank's entry, or skips for want of them."""
    collective = [r for r in records if r["case_id"].rpartition("::")[2].startswith("Distributed.")]
    if not collective:
        return []
    skipped = [r for r in collective if r["status"] == "skip"]
    why = f" ({_skip_reasons(skipped)})" if skipped else ""
    return [f"collectives: {counts(r['status'] for r in collective)}{why}; judged from every rank's recorded "
            f"inputs (docs/collectives.md)"]


def _skip_reasons(records: list[dict]) -> str:
    """'12 no-recorded-output, 4 unsupported-op': why the skipped records skipped."""
    tally = Counter(r.get("reason") or "skip" for r in records if r["status"] == "skip")
    return ", ".join(f"{n} {reason}" for reason, n in tally.most_common())


def _docs_sections(records: list[dict], statuses: tuple[str, ...]) -> list[str]:
    """The docs sections of the standards that these failing records failed, each once."""
    found: dict[str, None] = {}
    for record in records:
        for output in record["outputs"]:
            if output["status"] in statuses:
                failed = [check["metric"] for check in output["checks"] if check["status"] in statuses]
                found.update(dict.fromkeys(failure_sections(output["standard"], failed)))
    return list(found)


def _overflow_text(record: dict) -> str:
    output = next(o for o in record["outputs"] if o["status"] == "overflow")
    m = output["metrics"]
    count = m["overflow"] + m.get("range_overflow", 0)
    where = "past the dtype's largest value" if m.get("range_overflow") else "finite in the dtype"
    return f"{output['name']}: {count} / {m['numel']} elements inf where the exact {output['dtype']} result is {where}"


def _known(record: dict) -> str:
    return f" [known failure: {known_outcome(record)}]" if known_outcome(record) else ""


def _times(record: dict, statuses: tuple[str, ...]) -> str:
    worst = worst_check(record, statuses)
    text = times_limit(worst[1]) if worst else ""
    return f", {text}" if text else ""


def _more(items: list, what: str) -> list[str]:
    return [f"... and {len(items) - _LISTED} more {what}"] if len(items) > _LISTED else []


def _gate_lines(records: list[dict], gate: KnownFailureGate) -> list[str]:
    listed = [r for r in records if "known_failure" in r]
    ran = counts(r["known_failure"]["outcome"] for r in listed) or "none of the listed cases ran"
    lines = [f"known failures ({gate.path}): " + (ran if gate.entries else "no entries")]
    for outcome, text in (("regression", lambda r: r["known_failure"]["regressions"][0]),
                          ("changed", lambda r: f"accepted as {r['known_failure']['status']}, now {r['status']}"),
                          ("fixed", lambda r: "now passes: remove it, or rerun with "
                                              "--npu-precision-update-known-failures")):
        cases = [r for r in listed if r["known_failure"]["outcome"] == outcome]
        lines += [f"  {outcome}: {r['case_id']}: {text(r)}" for r in cases[:_LISTED]]
        lines += _more(cases, outcome)
    lines += [f"  stale: {case_id}: matches no collected case" for case_id in gate.stale[:_LISTED]]
    lines += _more(list(gate.stale), "stale entries")
    lines += [f"  {note}" for note in _gate_notes(gate)]
    return lines


def _gate_notes(gate: KnownFailureGate) -> list[str]:
    notes = []
    if gate.stale and gate.update is None:
        notes.append("stale entries fail the run: remove them, rerun with --npu-precision-update-known-failures, "
                     "or pass --npu-precision-warn-stale" if gate.fails_run else "stale entries are only warned about")
    if gate.stale_unchecked:
        notes.append(f"stale entries not checked: {gate.stale_unchecked}")
    if gate.update is not None:
        u = gate.update
        notes.append(f"rewrote {gate.path}: {len(u.entries)} entries; {len(u.added)} added, {len(u.changed)} "
                     f"changed, {len(u.fixed)} removed as fixed, {len(u.stale)} stale removed")
    unexplained = without_reason(gate.update.entries if gate.update is not None else gate.entries)
    if unexplained:
        notes.append(f"warning: {len(unexplained)} entries have no reason yet ({unexplained[0]}"
                     f"{', ...' if len(unexplained) > 1 else ''}): replace {REASON_PLACEHOLDER!r} in {gate.path} "
                     f"with why each failure is accepted, and commit it")
    return notes
