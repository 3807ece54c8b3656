#!/usr/bin/env python3
"""Write the small msprobe dumps in this folder: one call each of the ops that issue 21 part 3 found
replayed wrongly (random pooling windows, complex outputs, a stride-0 input, group_norm's three
gradients, nextafter's dtype grid, a linalg call replayed as another function), each through the public API that msprobe hooks.

    /work/msvenv/bin/python make_replay_dumps.py          # every dump
    /work/msvenv/bin/python make_replay_dumps.py random   # one

msprobe is a tool to make the data, never a test dependency. Its debugger is a per-process
singleton, so each dump is made in a child process; the folder of each is replaced whole.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261125


def random(torch, F):
    """fractional_max_pool2d/3d with and without recorded windows, rrelu in training and in eval."""
    x = torch.randn(1, 2, 8, 8, requires_grad=True)
    F.fractional_max_pool2d(x, 2, output_size=4).sum().backward()
    samples = torch.rand(1, 2, 2)
    F.fractional_max_pool2d(x, 2, output_size=4, _random_samples=samples)
    v = torch.randn(1, 1, 6, 6, 6)
    F.fractional_max_pool3d(v, 2, output_size=3)
    F.fractional_max_pool3d(v, 2, output_size=3, _random_samples=torch.rand(1, 1, 3))
    F.rrelu(torch.randn(16), training=True)
    F.rrelu(torch.randn(16), training=False)


def complex_outputs(torch, F):
    """Float inputs whose outputs are complex: Tensor.cfloat, torch.polar, torch.stft."""
    torch.randn(3, 4).cfloat()
    torch.polar(torch.rand(3, 4) + 0.5, torch.randn(3, 4))
    torch.stft(torch.randn(64), n_fft=16, hop_length=4, window=torch.hann_window(16), return_complex=True)


def stride0(torch, F):
    """An input expanded from one element (stride 0) and one expanded along a dimension."""
    x = torch.randn(4, 5)
    torch.mul(torch.randn(1), torch.randn(()).expand(1))  # shape [1], stride [0]
    torch.mul(x, torch.randn(1).expand(4, 5))
    torch.add(x, torch.randn(5).expand(4, 5))


def group_norm(torch, F):
    """F.group_norm with weight and bias, forward and backward: three gradients."""
    x = torch.randn(2, 6, 4, requires_grad=True)
    w = torch.randn(6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    y = F.group_norm(x, 3, w, b)
    y.backward(torch.randn_like(y))


def dtype_grid(torch, F):
    """nextafter, one step on the float16 and float32 grids."""
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        a = torch.randn(8).to(dtype)
        torch.nextafter(a, torch.full_like(a, 1e4))


def misreplayed(torch, F):
    """torch.linalg.svd, which msprobe names Torch.svd: replayed as torch.svd, its full_matrices does not bind."""
    torch.linalg.svd(torch.randn(4, 3), full_matrices=False)


DUMPS = {f.__name__: f for f in (random, complex_outputs, stride0, group_norm, dtype_grid, misreplayed)}


def dump_one(name: str) -> None:
    import torch
    import torch.nn.functional as F
    from msprobe.pytorch import PrecisionDebugger, seed_all

    out = HERE / name
    config = {"task": "tensor", "dump_path": str(out), "rank": [], "step": [], "level": "L1",
              "async_dump": False, "risk_level": "ALL", "tensor": {"scope": [], "list": [], "data_mode": ["all"]}}
    config_path = HERE / "configs" / f"{name}.json"
    config_path.parent.mkdir(exist_ok=True)
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    seed_all(SEED)
    debugger = PrecisionDebugger(config_path=str(config_path))
    debugger.start(rank_id=0)
    DUMPS[name](torch, F)
    debugger.stop()
    debugger.step()
    print(json.dumps({"dump": name}))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:
        dump_one(argv[1])
        return 0
    names = argv or list(DUMPS)
    unknown = [n for n in names if n not in DUMPS]
    if unknown:
        print(f"unknown dump {unknown}; known: {', '.join(DUMPS)}", file=sys.stderr)
        return 2
    for name in names:
        done = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True)
        (HERE / "configs").mkdir(exist_ok=True)
        (HERE / "configs" / f"{name}.log").write_text(done.stdout + done.stderr)
        print(f"{name}: {'ok' if done.returncode == 0 else f'failed ({done.returncode})'}: "
              f"{done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-2000:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
