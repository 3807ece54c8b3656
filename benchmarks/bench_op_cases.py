"""Time the shipped op cases: the whole op_cases/ folder under a profile, as CI runs it.

Runs pytest on op_cases/ in process (or with xdist workers) on the CPU, writing no regression
files, and prints the wall time, the cases by outcome, the examples Hypothesis ran (shrinking
included) and the slowest cases. The budget for the ci profile is 5 minutes on 2 CPU cores.

    python benchmarks/bench_op_cases.py [--profile ci] [--workers 2] [--folder op_cases]
"""

from __future__ import annotations

import argparse
import collections
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


class Tally:
    """Counts outcomes and examples from the reports, which xdist carries back from its workers."""

    def __init__(self) -> None:
        self.outcomes: collections.Counter[str] = collections.Counter()
        self.examples = 0
        self.durations: list[tuple[float, str]] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report) -> None:
        if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
            return
        self.outcomes[report.outcome] += 1
        self.examples += sum(v for k, v in report.user_properties if k == "npu_precision_examples")
        self.durations.append((report.duration, report.nodeid))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="ci", choices=("ci", "dev", "thorough"))
    parser.add_argument("--workers", type=int, default=0, help="xdist workers (0: in process)")
    parser.add_argument("--folder", default=str(ROOT / "op_cases"))
    args = parser.parse_args()

    tally = Tally()
    options = [args.folder, "-q", "-p", "no:cacheprovider", "--npu-precision-device", "cpu",
               "--npu-precision-profile", args.profile, "--npu-precision-regressions", "none",
               "--rootdir", str(ROOT), "-W", "ignore::pytest.PytestWarning"]
    if args.workers:
        options += ["-n", str(args.workers)]
    started = time.perf_counter()
    code = pytest.main(options, plugins=[tally])
    seconds = time.perf_counter() - started

    outcomes = ", ".join(f"{n} {k}" for k, n in sorted(tally.outcomes.items()))
    print(f"\nop cases in {args.folder}: {outcomes}; {tally.examples} examples")
    print(f"wall time {seconds:.1f} s (profile {args.profile}, "
          f"{f'{args.workers} xdist workers' if args.workers else 'one process'}; budget 300 s on 2 cores)")
    for duration, nodeid in sorted(tally.durations, reverse=True)[:5]:
        print(f"  {duration:6.2f} s  {nodeid}")
    return int(code)


if __name__ == "__main__":
    raise SystemExit(main())
