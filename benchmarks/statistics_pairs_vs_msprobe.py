"""Statistics pairs judged here and by msprobe's ``compare``, side by side (issue 55's note).

    python benchmarks/statistics_pairs_vs_msprobe.py ROOT [--msprobe PATH_TO_MSPROBE]

ROOT holds one folder per pair, each with ``npu/`` and ``gpu/`` statistics dumps of the same steps (as
tests/statistics_pairs.py writes them, by capture or by msprobe). For each pair it prints what
``pytest --npu-precision NPU --npu-precision-device dumped --npu-precision-baseline GPU`` blames and where it
says the dumps first part, and, given msprobe, the rows msprobe's ``compare`` marks per step (warning or error)
and its first marked row.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path


def ours(pair: Path) -> tuple[list[str], list[str]]:
    """(blamed case ids, the 'where the dumps first part' lines)."""
    with tempfile.TemporaryDirectory() as report:
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--npu-precision",
                              str(pair / "npu"), "--npu-precision-device", "dumped", "--npu-precision-baseline",
                              str(pair / "gpu"), "--npu-precision-report", report], capture_output=True, text=True)
        records = [json.loads(line) for line in (Path(report) / "cases.jsonl").read_text().splitlines()]
    blamed = [r["case_id"] for r in records if r["status"] == "error"]
    parting = [line for line in run.stdout.splitlines() if line.startswith("where the dumps")]
    return blamed, parting


def msprobe(pair: Path, executable: str) -> dict[str, list[str]]:
    """Per step, the rows msprobe's compare marks warning or error, in its order."""
    marked = {}
    for step in sorted(p.name for p in (pair / "npu").iterdir() if p.name.startswith("step")):
        with tempfile.TemporaryDirectory() as out:
            subprocess.run([executable, "compare", "-tp", str(pair / "npu" / step / "rank0" / "dump.json"),
                            "-gp", str(pair / "gpu" / step / "rank0" / "dump.json"), "-o", out],
                           capture_output=True, text=True, check=True)
            table = next(Path(out).glob("compare_result_*.csv"))
            rows = list(csv.DictReader(table.open()))
        marked[step] = [f"{r['NPU Name']} [{r['Result']}]" for r in rows if r["Result"] not in ("pass", "")]
    return marked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("--msprobe", help="msprobe's command line, to run its compare on the same pairs")
    args = parser.parse_args()
    for pair in sorted(p for p in args.root.iterdir() if (p / "npu").is_dir()):
        blamed, parting = ours(pair)
        apis = Counter(case.split("::")[1].rsplit(".", 2)[0] + "." + case.rsplit(".", 1)[1] for case in blamed)
        print(f"== {pair.name}")
        print(f"  here: {len(blamed)} blamed {dict(apis)}")
        for line in parting:
            print(f"    {line[:160]}")
        if args.msprobe:
            for step, rows in msprobe(pair, args.msprobe).items():
                first = rows[0] if rows else "none"
                print(f"  msprobe compare {step}: {len(rows)} rows marked; first {first}")


if __name__ == "__main__":
    main()
