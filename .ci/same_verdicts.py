"""Exit 1 unless two runs of the main job gave every case the same outcome (CI's floor job).

Usage: python .ci/same_verdicts.py REPORT_DIR REPORT_DIR: each holds the cases.jsonl of one run.
"""

import json
import sys
from pathlib import Path


def outcomes(folder: str) -> dict[str, str]:
    lines = (Path(folder) / "cases.jsonl").read_text(encoding="utf-8").splitlines()
    return {r["case_id"]: r["status"] for r in map(json.loads, lines)}


first, second = (outcomes(folder) for folder in sys.argv[1:3])
differ = sorted((case, first.get(case, "absent"), second.get(case, "absent"))
                for case in first.keys() | second.keys() if first.get(case) != second.get(case))
for case, a, b in differ:
    print(f"{case}: {a} in {sys.argv[1]}, {b} in {sys.argv[2]}")
counts = {s: list(first.values()).count(s) for s in sorted(set(first.values()))}
print(f"{len(first)} cases, {counts}: {'the same outcome in both runs' if not differ else f'{len(differ)} differ'}")
sys.exit(1 if differ else 0)
