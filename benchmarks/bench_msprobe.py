"""A whole tensor dump checked by this harness and by msprobe's acc_check, on the same dump and machine.

Issue 41's target: a whole-dump run at least 50x faster than msprobe's `acc_check` (the tool formerly
called run_ut), per API, whole processes, start-up included. Both sides run on the CPU, as tests/data
documents: msprobe 26.2.0 without torch_npu sets its device to "cuda" and its `acc_check_command()`
calls `torch.cuda.set_device`, which a CPU build of torch cannot do (a bare `NotImplementedError`);
its `-d` takes device ids 0-7, no CPU.
Its child here applies, at run time, the patches tests/data/msprobe-dumps/README.md describes (the
device side and its autocast on the CPU, `torch.cuda.set_device` a no-op) and then runs msprobe's own
`main()` unchanged: msprobe compares the dumped dtype on the CPU against its raised-precision bench on
the CPU. Ours runs `pytest --npu-precision DUMP --npu-precision-device cpu`, serial and `-n 2`, with a
report (msprobe writes its CSVs too).

The dump is the msprobe transformer_tensor fixture's step 0 (79 APIs, 125 forward and backward
entries, real tensors), repeated `--copies` times under fresh call indices (its tensor files
hard-linked under the new names). Each side also runs a dump of its first API alone; the run of that
one API is the side's start-up, and (whole - one API) / (APIs - 1) its cost per API without it.
Times are wall and CPU (getrusage of the child and its workers), one msprobe run between two of each
of ours (the median of ours is used), so that a machine others use loads both sides alike.

    python benchmarks/bench_msprobe.py [--copies 4] [--quick] [--markdown]

Exits 2 when msprobe is not installed (`pip install mindstudio-probe==26.2.0`, never a dependency).
"""

from __future__ import annotations

import argparse
import collections
import csv
import functools
import importlib.util
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_report import MISSES, load_average, markdown, report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "tests" / "data" / "msprobe-dumps" / "transformer_tensor" / "step0" / "rank0" / "dump.json"
TARGET = 50.0  # msprobe's seconds per API over ours


@dataclass(frozen=True)
class Run:
    wall: float
    cpu: float


@dataclass(frozen=True)
class Judged:
    """What one side judged and skipped: "Functional.linear.0 forward", one per API and direction."""

    judged: frozenset[str]
    skipped: frozenset[str]
    verdicts: collections.Counter

    def apis(self) -> int:
        return len({entry.split()[0] for entry in self.judged})


def copied_dump(source: Path, copies: int, folder: Path, apis: int | None = None) -> tuple[Path, int]:
    """A tensor dump of `source`'s entries `copies` times over (its first `apis` APIs only, when given),
    each copy under fresh call indices and its tensor files hard-linked under the new names.
    Returns the dump.json and its count of APIs (forward entries)."""
    document = json.loads(source.read_text())
    data_dir = source.parent / "dump_tensor_data"
    forwards = [key for key in document["data"] if key.endswith(".forward")][:apis]
    out_dir = folder / "step0" / "rank0" / "dump_tensor_data"
    out_dir.mkdir(parents=True)
    data = {}
    for copy in range(copies):
        for key in forwards:
            api, index = re.fullmatch(r"(.+)\.(\d+)\.forward", key).groups()
            new_index = 1000 * copy + int(index)  # the fixture's call indices are all below 1000
            for direction in ("forward", "backward"):
                old = f"{api}.{index}.{direction}"
                if old in document["data"]:
                    new = f"{api}.{new_index}.{direction}"
                    data[new] = _renamed(document["data"][old], old, new, data_dir, out_dir)
    path = folder / "step0" / "rank0" / "dump.json"
    path.write_text(json.dumps({**document, "dump_data_dir": str(out_dir), "data": data}))
    return path, len(forwards) * copies


def _renamed(value, old: str, new: str, data_dir: Path, out_dir: Path):
    if isinstance(value, list):
        return [_renamed(item, old, new, data_dir, out_dir) for item in value]
    if not isinstance(value, dict):
        return value
    value = {name: _renamed(item, old, new, data_dir, out_dir) for name, item in value.items()}
    if isinstance(value.get("data_name"), str):
        name = new + value["data_name"].removeprefix(old)
        try:
            os.link(data_dir / value["data_name"], out_dir / name)
        except OSError:  # another file system
            shutil.copyfile(data_dir / value["data_name"], out_dir / name)
        value["data_name"] = name
    return value


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(command: list[str], cwd: Path) -> Run:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**env, "TQDM_DISABLE": "1"})
    run = Run(time.perf_counter() - started, _children_cpu() - cpu)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed ({done.returncode}):\n{(done.stdout + done.stderr)[-2000:]}")
    return run


def ours(dump: Path, out: Path, *args: str) -> tuple[Run, Judged]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    run = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--npu-precision", str(dump),
                 "--npu-precision-device", "cpu", "--npu-precision-report", str(out / "report"), *args], out)
    records = [json.loads(line) for line in (out / "report" / "cases.jsonl").read_text().splitlines()]
    entries = {f"{record['api']} {record['direction']}": record["status"] for record in records}
    return run, Judged(frozenset(e for e, status in entries.items() if status != "skipped"),
                       frozenset(e for e, status in entries.items() if status == "skipped"),
                       collections.Counter(f"{e.split()[1]} {status}" for e, status in entries.items()))


def msprobe(dump: Path, out: Path) -> tuple[Run, Judged]:
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # cwd is the output: acc_check's default error_data_path is "./"
    run = timed([sys.executable, __file__, "--msprobe-child", "-api_info", str(dump), "-o", str(out)], out)
    [result] = out.glob("accuracy_checking_result_*.csv")
    with result.open(encoding="utf-8-sig", newline="") as rows:
        table = list(csv.DictReader(rows))
    # a verdict, SKIP with its reason, or blank: the dump holds no backward for that API
    entries = {f"{row['API name']} {direction.lower()}": row[f"{direction} Test Success"].strip()
               for row in table for direction in ("Forward", "Backward")}
    return run, Judged(frozenset(e for e, status in entries.items() if status in ("pass", "warning", "error")),
                       frozenset(e for e, status in entries.items() if status == "SKIP"),
                       collections.Counter(f"{e.split()[1]} {status or 'blank'}" for e, status in entries.items()))


def msprobe_child(argv: list[str]) -> None:
    """msprobe acc_check on the CPU: the patches tests/data/msprobe-dumps/README.md describes, then
    msprobe's own main()."""
    import torch
    import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check as acc_check
    import msprobe.pytorch.api_accuracy_checker.acc_check.acc_check_utils as acc_check_utils
    from msprobe.msprobe import main

    acc_check.current_device = acc_check_utils.current_device = "cpu"
    acc_check_utils.autocast = functools.partial(torch.autocast, "cpu")  # mixed-dtype APIs' device side
    torch.cuda.set_device = lambda *args, **kwargs: None
    sys.argv = ["msprobe", "acc_check", *argv]
    main()


def median_run(runs: list[Run]) -> Run:
    return Run(statistics.median(r.wall for r in runs), statistics.median(r.cpu for r in runs))


def measure(folder: Path, copies: int) -> dict:
    """Each side on the whole dump and on its first API alone; ours twice around msprobe's one run."""
    whole, apis = copied_dump(SOURCE, copies, folder / "whole")
    single, _ = copied_dump(SOURCE, 1, folder / "single", apis=1)
    figures = {"apis": apis}
    for name, dump in (("one API", single), ("whole", whole)):
        serial, parallel = [], []
        for turn in range(2):
            if turn == 1:
                figures[f"msprobe {name}"], figures[f"msprobe {name} judged"] = msprobe(dump, folder / "msprobe")
            run, judged = ours(dump, folder / "ours")
            serial.append(run)
            run, judged_n2 = ours(dump, folder / "ours-n2", "-n", "2")
            parallel.append(run)
        figures[f"serial {name}"], figures[f"serial {name} judged"] = median_run(serial), judged
        figures[f"-n 2 {name}"], figures[f"-n 2 {name} judged"] = median_run(parallel), judged_n2
    return figures


def print_figures(figures: dict, report: Callable[..., None]) -> None:
    """Prints what each side ran and judged, and through `report` each ratio against the target."""
    apis = figures["apis"]
    probe, probe_one = figures["msprobe whole"], figures["msprobe one API"]
    print(f"against msprobe: transformer_tensor step 0 x {apis // 79}, {apis} APIs")
    print(f"  msprobe acc_check: {probe.wall:.1f} s wall, {probe.cpu:.1f} s CPU; one API alone {probe_one.wall:.1f} s "
          f"wall, {probe_one.cpu:.1f} s CPU")
    _print_judged("msprobe", figures["msprobe whole judged"])
    for side in ("serial", "-n 2"):
        run, one = figures[f"{side} whole"], figures[f"{side} one API"]
        print(f"  ours {side}: {run.wall:.2f} s wall, {run.cpu:.2f} s CPU; one API alone {one.wall:.2f} s wall, "
              f"{one.cpu:.2f} s CPU")
        _print_judged(f"ours {side}", figures[f"{side} whole judged"])
    probe_judged, ours_judged = figures["msprobe whole judged"].judged, figures["serial whole judged"].judged
    print(f"  forward and backward entries judged by msprobe only: {_names(probe_judged - ours_judged)}; "
          f"by ours only: {_names(ours_judged - probe_judged)}; ours -n 2 judged the same as serial: "
          f"{figures['-n 2 whole judged'].judged == ours_judged}")
    for side in ("serial", "-n 2"):
        run, one = figures[f"{side} whole"], figures[f"{side} one API"]
        for kind in ("cpu", "wall"):
            marginal_probe = (getattr(probe, kind) - getattr(probe_one, kind)) / (apis - 1)
            marginal_ours = (getattr(run, kind) - getattr(one, kind)) / (apis - 1)
            report(f"msprobe / ours {side}, {kind} per API of {apis}, whole processes",
                   getattr(probe, kind) / getattr(run, kind),
                   TARGET, "x", higher_is_better=True,
                   detail=f"{getattr(probe, kind) / apis * 1e3:.0f} / {getattr(run, kind) / apis * 1e3:.1f} ms; "
                          f"start-up excluded {marginal_probe * 1e3:.0f} / {marginal_ours * 1e3:.1f} ms, "
                          f"{_ratio(marginal_probe, marginal_ours)}")


def _ratio(slow: float, fast: float) -> str:
    return f"{slow / fast:.0f}x" if fast > 0 else "ours within the noise of its start-up"


def _print_judged(side: str, judged: Judged) -> None:
    counts = ", ".join(f"{name} {count}" for name, count in sorted(judged.verdicts.items()))
    print(f"  {side}: {judged.apis()} APIs judged, {len(judged.judged)} forward and backward entries; skipped "
          f"{_names(judged.skipped)}; {counts}")


def _names(apis: frozenset[str]) -> str:
    """Entries without their call index, with counts: Tensor.split backward x4."""
    kinds = collections.Counter(re.sub(r"\.\d+ ", " ", entry) for entry in apis)
    return "(" + ", ".join(f"{kind} x{count}" for kind, count in sorted(kinds.items())) + ")" if kinds else "(none)"


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--msprobe-child":
        msprobe_child(sys.argv[2:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=4, help="times the transformer_tensor step is repeated")
    parser.add_argument("--quick", action="store_true", help="one copy (79 APIs)")
    parser.add_argument("--markdown", action="store_true", help="also print the figures as the README's table rows")
    args = parser.parse_args()
    if importlib.util.find_spec("msprobe") is None:
        print("msprobe is not installed: pip install mindstudio-probe==26.2.0")
        return 2
    before = load_average()
    print(f"load average before: {before} ({os.cpu_count()} cores; others' runs included)")
    with tempfile.TemporaryDirectory() as tmp:
        print_figures(measure(Path(tmp), 1 if args.quick else args.copies), report)
    if args.markdown:
        print(markdown(" ".join(["python benchmarks/bench_msprobe.py", *sys.argv[1:]]), before))
    return 1 if MISSES else 0


if __name__ == "__main__":
    sys.exit(main())
