"""The GPU check: one command that runs everything a GPU machine can tell us, and one table of results.

    python benchmarks/gpu_check.py [--workers 8] [--out gpu_check.txt]

On a machine with one NVIDIA GPU (16 cores: under 8 minutes), from the repository root, with the
project installed (pip install -e ".[test]"). Each step runs pytest (or a probe) in a subprocess:

1. TF32 rounding: how cuBLAS and cuDNN round float32 inputs with TF32 on (tf32_rounding.py): the
   rounding that reproduces their results to a few float32 ulp is the one the bounds assume.
2. The GPU tests (tests/backends/test_cuda.py, test_cuda_findings.py, test_backends.py,
   tests/common/test_math_modes.py).
3. The float32 CNN dump (examples/cnn_float32_tensor) on cuda as run, as IEEE and pinned to IEEE.
4. The whole test suite with the GPU visible (-n SUITE_WORKERS, every core but one).
5. The shipped example dumps on cuda, serial and with -n WORKERS (per-case time from the wall time).
6. The examples with a cuda golden (it must agree with the cpu golden) and with a live cpu baseline.
7. The seeded-defect suite with torch's cuda kernels as one more fair kernel: no false alarm in any mode.
8. With --opinfo DIR (make_opinfo_dumps.py's folder of one dump per dtype): PyTorch's OpInfo samples
   on cuda (opinfo_triage.py), each precision failure to be triaged against the CPU run's.

Without a GPU it says so and exits 2: CI never runs it.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUTCOME = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?)")
DEFECT_MODES = re.compile(r"^(none|self|peer) +(\d+) / (\d+) +(\d+) / (\d+) +(\d+) / (\d+)", re.M)
TRIAGE_ROW = re.compile(r"^\| (\w+) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \|", re.M)


@dataclass(frozen=True)
class Step:
    name: str
    command: list[str]
    expect: str  # what a good result is, for the reader of the table
    timeout: int = 300


@dataclass(frozen=True)
class Result:
    step: Step
    outcomes: str
    seconds: float
    returncode: int
    tail: str


def pytest(*words: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *words]


def steps(workers: int, suite_workers: int, opinfo: Path | None) -> list[Step]:
    dumps, cnn = "examples/dumps", "examples/cnn_float32_tensor"
    parallel = ["-n", str(workers)]
    return [
        Step("tf32 rounding probe", [sys.executable, "benchmarks/tf32_rounding.py"],
             "rne10 fits cuBLAS/cuDNN with TF32 on", 120),
        Step("GPU tests", pytest("tests/backends/test_cuda.py", "tests/backends/test_cuda_findings.py",
                                 "tests/backends/test_backends.py", "tests/common/test_math_modes.py"), "all pass"),
        Step("cnn float32 on cuda, as-run", pytest("--npu-precision", cnn, "--npu-precision-device", "cuda"),
             "all pass (TF32 convs judged as TF32)"),
        Step("cnn float32 on cuda, ieee",
             pytest("--npu-precision", cnn, "--npu-precision-device", "cuda", "--npu-precision-fp32", "ieee"),
             "the convs cuDNN ran in TF32 fail, naming it"),
        Step("cnn float32 on cuda, run-ieee",
             pytest("--npu-precision", cnn, "--npu-precision-device", "cuda", "--npu-precision-fp32", "run-ieee"),
             "all pass (TF32 off)"),
        Step(f"whole suite, GPU visible, -n {suite_workers}", pytest("-n", str(suite_workers)), "no failure", 270),
        Step("examples on cuda, serial", pytest("--npu-precision", dumps, "--npu-precision-device", "cuda"),
             "no failure"),
        Step(f"examples on cuda, -n {workers}",
             pytest("--npu-precision", dumps, "--npu-precision-device", "cuda", *parallel), "same as serial"),
        Step("examples, cuda golden", pytest("--npu-precision", dumps, "--npu-precision-device", "cpu",
                                             "--npu-precision-golden", "cuda"), "as with the cpu golden"),
        Step("examples, cuda vs live cpu baseline",
             pytest("--npu-precision", dumps, "--npu-precision-device", "cuda", "--npu-precision-baseline", "cpu"),
             "no failure"),
        Step("defect suite, torch's cuda kernels fair",
             [sys.executable, "benchmarks/defect_suite.py", "--device", "cuda"], "0 false alarms in every mode",
             300),
    ] + ([Step("OpInfo samples on cuda",
                [sys.executable, "benchmarks/opinfo_triage.py", str(opinfo), "--device", "cuda",
                 "-n", str(suite_workers), "--reports", "/tmp/gpu_check_opinfo"],
               "only the CPU run's failures and cuda's own real imprecisions", 420)] if opinfo else [])


def run(step: Step, logs: Path | None) -> Result:
    started = time.perf_counter()
    try:
        done = subprocess.run(step.command, cwd=REPO, capture_output=True, text=True, timeout=step.timeout)
        output, code = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output, code = f"{exc.stdout or ''}{exc.stderr or ''}\ntimed out after {step.timeout} s", -1
    seconds = time.perf_counter() - started
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / (re.sub(r"\W+", "_", step.name).strip("_") + ".log")).write_text(output)
    return Result(step, outcome(output, code), seconds, code, "\n".join(output.splitlines()[-40:]))


def outcome(output: str, code: int) -> str:
    """pytest's counts, or the defect suite's false alarms and recall, or the OpInfo triage's failures."""
    if modes := DEFECT_MODES.findall(output):
        return "; ".join(f"{m}: {a}/{f} false alarms, gross {g}/{gn}, subtle {s}/{sn}"
                         for m, a, f, g, gn, s, sn in modes)
    if rows := TRIAGE_ROW.findall(output):
        return "; ".join(f"{dtype}: {cases} cases, {failed} precision failures"
                         for dtype, cases, _, failed in rows)
    last = next((line for line in reversed(output.splitlines()) if OUTCOME.search(line)), "")
    return ", ".join(f"{n} {what}" for n, what in OUTCOME.findall(last)) or f"exit {code}"


def table(results: list[Result]) -> str:
    rows = [("step", "outcome", "wall s", "expected")]
    rows += [(r.step.name, r.outcomes, f"{r.seconds:.1f}", r.step.expect) for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(" | ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="xdist workers for the dumps")
    parser.add_argument("--suite-workers", type=int, default=max((os.cpu_count() or 2) - 1, 1),
                        help="xdist workers for the whole test suite")
    parser.add_argument("--out", type=Path, default=None, help="also write the table and each step's tail here")
    parser.add_argument("--only", default=None, help="run only the steps whose name contains any of these texts, "
                        "comma-separated")
    parser.add_argument("--logs", type=Path, default=None, help="write each step's whole output into this folder")
    parser.add_argument("--opinfo", type=Path, default=None, help="a folder of OpInfo dumps, one per dtype")
    options = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_check: no GPU is visible here (torch.cuda.is_available() is False); nothing to check")
        return 2
    header = (f"gpu_check: {torch.cuda.get_device_name(0)}, torch {torch.__version__}, cuda {torch.version.cuda}, "
              f"cudnn {torch.backends.cudnn.version()}, {os.cpu_count()} cores")
    print(header, flush=True)
    results = []
    for step in steps(options.workers, options.suite_workers, options.opinfo):
        if options.only and not any(part in step.name for part in options.only.split(",")):
            continue
        results.append(run(step, options.logs))
        print(f"{step.name}: {results[-1].outcomes} in {results[-1].seconds:.1f} s", flush=True)
    report = f"{header}\n\n{table(results)}"
    serial = next((r for r in results if r.step.name == "examples on cuda, serial"), None)
    if serial is not None:
        cases = sum(int(n) for n, what in OUTCOME.findall(serial.outcomes) if what in ("passed", "failed", "skipped"))
        report += f"\n\nexamples on cuda: {cases} cases, {1000 * serial.seconds / max(cases, 1):.1f} ms per case " \
                  f"serial (whole process)"
    print("\n" + report)
    if options.out is not None:
        tails = "\n\n".join(f"## {r.step.name} (exit {r.returncode})\n{r.tail}" for r in results)
        options.out.write_text(f"{report}\n\n{tails}\n")
    return 0 if all(map(as_expected, results)) else 1


def as_expected(result: Result) -> bool:
    """The step went as its expectation says: the ieee run fails by design, and the defect suite exits 1
    for its recall targets (issue 37), which a GPU does not change: there only its alarms count."""
    if "ieee" in result.step.name and "run-ieee" not in result.step.name:
        return True
    if modes := DEFECT_MODES.findall(result.tail):
        return all(alarms == "0" and caught == gross for _, alarms, _, caught, gross, _, _ in modes)
    return result.returncode in (0, 5)


if __name__ == "__main__":
    sys.exit(main())
