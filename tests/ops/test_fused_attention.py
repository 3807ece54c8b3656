"""npu_fusion_attention's reference in float64 against an independent per-head formulation.

The independent side builds the full mask with Python loops straight from the documented rules and
runs F.scaled_dot_product_attention per head; gradients come from autograd on both sides.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from fused_checks import BIG, assert_rel_close, dense_mask
from torch.utils._python_dispatch import TorchDispatchMode

from pytest_npuprecision.ops.fused import RandomFusedCall, attention, fused_op

fusion_attention = fused_op("npu_fusion_attention").reference
fusion_attention_grad = fused_op("npu_fusion_attention_grad").reference


def expected_bnsd(q, k, v, scale, masked=None, pse=None):
    """softmax(scale * (pse + q k^T)) v per head with SDPA; masked [B|1, N|1, Sq, Skv] True = out."""
    b, n1, sq, _ = q.shape
    group = n1 // k.shape[1]
    out = []
    for bi in range(b):
        heads = []
        for h in range(n1):
            bias = torch.zeros(sq, k.shape[2], dtype=q.dtype)
            if pse is not None:
                bias = bias + scale * pse[bi % pse.shape[0], h].expand(sq, k.shape[2])
            if masked is not None:
                bias = bias.masked_fill(masked[bi % masked.shape[0], h % masked.shape[1]], -math.inf)
            heads.append(F.scaled_dot_product_attention(
                q[bi, h], k[bi, h // group], v[bi, h // group], attn_mask=bias, scale=scale))
        out.append(torch.stack(heads))
    return torch.stack(out)


def leaves(*shapes, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=gen, dtype=torch.float64).requires_grad_() for s in shapes]


def check_both_ways(actual, expected, inputs, what):
    assert_rel_close(actual.detach(), expected.detach(), what=f"{what} forward")
    cotangent = torch.randn(expected.shape, generator=torch.Generator().manual_seed(7), dtype=expected.dtype)
    got = torch.autograd.grad(actual, inputs, cotangent)
    want = torch.autograd.grad(expected, inputs, cotangent)
    for name, g, w in zip("qkvp", got, want):
        assert_rel_close(g, w, what=f"{what} grad {name}")


def to_layout(t, layout):  # t is BNSD
    b, n, s, d = t.shape
    return {"BNSD": t, "BSND": t.transpose(1, 2), "BSH": t.transpose(1, 2).reshape(b, s, n * d),
            "SBH": t.permute(2, 0, 1, 3).reshape(s, b, n * d)}[layout]


@pytest.mark.parametrize("layout", ["BSH", "SBH", "BSND", "BNSD"])
@pytest.mark.parametrize("kv_heads", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
def test_every_layout_matches_per_head_sdpa(layout, kv_heads):
    q, k, v = leaves((2, 4, 6, 8), (2, kv_heads, 10, 8), (2, kv_heads, 10, 8))
    scale = 0.3
    out = fusion_attention(to_layout(q, layout), to_layout(k, layout), to_layout(v, layout), 4, layout,
                           scale=scale)[0]
    check_both_ways(out, to_layout(expected_bnsd(q, k, v, scale), layout), (q, k, v), layout)


@pytest.mark.parametrize("mode,pre,nxt,sq,skv", [
    (0, 2, 1, 6, 10), (0, 8, 0, 10, 6), (0, BIG, BIG, 6, 6), (1, BIG, BIG, 6, 10), (2, BIG, 0, 6, 10),
    (2, BIG, 0, 10, 6), (3, BIG, 0, 6, 10), (3, BIG, 0, 6, 6), (4, 2, 1, 6, 10), (4, 3, 0, 8, 8),
])
def test_sparse_modes_match_the_documented_masks(mode, pre, nxt, sq, skv):
    q, k, v = leaves((2, 2, sq, 8), (2, 2, skv, 8), (2, 2, skv, 8), seed=mode)
    gen = torch.Generator().manual_seed(3)
    given = torch.rand(sq, skv, generator=gen) < 0.3
    given[:, 0] = False  # no fully masked row
    if mode in (2, 3, 4):
        atten_mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)  # the documented compressed mask
    else:
        atten_mask = given
    masked = dense_mask(mode, sq, skv, pre, nxt, given.tolist())
    assert not masked.all(-1).any(), "test setup: a fully masked row"
    out = fusion_attention(q, k, v, 2, "BNSD", atten_mask=atten_mask, scale=0.25, pre_tockens=pre,
                           next_tockens=nxt, sparse_mode=mode)[0]
    check_both_ways(out, expected_bnsd(q, k, v, 0.25, masked[None, None]), (q, k, v), f"mode {mode}")


def test_prefix_mode_keeps_each_batch_prefix_visible():
    q, k, v = leaves((2, 2, 6, 8), (2, 2, 10, 8), (2, 2, 10, 8))
    prefix = [5, 7]
    masked = torch.stack([dense_mask(6, 6, 10, prefix=p) for p in prefix])[:, None]
    out = fusion_attention(q, k, v, 2, "BNSD", atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1),
                           scale=0.5, prefix=prefix, sparse_mode=6)[0]
    check_both_ways(out, expected_bnsd(q, k, v, 0.5, masked), (q, k, v), "prefix")


@pytest.mark.parametrize("mask_shape", [(2, 4, 6, 10), (2, 1, 6, 10), (1, 1, 6, 10), (6, 10)],
                         ids=["BNSS", "B1SS", "11SS", "SS"])
@pytest.mark.parametrize("as_uint8", [False, True])
def test_mask_shapes_and_pse_shapes(mask_shape, as_uint8):
    q, k, v = leaves((2, 4, 6, 8), (2, 2, 10, 8), (2, 2, 10, 8))
    mask = torch.rand(mask_shape, generator=torch.Generator().manual_seed(1)) < 0.4
    mask[..., 0] = False
    (pse,) = leaves((1, 4, 6, 10), seed=5)
    masked = mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))
    out = fusion_attention(q, k, v, 4, "BNSD", pse=pse, atten_mask=mask.to(torch.uint8) if as_uint8 else mask,
                           scale=0.4, sparse_mode=1)[0]
    check_both_ways(out, expected_bnsd(q, k, v, 0.4, masked, pse), (q, k, v, pse), "mask+pse")


@pytest.mark.parametrize("pse_shape", [(2, 4, 6, 10), (2, 4, 1, 10)], ids=["BNSS", "BN1Skv"])
def test_pse_shapes_are_added_before_scaling(pse_shape):
    q, k, v, pse = leaves((2, 4, 6, 8), (2, 4, 10, 8), (2, 4, 10, 8), pse_shape)
    out = fusion_attention(q, k, v, 4, "BNSD", pse=pse, scale=0.7)[0]
    check_both_ways(out, expected_bnsd(q, k, v, 0.7, pse=pse), (q, k, v, pse), "pse")


def test_without_mask_sparse_mode_and_tokens_do_nothing():
    q, k, v = leaves((1, 2, 6, 8), (1, 2, 6, 8), (1, 2, 6, 8))
    out = fusion_attention(q, k, v, 2, "BNSD", scale=1.0, pre_tockens=0, next_tockens=0, sparse_mode=0)[0]
    check_both_ways(out, expected_bnsd(q, k, v, 1.0), (q, k, v), "no mask")


def test_softmax_max_and_sum_are_the_logsumexp_pieces():
    q, k, v = leaves((2, 2, 6, 8), (2, 2, 10, 8), (2, 2, 10, 8))
    mask = dense_mask(3, 6, 10)
    _, row_max, row_sum, softmax_out, seed, offset, numels = fusion_attention(
        q, k, v, 2, "BNSD", atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1), scale=0.3, sparse_mode=3)
    scores = (0.3 * q @ k.transpose(-1, -2)).masked_fill(mask, -math.inf).detach()
    assert row_max.shape == row_sum.shape == (2, 2, 6, 8)
    assert (row_max == row_max[..., :1]).all() and (row_sum == row_sum[..., :1]).all()
    assert_rel_close(row_max[..., 0], scores.amax(-1), what="softmax_max")
    assert_rel_close(row_max[..., 0] + row_sum[..., 0].log(), scores.logsumexp(-1), what="max + log sum")
    assert softmax_out.numel() == 0 and (seed, offset, numels) == (0, 0, 0)


def varlen_case(seed=0):
    q_lens, kv_lens = [3, 0, 5, 2], [4, 2, 5, 6]
    tq, tkv = sum(q_lens) + 2, sum(kv_lens)  # two rows past the last sequence
    q, k, v = leaves((tq, 4, 8), (tkv, 2, 8), (tkv, 2, 8), seed=seed)
    cumulative = lambda lens: [sum(lens[:i + 1]) for i in range(len(lens))]
    return q, k, v, q_lens, kv_lens, cumulative(q_lens), cumulative(kv_lens)


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4])
def test_tnd_matches_a_loop_over_sequences(mode):
    q, k, v, q_lens, kv_lens, q_cum, kv_cum = varlen_case(mode)
    given = torch.rand(5, 6, generator=torch.Generator().manual_seed(4)) < 0.3
    given[:, 0] = False
    atten_mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1) if mode in (2, 3, 4) else given
    out, row_max, row_sum = fusion_attention(q, k, v, 4, "TND", atten_mask=atten_mask, scale=0.3,
                                             pre_tockens=3, next_tockens=1, actual_seq_qlen=q_cum,
                                             actual_seq_kvlen=kv_cum, sparse_mode=mode)[:3]
    pieces, qs, ks = [], 0, 0
    for sq, skv in zip(q_lens, kv_lens):
        if sq:
            masked = dense_mask(mode, sq, skv, 3, 1, given.tolist())
            bnsd = lambda t, s0, n: t[s0:s0 + n].transpose(0, 1)[None]
            pieces.append(expected_bnsd(bnsd(q, qs, sq), bnsd(k, ks, skv), bnsd(v, ks, skv), 0.3,
                                        masked[None, None])[0].transpose(0, 1))
        qs, ks = qs + sq, ks + skv
    pieces.append(torch.zeros(2, 4, 8, dtype=torch.float64))
    check_both_ways(out, torch.cat(pieces), (q, k, v), f"TND mode {mode}")
    assert row_max.shape == row_sum.shape == (q.shape[0], 4, 8)


def test_tnd_trailing_zero_lengths_skip_sequences():
    q, k, v = leaves((6, 2, 8), (6, 2, 8), (6, 2, 8))
    out = fusion_attention(q, k, v, 2, "TND", scale=0.5, actual_seq_qlen=[2, 6, 0, 0],
                           actual_seq_kvlen=torch.tensor([2, 6, 0, 0]))[0]
    full = fusion_attention(q, k, v, 2, "TND", scale=0.5, actual_seq_qlen=[2, 6], actual_seq_kvlen=[2, 6])[0]
    assert_rel_close(out.detach(), full.detach(), what="trailing zeros")


class LargestTensor(TorchDispatchMode):
    """Records the largest floating tensor any op produces, forward or backward (masks are bool)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for t in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                self.largest = max(self.largest, t.numel())
        return result


def test_query_blocks_bound_the_score_matrix(monkeypatch):
    assert attention.query_block_rows(batch_heads=32, kv_len=32768) == 4
    assert attention.query_block_rows(batch_heads=1, kv_len=1 << 30) == 1
    q, k, v = leaves((1, 2, 64, 8), (1, 2, 96, 8), (1, 2, 96, 8))
    args = dict(atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1), scale=0.3, sparse_mode=3)
    untiled = fusion_attention(q, k, v, 2, "BNSD", **args)
    cotangent = torch.randn(untiled[0].shape, dtype=torch.float64)
    untiled_grads = torch.autograd.grad(untiled[0], (q, k, v), cotangent)
    monkeypatch.setattr(attention.fusion, "SCORE_BLOCK_ELEMENTS", 2 * 96 * 5)  # 5 query rows per block
    with LargestTensor() as watch:
        tiled = fusion_attention(q, k, v, 2, "BNSD", **args)
        tiled_grads = torch.autograd.grad(tiled[0], (q, k, v), cotangent)
    for a, b in zip(tiled[:3] + tiled_grads, untiled[:3] + untiled_grads):
        assert_rel_close(a.detach(), b.detach(), what="tiled")
    # the inputs and their gradients, or one block of scores; never the whole 2 x 64 x 96 matrix
    assert watch.largest <= max(k.numel(), 2 * 5 * 96)


def test_grad_op_is_autograd_of_the_forward():
    q, k, v, pse = leaves((2, 6, 4, 8), (2, 10, 2, 8), (2, 10, 2, 8), (2, 4, 6, 10))
    dy = torch.randn(2, 6, 4, 8, dtype=torch.float64)
    mask = torch.ones(2048, 2048, dtype=torch.bool).triu(1)
    dq, dk, dv, dpse = fusion_attention_grad(q, k, v, dy, 4, "BSND", pse=pse, atten_mask=mask, scale_value=0.3,
                                             sparse_mode=3)
    masked = dense_mask(3, 6, 10)[None, None]
    bnsd = [t.transpose(1, 2) for t in (q, k, v)]
    expected = expected_bnsd(*bnsd, 0.3, masked, pse).transpose(1, 2)
    for got, want, name in zip((dq, dk, dv, dpse), torch.autograd.grad(expected, (q, k, v, pse), dy), "qkvp"):
        assert_rel_close(got, want, what=f"grad op d{name}")
    assert fusion_attention_grad(q, k, v, dy, 4, "BSND", scale_value=0.3)[3] is None


def test_sink_joins_the_softmax_sum_only():
    q, k, v, sink = leaves((1, 2, 4, 8), (1, 2, 5, 8), (1, 2, 5, 8), (2,))
    out = fusion_attention(q, k, v, 2, "BNSD", scale=0.5, sink=sink)[0]
    scores = 0.5 * q @ k.transpose(-1, -2)
    logits = torch.cat([scores, sink.reshape(1, 2, 1, 1).expand(1, 2, 4, 1)], dim=-1)
    expected = torch.softmax(logits, dim=-1)[..., :-1] @ v
    check_both_ways(out, expected, (q, k, v, sink), "sink")


@pytest.mark.parametrize("keep_prob", [0.9, 0.0])
def test_dropout_cannot_be_reproduced(keep_prob):
    q = torch.zeros(1, 1, 2, 4)
    with pytest.raises(RandomFusedCall, match="keep_prob"):
        fusion_attention(q, q, q, 1, "BNSD", keep_prob=keep_prob)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("layout", ["BSH", "TND"])
def test_half_inputs_keep_their_dtype_and_statistics_are_float32(dtype, layout):
    q = torch.randn(2, 6, 16).to(dtype) if layout == "BSH" else torch.randn(6, 2, 8).to(dtype)
    kw = dict(actual_seq_qlen=[2, 6], actual_seq_kvlen=[2, 6]) if layout == "TND" else {}
    out, row_max, row_sum = fusion_attention(q, q, q, 2, layout, scale=0.3, **kw)[:3]
    assert out.dtype == dtype and out.shape == q.shape
    assert row_max.dtype == row_sum.dtype == torch.float32
    golden = fusion_attention(q.double(), q.double(), q.double(), 2, layout, scale=0.3, **kw)[0]
    assert (out.double() - golden).abs().max() < 0.05


def test_fully_masked_rows_give_zero_output():
    q, k, v = leaves((1, 1, 6, 8), (1, 1, 4, 8), (1, 1, 4, 8))
    out, row_max, row_sum = fusion_attention(
        q, k, v, 1, "BNSD", atten_mask=torch.ones(2048, 2048, dtype=torch.bool).triu(1), sparse_mode=3)[:3]
    assert (out[0, 0, :2] == 0).all() and torch.isinf(row_max[0, 0, :2]).all() and (row_sum[0, 0, :2] == 0).all()
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
