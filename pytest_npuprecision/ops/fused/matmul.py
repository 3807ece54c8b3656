"""Plain matmuls torch_npu wraps: npu_linear and npu_bmmV2."""

from __future__ import annotations

import torch

from .opmath import opmath_dtype, widened
from .record import FusedOp


def npu_linear(input, weight, bias=None):
    """torch_npu.npu_linear(input, weight, bias=None) -> Tensor: input @ weight^T + bias (weight is [N, K])."""
    dtype = opmath_dtype(input.dtype)
    return torch.nn.functional.linear(input.to(dtype), weight.to(dtype), widened(bias, dtype)).to(input.dtype)


def npu_bmmV2(self, mat2, output_sizes=()):
    """torch_npu.npu_bmmV2(self, mat2, output_sizes) -> Tensor: batched self @ mat2.

    output_sizes only shapes the kernel's backward; it does not change the product.
    """
    dtype = opmath_dtype(self.dtype)
    return torch.matmul(self.to(dtype), mat2.to(dtype)).to(self.dtype)


OPS = (
    FusedOp("npu_linear", npu_linear, "npu_linear(input, weight, bias=None)", "output"),
    FusedOp("npu_bmmV2", npu_bmmV2, "npu_bmmV2(self, mat2, output_sizes)", "output",
            "output_sizes is not read (it only shapes the kernel's backward)"),
)
