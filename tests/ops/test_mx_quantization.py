"""Block and microscaling quantizers and int4 packing against their float64 references (ops/fused/quantization/mx.py).

Each reference equals an independent per-block formulation written here in Python floats, on fixed inputs with an
all-zero block, one huge value, values past the float8 saturation limit, negatives and half-way values; a fair
kernel (float32, half-way values rounded either way) passes the quantized standard and planted defects fail.
"""

from __future__ import annotations

import math

import pytest
import torch

from pytest_npuprecision import Status, check_call, judge
from pytest_npuprecision.ops.fused import FUSED_OPS, UnjudgedFusedCall

mx_quant = FUSED_OPS["npu_dynamic_mx_quant"].reference
grouped_mx_quant = FUSED_OPS["npu_grouped_dynamic_mx_quant"].reference
block_quant = FUSED_OPS["npu_dynamic_block_quant"].reference
int4pack = FUSED_OPS["npu_convert_weight_to_int4pack"].reference
E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2
EMAX = {E4M3: 8, E5M2: 15}

# ---------------------------------------------------------------- an independent mx formulation


def _grid(dtype):
    """Every finite value of a float8 format, with its bit pattern: read from all 256 bytes, not by a cast."""
    values = torch.arange(256, dtype=torch.uint8).view(dtype).float().tolist()
    return [(v, bits) for bits, v in enumerate(values) if math.isfinite(v)]


def _nearest(value, grid, largest):
    """value rounded to nearest on the grid, ties to the even bit pattern, saturated at largest."""
    value = max(-largest, min(largest, value))
    best = min(abs(v - value) for v, _ in grid)
    ties = [(v, bits) for v, bits in grid if abs(v - value) == best]
    return next(v for v, bits in ties if bits % 2 == 0) if len({v for v, _ in ties}) > 1 else ties[0][0]


def _mx_row(row, dtype, block=32):
    """One row quantized block by block: (elements, e8m0 bits per block, the exact quotients)."""
    grid, largest = _grid(dtype), torch.finfo(dtype).max
    elements, bits, exact = [], [], []
    for start in range(0, len(row), block):
        values = row[start:start + block]
        amax = max(abs(v) for v in values)
        e = math.floor(math.log2(amax)) - EMAX[dtype] if amax else -127
        bits.append(e + 127)
        exact += [max(-largest, min(largest, v / 2.0**e)) for v in values]
        elements += [_nearest(v / 2.0**e, grid, largest) for v in values]
    return elements, bits, exact


def _fixed_rows():
    """Two rows of 72 (blocks of 32, 32, 8): an all-zero block, a block with one huge value, a block past the
    e4m3 saturation limit (1.9375·2^k / 2^(k-8) = 496 > 448), negatives, and half-way values (17/256 at
    scale 2^-8: 17 lies half-way between e4m3's 16 and 18)."""
    zero = [0.0] * 32
    huge = [2.0**100] + [(-1) ** i * (i + 1) / 8 for i in range(31)]
    tail = [-3.0, 0.25, 0.0, 1.5, -0.125, 2.0, -2.5, 0.75]
    saturated = [1.9375, -1.9375, 1.875, -1.0] + [(-1) ** i * i / 32 for i in range(28)]
    halfway = [1.0, -17 / 256, 17 / 256, 19 / 256, -0.0703125] + [(-1) ** i * (2 * i + 1) / 64 for i in range(27)]
    return [zero + huge + tail, saturated + halfway + tail]


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_mx_quant_follows_the_ocp_formula_block_by_block(dtype):
    rows = _fixed_rows()
    x = torch.tensor(rows).bfloat16()
    assert x.double().tolist() == rows  # every fixed value is a bfloat16 value
    y, scale = mx_quant(x, dst_type=dtype)
    golden, golden_scale = mx_quant(x.double(), dst_type=dtype)
    assert y.dtype == dtype and scale.dtype == torch.uint8 and scale.shape == (2, 2, 2)
    for i, row in enumerate(rows):
        elements, bits, exact = _mx_row(row, dtype)
        assert y[i].float().tolist() == elements
        assert scale[i].reshape(-1).tolist() == bits + [0]  # three blocks, padded to two pairs with bits 0
        assert golden[i].tolist() == exact  # the golden keeps the quotient, saturated, unrounded
    assert torch.equal(golden_scale, scale)
    assert scale[0, 0, 0] == 0 and y[0, :32].eq(0).all()  # the all-zero block
    if dtype == E4M3:
        assert y[1, 0].item() == 448 and golden[1, 0].item() == 448  # 496 saturates
        assert y[1, 33].item() == -16 and golden[1, 33].item() == -17  # half-way, to even


def test_mx_quant_along_a_leading_axis_interleaves_pairs_of_blocks():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 96, 3, generator=generator).bfloat16()
    y, scale = mx_quant(x, axis=1, dst_type=E4M3)
    assert y.shape == x.shape and scale.shape == (2, 2, 3, 2)  # three blocks along axis 1, in two pairs
    for b in range(2):
        for c in range(3):
            elements, bits, _ = _mx_row(x[b, :, c].double().tolist(), E4M3)
            assert y[b, :, c].float().tolist() == elements
            assert [scale[b, k // 2, c, k % 2].item() for k in range(4)] == bits + [0]


def test_mx_quant_cublas_scale_rounds_the_float32_ratio_up_to_a_power_of_two():
    x = torch.tensor([[448.0] + [1.0] * 31, [450.0] + [-2.0] * 31, [0.5] * 32]).bfloat16()
    _, scale = mx_quant(x, dst_type=E4M3, scale_alg=1)
    expected = [math.ceil(math.log2(torch.tensor(float(row[0].abs()) / 448, dtype=torch.float32).item())) + 127
                for row in x.double()]
    assert scale[:, 0, 0].tolist() == expected == [127, 128, 118]


# ---------------------------------------------------------------- the quantized standard on a float8 grid


@pytest.mark.parametrize("actual, exact, status", [
    (16.0, 16.9, Status.PASS), (16.0, 17.0, Status.PASS), (18.0, 17.0, Status.PASS),  # a half-way value either way
    (18.0, 16.9, Status.ERROR), (15.0, 16.0, Status.ERROR),  # a step off, also just below 2^4 where the grid halves
    (16.0, 15.5, Status.PASS), (15.0, 15.5, Status.PASS), (448.0, 448.0, Status.PASS), (0.0, 2.0**-10, Status.PASS),
    (2.0**-9, 2.0**-10 * 1.01, Status.PASS), (2.0**-9, 2.0**-10 * 0.99, Status.ERROR),  # e4m3's subnormal step: 2^-9
])
def test_a_float8_element_must_be_its_exact_values_nearest_grid_value(actual, exact, status):
    verdict = judge(torch.tensor([actual]).to(E4M3), torch.tensor([exact], dtype=torch.float64),
                    op="npu_dynamic_mx_quant")
    assert verdict.standard == "quantized" and verdict.status is status


def test_an_inf_where_the_saturated_golden_is_the_largest_value_is_an_error():
    verdict = judge(torch.tensor([math.inf]).to(E5M2), torch.tensor([57344.0], dtype=torch.float64),
                    op="npu_dynamic_mx_quant")
    assert verdict.status is Status.ERROR


# ---------------------------------------------------------------- fair and defective mx kernels


def _mx_kernel(x, axis=-1, dst_type=E4M3, *, rounding="even", scale_factor=1.0, exponent_shift=0, saturate=True,
               quantized_axis=None, **_):
    """An mx quantizer in float32, written apart from the reference: rounding "even", "away" (half-way values
    away from zero) or "trunc"; the defects are its keyword arguments."""
    along = axis if quantized_axis is None else quantized_axis
    moved = x.float().movedim(along, -1)
    n = moved.shape[-1]
    blocks = torch.nn.functional.pad(moved, (0, -n % 32)).unflatten(-1, (-1, 32))
    amax = blocks.abs().amax(-1)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax)) - EMAX[dst_type] + exponent_shift, -127.0)
    q = blocks / (torch.exp2(e) * scale_factor)[..., None]
    largest = torch.finfo(dst_type).max
    if saturate:
        q = q.clamp(-largest, largest)
    if rounding == "away":  # float8 quotients of bfloat16 values are never within 2^-12 of a tie but at one
        q = q * (1 + 2.0**-12)
    y = q.to(dst_type)  # torch's cast saturates float8_e4m3fn; a kernel that does not gives NaN past the max
    if not saturate:
        step = torch.finfo(dst_type).eps * 2.0 ** math.floor(math.log2(largest))
        beyond = torch.tensor(math.inf if dst_type == E5M2 else math.nan).to(dst_type)
        y = torch.where(q.abs() >= largest + step / 2, beyond, y.float()).to(dst_type)
    if rounding == "trunc":  # one step toward zero wherever rounding went away from it
        bits = y.view(torch.uint8)
        y = torch.where(y.float().abs() > q.abs(), bits - 1, bits).view(dst_type)
    y = y.flatten(-2)[..., :n].movedim(-1, along)
    bits = (e + 127).to(torch.uint8)
    bits = torch.nn.functional.pad(bits, (0, bits.shape[-1] % 2))
    return y, bits.unflatten(-1, (-1, 2)).movedim(-2, along % x.dim())


def _one_step_off(x, axis=-1, dst_type=E4M3, **kwargs):
    y, scale = mx_quant(x, axis=axis, dst_type=dst_type, **kwargs)
    bits = y.view(torch.uint8).clone()
    bits[3, 7] += 1 if y[3, 7].float().abs() < torch.finfo(dst_type).max else -1
    return bits.view(dst_type), scale


MX_DEFECTS = {
    "one element one step off": _one_step_off,
    "a 1 % scale": lambda x, **k: _mx_kernel(x, scale_factor=1.01, **k),
    "a scale exponent off by one": lambda x, **k: _mx_kernel(x, exponent_shift=1, **k),
    "truncation": lambda x, **k: _mx_kernel(x, rounding="trunc", **k),
    "the wrong block axis": lambda x, **k: (_mx_kernel(x, quantized_axis=0, **k)[0], _mx_kernel(x, **k)[1]),
    "no saturation": lambda x, **k: _mx_kernel(x, saturate=False, **k),
}


def _mx_input():
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(64, 256, generator=generator).bfloat16()
    x[::4, ::32] = 7.75  # each such block's amax, 1.9375·2^2: quotients 496 in e4m3, 63488 in e5m2, past the max
    return x


@pytest.mark.parametrize("dtype", [E4M3, E5M2])
def test_a_fair_mx_quant_passes_with_ties_either_way_and_defects_fail(dtype):
    x = _mx_input()
    away = _mx_kernel(x, dst_type=dtype, rounding="away")[0]
    assert not torch.equal(away, mx_quant(x, dst_type=dtype)[0])  # the input has half-way values
    for kernel in (mx_quant, _mx_kernel, lambda x, **k: _mx_kernel(x, rounding="away", **k)):
        verdict = check_call(kernel, x, dst_type=dtype, reference=mx_quant)
        assert verdict.status is Status.PASS, verdict.message()
    for name, defect in MX_DEFECTS.items():
        verdict = check_call(defect, x, dst_type=dtype, reference=mx_quant)
        assert verdict.status is Status.ERROR, name


@pytest.mark.parametrize("call", [
    dict(dst_type=296), dict(dst_type=297), dict(dst_type=E4M3, round_mode="floor"),
    dict(dst_type=E4M3, scale_alg=2), dict(dst_type=torch.float16)], ids=str)
def test_mx_modes_without_a_reference_raise_unjudged(call):
    with pytest.raises(UnjudgedFusedCall):
        mx_quant(torch.ones(2, 32).bfloat16(), **call)
    with pytest.raises(UnjudgedFusedCall):
        grouped_mx_quant(torch.ones(32, 2).bfloat16(), torch.tensor([32]), **call)


def test_a_block_scaled_below_e8m0s_range_is_unjudged():
    x = torch.full((1, 32), 2.0**-120).bfloat16()
    with pytest.raises(UnjudgedFusedCall, match="2\\^-127"):
        mx_quant(x, dst_type=E4M3)


# ---------------------------------------------------------------- grouped mx quantization


def test_grouped_mx_quant_quantizes_each_group_down_its_rows():
    x = torch.tensor([[0.0], [8.0], [64.0], [512.0]] * 2).bfloat16()  # torch_npu's documented example
    y, scale = grouped_mx_quant(x, torch.tensor([4, 8], dtype=torch.int32), dst_type=E4M3)
    assert y.float().reshape(-1).tolist() == [0.0, 4.0, 32.0, 256.0] * 2  # 2^(9 - 8) = 2 each
    assert scale.tolist() == [[[128, 0]], [[128, 0]]]
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(100, 3, generator=generator).bfloat16()
    ends = [30, 30, 100]  # an empty group, and a group of 70 rows: 3 blocks, padded to 2 pairs
    y, scale = grouped_mx_quant(x, torch.tensor(ends, dtype=torch.int32), dst_type=E5M2)
    assert scale.shape == (100 // 64 + 3, 3, 2)
    rows = scale.transpose(1, 2).reshape(-1, 3)  # row 2p + j holds pair p's j-th block
    for c in range(3):
        first, _, _ = _mx_row(x[:30, c].double().tolist(), E5M2)
        rest, bits, _ = _mx_row(x[30:, c].double().tolist(), E5M2)
        assert y[:, c].float().tolist() == first + rest
        assert rows[4:8, c].tolist() == bits + [0]  # group 2 starts at pair 30 // 64 + 2
    assert rows[0].ne(0).all() and rows[1].eq(0).all() and rows[2:4].eq(127).all()  # a pad, the empty group's filler


def test_a_fair_grouped_mx_quant_passes_and_wrong_groups_fail():
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(128, 64, generator=generator).bfloat16()
    ends = torch.tensor([40, 72, 128], dtype=torch.int32)
    assert check_call(grouped_mx_quant, x, ends, dst_type=E4M3, reference=grouped_mx_quant).status is Status.PASS

    def ungrouped(x, group_index, **kwargs):
        return grouped_mx_quant(x, torch.tensor([x.shape[0]]), **kwargs)[0], grouped_mx_quant(x, group_index,
                                                                                              **kwargs)[1]

    def groups_shifted(x, group_index, **kwargs):
        return grouped_mx_quant(x, torch.tensor([32, 72, 128]), **kwargs)

    for defect in (ungrouped, groups_shifted):
        verdict = check_call(defect, x, ends, dst_type=E4M3, reference=grouped_mx_quant)
        assert verdict.status is Status.ERROR, defect.__name__


# ---------------------------------------------------------------- block quantization to int8


def test_block_quant_follows_the_documented_formula_block_by_block():
    x = torch.tensor([[0.0] * 128 + [1.0, -2.0], [3.0, -127.0, 0.5, 1.5] * 32 + [0.0, 0.0]]).bfloat16()
    y, scale = block_quant(x, min_scale=0.004)
    golden, golden_scale = block_quant(x.double(), min_scale=0.004)
    assert y.dtype == torch.int8 and scale.dtype == torch.float32 and scale.shape == (2, 2)
    for i, row in enumerate(x.double().tolist()):
        for b, start in enumerate((0, 128)):
            values = row[start:start + 128]
            s = max(max(abs(v) for v in values) / 127, 0.004)  # the block's scale, at least min_scale
            assert scale[i, b].item() == pytest.approx(s, rel=1e-6)
            assert golden[i, start:start + 128].tolist() == pytest.approx([v / s for v in values], rel=1e-12)
            assert y[i, start:start + 128].tolist() == [round(v / s) for v in values]
    assert y[0, :128].eq(0).all() and scale[0, 0].item() == pytest.approx(0.004)  # all zero: min_scale
    assert golden_scale.dtype == torch.float64
    y, _ = block_quant(torch.tensor([[0.5, -0.5, 0.25]] * 4).bfloat16(), row_block_size=2, col_block_size=2)
    assert y[:, 2].tolist() == [127] * 4 and y[:, :2].tolist() == [[127, -127]] * 4


def test_a_fair_block_quant_passes_with_ties_either_way_and_defects_fail():
    generator = torch.Generator().manual_seed(8)
    x = torch.randn(32, 320, generator=generator).bfloat16()
    call = dict(min_scale=1e-3, row_block_size=1, col_block_size=128)

    def blocks(x, col_block_size=128, min_scale=0.0):
        pad = torch.nn.functional.pad(x.float(), (0, -x.shape[1] % col_block_size))
        amax = pad.unflatten(-1, (-1, col_block_size)).abs().amax(-1)
        return amax, torch.maximum(amax / 127, torch.tensor(min_scale))

    def multiplied_away_from_zero(x, min_scale, row_block_size, col_block_size, **_):
        amax, scale = blocks(x, col_block_size, min_scale)
        q = x.float() * (1 / scale).repeat_interleave(col_block_size, -1)[:, :x.shape[1]]
        return (q.sign() * (q.abs() + 0.5).floor()).to(torch.int8), scale

    def truncated(x, **kwargs):
        golden, scale = block_quant(x.double(), **kwargs)
        return golden.trunc().to(torch.int8), scale.float()

    def one_off(x, **kwargs):
        y, scale = block_quant(x, **kwargs)
        y = y.clone()
        y[3, 7] += 1 if y[3, 7] < 127 else -1
        return y, scale

    def scale_off(x, **kwargs):
        y, scale = block_quant(x, **kwargs)
        return y, scale * 1.01

    def wrong_block(x, **kwargs):
        return block_quant(x, **{**kwargs, "col_block_size": 64})[0], block_quant(x, **kwargs)[1]

    def min_scale_ignored(x, **kwargs):
        return block_quant(x, **{**kwargs, "min_scale": 0.0})

    for kernel in (block_quant, multiplied_away_from_zero):
        verdict = check_call(kernel, x, **call, reference=block_quant)
        assert verdict.status is Status.PASS, verdict.message()
    tiny = x * 1e-2  # where min_scale binds
    assert check_call(min_scale_ignored, tiny, **call, reference=block_quant).status is Status.ERROR
    for defect in (truncated, one_off, scale_off, wrong_block):
        assert check_call(defect, x, **call, reference=block_quant).status is Status.ERROR, defect.__name__


def test_block_quant_modes_without_a_reference_raise_unjudged():
    x = torch.ones(2, 128).bfloat16()
    for call in (dict(dst_type=E4M3), dict(dst_type=35), dict(round_mode="round")):
        with pytest.raises(UnjudgedFusedCall):
            block_quant(x, **call)


# ---------------------------------------------------------------- int4 packing


def test_int4pack_packs_eight_nibbles_to_an_int32_low_first():
    generator = torch.Generator().manual_seed(9)
    weight = torch.randint(-8, 8, (6, 32), dtype=torch.int32, generator=generator)
    weight[0, :8] = torch.tensor([-8, 7, -1, 0, 1, -2, 3, 7])
    packed = int4pack(weight)
    assert packed.dtype == torch.int32 and packed.shape == (6, 4)
    for i in range(6):
        for k in range(4):
            word = sum((v & 0xF) << (4 * j) for j, v in enumerate(weight[i, 8 * k:8 * k + 8].tolist()))
            assert packed[i, k].item() == (word - 2**32 if word >= 2**31 else word)
    assert packed[0, 0].item() == 0x73E10F78  # nibbles 8 7 F 0 1 E 3 7, the first lowest
    assert check_call(int4pack, weight, reference=int4pack).status is Status.PASS

    def high_first(weight, inner_k_tiles=0):
        return int4pack(weight.reshape(weight.shape[0], -1, 8).flip(-1).reshape(weight.shape))

    assert check_call(high_first, weight, reference=int4pack).status is Status.ERROR
    with pytest.raises(UnjudgedFusedCall):
        int4pack(weight.float())
