"""One report for a sharded run: the report folders of its shards (``--npu-precision-report``, one per CI job,
as pytest-split makes them) joined into one folder, one HTML page, one summary and one known-failures gate.

    npu-precision-merge OUT SHARD [SHARD ...] [--html PAGE] [--known-failures FILE] [--strict-warnings]

Each shard's ``cases.jsonl`` holds its cases' whole records; they are joined in execution order and written
again with a ``run.json`` that names the shards, msprobe's CSVs and the HTML page. Stale known failures are
judged over every shard's cases together; a record its shard did not gate is gated here, from the file. The
exit status is a run's: 1 where a case fails or a known failure regressed, changed, passes or is stale, 5 where
nothing was judged, 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from .known_failures import KnownFailure, KnownFailuresError, load, lookup, outcome_of, stale_entries
from .pages.html import Gating, write_html
from .pages.msprobe_csv import write_msprobe_csv
from .report_files import summary_lines, write_jsonl
from .summary import exit_reasons, judged_nothing

DEFAULT_MARGIN = 0.1  # --npu-precision-known-failures-margin's default


class MergeError(ValueError):
    """A shard folder that cannot be merged: the message names it and the fix."""


@dataclass(frozen=True)
class MergedGate:
    """The known-failures gate over every shard, as the summary reads a run's."""

    path: Path
    entries: dict[str, KnownFailure]
    stale: tuple[str, ...]
    update: None = None
    stale_unchecked: str = ""
    fails_run: bool = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fails_run", bool(self.stale))


@dataclass(frozen=True)
class Merged:
    records: list[dict]
    runs: list[dict]
    duplicates: tuple[str, ...]  # case ids more than one shard holds: the first shard's record is kept


def read_shards(folders: Sequence[Path]) -> Merged:
    records: dict[str, dict] = {}
    runs, duplicates = [], []
    for folder in folders:
        cases = Path(folder) / "cases.jsonl"
        try:
            lines = cases.read_text(encoding="utf-8").splitlines()
            run = json.loads((Path(folder) / "run.json").read_text(encoding="utf-8"))
            shard = [json.loads(line) for line in lines if line.strip()]
        except OSError as exc:
            raise MergeError(f"{folder} is not a report folder ({exc.strerror}: {exc.filename}): give the folders "
                             f"that --npu-precision-report wrote") from None
        except ValueError as exc:
            raise MergeError(f"{cases} is not a report's JSON ({exc}): run that shard again") from None
        runs.append({"folder": str(folder), **run})
        for record in shard:
            if record.get("case_id") in records:
                duplicates.append(record["case_id"])
            else:
                records[record["case_id"]] = record
    ordered = sorted(records.values(), key=lambda r: (r["location"], r["order"], r["case_id"]))
    return Merged(ordered, runs, tuple(duplicates))


def merge(out: Path, shards: Sequence[Path], *, html: Path | None = None, known_failures: Path | None = None,
          strict_warnings: bool = False, margin: float = DEFAULT_MARGIN) -> tuple[list[str], int]:
    """Write the merged report into ``out``; return the summary's lines and the exit status."""
    merged = read_shards(shards)
    records = merged.records
    gate = None
    if known_failures is not None:
        entries = load(known_failures)
        for record in records:
            entry = lookup(entries, record["case_id"])
            if entry is not None and "known_failure" not in record:
                record["known_failure"] = outcome_of(entry, record, margin, strict_warnings)
        gate = MergedGate(known_failures, entries, tuple(stale_entries(entries, {r["case_id"] for r in records})))
    out.mkdir(parents=True, exist_ok=True)
    write_jsonl(records, out / "cases.jsonl")
    csvs = write_msprobe_csv(records, out, time.strftime("%Y%m%d%H%M%S"))
    page = html or out / "precision.html"
    write_html(records, page, generated=time.strftime("%Y-%m-%d %H:%M:%S"),
               gating=Gating(str(known_failures or ""), gate.stale if gate else (), bool(gate and gate.fails_run),
                             strict_warnings))
    run = {**{k: v for k, v in merged.runs[0].items() if k != "folder"}, "merged_shards": merged.runs,
           "msprobe_csv_files": [path.relative_to(out).as_posix() for path in csvs]}
    (out / "run.json").write_text(json.dumps(run, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    written = [out / "run.json", out / "cases.jsonl", page]
    lines = [f"merged: {len(records)} cases from {len(shards)} shard report folders"]
    if merged.duplicates:
        lines.append(f"{len(merged.duplicates)} case ids are in more than one shard (kept the first shard's): "
                     + ", ".join(merged.duplicates[:5]))
    lines += summary_lines(records, gate, written, strict_warnings)
    reasons = exit_reasons(records, strict_warnings, len(gate.stale) if gate else 0, updated=False)
    status = 1 if reasons else 5 if judged_nothing(records) or not records else 0
    lines += [f"npu-precision-merge: exit status 1: {'; '.join(reasons)}"] if reasons else []
    return lines, status


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="npu-precision-merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the merged report folder")
    parser.add_argument("shards", type=Path, nargs="+", help="the shards' --npu-precision-report folders")
    parser.add_argument("--html", type=Path, default=None, help="the merged HTML page (default OUT/precision.html)")
    parser.add_argument("--known-failures", type=Path, default=None, help="the known-failures file to gate with")
    parser.add_argument("--known-failures-margin", type=float, default=DEFAULT_MARGIN,
                        help="how much further past its limit a known failure may go (default 0.1)")
    parser.add_argument("--strict-warnings", action="store_true", help="warnings fail, as in the shards' runs")
    options = parser.parse_args(argv)
    try:
        lines, status = merge(options.out, options.shards, html=options.html, known_failures=options.known_failures,
                              strict_warnings=options.strict_warnings, margin=options.known_failures_margin)
    except (MergeError, KnownFailuresError) as exc:
        print(f"npu-precision-merge: {exc}", file=sys.stderr)
        return 4  # a usage error, as pytest's
    print("\n".join(lines))
    return status


if __name__ == "__main__":
    sys.exit(main())
