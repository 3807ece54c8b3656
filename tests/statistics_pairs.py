"""Two statistics dumps of the same two training steps of a small transformer, as a GPU and an NPU would
write them: the baseline ("GPU") runs torch's own CPU kernels; the device ("NPU") runs a fair but different
kernel for every op (its float64 result rounded once to the op's dtype), so every call past the first one
sees inputs a little apart from its partner's, as on a real device. A pair may plant one defect in one API
on the device's side; its outputs flow on into every later call, as a real kernel's would.

    python statistics_pairs.py PLANT DTYPE FOLDER SIDE   # msprobe writes FOLDER/SIDE, SIDE npu or gpu

Capture writes both dumps in the test process; run as a script in a side environment with msprobe 26.2.0,
msprobe writes them instead (statistics task, level L1), one side per process (its debugger is one per
process, and keeps its first dump path).
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from capture_step import TinyTransformer
from torch.overrides import TorchFunctionMode

SEED = 2024
STEPS = 2

# The defects a pair may plant in the device's kernels, by name: (msprobe's API name, what it does to an output
# or None for a kernel of its own). The scales are 0.2 % in float32 and 2 % in bfloat16.
PLANTS = ("none", "gelu_scale", "linear_scale", "softmax_bf16_sum")
PLANTED_API = {"gelu_scale": "Functional.gelu", "linear_scale": "Functional.linear",
               "softmax_bf16_sum": "Torch.softmax"}


def build(dtype: torch.dtype):
    """(model, inputs, targets): the same in every process."""
    torch.manual_seed(SEED)
    net = TinyTransformer(d=64, layers=3).to(dtype)  # attention rows of 128 tokens
    idx = torch.randint(0, 64, (2, 129))
    return net, idx[:, :-1], idx[:, 1:]


def train(net, x, y, step_scope: Callable[[int], object]) -> None:
    """STEPS steps of SGD; each step's forward and backward inside ``step_scope(step)``, its update outside."""
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    for step in range(STEPS):
        optimizer.zero_grad()
        with step_scope(step):
            loss = F.cross_entropy(net(x).reshape(-1, 64).float(), y.reshape(-1))
            loss.backward()
        optimizer.step()


def _softmax_summed_in_bfloat16(x: torch.Tensor, dim: int) -> torch.Tensor:
    """A softmax whose row sums run in bfloat16, one term at a time: the defect, in float32 arithmetic elsewhere."""
    e = torch.exp(x - x.amax(dim, keepdim=True))
    moved = e.movedim(dim, -1)
    total = torch.zeros(moved.shape[:-1], dtype=torch.bfloat16)
    for i in range(moved.shape[-1]):
        total = (total + moved[..., i].to(torch.bfloat16)).to(torch.bfloat16)
    return (moved / total.to(e.dtype).unsqueeze(-1)).movedim(-1, dim)


class FairKernels(TorchFunctionMode):
    """The device's kernels: each call's float output replaced, in place and so keeping its autograd node, by its
    float64 value rounded once (a fair kernel, though not the CPU's), and ``plant`` applied where it names the
    call's API. Entered before capture, so that capture records what these kernels return."""

    def __init__(self, plant: str = "none"):
        super().__init__()
        self.plant = plant

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if not isinstance(out, torch.Tensor) or not out.is_floating_point() or _shares_storage(out, args) or \
                name.endswith("_") or name.startswith(("__i", "__set")) or out.dtype == torch.float64:
            return out
        with torch.no_grad():
            try:
                wide = func(*_wide(args), **_wide(kwargs))
            except (RuntimeError, TypeError):
                return out
            if not isinstance(wide, torch.Tensor) or wide.shape != out.shape:
                return out
            fair = wide.to(out.dtype)
            planted = self._planted(func, args, kwargs, fair)
            out.data.copy_(planted)
        return out

    def _planted(self, func, args, kwargs, fair: torch.Tensor) -> torch.Tensor:
        scale = 1.002 if fair.dtype == torch.float32 else 1.02
        # By name: msprobe replaces torch's functions with wrappers, which hand this mode the originals.
        name = getattr(func, "__name__", "")
        if self.plant == "gelu_scale" and name == "gelu" or self.plant == "linear_scale" and name == "linear":
            return (fair.double() * scale).to(fair.dtype)
        if self.plant == "softmax_bf16_sum" and name == "softmax":
            dim = kwargs.get("dim", args[1] if len(args) > 1 else -1)
            return _softmax_summed_in_bfloat16(args[0].float(), dim).to(fair.dtype)
        return fair


def _shares_storage(out: torch.Tensor, args) -> bool:
    """A view of an argument (a transpose, a split): its values are the argument's, and writing them would change it."""
    ptr = out.untyped_storage().data_ptr()
    return any(isinstance(a, torch.Tensor) and a.untyped_storage().data_ptr() == ptr for a in _flat(args))


def _flat(value):
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flat(item)
    else:
        yield value


def _wide(value):
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.detach().double()
    if isinstance(value, (list, tuple)):
        return type(value)(_wide(v) for v in value)
    if isinstance(value, dict):
        return {k: _wide(v) for k, v in value.items()}
    return value


def capture_pair(folder: Path, plant: str, dtype: torch.dtype, task: str = "statistics") -> tuple[Path, Path]:
    """(device dump, baseline dump): capture's statistics dumps of both sides, under folder/npu and folder/gpu."""
    from pytest_npuprecision import capture

    def side(path: Path, kernels: FairKernels | None) -> None:
        net, x, y = build(dtype)

        def scope(step: int):
            stack = ExitStack()
            if kernels is not None:
                stack.enter_context(kernels)
            stack.enter_context(capture(path, task=task, step=step, rank=0))
            return stack

        train(net, x, y, scope)

    side(folder / "npu", FairKernels(plant))
    side(folder / "gpu", None)
    return folder / "npu", folder / "gpu"


def msprobe_side(folder: Path, plant: str, dtype: torch.dtype, side: str) -> Path:
    """One side of the same pair written by msprobe (run in an environment that has it)."""
    from msprobe.pytorch import PrecisionDebugger

    path = folder / side
    kernels = FairKernels(plant) if side == "npu" else None
    config = {"task": "statistics", "dump_path": str(path), "rank": [], "step": [], "level": "L1",
              "async_dump": False, "risk_level": "ALL",
              "statistics": {"scope": [], "list": [], "data_mode": ["all"], "summary_mode": "statistics"}}
    folder.mkdir(parents=True, exist_ok=True)
    config_path = folder / f"{side}_msprobe.json"
    config_path.write_text(json.dumps(config))
    net, x, y = build(dtype)
    debugger = PrecisionDebugger(config_path=str(config_path))

    class Scope:
        def __enter__(self):
            if kernels is not None:
                kernels.__enter__()
            debugger.start(model=net, rank_id=0)

        def __exit__(self, *exc):
            debugger.stop()
            debugger.step()
            if kernels is not None:
                kernels.__exit__(*exc)

    train(net, x, y, lambda step: Scope())
    return path


if __name__ == "__main__":
    torch.set_num_threads(1)
    msprobe_side(Path(sys.argv[3]), sys.argv[1], getattr(torch, sys.argv[2]), sys.argv[4])
