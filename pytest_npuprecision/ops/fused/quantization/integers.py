"""Integer quantizers: per-token dynamic quantization (symmetric and asymmetric) and quantization by given scales
(per tensor, channel or group, and quantize-then-scatter), and their inverse.

In a float64 call (the golden) a quantizer's integer output is the exact value before rounding, saturated to its
integer range, which the quantized standard rounds either way at a half; otherwise it is computed in float32 and
rounded. Their float outputs (a scale, an offset) are judged by the error bound. npu_anti_quant, integers back to
floats, is a float op: (x + offset) times scale in float32, one rounding to the output dtype, judged by the error
bound against float64.
"""

from __future__ import annotations

import torch

from ..opmath import int_list
from ..record import FusedOp, UnjudgedFusedCall

INT8_MIN, INT8_MAX = -128, 127
INT4_PER_INT32 = 8


def compute_dtype(golden: bool) -> torch.dtype:
    """What a quantizer computes in: float64 in the golden, float32 on a device."""
    return torch.float64 if golden else torch.float32


def int8_result(value: torch.Tensor, golden: bool) -> torch.Tensor:
    """value saturated to int8's range: unrounded in the golden, rounded to int8 otherwise."""
    value = value.clamp(INT8_MIN, INT8_MAX)
    return value if golden else torch.round(value).to(torch.int8)


def scaled_int8(values: torch.Tensor, scale: torch.Tensor, golden: bool) -> torch.Tensor:
    """values over their (broadcast) symmetric scale, 0 where the scale is 0, as int8_result gives them."""
    quotient = torch.where(scale > 0, values / scale.clamp(min=torch.finfo(values.dtype).tiny), 0)
    return int8_result(quotient, golden)


def _int8_only(dst_type, op: str) -> None:
    """An int4 destination (quint4x2: eight values packed into an int32) is not computed here."""
    if dst_type is not None and dst_type not in (torch.int8, torch.qint8):
        raise UnjudgedFusedCall(f"{op} to dst_type {dst_type} (int4 packed eight to an int32) has no reference here")


def _rows_by_group(rows: torch.Tensor, group_index, factors: torch.Tensor, op: str) -> torch.Tensor:
    """rows [S, H] times factors[g] on rows group_index[g-1]:group_index[g] (group_index non-decreasing ends)."""
    ends = int_list(group_index)
    if not ends or ends[-1] != rows.shape[0] or any(b < a for a, b in zip([0] + ends, ends)):
        raise UnjudgedFusedCall(f"{op}: group_index {ends} is not a non-decreasing list of row ends that stops at "
                                f"the row count {rows.shape[0]}; rows outside every group are undocumented")
    out, start = rows.clone(), 0
    for group, end in enumerate(ends):
        out[start:end] = rows[start:end] * factors[group].to(rows.dtype)
        start = end
    return out


def npu_dynamic_quant_asymmetric(x, *, smooth_scales=None, group_index=None, dst_type=None):
    """torch_npu.npu_dynamic_quant_asymmetric(x, *, smooth_scales=None, group_index=None, dst_type=None)
    -> (y, scale, offset)

    Asymmetric per-token int8 quantization over the last dim: x (times smooth_scales; with group_index,
    smooth_scales[g] times rows group_index[g-1]:group_index[g]) gives scale = (row max - row min) / 255,
    offset = 127 - row max / scale and y = round(x / scale + offset): y int8, scale and offset float32 of x's
    shape less its last dim. In a float64 call (the golden) y is unrounded. A constant row (scale 0) skips."""
    _int8_only(dst_type, "npu_dynamic_quant_asymmetric")
    golden = x.dtype == torch.float64
    wide = compute_dtype(golden)
    values = x.to(wide)
    if smooth_scales is not None and group_index is None:
        values = values * smooth_scales.to(wide)
    elif smooth_scales is not None:
        values = _rows_by_group(values.reshape(-1, values.shape[-1]), group_index, smooth_scales.to(wide),
                                "npu_dynamic_quant_asymmetric").reshape(values.shape)
    high, low = values.amax(-1), values.amin(-1)
    if bool((high == low).any()):
        raise UnjudgedFusedCall("npu_dynamic_quant_asymmetric of a constant row (scale 0: the documented formula "
                                "divides by it) has no reference here")
    scale = (high - low) / (INT8_MAX - INT8_MIN)
    offset = INT8_MAX - high / scale
    y = int8_result(values / scale[..., None] + offset[..., None], golden)
    return y, scale, offset


def npu_group_quant(x, scale, group_index, *, offset=None, dst_dtype=None):
    """torch_npu.npu_group_quant(x, scale, group_index, *, offset=None, dst_dtype=None) -> Tensor

    y = round(x * scale[g] + offset) for the rows group_index[g-1]:group_index[g] of x [S, H] (scale [E, H],
    group_index [E] non-decreasing, its last S; offset one number), saturated to int8. Computed in float32;
    unrounded in a float64 call (the golden)."""
    _int8_only(dst_dtype, "npu_group_quant")
    golden = x.dtype == torch.float64
    wide = compute_dtype(golden)
    value = _rows_by_group(x.to(wide), group_index, scale.to(wide), "npu_group_quant")
    if offset is not None:
        value = value + offset.to(wide).reshape(())
    return int8_result(value, golden)


def npu_quant_scatter(input, indices, updates, quant_scales, quant_zero_points=None, axis=-2, quant_axis=-1,
                      reduce="update", dst_type=None, round_mode="rint"):
    """torch_npu.npu_quant_scatter(input, indices, updates, quant_scales, quant_zero_points=None, axis=-2,
    quant_axis=-1, reduce='update', dst_type=None, round_mode='rint') -> Tensor (npu_quant_scatter_ in place)

    updates / quant_scales + quant_zero_points along updates' last dim, rounded and saturated to int8, written
    into a copy of the int8 input: 1-D indices put updates[i] at input[i], 2-D indices (batch, position) at
    input[batch]; along axis from that position on (indices[i] or indices[i][1]). Computed in float32; in a
    float64 call (the golden) the output is float64, the written values unrounded."""
    if input.dtype != torch.int8 or (dst_type is not None and dst_type not in (torch.int8, 1, 2)):
        raise UnjudgedFusedCall(f"npu_quant_scatter into {input.dtype} (dst_type {dst_type}: float8, hifloat8) "
                                f"has no reference here")
    if reduce != "update" or (round_mode or "rint") != "rint":
        raise UnjudgedFusedCall(f"npu_quant_scatter with reduce {reduce!r}, round_mode {round_mode!r} has no "
                                f"reference here")
    dims = updates.dim()
    axis, quant_axis = axis % dims, quant_axis % dims
    if quant_axis != dims - 1 or not 0 < axis < dims - 1:
        raise UnjudgedFusedCall(f"npu_quant_scatter along axis {axis}, quantized along {quant_axis} (documented: "
                                f"axis neither the first nor the last dim, quant_axis the last) has no reference here")
    golden = updates.dtype == torch.float64
    wide = compute_dtype(golden)
    value = updates.to(wide) / quant_scales.to(wide).reshape(-1)
    if quant_zero_points is not None:
        value = value + quant_zero_points.to(wide).reshape(-1)
    value = int8_result(value, golden)
    out = input.to(value.dtype) if golden else input.clone()
    places = indices.to(torch.int64).reshape(indices.shape[0], -1).tolist()
    for i, place in enumerate(places):
        batch, start = (i, place[0]) if indices.dim() == 1 else place
        out[batch].narrow(axis - 1, start, updates.shape[axis]).copy_(value[i])
    return out


def _int4_unpacked(x: torch.Tensor) -> torch.Tensor:
    """int32 [..., n] holding eight int4 values each (value j in bits 4j to 4j + 3, two's complement)
    -> int64 [..., 8n]."""
    shifts = 4 * torch.arange(INT4_PER_INT32, device=x.device)
    nibbles = (x.to(torch.int64)[..., None] >> shifts) & 0xF
    return torch.where(nibbles >= 8, nibbles - 16, nibbles).reshape(*x.shape[:-1], -1)


def npu_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
    """torch_npu.npu_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None) -> Tensor

    (x + offset) * scale along x's last dim (scale and offset (n,), n 1 or that dim's length), x int8 or int32
    holding eight int4 values (value j in bits 4j to 4j + 3), computed in float32 and rounded once to dst_dtype
    (float16 by default, or bfloat16); a float64 call (the golden) stays float64."""
    if x.dtype == torch.int32:
        values = _int4_unpacked(x)
    elif x.dtype == torch.int8:
        values = x
    else:
        raise UnjudgedFusedCall(f"npu_anti_quant of a {x.dtype} x (documented: int8, int32 packing int4) has no "
                                f"reference here")
    golden = scale.dtype == torch.float64
    wide = compute_dtype(golden)
    y = values.to(wide)
    if offset is not None:
        y = y + offset.to(wide)
    y = y * scale.to(wide)
    return y.to(dst_dtype or (torch.float64 if golden else torch.float16))


def npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None):
    """torch_npu.npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None) -> (y, scale)

    Symmetric per-token int8 quantization over the last dim: x (times smooth_scales; with group_index,
    smooth_scales[g] times rows group_index[g-1]:group_index[g]) is divided by scale = its row's largest
    |value| / 127, and rounded: y int8, scale float32 of x's shape less its last dim. In a float64 call
    (the golden) y is that quotient unrounded, which the quantized standard rounds either way at a half."""
    if dst_type is not None and dst_type != torch.int8:
        raise UnjudgedFusedCall(f"dst_type {dst_type} (int4 packed into int32) has no reference here")
    golden = x.dtype == torch.float64
    wide = compute_dtype(golden)
    values = x.to(wide)
    if smooth_scales is not None and group_index is None:
        values = values * smooth_scales.to(wide)
    elif smooth_scales is not None:
        values = _rows_by_group(values.reshape(-1, values.shape[-1]), group_index, smooth_scales,
                                "npu_dynamic_quant").reshape(values.shape)
    scale = values.abs().amax(-1) / INT8_MAX
    return scaled_int8(values, scale[..., None], golden), scale if golden else scale.to(torch.float32)


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


OPS = (
    FusedOp("npu_dynamic_quant", npu_dynamic_quant,
            "npu_dynamic_quant(x, *, smooth_scales=None, group_index=None, dst_type=None)",
            "y (int8; unrounded in the float64 golden), scale (float32)", "dst_type torch.quint4x2 (int4 packing)"),
    FusedOp("npu_quantize", npu_quantize, "npu_quantize(input, scales, zero_points, dtype, axis=1, div_mode=True)",
            "y (int8, uint8 or int32; unrounded in the float64 golden)", "dtype torch.quint4x2 (int4 packing)"),
    FusedOp("npu_dynamic_quant_asymmetric", npu_dynamic_quant_asymmetric,
            "npu_dynamic_quant_asymmetric(x, *, smooth_scales=None, group_index=None, dst_type=None)",
            "y (int8; unrounded in the float64 golden), scale, offset (float32)",
            "dst_type torch.quint4x2 (int4 packing); a constant row (scale 0)"),
    FusedOp("npu_group_quant", npu_group_quant,
            "npu_group_quant(x, scale, group_index, *, offset=None, dst_dtype=None)",
            "y (int8; unrounded in the float64 golden)", "dst_dtype torch.quint4x2 (int4 packing)"),
    FusedOp("npu_quant_scatter", npu_quant_scatter,
            "npu_quant_scatter(input, indices, updates, quant_scales, quant_zero_points=None, axis=-2, quant_axis=-1, "
            "reduce='update', dst_type=None, round_mode='rint')",
            "input updated (int8; float64, the written values unrounded, in the golden); npu_quant_scatter_ alike",
            "float8 and hifloat8 inputs, round_mode other than 'rint', quant_axis other than the last"),
    FusedOp("npu_anti_quant", npu_anti_quant,
            "npu_anti_quant(x, scale, *, offset=None, dst_dtype=None, src_dtype=None)", "y (float16 or bfloat16)",
            "x other than int8 or int32 (packed int4)"),
)
