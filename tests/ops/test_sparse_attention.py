"""npu_sparse_flash_attention (issue 52): each query attends the keys its row of sparse_indices names, under the
lower-right causal mask, with MLA's rope part added to the scores; the same call in BSND, TND and a paged cache
agree; a fair bfloat16 kernel passes and a dropped key, a lost mask, a lost rope part or shuffled heads fail."""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision import Status, check_call
from pytest_npuprecision.ops.fused import FUSED_OPS, UnjudgedFusedCall

sfa = FUSED_OPS["npu_sparse_flash_attention"].reference
B, SQ, SKV, N, NKV, D, DR, K = 2, 4, 16, 4, 2, 32, 8, 6


def _inputs(seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    shapes = {"q": (B, SQ, N, D), "k": (B, SKV, NKV, D), "v": (B, SKV, NKV, D), "q_rope": (B, SQ, N, DR),
              "k_rope": (B, SKV, NKV, DR)}
    tensors = {name: torch.randn(*shape, generator=generator, dtype=dtype) for name, shape in shapes.items()}
    picks = torch.stack([torch.randperm(SKV, generator=generator)[:K] for _ in range(B * SQ * NKV)])
    indices = picks.reshape(B, SQ, NKV, K).int()
    indices[0, 1, 0, 4:] = -1  # invalid entries fill the back of a row
    return tensors, indices


def _loop(t, indices, scale, causal=True):
    """The documented formula, one query head at a time."""
    out = torch.zeros(B, SQ, N, D, dtype=torch.float64)
    for b in range(B):
        for i in range(SQ):
            for h in range(N):
                kv = h // (N // NKV)
                keys = [int(j) for j in indices[b, i, kv] if 0 <= j and (not causal or j <= SKV - SQ + i)]
                scores = torch.stack([scale * (t["q"][b, i, h] @ t["k"][b, j, kv] + t["q_rope"][b, i, h]
                                               @ t["k_rope"][b, j, kv]) for j in keys])
                weights = torch.softmax(scores, 0)
                out[b, i, h] = sum(w * t["v"][b, j, kv] for w, j in zip(weights, keys))
    return out


@pytest.mark.parametrize("mode", [3, 0])
def test_each_query_attends_its_selected_keys(mode):
    t, indices = _inputs()
    out = sfa(t["q"], t["k"], t["v"], indices, 0.1, 1, query_rope=t["q_rope"], key_rope=t["k_rope"], sparse_mode=mode)
    torch.testing.assert_close(out, _loop(t, indices, 0.1, causal=mode == 3))


def test_packed_and_paged_layouts_give_the_same_result():
    t, indices = _inputs(seed=1)
    ropes = {"query_rope": t["q_rope"], "key_rope": t["k_rope"]}
    dense = sfa(t["q"], t["k"], t["v"], indices, 0.1, 1, **ropes)
    packed = sfa(t["q"].flatten(0, 1), t["k"].flatten(0, 1), t["v"].flatten(0, 1), indices.flatten(0, 1), 0.1, 1,
                 query_rope=t["q_rope"].flatten(0, 1), key_rope=t["k_rope"].flatten(0, 1), layout_query="TND",
                 layout_kv="TND", actual_seq_lengths_query=[SQ, 2 * SQ], actual_seq_lengths_kv=[SKV, 2 * SKV])
    torch.testing.assert_close(packed.reshape(dense.shape), dense)
    # a paged cache of blocks of 4 tokens, each batch's blocks listed out of order
    table = torch.tensor([[5, 0, 7, 2], [1, 6, 3, 4]], dtype=torch.int32)
    def paged(x):
        blocks = torch.zeros(8, 4, *x.shape[2:], dtype=x.dtype)
        for b in range(B):
            for n, block in enumerate(table[b].tolist()):
                blocks[block] = x[b, 4 * n:4 * n + 4]
        return blocks
    cached = sfa(t["q"], paged(t["k"]), paged(t["v"]), indices, 0.1, 1, query_rope=t["q_rope"],
                 key_rope=paged(t["k_rope"]), layout_kv="PA_BSND", block_table=table, actual_seq_lengths_kv=[SKV] * B)
    torch.testing.assert_close(cached, dense)


def test_a_fair_kernel_passes_and_defects_fail():
    t, indices = _inputs(seed=2)
    half = {name: x.bfloat16() for name, x in t.items()}
    args = (half["q"], half["k"], half["v"], indices, 0.1, 1)
    ropes = {"query_rope": half["q_rope"], "key_rope": half["k_rope"]}
    assert check_call(sfa, *args, reference=sfa, **ropes).status is Status.PASS
    dropped = indices.clone()
    dropped[..., 0] = -1
    defects = {
        "causal mask lost": lambda *a, **k: sfa(*a, sparse_mode=0, **k),
        "rope part lost": lambda *a, query_rope, key_rope: sfa(*a),
        "a selected key dropped": lambda q, k, v, i, *a, **kw: sfa(q, k, v, dropped, *a, **kw),
        "heads grouped the other way": lambda q, *a, **kw: sfa(
            q.reshape(B, SQ, 2, 2, D).transpose(2, 3).reshape(q.shape), *a, **kw),
    }
    for label, defect in defects.items():
        assert check_call(defect, *args, reference=sfa, **ropes).status is Status.ERROR, label


def test_blocks_of_keys_skip_as_unjudged():
    t, indices = _inputs()
    with pytest.raises(UnjudgedFusedCall, match="sparse_block_size"):
        sfa(t["q"], t["k"], t["v"], indices, 0.1, 16)
