"""Slowdown of a small transformer's forward+backward step under capture, beside msprobe's on the same step.

Each mode runs in its own child process (msprobe patches torch for good once started): the child
times the plain step, then the same step recorded, each the median of --steps runs after warm-up, and
prints the ratio. Modes: capture statistics, capture tensor, msprobe statistics, msprobe tensor
(the last two where mindstudio-probe is installed; both record every API, risk_level ALL, as capture does).

    python benchmarks/bench_capture.py [--steps 20] [--tokens 64]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = ("capture-statistics", "capture-tensor", "msprobe-statistics", "msprobe-tensor")


def child(mode: str, steps: int, tokens: int) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout, not an installed copy
    import torch
    from capture_step import build, step

    torch.set_num_threads(1)  # steadier figures on a shared machine
    net, x, y, classes = build("transformer", batch=4, tokens=tokens)
    folder = Path(tempfile.mkdtemp(prefix="bench_capture_"))
    task = mode.split("-")[1]

    def plain():
        net.zero_grad()
        step(net, x, y, classes)

    if mode.startswith("capture"):
        from pytest_npuprecision import capture

        def recorded(i):
            net.zero_grad()
            with capture(folder, task=task, step=i, rank=0):
                step(net, x, y, classes)
    else:
        from msprobe.pytorch import PrecisionDebugger

        config = {"task": task, "dump_path": str(folder / "dump"), "rank": [], "step": [], "level": "L1",
                  "async_dump": False, "risk_level": "ALL",
                  task: {"scope": [], "list": [], "data_mode": ["all"],
                         **({"summary_mode": "statistics"} if task == "statistics" else {})}}
        (folder / "config.json").write_text(json.dumps(config))
        debugger = PrecisionDebugger(config_path=str(folder / "config.json"))

        def recorded(i):
            net.zero_grad()
            debugger.start(model=net, rank_id=0)
            step(net, x, y, classes)
            debugger.stop()
            debugger.step()

    def timed(run) -> float:
        times = []
        for i in range(steps + 2):
            started = time.perf_counter()
            run(i)
            times.append(time.perf_counter() - started)
        return statistics.median(times[2:])

    base = timed(lambda i: plain())
    under = timed(recorded)
    return {"mode": mode, "plain_ms": base * 1e3, "recorded_ms": under * 1e3, "slowdown": under / base}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.tokens)))
        return
    has_msprobe = importlib.util.find_spec("msprobe") is not None
    print(f"tiny transformer (2 blocks, d=32, batch 4 x {args.tokens} tokens), forward+backward, "
          f"median of {args.steps} steps, 1 thread")
    for mode in MODES:
        if mode.startswith("msprobe") and not has_msprobe:
            print(f"{mode:20s} skipped: mindstudio-probe is not installed")
            continue
        run = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(args.steps),
                              "--tokens", str(args.tokens)], capture_output=True, text=True)
        lines = [line for line in run.stdout.splitlines() if line.startswith("{")]
        if run.returncode != 0 or not lines:
            print(f"{mode:20s} failed: {(run.stderr or run.stdout)[-500:]}")
            continue
        r = json.loads(lines[-1])
        print(f"{mode:20s} plain {r['plain_ms']:7.2f} ms  recorded {r['recorded_ms']:8.2f} ms  "
              f"slowdown x{r['slowdown']:.1f}")


if __name__ == "__main__":
    main()
