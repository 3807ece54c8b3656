"""What a backend is: how a case's inputs reach a device, how the op runs there, how results come back.

The runner talks to every device through this one small interface, so a new accelerator, a remote
device or a fault injector is a subclass that overrides what differs and inherits the rest:

    to_device(tensor)   an input, already in the dtype the side computes in, onto the device
    call(api, func, args, kwargs)              run the op (forward)
    gradients(api, outputs, inputs, grads)     run its backward: the inputs' gradients
    synchronize()       wait for queued work, so that timings and errors belong to the call
    to_host(tensor)     an output back as a CPU tensor (or a tensor on any device torch can copy from)
    running(seed)       a context around each forward and backward: per-case seed, flags, determinism
    info()              name, device name, versions and settings, for the header and every report

The base class is a plain torch device (cpu, or any device type torch knows) with no settings.
"""

from __future__ import annotations

import contextlib
import platform
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch


class BackendError(RuntimeError):
    """A backend cannot be set up here: the message names the backend and what to do."""


@dataclass(frozen=True)
class BackendInfo:
    name: str  # "cuda:0", "npu:1", "cpu", or a custom backend's own name
    device_name: str  # "NVIDIA H100 80GB HBM3", "Ascend910B2", the CPU's machine type
    versions: tuple[tuple[str, str], ...] = ()  # ("torch", "2.13.0"), ("cuda", "12.8"), ("torch_npu", ...)
    settings: tuple[tuple[str, str], ...] = ()  # ("tf32", "off"), ("inf_nan_mode", "on"), ...

    def describe(self) -> str:
        """One line for the header: ``cuda:0 (NVIDIA H100; torch 2.13.0, cuda 12.8; tf32 off)``."""
        parts = [self.device_name]
        if self.versions:
            parts.append(", ".join(f"{k} {v}" for k, v in self.versions))
        if self.settings:
            parts.append(", ".join(f"{k} {v}" for k, v in self.settings))
        return f"{self.name} ({'; '.join(parts)})"

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "device_name": self.device_name, "versions": dict(self.versions),
                "settings": dict(self.settings)}


class Backend:
    """A device under test, golden or baseline: by default a plain torch device."""

    def __init__(self, device: torch.device | str = "cpu", *, name: str | None = None):
        self.device = torch.device(device)
        self.name = name or str(self.device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def info(self) -> BackendInfo:
        return BackendInfo(self.name, _cpu_name() if self.device.type == "cpu" else self.device.type,
                           (("torch", torch.__version__),))

    def to_device(self, tensor: torch.Tensor) -> torch.Tensor:
        # copy=True: in-place ops must never write into the caller's tensors.
        return tensor.detach().to(device=self.device, copy=True)

    def call(self, api: str, func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        return func(*args, **kwargs)

    def gradients(self, api: str, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
                  grad_outputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        return torch.autograd.grad(list(outputs), list(inputs), list(grad_outputs), allow_unused=True)

    def synchronize(self) -> None:
        if self.device.type != "cpu":
            sync = getattr(getattr(torch, self.device.type, None), "synchronize", None)
            if sync is not None:
                sync()

    def to_host(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.detach().cpu()

    @contextlib.contextmanager
    def running(self, seed: int) -> Iterator[None]:
        # Random ops (dropout) draw the same values on every rerun of the case. The CPU generator only:
        # torch.manual_seed also queues a seed for CUDA, recording a stack trace each time (about 1 ms).
        torch.default_generator.manual_seed(seed)
        yield


def _cpu_name() -> str:
    return platform.processor() or platform.machine() or "cpu"


@contextlib.contextmanager
def deterministic() -> Iterator[None]:
    """torch's deterministic algorithms for the duration, warning (not raising) where an op has none."""
    was = torch.are_deterministic_algorithms_enabled()
    was_warn = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=was_warn)
