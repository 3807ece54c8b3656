"""Asymmetric per-token, grouped and scattering int8 quantizers and int8/int4 dequantization against their float64
references (ops/fused/quantization/integers.py).

Each reference equals an independent formulation written here in Python loops on fixed inputs (and the torch_npu
documentation's example where it gives numbers); a fair kernel (float32, half-way values rounded away from zero)
passes, and planted defects fail: one element one unit off, a 1 % scale, an ignored offset, truncation, the wrong
group or place, no saturation. Modes the references do not compute raise UnjudgedFusedCall.
"""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision import Status, check_call
from pytest_npuprecision.ops.fused import FUSED_OPS, UnjudgedFusedCall
from pytest_npuprecision.ops.resolution import resolve

asymmetric = FUSED_OPS["npu_dynamic_quant_asymmetric"].reference
group_quant = FUSED_OPS["npu_group_quant"].reference
quant_scatter = FUSED_OPS["npu_quant_scatter"].reference
anti_quant = FUSED_OPS["npu_anti_quant"].reference


def _away(q: torch.Tensor) -> torch.Tensor:
    """Half-way values away from zero: as fair as torch.round's ties to even."""
    return q.sign() * (q.abs() + 0.5).floor()


def _saturated(v: float) -> float:
    return max(-128.0, min(127.0, v))


def _one_off(y: torch.Tensor, index) -> torch.Tensor:
    y = y.clone()
    y[index] += 1 if y[index] < 127 else -1
    return y


def _flat(nested) -> list[float]:
    return [v for row in nested for v in (_flat(row) if isinstance(row, list) else [row])]


def _verdicts(kernels, args, kwargs, reference):
    return {k.__name__: check_call(k, *args, reference=reference, **kwargs).status for k in kernels}


# ---------------------------------------------------------------- npu_dynamic_quant_asymmetric


def _asymmetric_rows(rows, smooth=None, ends=None):
    """Row by row: (exact quotients, scale, offset), as the documentation's formula in Python floats."""
    out = []
    for r, row in enumerate(rows):
        factors = [1.0] * len(row)
        if smooth is not None and ends is None:
            factors = smooth
        elif smooth is not None:
            factors = smooth[next(g for g, end in enumerate(ends) if r < end)]
        values = [v * f for v, f in zip(row, factors)]
        scale = (max(values) - min(values)) / 255
        offset = 127 - max(values) / scale
        out.append(([_saturated(v / scale + offset) for v in values], scale, offset))
    return out


def test_asymmetric_dynamic_quant_follows_the_documented_formula():
    x = torch.tensor([[-1.0, 0.0, 0.5, 3.0], [2.0, 4.0, 6.0, 8.0]]).bfloat16()
    y, scale, offset = asymmetric(x)
    assert y.dtype == torch.int8 and scale.dtype == offset.dtype == torch.float32
    assert y.tolist() == [[-128, -64, -32, 127], [-128, -43, 42, 127]]  # -64.25 and -32.375 round to the nearest
    assert scale.tolist() == pytest.approx([4 / 255, 6 / 255]) and offset.tolist() == pytest.approx([-64.25, -213.0])
    golden, _, _ = asymmetric(x.double())
    assert golden[0].tolist() == pytest.approx([-128.0, -64.25, -32.375, 127.0])


def test_asymmetric_dynamic_quant_equals_a_row_by_row_loop_with_smoothing_and_groups():
    generator = torch.Generator().manual_seed(5)
    x = torch.randn(6, 16, generator=generator).double()
    smooth = torch.rand(16, generator=generator).double() + 0.5
    groups = torch.rand(2, 16, generator=generator).double() + 0.5
    ends = [2, 6]
    for kwargs, expected in (({}, _asymmetric_rows(x.tolist())),
                             ({"smooth_scales": smooth}, _asymmetric_rows(x.tolist(), smooth.tolist())),
                             ({"smooth_scales": groups, "group_index": torch.tensor(ends, dtype=torch.int32)},
                              _asymmetric_rows(x.tolist(), groups.tolist(), ends))):
        y, scale, offset = asymmetric(x, **kwargs)
        for r, (quotients, row_scale, row_offset) in enumerate(expected):
            assert y[r].tolist() == pytest.approx(quotients, abs=1e-9)
            assert scale[r].item() == pytest.approx(row_scale) and offset[r].item() == pytest.approx(row_offset)


def _asymmetric_fair(x, *, smooth_scales=None, group_index=None, dst_type=None):
    v = x.float() * (1 if smooth_scales is None else smooth_scales.float())
    high, low = v.amax(-1, keepdim=True), v.amin(-1, keepdim=True)
    scale = (high - low) / 255
    offset = 127 - high / scale
    return _away(v / scale + offset).clamp(-128, 127).to(torch.int8), scale[..., 0], offset[..., 0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_fair_asymmetric_dynamic_quant_passes_and_defects_fail(dtype):
    generator = torch.Generator().manual_seed(6)
    x = torch.randn(64, 256, generator=generator).to(dtype)
    smooth = (torch.rand(256, generator=generator) + 0.5).to(dtype)

    def truncated(x, **kwargs):
        _, scale, offset = asymmetric(x, **kwargs)
        v = x.float() * kwargs["smooth_scales"].float()
        return (v / scale[:, None] + offset[:, None]).trunc().clamp(-128, 127).to(torch.int8), scale, offset

    def one_off(x, **kwargs):
        y, scale, offset = asymmetric(x, **kwargs)
        return _one_off(y, (3, 7)), scale, offset

    def scale_off(x, **kwargs):
        y, scale, offset = asymmetric(x, **kwargs)
        return y, scale * 1.01, offset

    def offset_off(x, **kwargs):
        y, scale, offset = asymmetric(x, **kwargs)
        return y, scale, offset + 0.01 * offset.abs().clamp(min=1)

    def offset_ignored(x, **kwargs):
        y, scale, offset = asymmetric(x, **kwargs)
        return (y.float() - offset[:, None].round()).clamp(-128, 127).to(torch.int8), scale, offset

    def smoothing_ignored(x, **kwargs):
        return asymmetric(x)

    verdicts = _verdicts((asymmetric, _asymmetric_fair, truncated, one_off, scale_off, offset_off, offset_ignored,
                          smoothing_ignored), (x,), {"smooth_scales": smooth}, asymmetric)
    assert verdicts.pop("npu_dynamic_quant_asymmetric") is verdicts.pop("_asymmetric_fair") is Status.PASS
    assert verdicts == dict.fromkeys(verdicts, Status.ERROR)


def test_a_fair_asymmetric_offset_passes_where_it_cancels():
    # Rows of one sign: row max / scale is hundreds, the offset its difference from 127, computed in float32.
    x = (torch.rand(32, 128, generator=torch.Generator().manual_seed(7)) + 1).bfloat16()
    assert check_call(_asymmetric_fair, x, reference=asymmetric).status is Status.PASS


def test_asymmetric_dynamic_quant_skips_int4_and_constant_rows():
    with pytest.raises(UnjudgedFusedCall, match="quint4x2"):
        asymmetric(torch.randn(2, 8), dst_type=torch.quint4x2)
    with pytest.raises(UnjudgedFusedCall, match="constant row"):
        asymmetric(torch.zeros(2, 8))


# ---------------------------------------------------------------- npu_group_quant


def _group_quant_loop(x, scale, ends, offset):
    out, start = [], 0
    for group, end in enumerate(ends):
        for r in range(start, end):
            out.append([_saturated(v * s + offset) for v, s in zip(x[r], scale[group])])
        start = end
    return out


def test_group_quant_follows_the_documented_formula_and_a_loop():
    x = torch.tensor([[1.0, -2.0], [0.5, 3.0], [100.0, -0.25]])
    scale = torch.tensor([[2.0, 1.0], [4.0, 0.5]])
    y = group_quant(x, scale, torch.tensor([1, 3]), offset=torch.tensor([0.5]))
    assert y.dtype == torch.int8  # 2.5 and -1.5 are half-way: rounded to even here; 400.5 saturates
    assert y.tolist() == [[2, -2], [2, 2], [127, 0]]
    generator = torch.Generator().manual_seed(8)
    x, scale = torch.randn(7, 16, generator=generator).double() * 30, torch.rand(3, 16, generator=generator).double()
    ends = [2, 2, 7]  # an empty group
    golden = group_quant(x, scale, torch.tensor(ends), offset=torch.tensor(1.5).double())
    assert _flat(golden.tolist()) == pytest.approx(_flat(_group_quant_loop(x.tolist(), scale.tolist(), ends, 1.5)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_a_fair_group_quant_passes_and_defects_fail(dtype):
    generator = torch.Generator().manual_seed(9)
    x = (torch.randn(48, 128, generator=generator) * 40).to(dtype)  # some past int8's range at scale near 1
    scale = (torch.rand(3, 128, generator=generator) + 0.5).to(dtype)
    ends = torch.tensor([10, 30, 48], dtype=torch.int32)
    offset = torch.tensor([0.5]).to(dtype)

    def fair(x, scale, group_index, *, offset=None, dst_dtype=None):
        sizes = torch.diff(group_index, prepend=group_index[:1] * 0).tolist()
        factors = torch.cat([scale[g:g + 1].float().expand(n, -1) for g, n in enumerate(sizes)])
        return _away(x.float() * factors + offset.float()).clamp(-128, 127).to(torch.int8)

    def truncated(x, scale, group_index, *, offset=None, dst_dtype=None):
        factors = torch.cat([scale[g:g + 1].float().expand(n, -1) for g, n in enumerate([10, 20, 18])])
        return (x.float() * factors + offset.float()).trunc().clamp(-128, 127).to(torch.int8)

    def one_off(*args, **kwargs):
        return _one_off(group_quant(*args, **kwargs), (20, 5))

    def offset_ignored(x, scale, group_index, *, offset=None, dst_dtype=None):
        return group_quant(x, scale, group_index)

    def groups_shifted(x, scale, group_index, *, offset=None, dst_dtype=None):
        return group_quant(x, scale, torch.tensor([12, 30, 48], dtype=torch.int32), offset=offset)

    def wrapped(x, scale, group_index, *, offset=None, dst_dtype=None):  # no saturation: int16 cut to its low byte
        factors = torch.cat([scale[g:g + 1].double().expand(n, -1) for g, n in enumerate([10, 20, 18])])
        return torch.round(x.double() * factors + offset.double()).to(torch.int16).to(torch.int8)

    verdicts = _verdicts((group_quant, fair, truncated, one_off, offset_ignored, groups_shifted, wrapped),
                         (x, scale, ends), {"offset": offset}, group_quant)
    assert verdicts.pop("npu_group_quant") is verdicts.pop("fair") is Status.PASS
    assert verdicts == dict.fromkeys(verdicts, Status.ERROR)


def test_group_quant_skips_int4_and_rows_outside_every_group():
    with pytest.raises(UnjudgedFusedCall, match="quint4x2"):
        group_quant(torch.randn(4, 8), torch.ones(1, 8), torch.tensor([4]), dst_dtype=torch.quint4x2)
    with pytest.raises(UnjudgedFusedCall, match="row count"):
        group_quant(torch.randn(4, 8), torch.ones(1, 8), torch.tensor([3]))


# ---------------------------------------------------------------- npu_quant_scatter


def _scatter_loop(var, indices, updates, scales, zero_points):
    """var [B, S, H] (or [B, M, S, H], axis -2) updated in Python lists: quantized updates at each place."""
    out = [[list(map(float, row)) for row in batch] for batch in var]
    for i, place in enumerate(indices):
        batch, start = (i, place) if not isinstance(place, list) else place
        for s, row in enumerate(updates[i]):
            out[batch][start + s] = [_saturated(v / q + z) for v, q, z in zip(row, scales, zero_points)]
    return out


def _scatter_inputs(dtype, seed=10):
    generator = torch.Generator().manual_seed(seed)
    var = torch.randint(-128, 128, (4, 9, 32), generator=generator, dtype=torch.int8)
    updates = (torch.randn(3, 2, 32, generator=generator) * 20).to(dtype)
    scales = (torch.rand(1, 1, 32, generator=generator) * 0.3 + 0.1).to(dtype)  # some past int8's range
    zero_points = torch.randint(-3, 4, (1, 1, 32), generator=generator).to(dtype)
    return var, updates, scales, zero_points


def test_quant_scatter_equals_a_loop_for_both_index_forms():
    var, updates, scales, zero_points = _scatter_inputs(torch.float64)
    flat = [scales.reshape(-1).tolist(), zero_points.reshape(-1).tolist()]
    for indices in (torch.tensor([5, 0, 7], dtype=torch.int32), torch.tensor([[3, 1], [0, 6], [1, 2]])):
        golden = quant_scatter(var, indices, updates, scales, zero_points)
        assert golden.dtype == torch.float64
        expected = _scatter_loop(var.tolist(), indices.tolist(), updates.tolist(), *flat)
        assert _flat(golden.tolist()) == pytest.approx(_flat(expected))
        y = quant_scatter(var, indices, updates.float(), scales.float(), zero_points.to(torch.int32))
        assert y.dtype == torch.int8 and (y.double() - golden).abs().max() <= 0.5 + 1e-6
    var4, updates4 = var.reshape(4, 3, 3, 32), updates[:, :, None, :].repeat(1, 2, 1, 1)[:, :3]  # [3, 3, 1, 32]
    four = quant_scatter(var4, torch.tensor([2, 0, 1]), updates4, scales, axis=2)  # 4-D, axis 2
    for i, start in enumerate([2, 0, 1]):
        for m in range(3):
            assert four[i, m, start].tolist() == pytest.approx(
                [_saturated(v / q) for v, q in zip(updates4[i, m, 0].tolist(), flat[0])])
    assert torch.equal(four[3], var4[3].double()) and torch.equal(four[0, :, :2], var4[0, :, :2].double())
    assert resolve("NPU.npu_quant_scatter_").reference is quant_scatter  # the in-place spelling


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_fair_quant_scatter_passes_and_defects_fail(dtype):
    var, updates, scales, zero_points = _scatter_inputs(dtype, seed=11)
    indices = torch.tensor([4, 0, 6], dtype=torch.int32)

    def fair(input, indices, updates, quant_scales, quant_zero_points=None, **kwargs):
        out = input.clone()
        q = _away(updates.float() / quant_scales.float().reshape(-1) + quant_zero_points.float().reshape(-1))
        for i, start in enumerate(indices.tolist()):
            out[i, start:start + updates.shape[1]] = q[i].clamp(-128, 127).to(torch.int8)
        return out

    def multiplied(input, indices, updates, quant_scales, quant_zero_points=None, **kwargs):
        return quant_scatter(input, indices, updates, 1 / quant_scales.float(), quant_zero_points)

    def zero_points_ignored(input, indices, updates, quant_scales, quant_zero_points=None, **kwargs):
        return quant_scatter(input, indices, updates, quant_scales)

    def misplaced(input, indices, updates, quant_scales, quant_zero_points=None, **kwargs):
        return quant_scatter(input, indices + 1, updates, quant_scales, quant_zero_points)

    def one_off(*args, **kwargs):
        return _one_off(quant_scatter(*args, **kwargs), (0, 4, 3))

    def truncated(input, indices, updates, quant_scales, quant_zero_points=None, **kwargs):
        out = input.clone()
        q = (updates.float() / quant_scales.float().reshape(-1) + quant_zero_points.float().reshape(-1)).trunc()
        for i, start in enumerate(indices.tolist()):
            out[i, start:start + updates.shape[1]] = q[i].clamp(-128, 127).to(torch.int8)
        return out

    def wrapped(input, indices, updates, quant_scales, quant_zero_points=None, **kwargs):
        exact = quant_scatter(input, indices, updates.double(), quant_scales.double(), quant_zero_points.double())
        raw = updates.double() / quant_scales.double().reshape(-1) + quant_zero_points.double().reshape(-1)
        for i, start in enumerate(indices.tolist()):
            exact[i, start:start + updates.shape[1]] = raw[i]
        return exact.round().to(torch.int16).to(torch.int8)

    verdicts = _verdicts((quant_scatter, fair, multiplied, zero_points_ignored, misplaced, one_off, truncated, wrapped),
                         (var, indices, updates, scales, zero_points), {}, quant_scatter)
    assert verdicts.pop("npu_quant_scatter") is verdicts.pop("fair") is Status.PASS
    assert verdicts == dict.fromkeys(verdicts, Status.ERROR)


def test_quant_scatter_skips_undocumented_modes():
    var, updates, scales, _ = _scatter_inputs(torch.float32)
    indices = torch.tensor([0, 1, 2])
    for kwargs, words in (({"quant_axis": -2}, "quantized along"), ({"axis": 0}, "axis 0"),
                          ({"round_mode": "floor"}, "round_mode"), ({"reduce": "add"}, "reduce")):
        with pytest.raises(UnjudgedFusedCall, match=words):
            quant_scatter(var, indices, updates, scales, **kwargs)
    with pytest.raises(UnjudgedFusedCall, match="float8"):
        quant_scatter(var.to(torch.uint8), indices, updates, scales)


# ---------------------------------------------------------------- npu_anti_quant


def _int4_loop(word: int) -> list[int]:
    """Eight int4 values of one int32, value j in bits 4j to 4j + 3, two's complement."""
    bits = word & 0xFFFFFFFF
    return [((bits >> (4 * j)) & 0xF) - (16 if (bits >> (4 * j)) & 0x8 else 0) for j in range(8)]


def test_anti_quant_follows_the_documented_example_and_unpacks_int4():
    x = torch.tensor([1, 2, 3, 4], dtype=torch.int8)
    out = anti_quant(x, torch.tensor([2.0]), offset=torch.tensor([2.0]), dst_dtype=torch.float16)
    assert out.dtype == torch.float16 and out.tolist() == [6.0, 8.0, 10.0, 12.0]
    assert anti_quant(x, torch.tensor([2.0])).dtype == torch.float16  # the documented default
    words = torch.tensor([[0x76543210, -0x76543211], [0x0F0F0F0F, -1]], dtype=torch.int32)
    scale, offset = torch.linspace(0.5, 2.0, 16).double(), torch.linspace(-1, 1, 16).double()
    golden = anti_quant(words, scale, offset=offset, dst_dtype=torch.float64)
    for r, row in enumerate(words.tolist()):
        values = _int4_loop(row[0]) + _int4_loop(row[1])
        assert golden[r].tolist() == pytest.approx([(v + o) * s for v, o, s in
                                                    zip(values, offset.tolist(), scale.tolist())])
    assert _int4_loop(0x76543210) == list(range(8)) and _int4_loop(-1) == [-1] * 8


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("dst_dtype", [torch.float16, torch.bfloat16])
def test_a_fair_anti_quant_passes_and_defects_fail(packed, dst_dtype):
    generator = torch.Generator().manual_seed(12)
    if packed:
        x = torch.randint(-2**31, 2**31, (32, 16), generator=generator, dtype=torch.int64).to(torch.int32)
    else:
        x = torch.randint(-128, 128, (32, 128), generator=generator, dtype=torch.int8)
    scale = torch.rand(128, generator=generator) * 0.1 + 0.01
    offset = torch.randn(128, generator=generator).round()

    def correctly_rounded(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
        return anti_quant(x, scale.double(), offset=offset.double(), dst_dtype=torch.float64).to(dst_dtype)

    def offset_ignored(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
        return anti_quant(x, scale, dst_dtype=dst_dtype)

    def scale_off(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
        return anti_quant(x, scale * 1.01, offset=offset, dst_dtype=dst_dtype)

    def scale_reversed(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):  # the wrong channel order
        return anti_quant(x, scale.flip(0), offset=offset.flip(0), dst_dtype=dst_dtype)

    kernels = [anti_quant, correctly_rounded, offset_ignored, scale_off, scale_reversed]
    if packed:
        def nibbles_reversed(x, scale, *, offset=None, dst_dtype=None, src_dtype=None):
            y = anti_quant(x, torch.ones(1), dst_dtype=torch.float32).reshape(32, 16, 8).flip(-1).reshape(32, 128)
            return ((y + offset) * scale).to(dst_dtype)

        kernels.append(nibbles_reversed)
    verdicts = _verdicts(kernels, (x, scale), {"offset": offset, "dst_dtype": dst_dtype}, anti_quant)
    assert verdicts.pop("npu_anti_quant") is verdicts.pop("correctly_rounded") is Status.PASS
    assert verdicts == dict.fromkeys(verdicts, Status.ERROR)


def test_anti_quant_skips_a_float_input():
    with pytest.raises(UnjudgedFusedCall, match="float32"):
        anti_quant(torch.randn(4), torch.ones(1))
