"""The device under test as the dump recorded it: its outputs and gradients are read, never computed.

With it a CI machine, a laptop or a GPU box checks a dump taken on an NPU: the golden (and a live
baseline) run from the recorded inputs, and the device's side is the dump's recorded results. It
runs no op, so neither torch_npu nor the op itself needs to exist here.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from ..common import Float32Modes
from .base import Backend, BackendError, BackendInfo

DUMPED = "dumped"


class DumpedOutputs(Backend):
    """Placeholder device: tensors stay on the CPU, and calling an op is a harness bug."""

    def __init__(self):
        super().__init__("cpu", name=DUMPED)

    def info(self) -> BackendInfo:
        return BackendInfo(DUMPED, "the results recorded in the dump, no op runs on this side",
                           (("torch", torch.__version__),))

    def float32_modes(self) -> Float32Modes:
        """A dump records no math mode: IEEE is assumed, and said (--npu-precision-fp32-modes tells it)."""
        return Float32Modes(known=False)

    def pin_ieee_float32(self) -> None:
        raise BackendError("the dumped device runs nothing, so its float32 mode cannot be pinned: "
                           "use --npu-precision-fp32 ieee or as-run")

    def call(self, api: str, func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        raise BackendError(f"{api}: the dumped device runs nothing; its results come from the dump")
