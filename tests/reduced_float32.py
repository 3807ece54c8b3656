"""A CPU backend that computes float32 matmuls and convolutions as a TF32 (or HF32) device does: each
float32 input of the products, and each output gradient flowing into them, rounded to nearest (ties
to even) to ``bits`` mantissa bits, then the op in float32. That is what cuBLAS and cuDNN were measured
to do with TF32 on (an H200: inputs so rounded reproduce their results to a few float32 ulp), so it is
a fair TF32 kernel that runs without a GPU.

``error`` plants a defect on top: every float output and gradient of those ops scaled by 1 + error.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from pytest_npuprecision import Backend, BackendInfo
from pytest_npuprecision.common.math_modes import Float32Modes, MathMode, round_mantissa
from pytest_npuprecision.ops.catalogue import op_record
from pytest_npuprecision.ops.resolution import base_name


class ReducedFloat32Cpu(Backend):
    def __init__(self, mode: str = "tf32", *, error: float = 0.0, families: Sequence[str] = ("matmul", "conv")):
        super().__init__("cpu", name=f"{mode}-emulating cpu")
        self.mode = MathMode(mode, {"tf32": 10, "hf32": 11}[mode], "emulated on the CPU (tests/reduced_float32.py)",
                             "ReducedFloat32Cpu(...).pin_ieee_float32()")
        self.error = error
        self.families = tuple(families)

    def float32_modes(self) -> Float32Modes:
        if self.ieee_float32:
            return Float32Modes()
        return Float32Modes(**{family: self.mode for family in self.families})

    def info(self) -> BackendInfo:
        return BackendInfo(self.name, "cpu", (("torch", torch.__version__),), (("float32", self.mode.name),))

    def _reduces(self, api: str) -> bool:
        return not self.ieee_float32 and op_record(base_name(api)).math_family in self.families

    def _rounded(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dtype == torch.float32:
            # the rounding's values forward, the identity's gradient backward: autograd saves rounded factors
            return value + (round_mantissa(value.detach(), self.mode.mantissa_bits) - value).detach()
        if isinstance(value, (list, tuple)):
            return type(value)(self._rounded(v) for v in value)
        return value

    def _defect(self, value: Any) -> Any:
        if not self.error:
            return value
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value * (1 + self.error)
        if isinstance(value, (list, tuple)):
            return type(value)(self._defect(v) for v in value)
        return value

    def call(self, api: str, func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        if not self._reduces(api):
            return func(*args, **kwargs)
        rounded = [self._rounded(a) for a in args]
        return self._defect(func(*rounded, **{k: self._rounded(v) for k, v in kwargs.items()}))

    def gradients(self, api: str, outputs, inputs, grad_outputs) -> tuple[torch.Tensor | None, ...]:
        if not self._reduces(api):
            return super().gradients(api, outputs, inputs, grad_outputs)
        rounded = [round_mantissa(g, self.mode.mantissa_bits) if g.dtype == torch.float32 else g
                   for g in grad_outputs]
        return tuple(self._defect(g) if g is not None else None
                     for g in super().gradients(api, outputs, inputs, rounded))
