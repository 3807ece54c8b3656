"""The cost of the second look: the slowest cases of OpInfo dumps, timed with it and without it.

The second look (precision/second_look.py) reruns a failing output's golden on inputs moved by their dtype's
rounding, five times, before it judges again. It costs nothing where the first look passes, so its
price shows on the cases that need it. This runs every case of the dumps on the CPU twice, once as
shipped and once with the spread never measured, takes the N slowest cases (of the run with it),
and prints their time both ways and how many of them took the second look.

    python benchmarks/bench_second_look.py tests/data/opinfo [--slowest 1000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

from pytest_npuprecision.checks.case_run import CaseInputError, CaseSkipped, Settings, run_case
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.dump.locations import find_dump_files
from pytest_npuprecision.replay import perturbed


def case_seconds(roots: list[Path], settings: Settings) -> tuple[dict[str, float], set[str]]:
    """Seconds of each case that ran, by case id, and the ids whose verdict the second look made."""
    seconds, second = {}, set()
    for root in roots:
        for path in find_dump_files(root):
            dump = load_dump(path)
            for case in dump.cases:
                started = time.perf_counter()
                try:
                    result = run_case(case, dump.data_dir, settings)
                except (CaseSkipped, CaseInputError):
                    continue
                except Exception:  # a harness error: timed all the same
                    result = None
                seconds[case.case_id] = time.perf_counter() - started
                if result is not None and any(o.verdict.excused is not None or any(
                        n.startswith("second look") for n in o.verdict.notes) for o in result.outputs):
                    second.add(case.case_id)
    return seconds, second


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dumps", nargs="+", type=Path)
    parser.add_argument("--slowest", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=2, help="runs each way; the fastest per case counts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = Settings(device=torch.device("cpu"))
    measure = perturbed.GoldenSpread.__call__
    with_it, without = {}, {}
    looked: set[str] = set()
    for _ in range(args.repeat):
        perturbed.GoldenSpread.__call__ = measure
        seconds, looked = case_seconds(args.dumps, settings)
        for k, s in seconds.items():
            with_it[k] = min(with_it.get(k, s), s)
        perturbed.GoldenSpread.__call__ = lambda self, name, golden: None  # no spread: no second look
        seconds, _ = case_seconds(args.dumps, settings)
        for k, s in seconds.items():
            without[k] = min(without.get(k, s), s)
    perturbed.GoldenSpread.__call__ = measure
    common = [k for k in with_it if k in without]
    slowest = sorted(common, key=with_it.get, reverse=True)[:args.slowest]
    on, off = sum(with_it[k] for k in slowest), sum(without[k] for k in slowest)
    took = [k for k in slowest if k in looked]
    print(f"{len(common)} cases judged; the {len(slowest)} slowest, {len(took)} of them with a second look:")
    print(f"  with the second look    {on:8.2f} s  (median {statistics.median(with_it[k] for k in slowest) * 1e3:.2f} ms)")
    print(f"  without it              {off:8.2f} s  (median {statistics.median(without[k] for k in slowest) * 1e3:.2f} ms)")
    print(f"  cost: {on / off:.2f}x in all; on the cases that took it, "
          f"{sum(with_it[k] for k in took) / max(sum(without[k] for k in took), 1e-9):.2f}x")
    everything_on, everything_off = sum(with_it[k] for k in common), sum(without[k] for k in common)
    print(f"  every case: {everything_on:.2f} s with, {everything_off:.2f} s without ({everything_on / everything_off:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
