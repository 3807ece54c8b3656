"""The non-attention fused references in float64 against independent formulations, both ways."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from fused_checks import assert_rel_close

from pytest_npuprecision.ops.fused import FUSED_OPS, FusedOp, fused_op


def ref(name):
    return fused_op(name).reference


def leaves(*shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]


def check_both_ways(actual, expected, inputs, what):
    """Forward and, for float outputs, the gradients w.r.t. every input, via autograd on both sides."""
    actual = actual if isinstance(actual, (tuple, list)) else (actual,)
    expected = expected if isinstance(expected, (tuple, list)) else (expected,)
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert a.dtype == e.dtype, f"{what} output {i}: dtype {a.dtype} != {e.dtype}"
        assert_rel_close(a.detach(), e.detach(), what=f"{what} output {i}")
    gen = torch.Generator().manual_seed(11)
    pairs = [(a, e) for a, e in zip(actual, expected) if e.is_floating_point() and e.requires_grad]
    cotangents = [torch.randn(e.shape, generator=gen, dtype=e.dtype) for _, e in pairs]
    got = torch.autograd.grad([a for a, _ in pairs], inputs, cotangents, allow_unused=True)
    want = torch.autograd.grad([e for _, e in pairs], inputs, cotangents, allow_unused=True)
    for i, (g, w) in enumerate(zip(got, want)):
        assert (g is None) == (w is None), f"{what} grad {i}: one side has no gradient"
        if g is not None:
            assert_rel_close(g, w, what=f"{what} grad {i}")


def test_registry_lists_each_op_once_with_its_signature():
    assert len(FUSED_OPS) >= 20
    for name, op in FUSED_OPS.items():
        assert isinstance(op, FusedOp) and op.name == name and name.isidentifier()
        # torch_npu's own name, or its in-place spelling (one_), which resolves to the same reference
        assert op.signature.split("(", 1)[0] in (name, name + "_") and op.outputs
        assert op.signature.split("(", 1)[0] in op.reference.__doc__
    assert fused_op("npu_not_an_op") is None


@pytest.mark.parametrize("gamma_dims", [1, 2])
def test_rms_norm_is_torch_rms_norm(gamma_dims):
    x, gamma = leaves((3, 4, 8), (4, 8)[-gamma_dims:])
    y, rstd = ref("npu_rms_norm")(x, gamma, 1e-5)
    dims = tuple(range(3 - gamma_dims, 3))
    explicit_rstd = 1 / torch.sqrt(x.pow(2).sum(dims, keepdim=True) / gamma.numel() + 1e-5)
    check_both_ways((y, rstd), (F.rms_norm(x, gamma.shape, gamma, eps=1e-5), explicit_rstd), (x, gamma), "rms_norm")
    assert rstd.shape == (3, 4, 1) if gamma_dims == 1 else (3, 1, 1)


def test_add_rms_norm_normalises_the_sum():
    x1, x2, gamma = leaves((3, 8), (3, 8), (8,))
    s = x1 + x2
    expected = (F.rms_norm(s, (8,), gamma, eps=1e-6), 1 / torch.sqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6), s)
    check_both_ways(ref("npu_add_rms_norm")(x1, x2, gamma), expected, (x1, x2, gamma), "add_rms_norm")


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_eval_uses_weight_bias_and_eps(affine):
    x, w, b = leaves((3, 2, 6), (2, 6), (2, 6))
    mean = x.mean((-2, -1), keepdim=True)
    var = (x - mean).pow(2).mean((-2, -1), keepdim=True)
    expected = (x - mean) / torch.sqrt(var + 1e-3)
    if affine:
        expected = expected * w + b
        got = ref("npu_layer_norm_eval")(x, [2, 6], w, b, 1e-3)
    else:
        got = ref("npu_layer_norm_eval")(x, [2, 6], eps=1e-3)
    check_both_ways(got, expected, (x, w, b), "layer_norm_eval")


def test_group_norm_silu_is_group_norm_then_silu():
    x, w, b = leaves((2, 6, 3, 2), (6,), (6,))
    out, mean, rstd = ref("npu_group_norm_silu")(x, w, b, 3, 1e-4)
    grouped = x.reshape(2, 3, -1)
    expected_rstd = 1 / grouped.var(-1, unbiased=False).add(1e-4).sqrt()
    check_both_ways((out, mean, rstd), (F.silu(F.group_norm(x, 3, w, b, 1e-4)), grouped.mean(-1), expected_rstd),
                    (x, w, b), "group_norm_silu")


def complex_rotation(x, theta, interleaved):
    """x rotated by e^{i theta}: pairs are (x[i], x[i + D/2]) for half mode, (x[2i], x[2i+1]) interleaved."""
    if interleaved:
        z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
        return torch.view_as_real(z * torch.polar(torch.ones_like(theta), theta)).flatten(-2)
    half = x.shape[-1] // 2
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones_like(theta), theta)
    return torch.cat([z.real, z.imag], dim=-1)


def cos_sin(theta, interleaved):
    spread = (lambda t: t.repeat_interleave(2, -1)) if interleaved else (lambda t: torch.cat([t, t], -1))
    return spread(theta.cos()), spread(theta.sin())


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_rotary_mul_is_complex_multiplication(mode):
    x, theta = leaves((2, 3, 4, 8), (1, 3, 1, 4))  # BSND with 1S1D coefficients
    r1, r2 = cos_sin(theta, mode == "interleave")
    check_both_ways(ref("npu_rotary_mul")(x, r1, r2, mode), complex_rotation(x, theta, mode == "interleave"),
                    (x, theta), f"rotary {mode}")


def test_rotary_mul_with_a_rotate_matrix():
    x, theta = leaves((2, 3, 1, 8), (1, 3, 1, 4))
    rotate = torch.zeros(8, 8, dtype=torch.float64)
    rotate[torch.arange(4) + 4, torch.arange(4)] = -1  # x @ rotate = cat(-x2, x1)
    rotate[torch.arange(4), torch.arange(4) + 4] = 1
    r1, r2 = cos_sin(theta, False)
    check_both_ways(ref("npu_rotary_mul")(x, r1, r2, rotate=rotate), complex_rotation(x, theta, False),
                    (x, theta), "rotary rotate")


@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_apply_rotary_pos_emb_rotates_query_and_key(mode):
    q, k, theta = leaves((2, 3, 4, 8), (2, 3, 2, 8), (2, 3, 1, 4))
    cos, sin = cos_sin(theta, mode == "interleave")
    got = ref("npu_apply_rotary_pos_emb")(q, k, cos, sin, layout="BSND", rotary_mode=mode)
    expected = (complex_rotation(q, theta, mode == "interleave"), complex_rotation(k, theta, mode == "interleave"))
    check_both_ways(got, expected, (q, k, theta), f"apply_rotary {mode}")


@pytest.mark.parametrize("dim", [-1, 0])
def test_swiglu_is_silu_of_the_first_half_times_the_second(dim):
    (x,) = leaves((4, 6))
    a, b = x.chunk(2, dim)
    check_both_ways(ref("npu_swiglu")(x, dim), F.silu(a) * b, (x,), "swiglu")


@pytest.mark.parametrize("approximate,activate_left", [(0, False), (1, False), (1, True)])
def test_geglu_gates_one_half_with_gelu(approximate, activate_left):
    (x,) = leaves((3, 8))
    left, right = x.chunk(2, -1)
    gated, other = (left, right) if activate_left else (right, left)
    gelu = F.gelu(gated, approximate="tanh" if approximate else "none")
    check_both_ways(ref("npu_geglu")(x, -1, approximate, activate_left), (other * gelu, gelu), (x,), "geglu")


def test_fast_gelu_is_the_documented_stable_formula():
    (x,) = leaves((64,))
    with torch.no_grad():
        x.mul_(4)
    expected = x * torch.exp(0.851 * (x - x.abs())) / (1 + torch.exp(-1.702 * x.abs()))
    check_both_ways(ref("npu_fast_gelu")(x), expected, (x,), "fast_gelu")


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_is_the_erf_or_tanh_formula(approximate):
    (x,) = leaves((64,))
    if approximate == "none":
        expected = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    else:
        expected = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3))))
    check_both_ways(ref("npu_gelu")(x, approximate=approximate), expected, (x,), f"gelu {approximate}")


def test_mish_and_silu():
    (x,) = leaves((64,))
    check_both_ways(ref("npu_mish")(x), x * torch.tanh(torch.log1p(torch.exp(x))), (x,), "mish")
    check_both_ways(ref("npu_silu")(x), x / (1 + torch.exp(-x)), (x,), "silu")


@pytest.mark.parametrize("fixed_triu_mask", [False, True])
def test_scaled_masked_softmax_fills_masked_logits(fixed_triu_mask):
    (x,) = leaves((2, 3, 4, 5))
    mask = torch.rand(2, 1, 4, 5, generator=torch.Generator().manual_seed(2)) < 0.4
    mask[0, 0, 1] = True  # one fully masked row: uniform, not NaN
    used = torch.ones(4, 5, dtype=torch.bool).triu(1) if fixed_triu_mask else mask
    logits = torch.where(used, torch.tensor(-10000.0, dtype=x.dtype), 0.7 * x)
    weights = torch.exp(logits - logits.amax(-1, keepdim=True))
    check_both_ways(ref("npu_scaled_masked_softmax")(x, mask, 0.7, fixed_triu_mask),
                    weights / weights.sum(-1, keepdim=True), (x,), "scaled_masked_softmax")


def test_linear_and_bmm():
    x, w, b, m1, m2 = leaves((5, 4), (3, 4), (3,), (2, 5, 4), (2, 4, 3))
    check_both_ways(ref("npu_linear")(x, w, b), torch.einsum("mk,nk->mn", x, w) + b, (x, w, b), "linear")
    check_both_ways(ref("npu_bmmV2")(m1, m2, [2, 5, 3]), torch.stack([m1[i].mm(m2[i]) for i in range(2)]),
                    (m1, m2), "bmmV2")


SIZES = [2, 0, 3, 1]  # rows per expert, one expert empty; x has 7 rows, one past the last group


def grouped_loop(x, weights, biases=None, act=lambda y: y):
    outs, start = [], 0
    for g, rows in enumerate(SIZES):
        y = x[start:start + rows] @ weights[g] + (0 if biases is None else biases[g])
        outs.append(act(y))
        start += rows
    return outs


@pytest.mark.parametrize("group_list,group_list_type", [
    ([2, 2, 5, 6], None), (torch.tensor([2, 2, 5, 6]), 0), (torch.tensor(SIZES), 1),
    (torch.tensor([[0, 2], [1, 0], [2, 3], [3, 1]]), 2),
], ids=["int-list", "cumulative", "counts", "index-size"])
@pytest.mark.parametrize("split_item", [0, 3])
def test_grouped_matmul_is_a_loop_of_matmuls(group_list, group_list_type, split_item):
    x, w, b = leaves((7, 4), (4, 4, 3), (4, 3))
    kw = {} if group_list_type is None else dict(group_list_type=group_list_type, group_type=0)
    got = ref("npu_grouped_matmul")([x], [w], bias=[b], group_list=group_list, split_item=split_item, **kw)
    loop = grouped_loop(x, w.unbind(0), b.unbind(0))
    expected = [torch.cat(loop + [torch.zeros(1, 3, dtype=x.dtype)])] if split_item == 3 else loop
    assert len(got) == len(expected)
    check_both_ways(got, expected, (x, w, b), f"grouped_matmul {group_list_type}")


def test_grouped_matmul_lists_activation_and_k_groups():
    x1, x2, w1, w2 = leaves((3, 4), (2, 5), (4, 6), (5, 6))
    got = ref("npu_grouped_matmul")([x1, x2], [w1, w2], act_type=5)
    check_both_ways(got, [F.silu(x1 @ w1), F.silu(x2 @ w2)], (x1, x2, w1, w2), "grouped_matmul lists")
    x, w = leaves((3, 6), (6, 2))
    got = ref("npu_grouped_matmul")([x], [w], group_list=torch.tensor([2, 6]), group_type=2, split_item=3)
    check_both_ways(got, [torch.stack([x[:, :2] @ w[:2], x[:, 2:] @ w[2:]])], (x, w), "grouped_matmul k groups")


@pytest.mark.parametrize("name,group_list", [("npu_gmm", [2, 2, 5, 6]), ("npu_gmm_v2", SIZES)])
def test_gmm_cumulative_and_counts(name, group_list):
    x, w = leaves((6, 4), (4, 4, 3))
    check_both_ways(ref(name)(x, w, group_list=group_list), torch.cat(grouped_loop(x, w.unbind(0))), (x, w), name)


def test_confusion_transpose_both_orders():
    x = torch.arange(24.0).reshape(2, 3, 4)
    first = ref("npu_confusion_transpose")(x, [0, 2, 1], [2, 12], True)
    assert torch.equal(first, x.transpose(1, 2).contiguous().view(2, 12))
    later = ref("npu_confusion_transpose")(x, [1, 0], [6, 4], False)
    assert torch.equal(later, x.view(6, 4).t())


@pytest.mark.parametrize("descending", [False, True])
def test_sort_v2_returns_values_only(descending):
    x = torch.tensor([[3.0, -1.0, 2.0, 2.0], [0.5, 9.0, -4.0, 1.0]], dtype=torch.float64)
    got = ref("npu_sort_v2")(x, descending=descending)
    assert got.tolist() == [sorted(row, reverse=descending) for row in x.tolist()]


def test_moe_gating_top_k_softmax_per_row():
    (x,) = leaves((2, 3, 5))
    finished = torch.tensor([[False, True, False], [False, False, False]])
    y, expert_idx, row_idx = ref("npu_moe_gating_top_k_softmax")(x, finished, k=2)
    probabilities = x.exp() / x.exp().sum(-1, keepdim=True)
    rows = probabilities.reshape(6, 5)
    plain = rows.detach().tolist()
    expected_idx = [sorted(range(5), key=lambda e: -r[e])[:2] for r in plain]
    expected_y = torch.stack([rows[r, expected_idx[r]] for r in range(6)]).reshape(2, 3, 2)
    check_both_ways(y, expected_y, (x,), "moe gating y")
    flat_idx = expert_idx.reshape(6, 2).tolist()
    assert flat_idx == [[5, 5] if r == 1 else expected_idx[r] for r in range(6)]
    assert row_idx.reshape(6, 2).tolist() == [[r, r + 6] for r in range(6)]
    assert expert_idx.dtype == row_idx.dtype == torch.int32


MOE_EXPERTS = torch.tensor([[0, 2], [1, 0], [2, 1], [1, 2]], dtype=torch.int32)  # 4 tokens' 2 of 3 experts


def half_calls(dtype):
    """(name, call) for each op on a small input of ``dtype``; the call returns its outputs."""
    g = torch.Generator().manual_seed(0)
    t = lambda *s: torch.randn(*s, generator=g).to(dtype)
    gamma, x4 = t(8), t(2, 3, 4, 8)
    theta = t(1, 3, 1, 4)
    return {
        "npu_rms_norm": lambda: ref("npu_rms_norm")(x4, gamma),
        "npu_add_rms_norm": lambda: ref("npu_add_rms_norm")(x4, x4, gamma),
        "npu_layer_norm_eval": lambda: ref("npu_layer_norm_eval")(x4, [8], gamma, gamma),
        "npu_group_norm_silu": lambda: ref("npu_group_norm_silu")(x4, t(3), t(3), 3),
        "npu_rotary_mul": lambda: ref("npu_rotary_mul")(x4, *cos_sin(theta, False)),
        "npu_apply_rotary_pos_emb": lambda: ref("npu_apply_rotary_pos_emb")(x4, x4, *cos_sin(theta, False)),
        "npu_swiglu": lambda: ref("npu_swiglu")(x4),
        "npu_geglu": lambda: ref("npu_geglu")(x4),
        "npu_fast_gelu": lambda: ref("npu_fast_gelu")(x4),
        "npu_gelu": lambda: ref("npu_gelu")(x4, approximate="tanh"),
        "npu_mish": lambda: ref("npu_mish")(x4),
        "npu_silu": lambda: ref("npu_silu")(x4),
        "npu_scaled_masked_softmax": lambda: ref("npu_scaled_masked_softmax")(x4, x4 > 0, 0.5),
        "npu_linear": lambda: ref("npu_linear")(t(5, 8), t(3, 8), t(3)),
        "npu_bmmV2": lambda: ref("npu_bmmV2")(t(2, 5, 8), t(2, 8, 3), [2, 5, 3]),
        "npu_grouped_matmul": lambda: ref("npu_grouped_matmul")([t(6, 8)], [t(4, 8, 3)], group_list=[2, 2, 5, 6]),
        "npu_gmm": lambda: ref("npu_gmm")(t(6, 8), t(4, 8, 3), group_list=[2, 2, 5, 6]),
        "npu_gmm_v2": lambda: ref("npu_gmm_v2")(t(6, 8), t(4, 8, 3), group_list=SIZES),
        "npu_confusion_transpose": lambda: ref("npu_confusion_transpose")(x4, [0, 2, 1, 3], [2, 4, 24], True),
        "npu_sort_v2": lambda: ref("npu_sort_v2")(x4),
        "npu_moe_gating_top_k_softmax": lambda: ref("npu_moe_gating_top_k_softmax")(t(4, 8), None, 2),
        "npu_moe_token_permute": lambda: ref("npu_moe_token_permute")(t(4, 8), torch.tensor([[0, 1], [1, 2], [0, 2], [2, 1]])),
        "npu_moe_token_unpermute": lambda: ref("npu_moe_token_unpermute")(
            t(8, 8), torch.arange(8, dtype=torch.int32).flip(0), t(4, 2).abs()),
        "npu_moe_gating_top_k": lambda: ref("npu_moe_gating_top_k")(t(4, 8), 2, t(8), k_group=2, group_count=2,
                                                                 norm_type=1, out_flag=True),
        "npu_moe_init_routing": lambda: ref("npu_moe_init_routing")(
            t(4, 8), torch.arange(8, dtype=torch.int32).reshape(2, 4).t(), MOE_EXPERTS, 4),
        "npu_moe_init_routing_v2": lambda: ref("npu_moe_init_routing_v2")(
            t(4, 8), MOE_EXPERTS, scale=t(4).float(), expert_num=3, expert_tokens_num_type=1, expert_tokens_num_flag=True),
        "npu_moe_finalize_routing": lambda: ref("npu_moe_finalize_routing")(
            t(8, 8), t(4, 8), t(4, 8), t(3, 8), t(4, 2).abs(), torch.arange(8, dtype=torch.int32).flip(0), MOE_EXPERTS),
        "npu_moe_compute_expert_tokens": lambda: ref("npu_moe_compute_expert_tokens")(
            torch.tensor([0, 0, 1, 2, 2, 2, 3, 3], dtype=torch.int32), 4),
        "npu_moe_token_permute_with_routing_map": lambda: ref("npu_moe_token_permute_with_routing_map")(
            t(4, 8), torch.tensor([[1, 1, 0], [0, 1, 1], [1, 0, 1], [0, 1, 1]], dtype=torch.int8), probs=t(4, 3),
            num_out_tokens=8),
        "npu_dynamic_quant": lambda: ref("npu_dynamic_quant")(x4),
        "npu_apply_adam_w": lambda: ref("npu_apply_adam_w")(0.9, 0.99, 1e-3, 0.01, 0.9, 0.999, 1e-8, t(8), None,
                                                           False, False, out=(t(8), t(8), t(8).abs())),
        "npu_apply_adam": lambda: ref("npu_apply_adam")(0.9, 0.99, 1e-3, 0.9, 0.999, 1e-8, t(8), False, False,
                                                       out=(t(8), t(8), t(8).abs())),
        "npu_transpose": lambda: ref("npu_transpose")(x4, (3, 0, 2, 1)),
        "npu_slice": lambda: ref("npu_slice")(x4, [0, 1, 1, 2], [2, 2, 3, 4]),
        "npu_broadcast": lambda: ref("npu_broadcast")(t(1, 8), (3, 8)),
        "npu_mrope": lambda: ref("npu_mrope")(torch.tensor([[0, 1, 2], [1, 1, 0], [2, 0, 1]]), t(3, 16), t(3, 8),
                                             t(4, 4), 8, mrope_section=[1, 0, 1]),
        "npu_rms_norm_backward": lambda: ref("npu_rms_norm_backward")(x4, x4, gamma, t(2, 3, 4, 1).abs()),
        "fast_gelu": lambda: ref("fast_gelu")(x4),
        "npu_dtype_cast": lambda: ref("npu_dtype_cast")(x4, x4.dtype),
        "npu_one_hot": lambda: ref("npu_one_hot")(torch.tensor([5, 3, 2, 1]), depth=5),
        "npu_pad": lambda: ref("npu_pad")(x4, [0, 0, 1, 1, 0, 0, 2, 1]),
        "npu_reshape": lambda: ref("npu_reshape")(x4, (6, 32)),
        "npu_max": lambda: ref("npu_max")(x4, 2),
        "npu_min": lambda: ref("npu_min")(x4, -1, True),
        "npu_indexing": lambda: ref("npu_indexing")(x4, [0, 1, 0, 2], [2, 3, 4, 8], [1, 1, 2, 3]),
        "npu_masked_fill_range": lambda: ref("npu_masked_fill_range")(
            t(4, 8), torch.tensor([[0, 1, 2]], dtype=torch.int32), torch.tensor([[1, 3, 8]], dtype=torch.int32), t(1)),
        "scatter_update": lambda: ref("scatter_update")(x4, torch.tensor([2, 0]), t(2, 3, 2, 8), -2),
        "npu_sign_bits_pack": lambda: ref("npu_sign_bits_pack")(t(14), 2),
        "npu_sign_bits_unpack": lambda: ref("npu_sign_bits_unpack")(torch.tensor([159, 15], dtype=torch.uint8), 2,
                                                                   torch.float32),
        "one": lambda: ref("one")(x4),
        "npu_gelu_mul": lambda: ref("npu_gelu_mul")(x4, approximate="tanh"),
        "npu_sparse_flash_attention": lambda: ref("npu_sparse_flash_attention")(
            t(2, 3, 2, 8), t(2, 5, 1, 8), t(2, 5, 1, 8), torch.tensor([0, 4, 2, -1]).repeat(2, 3, 1, 1), 0.3, 1),
        "npu_lightning_indexer": lambda: ref("npu_lightning_indexer")(t(2, 3, 4, 8), t(2, 5, 1, 8), t(2, 3, 4),
                                                                     sparse_count=4),
        "npu_kv_rmsnorm_rope_cache": lambda: ref("npu_kv_rmsnorm_rope_cache")(
            t(2, 1, 3, 16), t(8), t(2, 1, 3, 8), t(2, 1, 3, 8), torch.tensor([[0, 2, -1], [1, 3, 0]]), t(2, 1, 4, 8),
            t(2, 1, 4, 8), is_output_kv=True),
        "npu_clipped_swiglu": lambda: ref("npu_clipped_swiglu")(x4 * 4),
        "npu_group_norm_swish": lambda: ref("npu_group_norm_swish")(x4, 3, t(3), t(3), swish_scale=1.5),
        "npu_cross_entropy_loss": lambda: ref("npu_cross_entropy_loss")(t(4, 8), torch.tensor([0, 7, 3, 3])),
        "npu_softmax_cross_entropy_with_logits": lambda: ref("npu_softmax_cross_entropy_with_logits")(
            t(4, 8), torch.softmax(t(4, 8).float(), -1).to(dtype)),
        "npu_quant_matmul": lambda: ref("npu_quant_matmul")(
            torch.arange(40, dtype=torch.int8).reshape(5, 8) - 20, torch.arange(24, dtype=torch.int8).reshape(8, 3) - 12,
            torch.full((3,), 0.01), output_dtype=t(1).dtype),
        "npu_interleave_rope": lambda: ref("npu_interleave_rope")(x4, t(2, 1, 4, 8), t(2, 1, 4, 8)),
        "npu_transpose_batchmatmul": lambda: ref("npu_transpose_batchmatmul")(t(5, 2, 8), t(2, 8, 3),
                                                                           perm_x1=[1, 0, 2]),
        "npu_format_cast": lambda: ref("npu_format_cast")(x4, 29),
        "npu_scatter_nd_update": lambda: ref("npu_scatter_nd_update")(x4, torch.tensor([[0, 1], [1, 2]]), t(2, 4, 8)),
        "npu_quantize": lambda: ref("npu_quantize")(x4 * 20, t(8).abs() + 0.5, None, torch.qint8, -1, False),
        "npu_weight_quant_batchmatmul": lambda: ref("npu_weight_quant_batchmatmul")(
            t(5, 8), torch.arange(24, dtype=torch.int8).reshape(8, 3) - 12, t(1, 3).abs() * 0.01, t(1, 3)),
        "npu_prompt_flash_attention": lambda: ref("npu_prompt_flash_attention")(
            x4, x4, x4, num_heads=4, scale_value=0.35, input_layout="BSND"),
        "npu_incre_flash_attention": lambda: ref("npu_incre_flash_attention")(
            x4[:, :1], x4, x4, num_heads=4, scale_value=0.35, input_layout="BSND"),
        "npu_fused_infer_attention_score": lambda: ref("npu_fused_infer_attention_score")(
            x4, x4[:, :, :2], x4[:, :, :2], num_heads=4, num_key_value_heads=2, input_layout="BSND",
            softmax_lse_flag=True),
        "npu_fused_infer_attention_score_v2": lambda: ref("npu_fused_infer_attention_score_v2")(
            x4[:, :1], x4, x4, num_query_heads=4, input_layout="BSND", return_softmax_lse=True),
        "npu_dynamic_mx_quant": lambda: ref("npu_dynamic_mx_quant")(t(2, 72), dst_type=torch.float8_e4m3fn),
        "npu_grouped_dynamic_mx_quant": lambda: ref("npu_grouped_dynamic_mx_quant")(
            t(40, 8), torch.tensor([16, 40], dtype=torch.int32), dst_type=torch.float8_e5m2),
        "npu_dynamic_block_quant": lambda: ref("npu_dynamic_block_quant")(t(3, 160)),
        "npu_convert_weight_to_int4pack": lambda: ref("npu_convert_weight_to_int4pack")(
            torch.arange(-8, 8, dtype=torch.int32).repeat(2, 1)),
        "npu_dynamic_quant_asymmetric": lambda: ref("npu_dynamic_quant_asymmetric")(x4),
        "npu_group_quant": lambda: ref("npu_group_quant")(t(5, 8) * 40, t(2, 8), torch.tensor([2, 5]), offset=t(1)),
        "npu_quant_scatter": lambda: ref("npu_quant_scatter")(
            torch.zeros(2, 4, 8, dtype=torch.int8), torch.tensor([1, 2]), t(2, 2, 8) * 9, t(8).abs() + 0.1, t(8)),
        "npu_anti_quant": lambda: ref("npu_anti_quant")(
            torch.arange(-16, 16, dtype=torch.int8).reshape(4, 8), t(8), offset=t(8), dst_dtype=t(1).dtype),
    }


FLOAT32_STATISTICS = {"npu_rms_norm": (1,), "npu_add_rms_norm": (1,), "npu_dynamic_quant": (1,),
                      "npu_fused_infer_attention_score": (1,), "npu_fused_infer_attention_score_v2": (1,),
                      "npu_dynamic_block_quant": (1,), "npu_dynamic_quant_asymmetric": (1, 2),
                      "npu_rms_norm_backward": (1,), "npu_one_hot": (0,), "npu_sign_bits_unpack": (0,)}
UINT8_OUTPUTS = {"npu_sign_bits_pack": (0,)}
INT64_OUTPUTS = {"npu_moe_init_routing_v2": (2,)}
MOE_FLOAT32 = {"npu_moe_gating_top_k": (2,), "npu_moe_init_routing_v2": (3,)}  # norm_out, expanded_scale
INT8_OUTPUTS = {"npu_dynamic_quant": (0,), "npu_quantize": (0,), "npu_dynamic_block_quant": (0,),
                "npu_dynamic_quant_asymmetric": (0,), "npu_group_quant": (0,), "npu_quant_scatter": (0,)}
# mx quantizers: float8 elements and their e8m0 scale bits as uint8
MX_OUTPUTS = {"npu_dynamic_mx_quant": (torch.float8_e4m3fn, torch.uint8),
              "npu_grouped_dynamic_mx_quant": (torch.float8_e5m2, torch.uint8)}
INT32_OUTPUTS = {"npu_moe_gating_top_k": (1,), "npu_moe_init_routing": (1, 2), "npu_moe_init_routing_v2": (1,),
                 "npu_moe_compute_expert_tokens": (0,), "npu_moe_token_permute_with_routing_map": (2,),
                 "npu_moe_gating_top_k_softmax": (1, 2), "npu_moe_token_permute": (1,), "npu_max": (1,),
                 "npu_min": (1,), "npu_convert_weight_to_int4pack": (0,), "npu_lightning_indexer": (0,)}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_return_the_documented_dtypes(dtype):
    calls = half_calls(dtype)
    assert set(calls) | {"npu_fusion_attention", "npu_fusion_attention_grad"} == set(FUSED_OPS)
    for name, call in calls.items():
        outputs = call()
        outputs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
        for i, out in enumerate(outputs):
            want = MX_OUTPUTS[name][i] if name in MX_OUTPUTS else \
                torch.float32 if i in FLOAT32_STATISTICS.get(name, ()) + MOE_FLOAT32.get(name, ()) else \
                torch.int64 if i in INT64_OUTPUTS.get(name, ()) else \
                torch.int32 if i in INT32_OUTPUTS.get(name, ()) else \
                torch.int8 if i in INT8_OUTPUTS.get(name, ()) else \
                torch.uint8 if i in UINT8_OUTPUTS.get(name, ()) else dtype
            assert out.dtype == want, f"{name} output {i}: {out.dtype}, documented {want}"
            assert torch.isfinite(out.float()).all(), f"{name} output {i} is not finite"


def test_half_results_stay_near_the_float64_golden():
    half, golden = half_calls(torch.bfloat16), half_calls(torch.float64)
    for name in half:
        for a, b in zip(*(o if isinstance(o, (tuple, list)) else (o,) for o in (half[name](), golden[name]()))):
            if a.is_floating_point() and a.numel():
                assert (a.double() - b).abs().max() <= 0.1 * (1 + b.abs().max()), name
