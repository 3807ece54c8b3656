"""Ascend NPUs through torch_npu, imported only when an npu backend is asked for.

Two things the report must carry, because they change what a correct result looks like:
- INF_NAN mode. In saturation mode an NPU writes an overflow as the dtype's largest finite value and
  a NaN as 0, which the inf/nan gate then reports against the golden's inf and NaN. torch_npu tells
  the mode with ``torch_npu.npu.utils.is_support_inf_nan()``; the ``INF_NAN_MODE_ENABLE`` environment
  variable (1 = INF_NAN) sets it before torch_npu starts.
- Float32 math modes. torch_npu computes float32 convolutions in HF32 by default
  (``torch.npu.conv.allow_hf32``; matmuls only with ``torch.npu.matmul.allow_hf32``), and CANN's
  ``ACL_PRECISION_MODE`` allow_fp32_to_fp16 (the default on Atlas training products) computes
  matrix ops in float16. torch_npu sets that option but cannot read it back, so the run is told it
  (``--npu-precision-fp32-modes allow_fp32_to_fp16``).
- Determinism. Each call runs with ``torch.use_deterministic_algorithms`` and a per-case seed, so a
  rerun of a failing case reproduces it.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from types import ModuleType
from typing import Iterator

import torch

from ..common import Float32Modes, IEEE, hf32
from .base import Backend, BackendError, BackendInfo, deterministic, switched


def import_torch_npu() -> ModuleType:
    try:
        return importlib.import_module("torch_npu")
    except Exception as exc:  # absent, or present without a working CANN install
        raise BackendError(f"npu needs torch_npu, which does not import here ({type(exc).__name__}: {exc}): "
                           f"install the torch_npu release that matches torch {torch.__version__} and "
                           f"source CANN's set_env.sh") from None


class NpuBackend(Backend):
    def __init__(self, device: str = "npu"):
        torch_npu = import_torch_npu()
        npu = getattr(torch, "npu", None)
        if npu is None or not npu.is_available() or npu.device_count() == 0:
            raise BackendError("torch_npu imports but sees no NPU: check ASCEND_RT_VISIBLE_DEVICES and that "
                               "npu-smi info lists a device")
        index = _index(device, npu.current_device())
        if index >= npu.device_count():
            raise BackendError(f"npu:{index} does not exist: this machine has {npu.device_count()} NPU(s), "
                               f"npu:0 to npu:{npu.device_count() - 1}")
        npu.set_device(index)
        super().__init__(torch.device(f"npu:{index}"))
        self.index = index
        self.torch_npu = torch_npu
        self.inf_nan_mode = inf_nan_mode(torch_npu)

    def info(self) -> BackendInfo:
        versions = [("torch", torch.__version__), ("torch_npu", str(getattr(self.torch_npu, "__version__", "?")))]
        cann = getattr(getattr(self.torch_npu, "version", None), "cann", None)
        if cann:
            versions.append(("cann", str(cann)))
        mode = {True: "on", False: "off (saturation)", None: "unknown"}[self.inf_nan_mode]
        return BackendInfo(self.name, str(torch.npu.get_device_name(self.index)), tuple(versions),
                           (("inf_nan_mode", mode), ("deterministic", "on")))

    def float32_modes(self) -> Float32Modes:
        return Float32Modes() if self.ieee_float32 else hf32_modes(torch.npu)

    def synchronize(self) -> None:
        torch.npu.synchronize()

    @contextlib.contextmanager
    def running(self, seed: int) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(deterministic())
            if self.ieee_float32:
                stack.enter_context(hf32_off(torch.npu))
            torch.manual_seed(seed)
            torch.npu.manual_seed(seed)
            yield


# torch_npu's documented defaults, where an older release lacks the switch.
_HF32_DEFAULTS = {"matmul": False, "conv": True}


def hf32_modes(npu: ModuleType) -> Float32Modes:
    """HF32 for matmuls and convolutions as ``torch.npu.matmul/conv.allow_hf32`` set it now."""
    modes = {}
    for family, default in _HF32_DEFAULTS.items():
        on = bool(getattr(getattr(npu, family, None), "allow_hf32", default))
        modes[family] = hf32(f"torch.npu.{family}.allow_hf32 is True",
                             f"torch.npu.{family}.allow_hf32 = False") if on else IEEE
    return Float32Modes(**modes)


@contextlib.contextmanager
def hf32_off(npu: ModuleType) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for family in _HF32_DEFAULTS:
            module = getattr(npu, family, None)
            if hasattr(module, "allow_hf32"):
                stack.enter_context(switched(module, allow_hf32=False))
        yield


def inf_nan_mode(torch_npu: ModuleType) -> bool | None:
    """True in INF_NAN mode, False in saturation mode, None when neither torch_npu nor the environment says."""
    utils = getattr(getattr(torch_npu, "npu", None), "utils", None)
    ask = getattr(utils, "is_support_inf_nan", None)
    if ask is not None:
        return bool(ask())
    value = os.environ.get("INF_NAN_MODE_ENABLE")
    return None if value is None else value.strip() == "1"


def _index(device: str, current: int) -> int:
    _, _, index = device.partition(":")
    if not index:
        return current
    if not index.isdigit():
        raise BackendError(f"device {device!r} is not npu or npu:N")
    return int(index)
