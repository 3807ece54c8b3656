"""Triage OpInfo dumps: run each dtype's dump on a device and print issue 21's table and failure lists.

    python benchmarks/opinfo_triage.py /tmp/opinfo                 # every <dtype>/ folder under it
    python benchmarks/opinfo_triage.py /tmp/opinfo/float16 -n 2 --device cpu
    python benchmarks/opinfo_triage.py /tmp/opinfo --reports /tmp/opinfo-reports --no-run   # reread

Each dump runs as ``pytest --npu-precision DUMP --npu-precision-report REPORTS/<dtype>`` in a child
process; the counts come from the report's ``cases.jsonl`` (docs/reports.md), not from pytest's
terminal output. Skips are split by reason (the text before the first ':' of the reason), and every
case that did not pass or skip is listed, grouped by op (the API name without its call index).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

STATUSES = ("pass", "error", "warning", "skip", "input-error", "harness-error")
LABELS = {"error": "precision fail"}


def dump_folders(root: Path) -> list[Path]:
    """``root`` itself when it is one dump (a dump.json, step folders, or the dump script's part
    folders), else each of its subfolders that holds a dump."""
    if (root / "dump.json").exists() or any(re.fullmatch(r"(step|part)\d+", p.name) for p in root.iterdir()):
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and any(p.rglob("dump.json")))


def run_dump(dump: Path, reports: Path, device: str, workers: int, extra: list[str]) -> float:
    reports.mkdir(parents=True, exist_ok=True)
    for old in reports.glob("*"):
        if old.is_file():
            old.unlink()
    command = [sys.executable, "-m", "pytest", "--npu-precision", str(dump), "--npu-precision-device", device,
               "--npu-precision-report", str(reports), "-q", "-p", "no:cacheprovider", "--no-header", "-rN",
               *(["-n", str(workers)] if workers > 1 else ["-p", "no:xdist"]), *extra]
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True)
    (reports / "pytest.log").write_text(done.stdout + done.stderr)
    return time.monotonic() - began


def read_cases(reports: Path) -> list[dict]:
    path = reports / "cases.jsonl"
    if not path.exists():
        raise SystemExit(f"{path} is missing: the pytest run wrote no report (see {reports / 'pytest.log'})")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def op_of(record: dict) -> str:
    """``Torch.svd.3`` -> ``Torch.svd``; op cases keep their name."""
    return re.sub(r"\.\d+$", "", record.get("api") or record.get("key") or record.get("case_id", "?"))


def skip_reason(record: dict) -> str:
    reason = (record.get("reason") or record.get("message") or "").strip()
    return reason.split(":", 1)[0][:60] or "(no reason)"


def first_line(record: dict) -> str:
    text = (record.get("message") or record.get("reason") or "").strip()
    line = text.splitlines()[0] if text else ""
    return line[:160]


def table(rows: list[tuple[str, list[dict]]]) -> str:
    head = ["dtype", "cases", *[LABELS.get(s, s) for s in STATUSES]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, cases in rows:
        counts = Counter(c["status"] for c in cases)
        lines.append("| " + " | ".join([name, f"{len(cases):,}", *[f"{counts.get(s, 0):,}" for s in STATUSES]]) + " |")
    return "\n".join(lines)


def details(name: str, cases: list[dict]) -> str:
    out = [f"\n## {name}"]
    skips = Counter(skip_reason(c) for c in cases if c["status"] == "skip")
    if skips:
        out.append("skips by reason:")
        out += [f"  {n:5d}  {reason}" for reason, n in skips.most_common()]
        by_reason: dict[str, set[str]] = defaultdict(set)
        for c in cases:
            if c["status"] == "skip":
                by_reason[skip_reason(c)].add(op_of(c))
        for reason, ops in sorted(by_reason.items()):
            out.append(f"  [{reason}] ops: {', '.join(sorted(ops))}")
    for status in ("error", "input-error", "harness-error", "warning"):
        groups: dict[str, list[dict]] = defaultdict(list)
        for c in cases:
            if c["status"] == status:
                groups[op_of(c)].append(c)
        if not groups:
            continue
        out.append(f"{LABELS.get(status, status)}: {sum(map(len, groups.values()))} cases in {len(groups)} ops")
        for op, members in sorted(groups.items()):
            directions = Counter(m.get("direction", "?") for m in members)
            out.append(f"  {op} ({', '.join(f'{d} {n}' for d, n in sorted(directions.items()))}): {first_line(members[0])}")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="a dump folder, or a folder of one dump per dtype")
    parser.add_argument("--reports", type=Path, default=Path("/tmp/opinfo-triage-reports"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("-n", "--workers", type=int, default=1, help="pytest-xdist workers")
    parser.add_argument("--no-run", action="store_true", help="reread the reports of an earlier run")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments, after --")
    args = parser.parse_args(argv)
    rows = []
    for dump in dump_folders(args.root):
        reports = args.reports / dump.name
        if not args.no_run:
            seconds = run_dump(dump, reports, args.device, args.workers, args.pytest_args)
            print(f"{dump.name}: ran in {seconds:.0f} s", file=sys.stderr)
        rows.append((dump.name, read_cases(reports)))
    if not rows:
        print(f"no dump under {args.root}", file=sys.stderr)
        return 2
    print(table(rows))
    for name, cases in rows:
        print(details(name, cases))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
