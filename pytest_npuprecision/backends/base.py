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
    float32_modes()     the float32 math mode of each op family (TF32, HF32 or IEEE), as calls run now
    pin_ieee_float32()  run every later call in IEEE float32 (--npu-precision-fp32 run-ieee)

The base class is a plain torch device (cpu, or any device type torch knows) with no settings.
"""

from __future__ import annotations

import contextlib
import platform
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from ..common import Float32Modes, IEEE, fp32_precision, half_products, tf32


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
        self.ieee_float32 = False  # pinned by pin_ieee_float32
        self.declared_float32: Float32Modes | None = None  # what the run was told (--npu-precision-fp32-modes)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def info(self) -> BackendInfo:
        return BackendInfo(self.name, _cpu_name() if self.device.type == "cpu" else self.device.type,
                           (("torch", torch.__version__),))

    def float32_modes(self) -> Float32Modes:
        """How float32 matmuls, convolutions and recurrent layers run on this backend now.

        The CPU reads oneDNN's switch (``torch.set_float32_matmul_precision("medium")`` lets it use
        bfloat16 products); any other plain device is IEEE. A backend whose device computes float32
        in a narrower format overrides this, so that its fair kernels are judged as they ran.
        """
        if self.device.type != "cpu" or self.ieee_float32:
            return Float32Modes()
        return _onednn_modes()

    def pin_ieee_float32(self) -> None:
        """Run every later call with the reduced float32 modes off. A backend that reports a reduced
        mode and cannot turn it off raises BackendError."""
        self.ieee_float32 = True
        if self.float32_modes().reduced:
            raise BackendError(f"backend {self.name!r} reports {self.float32_modes().describe()} and cannot pin "
                               f"IEEE float32: override pin_ieee_float32 (docs/backends.md), or judge as run")

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
        if self.ieee_float32 and self.device.type == "cpu":
            with _onednn_ieee():
                yield
        else:
            yield


def float32_modes_of(backend: Backend) -> Float32Modes:
    """The modes a run was told for this backend, else what the backend reads of itself."""
    declared = getattr(backend, "declared_float32", None)
    return declared if declared is not None else backend.float32_modes()


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


# oneDNN (the CPU's matmul and conv library) takes float32's mode from torch 2.9's per-backend
# fp32_precision, which torch.set_float32_matmul_precision also sets; older torch has only the latter.
_ONEDNN_FAMILIES = ("matmul", "conv", "rnn")


def _onednn_modes() -> Float32Modes:
    modes = {}
    for family in _ONEDNN_FAMILIES:
        precision = fp32_precision(f"mkldnn.{family}")
        if precision is None:  # before torch 2.9: only the matmul precision, "medium" allowing bfloat16
            precision = {"medium": "bf16"}.get(torch.get_float32_matmul_precision(), "ieee") \
                if family == "matmul" else "ieee"
        setting = f"torch.backends.mkldnn.{family}.fp32_precision is {precision!r}"
        switch = f"torch.backends.mkldnn.{family}.fp32_precision = 'ieee' (or torch.set_float32_matmul_precision('highest'))"
        modes[family] = {"bf16": half_products("bfloat16", setting, switch),
                         "tf32": tf32(setting, switch)}.get(precision, IEEE)
    return Float32Modes(**modes)


@contextlib.contextmanager
def _onednn_ieee() -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        if fp32_precision("mkldnn.matmul") is None:  # before torch 2.9
            legacy = torch.get_float32_matmul_precision()
            torch.set_float32_matmul_precision("highest")
            stack.callback(torch.set_float32_matmul_precision, legacy)
        else:
            for family in _ONEDNN_FAMILIES:
                module = getattr(torch.backends.mkldnn, family, None)
                if hasattr(module, "fp32_precision"):
                    stack.enter_context(switched(module, fp32_precision="ieee"))
        yield


@contextlib.contextmanager
def switched(module: Any, **values: Any) -> Iterator[None]:
    """A module's switches (torch.backends.cudnn's allow_tf32, torch.npu.conv's allow_hf32) set for the
    duration and put back as they were, each alone."""
    saved = {name: getattr(module, name) for name in values}
    for name, value in values.items():
        setattr(module, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)
