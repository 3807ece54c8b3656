"""Quantization: per-token dynamic quantization and quantization by given scales, whose float64 golden is
the exact value before rounding (judged by the quantized standard); quantised matmuls: an exact integer
product, then the few float roundings of dequantization (scale, per-token scale, offset, bias, the output cast), judged against the
float64 dequantized product; and a float matmul of an int8 weight dequantized on the fly."""

from __future__ import annotations

import torch

from ...bounds.terms.dequantized_terms import dequantized_weight
from .opmath import int_list, opmath_dtype
from .record import FusedOp, UnjudgedFusedCall


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


def npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None):
    """torch_npu.npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None) -> (y, scale)

    Symmetric per-token int8 quantization over the last dim: x (times smooth_scales; with group_index,
    smooth_scales[g] times rows group_index[g-1]:group_index[g]) is divided by scale = its row's largest
    |value| / 127, and rounded: y int8, scale float32 of x's shape less its last dim. In a float64 call
    (the golden) y is that quotient unrounded, which the quantized standard rounds either way at a half."""
    if dst_type is not None and dst_type != torch.int8:
        raise UnjudgedFusedCall(f"dst_type {dst_type} (int4 packed into int32) has no reference here")
    golden = x.dtype == torch.float64
    wide = torch.float64 if golden else torch.float32
    values = x.to(wide)
    if smooth_scales is not None and group_index is None:
        values = values * smooth_scales.to(wide)
    elif smooth_scales is not None:
        rows, start = values.reshape(-1, values.shape[-1]).clone(), 0
        for group, end in enumerate(int_list(group_index)):
            rows[start:end] = rows[start:end] * smooth_scales[group].to(wide)
            start = max(start, end)
        values = rows.reshape(values.shape)
    scale = values.abs().amax(-1) / INT8_MAX
    quotient = torch.where(scale[..., None] > 0, values / scale[..., None].clamp(min=torch.finfo(wide).tiny), 0)
    quotient = quotient.clamp(-INT8_MAX - 1, INT8_MAX)
    if golden:
        return quotient, scale
    return torch.round(quotient).to(torch.int8), scale.to(torch.float32)


# What npu_quantize's dtype argument makes: the integer type, and its range the result saturates to.
_QUANTIZED_TO = {torch.qint8: torch.int8, torch.quint8: torch.uint8, torch.int8: torch.int8, torch.uint8: torch.uint8,
                 torch.int32: torch.int32, torch.qint32: torch.int32}


def npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True):
    """torch_npu.npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True) -> Tensor

    input / scales + zero_points (div_mode False: input * scales + zero_points), rounded and saturated to
    dtype's integers (qint8 and quint8 give int8 and uint8, int32 int32). A 1-D scales (and zero_points)
    runs along the second-to-last dim where axis is -2, else along the last. Computed in float32; in a
    float64 call (the golden) the result is that value unrounded, as the quantized standard reads it."""
    target = _QUANTIZED_TO.get(dtype)
    if target is None:
        raise UnjudgedFusedCall(f"dtype {dtype} (torch.quint4x2 packs 8 int4 values into an int32) has no "
                                f"reference here")
    golden = input.dtype == torch.float64
    wide = torch.float64 if golden else torch.float32
    along = -2 if axis == -2 else -1

    def placed(t):
        t = t.to(wide)
        if t.dim() == 1 and t.numel() > 1 and input.dim() > 1:
            shape = [1] * input.dim()
            shape[along] = t.numel()
            t = t.reshape(shape)
        return t

    value = input.to(wide) / placed(scales) if div_mode else input.to(wide) * placed(scales)
    if zero_points is not None:
        value = value + placed(zero_points)
    info = torch.iinfo(target)
    value = value.clamp(info.min, info.max)
    return value if golden else torch.round(value).to(target)


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
    FusedOp("npu_dynamic_quant", npu_dynamic_quant,
            "npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None)",
            "y (int8; unrounded in the float64 golden), scale (float32)", "dst_type torch.quint4x2 (int4 packing)"),
    FusedOp("npu_quantize", npu_quantize, "npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True)",
            "y (int8, uint8 or int32; unrounded in the float64 golden)", "dtype torch.quint4x2 (int4 packing)"),
    FusedOp("npu_weight_quant_batchmatmul", npu_weight_quant_batchmatmul,
            "npu_weight_quant_batchmatmul(x, weight, antiquant_scale, antiquant_offset=None, quant_scale=None, "
            "quant_offset=None, bias=None, antiquant_group_size=0, inner_precise=0)",
            "y", "an int4 (packed int32) weight, an int64 antiquant_scale, an int8 output (quant_scale)"),
)
