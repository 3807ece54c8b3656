"""Plain matmuls torch_npu wraps: npu_linear, npu_bmmV2 and npu_transpose_batchmatmul."""

from __future__ import annotations

import torch

from .opmath import int_list, opmath_dtype, widened
from .record import FusedOp, UnjudgedFusedCall


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


def npu_transpose_batchmatmul(input, weight, *, bias=None, scale=None, perm_x1=None, perm_x2=None, perm_y=None,
                              batch_split_factor=1):
    """torch_npu.npu_transpose_batchmatmul(input, weight, *, bias=None, scale=None, perm_x1=None, perm_x2=None,
    perm_y=None, batch_split_factor=1) -> Tensor

    input permuted by perm_x1 to (B, M, K), weight by perm_x2 to (B, K, N), multiplied batch by batch, and
    returned as (M, B, N); with batch_split_factor f > 1, as (f, M, B·N / f): the (M, B·N) result's columns
    cut into f parts. Computed in float32 for half inputs, rounded once."""
    if scale is not None:
        raise UnjudgedFusedCall("a scale (an int8 output: its rounding and saturation) has no reference here")
    if bias is not None:
        raise UnjudgedFusedCall("a bias (its shape and where it adds are not documented) has no reference here")
    if perm_y is not None and int_list(perm_y) != [1, 0, 2]:
        raise UnjudgedFusedCall(f"perm_y {int_list(perm_y)}: the documented output is (M, B, N), perm_y [1, 0, 2]")
    dtype = opmath_dtype(input.dtype)
    a = input.to(dtype).permute(int_list(perm_x1) if perm_x1 is not None else [0, 1, 2])
    b = weight.to(dtype).permute(int_list(perm_x2) if perm_x2 is not None else [0, 1, 2])
    out = torch.matmul(a, b).transpose(0, 1)  # (M, B, N)
    factor = int(batch_split_factor or 1)
    if factor > 1:
        out = out.reshape(out.shape[0], factor, -1).transpose(0, 1)
    return out.contiguous().to(input.dtype)


OPS = (
    FusedOp("npu_linear", npu_linear, "npu_linear(input, weight, bias=None)", "output"),
    FusedOp("npu_bmmV2", npu_bmmV2, "npu_bmmV2(self, mat2, output_sizes)", "output",
            "output_sizes is not read (it only shapes the kernel's backward)"),
    FusedOp("npu_transpose_batchmatmul", npu_transpose_batchmatmul,
            "npu_transpose_batchmatmul(input, weight, *, bias=None, scale=None, perm_x1=None, perm_x2=None, "
            "perm_y=None, batch_split_factor=1)", "output (M, B, N), or (f, M, B*N/f) with batch_split_factor f",
            "a scale (int8 output), a bias, a perm_y other than [1, 0, 2]"),
)
