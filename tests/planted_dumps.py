"""Two dumps of the same model, taken by capture: a fair one (the "GPU" dump) and one through a backend
with planted defects in two ops (the "NPU" dump). The planted outputs flow on into the later calls, as
a real device's errors do, so every call after the first planted one sees other inputs than its partner.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from capture_step import build
from faulty_backend import Fault, FaultyBackend
from torch.overrides import TorchFunctionMode

from pytest_npuprecision import capture

# msprobe's names of the planted ops, with the defect each gets; softmax runs first in the model.
PLANTED = {"Torch.softmax": Fault("bias", 16), "Functional.gelu": Fault("noise", 64)}
_FUNCTIONS = {torch.softmax: "Torch.softmax", F.gelu: "Functional.gelu"}


class _Planted(TorchFunctionMode):
    """Entered before capture, so that capture's mode sees each call first and records what this one returns."""

    def __init__(self, backend: FaultyBackend):
        super().__init__()
        self.backend = backend

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = _FUNCTIONS.get(func)
        return func(*args, **kwargs) if name is None else self.backend.call(name, func, args, kwargs)


def forward_dump(folder: Path, model: str = "transformer", planted: bool = False, rank: int = 0) -> Path:
    """One forward pass of capture_step's model, captured into folder/step0/rank<rank>; returns ``folder``."""
    net, x, _, _ = build(model)
    with torch.no_grad():
        if planted:
            with _Planted(FaultyBackend(PLANTED)), capture(folder, rank=rank, data_mode=["forward"]):
                net(x)
        else:
            with capture(folder, rank=rank, data_mode=["forward"]):
                net(x)
    return folder
