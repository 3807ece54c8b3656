"""Per-case harness overhead of dump cases, and how fast a large dump turns into cases.

Runs every case of the msprobe transformer_tensor fixture dump (tests/data) and of a synthetic statistics dump
of 10 000 entries (the mlp_statistics entries repeated with fresh call indices), in process,
through the same core the plugin uses. Prints the median harness overhead per case (case time
minus the op's own device and golden time) and the total. msprobe's acc_check needs about
500 ms per API on these dumps; the aim here is under 10 ms. Also times load_dump of a
100 000-entry dump (collection must take seconds).

    python benchmarks/bench_dump.py [--fixtures DIR] [--entries 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch

from pytest_npuprecision.checks.case_run import CaseInputError, CaseSkipped, Settings, run_case
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.dump.locations import find_dump_files

FIXTURES = Path(os.environ.get("NPU_PRECISION_FIXTURES",
                               Path(__file__).resolve().parents[1] / "tests" / "data" / "msprobe-dumps"))


def synthetic_dump(source: Path, entries: int, folder: Path, apis: tuple[str, ...] | None = None) -> Path:
    """A statistics dump.json with `entries` API entries copied from `source` (those of `apis` only,
    when given) under new call indices."""
    data = json.loads(source.read_text())["data"]
    forwards = {k: v for k, v in data.items() if k.endswith(".forward") and not k.startswith("Module")
                and (apis is None or re.sub(r"\.\d+\.forward$", "", k) in apis)}
    out, copy = {}, 0
    while len(out) < entries:
        for key, entry in forwards.items():
            api = re.sub(r"\.\d+\.forward$", "", key)
            out[f"{api}.{1000 + copy}.forward"] = entry
            backward = data.get(key.replace(".forward", ".backward"))
            if backward is not None:
                out[f"{api}.{1000 + copy}.backward"] = backward
            if len(out) >= entries:
                break
        copy += 1
    path = folder / "step0" / "rank0" / "dump.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                "dump_data_dir": None, "data": out}))
    return path


def run_dump(root: Path, settings: Settings) -> tuple[list[float], int, int, float]:
    overheads, ran, skipped = [], 0, 0
    started = time.perf_counter()
    for path in find_dump_files(root):
        dump = load_dump(path)
        for case in dump.cases:
            try:
                result = run_case(case, dump.data_dir, settings)
            except (CaseSkipped, CaseInputError):
                skipped += 1
                continue
            ran += 1
            overheads.append(result.seconds - result.op_seconds)
    return overheads, ran, skipped, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--entries", type=int, default=10_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    settings = Settings(device=torch.device("cpu"))
    with tempfile.TemporaryDirectory() as tmp:
        source = next(iter(find_dump_files(args.fixtures / "mlp_statistics")))
        synthetic = synthetic_dump(source, args.entries, Path(tmp) / "synthetic")
        big = synthetic_dump(source, 100_000, Path(tmp) / "big")
        started = time.perf_counter()
        cases = len(load_dump(big).cases)
        print(f"load_dump of a 100000-entry dump: {cases} cases in {time.perf_counter() - started:.2f} s")
        for name, root in (("transformer_tensor", args.fixtures / "transformer_tensor"),
                           (f"synthetic statistics ({args.entries} entries)", synthetic.parent.parent.parent)):
            overheads, ran, skipped, total = run_dump(root, settings)
            median = statistics.median(overheads) * 1e3
            print(f"{name}: {ran} cases run, {skipped} skipped, total {total:.1f} s, "
                  f"median overhead {median:.2f} ms/case, p90 {statistics.quantiles(overheads, n=10)[-1] * 1e3:.2f} ms "
                  f"(aim < 10 ms; msprobe ~500 ms/API: {500 / median:.0f}x)")


if __name__ == "__main__":
    main()
