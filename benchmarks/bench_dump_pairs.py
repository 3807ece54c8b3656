"""Seconds per case of two dumps judged side by side (--npu-precision-baseline DUMP) against the offline
check of each dump alone (--npu-precision-device dumped).

Captures a small transformer's forward passes, repeated until the dump holds 1,000+ entries, twice: a
fair "GPU" dump and an "NPU" dump through a backend with two planted defects (tests/planted_dumps.py).
Then judges, in process through the core the plugin uses: the NPU dump alone, the GPU dump alone, and
the pair, whose baseline side is each entry's partner judged as the GPU dump alone judges it. A pair
should cost what the two alone cost together, plus pairing (loading the baseline dump once, one dict
lookup and a descriptor comparison per case): the printed ratio is pair / (NPU alone + GPU alone).

    python benchmarks/bench_dump_pairs.py [--passes 20] [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_dump import run_dump  # noqa: E402

from capture_step import build  # noqa: E402
from planted_dumps import PLANTED, _Planted  # noqa: E402
from faulty_backend import FaultyBackend  # noqa: E402

from pytest_npuprecision import capture  # noqa: E402
from pytest_npuprecision.backends import DumpedOutputs  # noqa: E402
from pytest_npuprecision.checks.baseline_dump import BaselineDump  # noqa: E402
from pytest_npuprecision.checks.case_run import Settings  # noqa: E402
from pytest_npuprecision.dump.dump_cases import load_dump  # noqa: E402
from pytest_npuprecision.dump.locations import find_dump_files  # noqa: E402


def repeated_dump(folder: Path, passes: int, planted: bool) -> Path:
    net, x, _, _ = build("transformer")
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        modes = [_Planted(FaultyBackend(PLANTED))] if planted else []
        for mode in modes:
            mode.__enter__()
        try:
            with capture(folder, rank=0, data_mode=["forward"]):
                for _ in range(passes):
                    net(torch.randint(0, 64, x.shape, generator=generator))
        finally:
            for mode in modes:
                mode.__exit__(None, None, None)
    return folder


def judge_all(root: Path, settings: Settings) -> tuple[float, int]:
    """(CPU seconds, cases judged) over every case of the dump under ``root``. CPU time of this process
    (torch runs on one thread here), so that other work on a shared machine moves the ratio less."""
    started = time.process_time()
    _, judged, _, _ = run_dump(root, settings)
    return time.process_time() - started, judged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=20, help="forward passes per dump (55 entries each)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the fastest counts")
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        npu = repeated_dump(Path(tmp) / "npu", args.passes, planted=True)
        gpu = repeated_dump(Path(tmp) / "gpu", args.passes, planted=False)
        entries = len(load_dump(next(iter(find_dump_files(npu)))).cases)
        alone = Settings(device=DumpedOutputs())
        best: dict[str, tuple[float, int]] = {}
        loadings = []
        for _ in range(args.repeat):
            started = time.process_time()
            pair = Settings(device=DumpedOutputs(), baseline=BaselineDump.load(gpu))  # pairing, once
            loading = time.process_time() - started
            loadings.append(loading)
            runs = {"npu alone": judge_all(npu, alone), "gpu alone": judge_all(gpu, alone)}
            seconds, judged = judge_all(npu, pair)
            runs["pair"] = (seconds + loading, judged)
            for name, run in runs.items():
                if name not in best or run[0] < best[name][0]:
                    best[name] = run
    print(f"{entries} entries per dump, {best['pair'][1]} judged; CPU seconds, fastest of {args.repeat}")
    for name, (seconds, judged) in best.items():
        print(f"  {name:10s} {seconds:7.2f} s  {1e3 * seconds / judged:6.2f} ms/case")
    print(f"  of the pair, loading and indexing the baseline dump once: {1e3 * min(loadings):.1f} ms")
    together = best["npu alone"][0] + best["gpu alone"][0]
    print(f"pair / (npu alone + gpu alone) = {best['pair'][0] / together:.3f}")


if __name__ == "__main__":
    main()
