"""Benchmark of ``pytest_npuprecision.checks.judging``: wall time and peak extra memory.

For each tensor size and output dtype this measures two modes:

* ``error-bound``: ``judge(actual, golden, op="Torch.matmul", accumulation=Accumulation(1))``, every metric computed once;
* ``benchmark``: the same with ``baseline=`` a tensor of the same dtype, which computes every
  metric twice (once for the actual, once for the baseline).

Time: the median wall time of ``judge`` over ``--repeat`` runs, against the median time of one
``torch.sub(actual, golden)`` over the same tensors (a single pass over the data that any
comparison must make). Aim: judge under 20x that subtraction.

Memory: each measurement runs in a fresh subprocess (this script with ``--child``): it builds
the inputs chunk by chunk (all pages written, no high-water mark left), runs a tiny judge to load
everything, resets the RSS high-water mark (``/proc/self/clear_refs``), runs judge once and takes
the rise of the mark (VmHWM: ``ru_maxrss`` without the parent's RSS that a child inherits through
fork and exec) as judge's peak extra memory, reported as a multiple of the ``actual`` tensor and of
``actual + golden``. Aim: under 4x the actual tensor.

Inputs are seeded: golden is randn in float64, actual (and baseline) is golden times
``1 + eps * randn`` rounded to the dtype, so errors are small but non-zero.

    python benchmarks/bench_metrics.py [--sizes 1M 64M] [--dtypes float32 float16] [--repeat 3]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

from pytest_npuprecision import Accumulation, judge

BUILD_CHUNK = 1 << 16
MODES = ("error-bound", "benchmark")


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def make_inputs(n: int, dtype: torch.dtype, with_baseline: bool, seed: int = 0):
    """golden (float64), actual and optionally baseline (dtype), built without large temporaries."""
    gen = torch.Generator().manual_seed(seed)
    golden = torch.empty(n, dtype=torch.float64).normal_(generator=gen)
    eps = torch.finfo(dtype).eps
    outs = []
    for _ in range(2 if with_baseline else 1):
        out = torch.empty(n, dtype=dtype)
        for s in range(0, n, BUILD_CHUNK):
            g = golden[s : s + BUILD_CHUNK]
            out[s : s + BUILD_CHUNK] = g * (1 + eps * torch.randn(g.shape, dtype=torch.float64, generator=gen))
        outs.append(out)
    return golden, outs[0], (outs[1] if with_baseline else None)


def run_judge(golden, actual, baseline):
    # Synthetic outputs of no real call: one term each (the timing does not depend on K).
    return judge(actual, golden, baseline=baseline, op="Torch.matmul", accumulation=Accumulation(1))


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def peak_rss_kib(reset: bool = False) -> int:
    """This process's peak RSS (VmHWM; ru_maxrss off Linux), after resetting it if asked."""
    try:
        if reset:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(n: int, dtype: torch.dtype, mode: str) -> None:
    """Measure one judge's peak extra memory in this (fresh) process; print it as JSON."""
    bench = mode == "benchmark"
    run_judge(*make_inputs(4096, dtype, bench, seed=1))  # load rules and kernels once
    golden, actual, baseline = make_inputs(n, dtype, bench)  # writing them touched every page
    before = peak_rss_kib(reset=True)
    run_judge(golden, actual, baseline)
    extra = (peak_rss_kib() - before) * 1024
    print(json.dumps({"actual": extra / actual.nbytes, "a+g": extra / (actual.nbytes + golden.nbytes)}))


def measure_memory(size: str, dtype: str, mode: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", size, dtype, mode]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        return {"actual": float("nan"), "a+g": float("nan")}  # e.g. killed for memory
    return json.loads(proc.stdout.strip().splitlines()[-1])


def trim_heap() -> None:
    """Give the parent's freed heap back to the OS (glibc keeps it) before a child runs."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["1M", "64M"])
    parser.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("SIZE", "DTYPE", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        size, dtype, mode = args.child
        return child(parse_size(size), getattr(torch, dtype), mode)

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, repeat {args.repeat}")
    header = f"{'size':>5} {'dtype':<9} {'mode':<12} {'judge ms':>9} {'sub ms':>8} {'judge/sub':>9}" \
             f" {'mem/actual':>10} {'mem/(a+g)':>9}"
    print(header + "\n" + "-" * len(header))
    worst = {"judge/sub": (0.0, ""), "mem/actual": (0.0, ""), "mem/(a+g)": (0.0, "")}
    for size in args.sizes:
        n = parse_size(size)
        repeat = args.repeat if n <= (1 << 24) else min(args.repeat, 2)  # a 64M judge takes seconds
        for dtype in args.dtypes:
            golden, actual, baseline = make_inputs(n, getattr(torch, dtype), True)
            torch.sub(actual[:4096], golden[:4096])  # warm up
            sub = median_time(lambda: torch.sub(actual, golden), max(repeat, 3))
            times = {}
            for mode in MODES:
                base = baseline if mode == "benchmark" else None
                run_judge(golden[:4096], actual[:4096], None if base is None else base[:4096])
                times[mode] = median_time(lambda: run_judge(golden, actual, base), repeat)
            golden = actual = baseline = None  # free them before measuring memory
            trim_heap()
            for mode, t in times.items():
                mem = measure_memory(size, dtype, mode)
                where = f"{size} {dtype} {mode}"
                for key, value in (("judge/sub", t / sub), ("mem/actual", mem["actual"]), ("mem/(a+g)", mem["a+g"])):
                    worst[key] = max(worst[key], (value, where))
                print(f"{size:>5} {dtype:<9} {mode:<12} {t * 1e3:9.1f} {sub * 1e3:8.2f} {t / sub:8.1f}x"
                      f" {mem['actual']:9.2f}x {mem['a+g']:8.2f}x", flush=True)
    print("worst: " + "; ".join(f"{k} {v:.2f}x ({w})" for k, (v, w) in worst.items())
          + "  [aims: judge/sub < 20x, mem/actual < 4x]")


if __name__ == "__main__":
    main()
