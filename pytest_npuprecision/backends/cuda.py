"""NVIDIA GPUs through torch.cuda: as the device under test, as a float64 golden, or as a baseline.

A golden or baseline runs with TF32 off (unless asked): TF32 rounds float32 matmul and conv inputs
to 10 mantissa bits, which would make a trusted reference less precise than the device it judges.
The device under test keeps the process's own TF32 settings, since those are what training runs with.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

from ..common import Float32Modes, IEEE, fp32_precision, tf32
from .base import Backend, BackendError, BackendInfo, deterministic, switched


class CudaBackend(Backend):
    def __init__(self, device: torch.device | str = "cuda", *, tf32: bool | None = None):
        """tf32: True or False pins TF32 for matmul and cuDNN during each call; None keeps torch's setting."""
        device = torch.device(device)
        if not torch.cuda.is_available():
            build = f"torch {torch.__version__} has no CUDA" if torch.version.cuda is None else "no GPU is visible"
            raise BackendError(f"{device} is not available ({build}): use cpu, or run on a machine with an NVIDIA GPU")
        index = torch.cuda.current_device() if device.index is None else device.index
        if index >= torch.cuda.device_count():
            raise BackendError(f"{device} does not exist: this machine has {torch.cuda.device_count()} GPU(s), "
                               f"cuda:0 to cuda:{torch.cuda.device_count() - 1}")
        # cuBLAS reads this when it makes its first handle; deterministic GEMMs need it.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        super().__init__(torch.device("cuda", index))
        self.tf32 = tf32

    def info(self) -> BackendInfo:
        versions = [("torch", torch.__version__), ("cuda", str(torch.version.cuda))]
        if torch.backends.cudnn.is_available():
            versions.append(("cudnn", str(torch.backends.cudnn.version())))
        matmul, conv = (self.tf32, self.tf32) if self.tf32 is not None else tf32_in_use()
        return BackendInfo(self.name, torch.cuda.get_device_name(self.device), tuple(versions),
                           (("tf32 matmul", _on(matmul)), ("tf32 conv", _on(conv)), ("deterministic", "on")))

    def float32_modes(self) -> Float32Modes:
        if self.tf32 is not None:
            pinned = "pinned by the harness" + ("" if self.tf32 else " (--npu-precision-fp32 run-ieee)")
            mode = tf32(f"TF32 {pinned}", "--npu-precision-fp32 run-ieee") if self.tf32 else IEEE
            return Float32Modes(mode, mode, mode)
        return process_modes()

    def pin_ieee_float32(self) -> None:
        self.tf32 = False

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    @contextlib.contextmanager
    def running(self, seed: int) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(torch.cuda.device(self.device))
            stack.enter_context(deterministic())
            stack.enter_context(switched(torch.backends.cudnn, benchmark=False, deterministic=True))
            if self.tf32 is not None:
                stack.enter_context(pinned_tf32(self.tf32))
            torch.manual_seed(seed)  # seeds every GPU too
            yield


# torch 2.9 moved TF32 to per-backend fp32_precision ("tf32" / "ieee"); once a process sets it, reading
# the legacy allow_tf32 flags raises, and torch.backends.cudnn.flags() reads them. So each flag is set
# and restored alone, through the newer API wherever torch has it.
def _has_fp32_precision() -> bool:
    return fp32_precision("cudnn.conv") is not None


def tf32_in_use() -> tuple[bool, bool]:
    """Whether float32 (matmuls, cuDNN convolutions) may run in TF32 now, as the process set it.

    Apart, since torch's defaults differ: matmuls in full float32, convolutions in TF32.
    """
    if _has_fp32_precision():
        return fp32_precision("cuda.matmul") == "tf32", fp32_precision("cudnn.conv") == "tf32"
    return bool(torch.backends.cuda.matmul.allow_tf32), bool(torch.backends.cudnn.allow_tf32)


# Where each family's switch lives, by API: (torch 2.9+ fp32_precision module, legacy allow_tf32 module).
_SWITCHES = {"matmul": ("torch.backends.cuda.matmul", "torch.backends.cuda.matmul"),
             "conv": ("torch.backends.cudnn.conv", "torch.backends.cudnn"),
             "rnn": ("torch.backends.cudnn.rnn", "torch.backends.cudnn")}


def process_modes() -> Float32Modes:
    """The float32 mode of cuBLAS matmuls, cuDNN convolutions and cuDNN RNNs as this process set them
    (PyTorch's defaults: matmuls IEEE, convolutions and RNNs TF32)."""
    matmul, conv = tf32_in_use()
    rnn = fp32_precision("cudnn.rnn") == "tf32" if _has_fp32_precision() else conv
    modes = {}
    for family, on in (("matmul", matmul), ("conv", conv), ("rnn", rnn)):
        new, legacy = _SWITCHES[family]
        if _has_fp32_precision():
            setting, switch = f"{new}.fp32_precision is 'tf32'", f"{new}.fp32_precision = 'ieee'"
        else:
            setting, switch = f"{legacy}.allow_tf32 is True", f"{legacy}.allow_tf32 = False"
        modes[family] = tf32(setting, switch) if on else IEEE
    return Float32Modes(**modes)


def _on(flag: bool) -> str:
    return "on" if flag else "off"


@contextlib.contextmanager
def pinned_tf32(on: bool) -> Iterator[None]:
    """TF32 on or off for cuBLAS matmuls and cuDNN convolutions, put back as it was afterwards."""
    if _has_fp32_precision():
        with contextlib.ExitStack() as stack:
            for module in (torch.backends.cuda.matmul, torch.backends.cudnn.conv, torch.backends.cudnn.rnn):
                stack.enter_context(switched(module, fp32_precision="tf32" if on else "ieee"))
            yield
    else:
        with switched(torch.backends.cuda.matmul, allow_tf32=on), switched(torch.backends.cudnn, allow_tf32=on):
            yield
