"""How much of the Ascend half the catalogue judges: msprobe's hooked torch_npu names, and the ops public
Ascend projects call most, each resolved as a dump case resolves it (issue 52's counts).

    python benchmarks/ascend_coverage.py ../shared/reference/ascend-ops

The folder holds ``msprobe-26.2.0-hooked-torch_npu.txt`` (one ``NPU.<name>`` a line) and
``ranked-by-use.csv`` (rank, op, projects, ...). An op counts as judged when its name resolves to a float64
reference (in-place spellings and ``atb.`` names included); the rest are split by the reason their cases
skip with.
"""

from __future__ import annotations

import argparse
import csv
from collections import Counter
from pathlib import Path

from pytest_npuprecision.ops.resolution import resolve

FROM_EVERY_RANK = ("npu_mm_reduce_scatter_base", "npu_all_gather_base_mm", "npu_mm_all_reduce_base")


def verdict(name: str) -> str:
    """'judged', or the skip code a case of ``NPU.<name>`` ends with."""
    found = resolve(f"NPU.{name}")
    if found.reference is not None:
        return "judged"
    if "judged from every rank" in (found.unsupported or ""):
        return "judged"  # a fused matmul-collective: judged from a multi-rank dump (docs/collectives.md)
    return found.unsupported_reason


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path)
    parser.add_argument("--top", type=int, default=40)
    options = parser.parse_args()
    hooked = [line.strip().removeprefix("NPU.") for line in
              (options.folder / "msprobe-26.2.0-hooked-torch_npu.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    ranked = list(csv.DictReader((options.folder / "ranked-by-use.csv").open()))[:options.top]
    verdicts = {name: verdict(name) for name in {*hooked, *(row["op"] for row in ranked)}}
    counts = Counter(verdicts[name] == "judged" for name in hooked)
    print(f"msprobe's hooked torch_npu names: {counts[True]} of {len(hooked)} judged")
    # what a single-op golden could judge: not a collective inside a kernel, not a workspace query
    alone = [row for row in ranked if verdicts[row["op"]] not in ("needs-process-group", "not-a-computation")
             and row["op"] not in FROM_EVERY_RANK]
    judged = [row for row in alone if verdicts[row["op"]] == "judged"]
    print(f"top {options.top}: {sum(verdicts[r['op']] == 'judged' for r in ranked)} judged; "
          f"of the {len(alone)} without a process group: {len(judged)}")
    print(f"top 10: {sum(verdicts[r['op']] == 'judged' for r in ranked[:10])} judged")
    print("\ntop ops not judged:")
    for row in ranked:
        if verdicts[row["op"]] != "judged":
            print(f"  {row['rank']:>3} {row['op']:<48} {verdicts[row['op']]}")


if __name__ == "__main__":
    main()
