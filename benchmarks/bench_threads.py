"""Threads per case (issue 41): small cases with one intra-op thread, large ones with the budget.

Prints paired ratios from alternating runs, so that a machine others are using moves both sides of
each ratio alike. Every pytest run is a fresh subprocess in an empty folder; its CPU is getrusage's
of the child (its xdist workers included), per case = CPU / cases (start-up included).

    python benchmarks/bench_threads.py [--cases 1000] [--rounds 1] [--crossover] [--no-xdist]

- small cases: a statistics dump of --cases small cases (linear forward and backward, gelu, add_),
  `--npu-precision-device cpu`, idle and under load (one process per core spinning), serial and -n 2,
  each run three ways: the policy (the default), `OMP_NUM_THREADS=1`, and every case at the process's
  count as before (`--npu-precision-threads` = torch's default count, or the cores // workers of -n 2).
  Target: the policy's CPU <= 1.2x that of OMP_NUM_THREADS=1 under load.
- large case: one 2048x2048 float32 matmul from a tensor dump, in process (as a pytest run applies the
  policy), the policy against every case at the process's count, idle and under load, alternating
  runs. Target: no slower (wall ratio <= 1.0, within the noise).
- --crossover: in process, a square linear and a gelu of growing size checked with check_call at one
  thread and at the cores' count: where more threads start to pay (the policy's LARGE_CASE_ELEMENTS).

"idle" is this script's own load removed; a shared machine still has its users' (the load average
is printed with each block).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale  # noqa: E402  (its synthetic statistics dumps)

from pytest_npuprecision import capture, check_call
from pytest_npuprecision.checks.case_run import Settings, run_case
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.replay import threads
from pytest_npuprecision.replay.memory_budget import input_elements
from pytest_npuprecision.replay.threads import LARGE_CASE_ELEMENTS, ThreadPolicy, available_cores, thread_policy

SMALL_APIS = ("Functional.linear", "Functional.gelu", "Tensor.add_")
DEFAULT_THREADS = torch.get_num_threads()  # before anything here sets it: torch's default in this process


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def pytest_run(dump: Path, cwd: Path, *args: str, env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the pytest process and its workers, its last line)."""
    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    cpu, started = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--npu-precision",
                           str(dump), "--npu-precision-device", "cpu", *args], cwd=cwd, capture_output=True,
                          text=True, env={**environ, **(env or {})})
    wall, used = time.perf_counter() - started, _children_cpu() - cpu
    last = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]
    if done.returncode != 0:
        raise SystemExit(f"pytest failed ({done.returncode}): {last}")
    return wall, used, last


@contextlib.contextmanager
def load(on: bool):
    """One process per core spinning, in a group of its own, while the block runs."""
    if not on:
        yield
        return
    spinner = subprocess.Popen(
        [sys.executable, "-c", "import multiprocessing as m, os\n"
         "def spin():\n    while True: pass\n"
         f"ps = [m.Process(target=spin) for _ in range({available_cores()})]\n"
         "[p.start() for p in ps]\n[p.join() for p in ps]"], start_new_session=True)
    time.sleep(0.5)
    try:
        yield
    finally:
        os.killpg(spinner.pid, signal.SIGTERM)
        spinner.wait()


def _load_text(under_load: bool) -> str:
    return f"{'under load' if under_load else 'idle'} (load average {os.getloadavg()[0]:.1f} before)"


def small_cases(dump: Path, cwd: Path, cases: int, rounds: int, xdist: bool) -> None:
    for under_load in (False, True):
        for workers in ((0, 2) if xdist else (0,)):
            today = DEFAULT_THREADS if workers == 0 else max(1, available_cores() // workers)
            ways = {"policy": ((), None), "OMP_NUM_THREADS=1": ((), {"OMP_NUM_THREADS": "1"}),
                    f"every case {today} thread(s)": (("--npu-precision-threads", str(today)), None)}
            xdist_args = ("-n", str(workers)) if workers else ()
            print(f"\n{cases} small cases, {'serial' if not workers else f'-n {workers}'}, {_load_text(under_load)}")
            results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
            with load(under_load):
                for round_ in range(rounds):
                    order = list(ways) if round_ % 2 == 0 else list(reversed(ways))  # alternate who goes first
                    for name in order:
                        args, env = ways[name]
                        wall, cpu, _ = pytest_run(dump, cwd, *xdist_args, *args, env=env)
                        results[name].append((wall, cpu))
            for name, runs in results.items():
                print(f"  {name:28s} CPU per case {_range([c / cases * 1e3 for _, c in runs])} ms, "
                      f"wall {_range([w for w, _ in runs])} s")
            base = results["OMP_NUM_THREADS=1"]
            today_name = list(ways)[2]
            for name in ("policy", today_name):
                cpu_ratios = [c / b for (_, c), (_, b) in zip(results[name], base)]
                wall_ratios = [w / b for (w, _), (b, _) in zip(results[name], base)]
                target = " (target <= 1.2)" if name == "policy" else ""
                print(f"  {name} / OMP_NUM_THREADS=1: CPU {_range(cpu_ratios, '.2f')}x{target}, "
                      f"wall {_range(wall_ratios, '.2f')}x")
            print(f"  policy / {today_name}: CPU {_range([c / t for (_, c), (_, t) in zip(results['policy'], results[today_name])], '.2f')}x, "
                  f"wall {_range([w / t for (w, _), (t, _) in zip(results['policy'], results[today_name])], '.2f')}x")


def large_case(folder: Path, rounds: int, size: int = 2048) -> None:
    """In process, as a pytest run does it (threads.apply): one case at a time, alternating."""
    dump = folder / f"matmul{size}"
    generator = torch.Generator().manual_seed(0)
    a, b = (torch.randn(size, size, generator=generator) for _ in range(2))
    with capture(str(dump), task="tensor", rank=0):
        torch.matmul(a, b)
    del a, b
    loaded = load_dump(next(dump.rglob("dump.json")))
    settings = Settings(device=torch.device("cpu"))
    run_case(loaded.cases[0], loaded.data_dir, settings)  # warm: the first case loads what every case uses
    ways = {"policy": thread_policy(0, {}),
            f"every case {DEFAULT_THREADS} thread(s)": ThreadPolicy(DEFAULT_THREADS, "--npu-precision-threads")}
    elements = input_elements(loaded.cases[0].read())
    counts = {name: policy.threads_for(elements) or DEFAULT_THREADS for name, policy in ways.items()}
    print(f"\n{size}x{size} matmul: {elements} input elements; threads in the case: "
          + ", ".join(f"{name} {count}" for name, count in counts.items()))
    for under_load in (False, True):
        print(f"one {size}x{size} float32 matmul case, in process, {rounds} alternating runs each, "
              f"{_load_text(under_load)}")
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        with load(under_load):
            for round_ in range(rounds):
                for name in (list(ways) if round_ % 2 == 0 else list(reversed(ways))):
                    threads.apply(ways[name])
                    cpu, started = _own_cpu(), time.perf_counter()
                    try:
                        run_case(loaded.cases[0], loaded.data_dir, settings)
                    finally:
                        threads.release()
                    results[name].append((time.perf_counter() - started, _own_cpu() - cpu))
        for name, runs in results.items():
            print(f"  {name:28s} wall {_range([w for w, _ in runs])} s (median {statistics.median(w for w, _ in runs):.3g}), "
                  f"CPU {_range([c for _, c in runs])} s")
        other = list(ways)[1]
        ratios = [w / o for (w, _), (o, _) in zip(results["policy"], results[other])]
        print(f"  policy / {other}: wall {_range(ratios, '.2f')}x, median {statistics.median(ratios):.2f}x "
              f"(target <= 1.0; with the same count in the case, any gap is the machine's noise)")


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def crossover(rounds: int) -> None:
    cores = available_cores()
    print(f"\ncrossover: check_call on cpu, {cores} threads / 1 thread, best of {rounds + 2}, "
          f"load average {os.getloadavg()[0]:.1f}; the policy's threshold: {LARGE_CASE_ELEMENTS} input elements")
    generator = torch.Generator().manual_seed(0)
    for n in (64, 128, 256, 512, 1024):
        a, w = torch.randn(n, n, generator=generator), torch.randn(n, n, generator=generator)
        x = torch.randn(n * n * 2, generator=generator)
        for name, fn, elements in (("linear", lambda: check_call("Functional.linear", a, w), 2 * n * n),
                                   ("gelu", lambda: check_call("Functional.gelu", x), 2 * n * n)):
            best = {}
            for count in (1, cores) * (rounds + 2):
                torch.set_num_threads(count)
                started = time.perf_counter()
                fn()
                best[count] = min(best.get(count, 1e9), time.perf_counter() - started)
            print(f"  {name:6s} {elements:9d} input elements: 1 thread {best[1] * 1e3:8.2f} ms, "
                  f"{cores} threads {best[cores] * 1e3:8.2f} ms, ratio {best[cores] / best[1]:.2f}")
    torch.set_num_threads(DEFAULT_THREADS)


def _range(values: list[float], spec: str = ".3g") -> str:
    low, high = min(values), max(values)
    return format(low, spec) if len(values) == 1 or format(low, spec) == format(high, spec) \
        else f"{format(low, spec)}-{format(high, spec)}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000, help="small cases in the dump (default 1000)")
    parser.add_argument("--rounds", type=int, default=1, help="paired rounds of each comparison (default 1)")
    parser.add_argument("--no-xdist", action="store_true", help="serial runs only")
    parser.add_argument("--no-large", action="store_true", help="skip the 2048x2048 matmul case")
    parser.add_argument("--crossover", action="store_true", help="also sweep sizes in process (about a minute)")
    args = parser.parse_args()
    print(f"{available_cores()} cores, torch {torch.__version__} default {DEFAULT_THREADS} threads")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        cwd = folder / "empty"
        cwd.mkdir()
        dump = bench_scale.synthetic_dump(args.cases, folder / "small", SMALL_APIS)
        small_cases(dump, cwd, args.cases, args.rounds, not args.no_xdist)
        if not args.no_large:
            large_case(folder, max(5, args.rounds))
        if args.crossover:
            crossover(args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
