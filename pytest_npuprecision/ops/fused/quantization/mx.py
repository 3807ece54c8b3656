"""Block and microscaling (mx) quantizers and int4 packing, whose float64 golden is the exact value before
the last rounding (judged by the quantized standard on the output's grid: integers, or a float8 format's values).

mx (OCP Microscaling, torch_npu's scale_alg 0): each block of block_size values along an axis shares one power
of two 2^e, e = floor(log2(amax)) - emax (emax: the exponent of the element format's largest normal value,
8 for float8_e4m3fn, 15 for float8_e5m2), stored as float8_e8m0 bits e + 127, which torch_npu returns as uint8.
Each element is its value / 2^e, exact in float32 and float64, rounded to nearest even on the element format's
grid and saturated at its largest finite value: the golden keeps that quotient unrounded. The scale bits are
integers from a documented rule: judged exactly.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..opmath import int_list, statistic_dtype
from ..record import FusedOp, UnjudgedFusedCall
from .integers import INT4_PER_INT32, INT8_MAX, compute_dtype, scaled_int8

E8M0_BIAS = 127
E8M0_NAN = 255
E8M0_ONE = E8M0_BIAS  # the bits of 2^0, which fill the grouped scale's rows between groups
_SMALLEST_EXPONENT = -E8M0_BIAS

# dst_type as torch_npu takes it: a torch dtype, or its ScalarType code (torch's, or torch_npu's own numbering).
_FLOAT8_CODES = {23: "float8_e5m2", 291: "float8_e5m2", 24: "float8_e4m3fn", 292: "float8_e4m3fn"}
_FLOAT4_CODES = {296: "float4_e2m1fn_x2", 297: "float4_e1m2fn_x2"}
_FLOAT8_NAMES = ("float8_e4m3fn", "float8_e5m2")


def _element_format(dst_type) -> torch.dtype:
    """The float8 dtype dst_type names; a float4 format (two to a uint8 byte) is not computed here."""
    if isinstance(dst_type, torch.dtype):
        name = str(dst_type).removeprefix("torch.")
    elif isinstance(dst_type, str):
        name = dst_type.removeprefix("torch.")
    else:
        code = int(dst_type)
        name = _FLOAT8_CODES.get(code) or _FLOAT4_CODES.get(code) or f"code {code}"
    if name in _FLOAT8_NAMES and hasattr(torch, name):
        return getattr(torch, name)
    raise UnjudgedFusedCall(f"dst_type {name} (float4 elements packed two to a uint8 byte, or not a float8 format) "
                            f"has no reference here")


def _emax(element: torch.dtype) -> int:
    """The exponent of the element format's largest normal value: 8 for float8_e4m3fn, 15 for float8_e5m2."""
    return math.frexp(torch.finfo(element).max)[1] - 1


def _blocks(values: torch.Tensor, axis: int, block: int) -> tuple[torch.Tensor, int]:
    """values with ``axis`` moved last, zero padded to whole blocks (a zero changes no block's amax), as
    [..., blocks, block]; and the axis' length."""
    moved = values.movedim(axis, -1)
    length = moved.shape[-1]
    if length % block:
        moved = F.pad(moved, (0, -length % block))
    return moved.reshape(*moved.shape[:-1], -1, block), length


def _shared_exponents(blocks: torch.Tensor, element: torch.dtype, scale_alg: int,
                      max_low_bound: float) -> torch.Tensor:
    """Each block's scale exponent e (int64): scale_alg 0, floor(log2(amax)) - emax; scale_alg 1 (cuBLAS'),
    ceil(log2(S)) of S = max(amax, max_low_bound) / the element's largest value, S rounded to float32 as
    documented. An all-zero block gets the smallest exponent, -127 (e8m0 bits 0)."""
    amax = blocks.abs().amax(-1)
    if scale_alg == 0:
        _, exponent = torch.frexp(amax)  # amax = m·2^exponent, m in [0.5, 1): floor(log2(amax)) = exponent - 1
        shared = exponent.to(torch.int64) - 1 - _emax(element)
    else:
        bounded = amax.to(torch.float32).clamp(min=float(max_low_bound))
        ratio = bounded / torch.tensor(torch.finfo(element).max, dtype=torch.float32)
        mantissa, exponent = torch.frexp(ratio)
        shared = exponent.to(torch.int64) - (mantissa == 0.5).to(torch.int64)  # ceil(log2): a power of two is its own
    finite = torch.isfinite(amax)
    if bool(((amax > 0) & finite & (shared <= _SMALLEST_EXPONENT)).any()):
        raise UnjudgedFusedCall("a block whose scale is 2^-127 or less (its largest |value| below 2^(emax-126)): "
                                "how the kernel quantizes its elements there is not documented")
    return torch.where(amax > 0, shared, _SMALLEST_EXPONENT).clamp(max=E8M0_BIAS)


def _scale_bits(shared: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """e8m0 bits, e + 127, as uint8; 255 (NaN) where a block holds an inf or a NaN."""
    bits = torch.where(torch.isfinite(blocks).all(-1), shared + E8M0_BIAS, E8M0_NAN)
    return bits.to(torch.uint8)


def _elements(blocks: torch.Tensor, shared: torch.Tensor, element: torch.dtype, golden: bool) -> torch.Tensor:
    """value / 2^e, saturated at the element format's largest value (NaN through a NaN block): unrounded in the
    golden, rounded to nearest even in the element format otherwise."""
    quotient = blocks * torch.exp2(-shared.to(blocks.dtype))[..., None]
    quotient = torch.where(torch.isfinite(blocks).all(-1, keepdim=True), quotient, math.nan)
    largest = torch.finfo(element).max
    quotient = quotient.clamp(-largest, largest)
    return quotient if golden else quotient.to(element)


def _checked_modes(round_mode: str, scale_alg: int) -> int:
    if round_mode != "rint":
        raise UnjudgedFusedCall(f"round_mode {round_mode!r} (float8 elements round by 'rint' only; 'round' and "
                                f"'floor' are float4's) has no reference here")
    if int(scale_alg) not in (0, 1):
        raise UnjudgedFusedCall(f"scale_alg {scale_alg} (float4 only) has no reference here")
    return int(scale_alg)


def npu_dynamic_mx_quant(input, *, axis=-1, round_mode="rint", dst_type=296, block_size=32, scale_alg=0,
                         dst_type_max=0.0, max_low_bound=0.0):
    """torch_npu.npu_dynamic_mx_quant(input, *, axis=-1, round_mode="rint", dst_type=296, block_size=32,
    scale_alg=0, dst_type_max=0.0, max_low_bound=0.0) -> (y, mxscale)

    mx quantization along axis, block_size values to a block (the last one zero padded): y float8_e4m3fn or
    float8_e5m2 of input's shape (unrounded in the float64 golden); mxscale the e8m0 bits as uint8, of shape
    input's with axis' length replaced by ceil(ceil(n / block_size) / 2) and a last dim of 2: block 2i + j at
    [..., i, ..., j], an odd count padded with bits 0."""
    element = _element_format(dst_type)
    scale_alg = _checked_modes(round_mode, scale_alg)
    golden = input.dtype == torch.float64
    wide = compute_dtype(golden)
    axis = axis % input.dim()
    blocks, length = _blocks(input.to(wide), axis, int(block_size))
    shared = _shared_exponents(blocks, element, scale_alg, max_low_bound)
    y = _elements(blocks, shared, element, golden)
    y = y.reshape(*y.shape[:-2], -1)[..., :length].movedim(-1, axis)
    bits = _scale_bits(shared, blocks)
    if bits.shape[-1] % 2:
        bits = F.pad(bits, (0, 1))
    return y, bits.reshape(*bits.shape[:-1], -1, 2).movedim(-2, axis)


def npu_grouped_dynamic_mx_quant(x, group_index, *, round_mode="rint", dst_type=23, blocksize=32, scale_alg=0,
                                 dst_type_max=0.0):
    """torch_npu.npu_grouped_dynamic_mx_quant(x, group_index, *, round_mode="rint", dst_type=23, blocksize=32,
    scale_alg=0, dst_type_max=0.0) -> (y, mxscale)

    x [m, n] in groups of rows ending at group_index (cumulative), each mx quantized along dim 0 as
    npu_dynamic_mx_quant's axis 0, its last block zero padded. mxscale [m // (2·blocksize) + g, n, 2] uint8:
    group i's block rows start at row pair start_i // (2·blocksize) + i, an odd count padded with bits 0,
    and the pairs between groups hold bits 127 (2^0), as CANN's own golden lays them out."""
    element = _element_format(dst_type)
    scale_alg = _checked_modes(round_mode, scale_alg)
    golden = x.dtype == torch.float64
    wide = compute_dtype(golden)
    values, block, span = x.to(wide), int(blocksize), 2 * int(blocksize)
    ends = int_list(group_index)
    ys, pairs = [], x.shape[0] // span + len(ends)
    scale = torch.full((2 * pairs, x.shape[1]), E8M0_ONE, dtype=torch.uint8, device=x.device)
    start = 0
    for group, end in enumerate(ends):
        if end <= start:  # an empty group: its row pairs hold the filler
            continue
        blocks, length = _blocks(values[start:end], 0, block)  # [n, blocks, block]
        shared = _shared_exponents(blocks, element, scale_alg, 0.0)
        y = _elements(blocks, shared, element, golden)
        ys.append(y.reshape(y.shape[0], -1)[:, :length].movedim(-1, 0))
        first, count = 2 * (start // span + group), blocks.shape[1]
        scale[first:first + count] = _scale_bits(shared, blocks).movedim(-1, 0)
        if count % 2:
            scale[first + count] = 0
        start = end
    # through float64, exactly: torch 2.1 cannot concatenate float8 tensors
    y = torch.cat([t.double() for t in ys]).to(ys[0].dtype) if ys else values.to(x.dtype if golden else element)
    return y, scale.reshape(pairs, 2, -1).transpose(1, 2)


def npu_dynamic_block_quant(x, *, min_scale=0.0, round_mode="rint", dst_type=1, row_block_size=1,
                            col_block_size=128):
    """torch_npu.npu_dynamic_block_quant(x, *, min_scale=0.0, round_mode="rint", dst_type=1, row_block_size=1,
    col_block_size=128) -> (y, scale)

    x [M, N] or [B, M, N] in blocks of row_block_size × col_block_size (the last ones partial): each block's
    scale = max(amax / 127, min_scale) (CANN: the reciprocal min(127 / amax, 1 / min_scale)), y = x / scale
    rounded to int8 (unrounded in the float64 golden; 0 in an all-zero block); scale float32
    [(B,) ceil(M / row_block_size), ceil(N / col_block_size)]."""
    if dst_type not in (1, torch.int8):
        raise UnjudgedFusedCall(f"dst_type {dst_type} (float8 and hifloat8 outputs) has no reference here")
    if round_mode != "rint":
        raise UnjudgedFusedCall(f"round_mode {round_mode!r} (hifloat8's) has no reference here")
    golden = x.dtype == torch.float64
    wide = compute_dtype(golden)
    rows, cols = int(row_block_size), int(col_block_size)
    values = x.to(wide)
    *batch, m, n = values.shape
    padded = F.pad(values, (0, -n % cols, 0, -m % rows))
    blocks = padded.reshape(*batch, padded.shape[-2] // rows, rows, padded.shape[-1] // cols, cols)
    amax = blocks.abs().amax(dim=(-3, -1))
    scale = torch.maximum(amax / INT8_MAX, torch.tensor(float(min_scale), dtype=wide))
    spread = scale.repeat_interleave(rows, -2).repeat_interleave(cols, -1)[..., :m, :n]
    return scaled_int8(values, spread, golden), scale if golden else scale.to(statistic_dtype(x.dtype))


def npu_convert_weight_to_int4pack(weight, inner_k_tiles=0):
    """torch_npu.npu_convert_weight_to_int4pack(weight, inner_k_tiles=0) -> Tensor

    An int32 weight [k, n] of int4 values ([-8, 7]) packed eight to an int32 along the last dim: [k, n / 8],
    value j of each eight in bits 4j to 4j + 3 (its two's complement nibble). Judged bit-exact."""
    if weight.dtype != torch.int32:
        raise UnjudgedFusedCall(f"a {weight.dtype} weight (float packed to float4_e2m1) has no reference here")
    nibbles = (weight.to(torch.int64) & 0xF).reshape(*weight.shape[:-1], -1, INT4_PER_INT32)
    shifts = 4 * torch.arange(INT4_PER_INT32, device=weight.device)
    packed = (nibbles << shifts).sum(-1)  # in [0, 2^32): its bits as an int32
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


OPS = (
    FusedOp("npu_dynamic_mx_quant", npu_dynamic_mx_quant,
            "npu_dynamic_mx_quant(input, *, axis=-1, round_mode=\"rint\", dst_type=296, block_size=32, scale_alg=0, "
            "dst_type_max=0.0, max_low_bound=0.0)",
            "y (float8; unrounded in the float64 golden), mxscale (e8m0 bits, uint8)",
            "float4 dst_types (packed two to a uint8), scale_alg 2, a block scaled by 2^-127 or less"),
    FusedOp("npu_grouped_dynamic_mx_quant", npu_grouped_dynamic_mx_quant,
            "npu_grouped_dynamic_mx_quant(x, group_index, *, round_mode=\"rint\", dst_type=23, blocksize=32, "
            "scale_alg=0, dst_type_max=0.0)",
            "y (float8; unrounded in the float64 golden), mxscale (e8m0 bits, uint8)",
            "float4 dst_types (packed two to a uint8), scale_alg 2, a block scaled by 2^-127 or less"),
    FusedOp("npu_dynamic_block_quant", npu_dynamic_block_quant,
            "npu_dynamic_block_quant(x, *, min_scale=0.0, round_mode=\"rint\", dst_type=1, row_block_size=1, "
            "col_block_size=128)",
            "y (int8; unrounded in the float64 golden), scale (float32)", "float8 and hifloat8 dst_types"),
    FusedOp("npu_convert_weight_to_int4pack", npu_convert_weight_to_int4pack,
            "npu_convert_weight_to_int4pack(weight, inner_k_tiles=0)", "int32 (eight int4 values each)",
            "a float weight (float4_e2m1 packing); a FRACTAL_NZ weight"),
)
