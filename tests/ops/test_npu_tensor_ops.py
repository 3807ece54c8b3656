"""torch_npu's casting, filling, padding, indexing, scattering and sign-packing ops (issue 52): each reference
reproduces the example its documentation gives, is judged bit for bit, and a kernel one element off fails."""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision import Status, check_call
from pytest_npuprecision.ops.fused import FUSED_OPS
from pytest_npuprecision.ops.resolution import resolve


def ref(name):
    return FUSED_OPS[name].reference


def test_the_documented_examples():
    assert ref("npu_dtype_cast")(torch.tensor([0, 0.5, -1.0]), torch.int32).tolist() == [0, 0, -1]
    hot = ref("npu_one_hot")(torch.tensor([5, 3, 2, 1], dtype=torch.int32), depth=5)
    assert hot.dtype == torch.float32
    assert hot.tolist() == [[0, 0, 0, 0, 0], [0, 0, 0, 1, 0], [0, 0, 1, 0, 0], [0, 1, 0, 0, 0]]
    padded = ref("npu_pad")(torch.tensor([[20, 20, 10, 10]], dtype=torch.float16), [1, 1, 1, 1])
    assert padded.tolist() == [[0] * 6, [0, 20, 20, 10, 10, 0], [0] * 6]
    assert ref("npu_reshape")(torch.arange(16.0).reshape(2, 8), (4, 4)).shape == (4, 4)
    x = torch.tensor([[-1.8135, 0.2078], [-0.6678, 0.7846]])
    values, indices = ref("npu_max")(x, 0)
    assert values.tolist() == pytest.approx([-0.6678, 0.7846]) and indices.tolist() == [1, 1]
    assert indices.dtype == torch.int32
    assert ref("npu_min")(x, 1)[1].tolist() == [0, 0]
    sliced = ref("npu_indexing")(torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]], dtype=torch.int32), [0, 0], [2, 2], [1, 1])
    assert sliced.tolist() == [[1, 2], [5, 6]]
    a = torch.rand(4, 4)
    filled = ref("npu_masked_fill_range")(a, torch.tensor([[0, 1, 2]], dtype=torch.int32),
                                          torch.tensor([[1, 2, 3]], dtype=torch.int32), torch.tensor([1.0]), 1)
    expected = a.clone()
    expected[0, 0] = expected[1, 1] = expected[2, 2] = 1.0
    assert torch.equal(filled, expected)
    data = torch.tensor([[[[1.0] * 8, [2.0] * 8]]])
    updated = ref("scatter_update")(data, torch.tensor([1]), torch.tensor([[[[3.0] * 8]]]), -2)
    assert updated.tolist() == [[[[1.0] * 8, [3.0] * 8]]] and data[0, 0, 1, 0] == 2.0  # data is left as it was
    packed = ref("npu_sign_bits_pack")(torch.tensor([5, 4, 3, 2, 0, -1, -2, 4, 3, 2, 1, 0, -1, -2.0]), 2)
    assert packed.tolist() == [[159], [15]] and packed.dtype == torch.uint8
    unpacked = ref("npu_sign_bits_unpack")(torch.tensor([159, 15], dtype=torch.uint8), 2, torch.float32)
    assert unpacked.tolist() == [[1, 1, 1, 1, 1, -1, -1, 1], [1, 1, 1, 1, -1, -1, -1, -1]]
    assert ref("one")(torch.rand(2, 3)).tolist() == [[1.0] * 3] * 2


def test_pack_and_unpack_invert_each_other_and_match_a_bit_loop():
    x = torch.randn(64, generator=torch.Generator().manual_seed(3))
    packed = ref("npu_sign_bits_pack")(x, 4)
    for i, byte in enumerate(packed.reshape(-1).tolist()):
        assert byte == sum(1 << j for j in range(8) if x[8 * i + j] >= 0)
    assert torch.equal(ref("npu_sign_bits_unpack")(packed, 1, 0).reshape(-1), torch.where(x >= 0, 1.0, -1.0))


def test_indexing_masks_take_a_dim_whole_and_unsupported_masks_skip():
    x = torch.arange(24).reshape(4, 6)
    assert torch.equal(ref("npu_indexing")(x, [1, 1], [3, 5], [1, 2], begin_mask=0b01, end_mask=0b10), x[:3, 1::2])
    from pytest_npuprecision.ops.fused import UnjudgedFusedCall
    with pytest.raises(UnjudgedFusedCall, match="shrink_axis_mask"):
        ref("npu_indexing")(x, [0, 0], [1, 1], [1, 1], shrink_axis_mask=1)


CALLS = {
    "npu_pad": lambda t: (t, [0, 1, 2, 0]),
    "npu_max": lambda t: (t, 1),
    "npu_indexing": lambda t: (t, [1, 0], [7, 9], [2, 3]),
    "scatter_update": lambda t: (t, torch.tensor([3, 1]), t[:, :2] * 2, 1),
    "npu_dtype_cast": lambda t: (t.float(), torch.bfloat16),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_judged_bit_exact_and_one_element_off_fails(name):
    x = torch.randn(8, 9, generator=torch.Generator().manual_seed(4)).bfloat16()
    args = CALLS[name](x)
    reference = ref(name)
    assert resolve(f"NPU.{name}").reference is reference
    verdict = check_call(reference, *args, reference=reference)
    assert verdict.status is Status.PASS
    assert {v.standard for _, v in verdict.outputs} == {"binary"}

    def one_off(*a):
        out = reference(*a)
        first = out[0] if isinstance(out, tuple) else out
        nudged = first.clone()
        nudged.view(-1)[3] = nudged.view(-1)[3] * 1.0625 + 0.0625 if first.is_floating_point() \
            else nudged.view(-1)[3] + 1  # a few ulps off in bfloat16, one unit for integers
        return (nudged, *out[1:]) if isinstance(out, tuple) else nudged
    assert check_call(one_off, *args, reference=reference).status is Status.ERROR
