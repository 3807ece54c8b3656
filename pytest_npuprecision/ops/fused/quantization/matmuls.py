"""Quantised matmuls: an exact integer product, then the few float roundings of dequantization (scale, per-token
scale, offset, bias, the output cast), judged against the float64 dequantized product; and a float matmul of an int8
weight dequantized on the fly."""

from __future__ import annotations

import torch

from ....bounds import dequantized_weight
from ..opmath import opmath_dtype
from ..record import FusedOp, UnjudgedFusedCall


def npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None,
                     x1_dtype=None, x2_dtype=None, pertoken_scale_dtype=None, scale_dtype=None, group_sizes=None):
    """torch_npu.npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None,
    output_dtype=None, x1_dtype=None, x2_dtype=None, pertoken_scale_dtype=None, scale_dtype=None,
    group_sizes=None) -> Tensor

    x1 [..., M, K] and x2 [..., K, N] int8 multiply exactly (int32 accumulation); an int32 bias adds
    to that product, then scale ((N,) or (1,), float32 or bfloat16) multiplies each column,
    pertoken_scale (M,) each row, and offset, or a float bias, adds last; the result rounds once to
    output_dtype (float16 or bfloat16). Computed in float32 (float64 for a float64 golden)."""
    if x1.dtype != torch.int8 or x2.dtype != torch.int8:
        raise UnjudgedFusedCall(f"{x1.dtype} by {x2.dtype} (int32 holds 8 packed int4 values) has no reference here")
    if not scale.is_floating_point():
        raise UnjudgedFusedCall("an int64 scale (packed by npu_trans_quant_param) has no reference here")
    if output_dtype is None or not output_dtype.is_floating_point:
        raise UnjudgedFusedCall("an int8 output (its rounding and saturation) has no reference here")
    if group_sizes is not None or any(d is not None for d in (x1_dtype, x2_dtype, pertoken_scale_dtype, scale_dtype)):
        raise UnjudgedFusedCall("block-wise and reinterpreted (mx, fp8, hifloat8) formats have no reference here")
    wide = torch.float64 if scale.dtype == torch.float64 else torch.float32
    product = torch.matmul(x1.to(torch.float64), x2.to(torch.float64))  # exact: |product| < 2^53
    integer_bias = bias is not None and not bias.is_floating_point()
    if integer_bias:
        product = product + bias.to(torch.float64)
    y = product.to(wide) * scale.to(wide)
    if pertoken_scale is not None:
        y = y * pertoken_scale.to(wide).reshape(*pertoken_scale.shape, 1)
    if offset is not None:
        y = y + offset.to(wide)
    if bias is not None and not integer_bias:
        y = y + bias.to(wide)
    return y.to(output_dtype)


INT8_MAX = 127


def npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None, quant_scale=None,
                                 quant_offset=None, bias=None, antiquant_group_size=0, inner_precise=0):
    """torch_npu.npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None,
    quant_scale=None, quant_offset=None, bias=None, antiquant_group_size=0, inner_precise=0) -> Tensor

    x [M, K] (float16, bfloat16) @ ((weight + antiquant_offset) * antiquant_scale) + bias: the int8 weight
    [K, N] dequantized per tensor ((1,)), per channel ((N,), (1, N)) or per group of antiquant_group_size rows
    of K ((ceil(K / group), N)); computed in float32, rounded once to x's dtype."""
    if weight.dtype != torch.int8:
        raise UnjudgedFusedCall(f"a {weight.dtype} weight (int32 holds 8 packed int4 values) has no reference here")
    if not antiquant_scale.is_floating_point():
        raise UnjudgedFusedCall("an int64 antiquant_scale (packed by npu_trans_quant_param) has no reference here")
    if quant_scale is not None or quant_offset is not None:
        raise UnjudgedFusedCall("an int8 output (quant_scale: its rounding and saturation) has no reference here")
    dtype = torch.float64 if x.dtype == torch.float64 else opmath_dtype(x.dtype)
    dequantized = dequantized_weight(weight, antiquant_scale, antiquant_offset, int(antiquant_group_size), dtype)
    y = torch.matmul(x.to(dtype), dequantized)
    if bias is not None:
        y = y + bias.to(dtype)
    return y.to(x.dtype)


OPS = (
    FusedOp("npu_quant_matmul", npu_quant_matmul,
            "npu_quant_matmul(x1, x2, scale, *, offset=None, pertoken_scale=None, bias=None, output_dtype=None, "
            "x1_dtype=None, x2_dtype=None, pertoken_scale_dtype=None, scale_dtype=None, group_sizes=None)",
            "output", "int4 (packed int32) inputs, an int64 scale, an int8 output, block-wise and mx/fp8 formats"),
    FusedOp("npu_weight_quant_batchmatmul", npu_weight_quant_batchmatmul,
            "npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None, quant_scale=None, "
            "quant_offset=None, bias=None, antiquant_group_size=0, inner_precise=0)",
            "y", "an int4 (packed int32) weight, an int64 antiquant_scale, an int8 output (quant_scale)"),
)
