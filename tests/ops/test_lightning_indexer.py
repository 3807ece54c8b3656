"""npu_lightning_indexer: the reference equals an explicit loop over tokens, heads and keys in every layout (BSND,
TND, PA_BSND through a shuffled block table) and mask (causal mode 3, mode 0, rows with fewer visible keys
than places padded with -1); a fair bfloat16 kernel passes check_call, also where it picks the other of two
tied keys or lists its set in another order (replay/tie_alignment.py), and planted defects fail.
"""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision import Status, check_call
from pytest_npuprecision.ops.fused import FUSED_OPS

indexer = FUSED_OPS["npu_lightning_indexer"].reference

# (query tokens, key tokens) per batch: the first batch has fewer queries than keys, the second as many
LENGTHS = [(3, 7), (5, 5)]
HEADS, KEY_HEADS, DIM = 4, 1, 8


def _batches(key_heads=KEY_HEADS, seed=0):
    """One (q [S_q, N1, D], k [S_k, N2, D], w [S_q, N1]) per batch of small integers: exact in every dtype,
    so the loop and the reference agree bit for bit, exact ties included."""
    g = torch.Generator().manual_seed(seed)
    ints = lambda *s: torch.randint(-3, 4, s, generator=g).double()
    return [(ints(sq, HEADS, DIM), ints(sk, key_heads, DIM), ints(sq, HEADS)) for sq, sk in LENGTHS]


def _loop(batches, sparse_count, sparse_mode):
    """The formula, one query token, key head and key at a time: per batch [S_q, N2, sparse_count]."""
    out = []
    for q, k, w in batches:
        q_len, k_len, key_heads = q.shape[0], k.shape[0], k.shape[1]
        group = HEADS // key_heads
        rows = torch.full((q_len, key_heads, sparse_count), -1, dtype=torch.int32)
        for t in range(q_len):
            for n in range(key_heads):
                scored = []
                for s in range(k_len):
                    if sparse_mode == 3 and s > k_len - q_len + t:
                        continue
                    score = sum(float(w[t, j]) * max(float(q[t, j] @ k[s, n]), 0.0)
                                for j in range(n * group, (n + 1) * group))
                    scored.append((-score, s))
                for place, (_, s) in enumerate(sorted(scored)[:sparse_count]):
                    rows[t, n, place] = s
        out.append(rows)
    return out


def _bsnd(batches, rows=6):
    """query [B, rows, N1, D], key [B, S_k max, N2, D], weights [B, rows, N1], the lengths as int32 tensors."""
    pad = lambda t, n: torch.cat([t, t.new_zeros(n - t.shape[0], *t.shape[1:])])
    width = max(k.shape[0] for _, k, _ in batches)
    query, key, weights = (torch.stack([pad(b[i], n) for b in batches])
                           for i, n in ((0, rows), (1, width), (2, rows)))
    lengths = [torch.tensor([b[i].shape[0] for b in batches], dtype=torch.int32) for i in (0, 1)]
    return query, key, weights, lengths


@pytest.mark.parametrize("sparse_mode", [3, 0])
@pytest.mark.parametrize("sparse_count", [4, 9])
def test_bsnd_equals_the_loop(sparse_mode, sparse_count):
    batches = _batches()
    query, key, weights, (lengths_q, lengths_k) = _bsnd(batches)
    out = indexer(query, key, weights, actual_seq_lengths_query=lengths_q, actual_seq_lengths_key=lengths_k,
                  sparse_count=sparse_count, sparse_mode=sparse_mode)
    assert out.dtype == torch.int32 and out.shape == (2, 6, KEY_HEADS, sparse_count)
    for b, rows in enumerate(_loop(batches, sparse_count, sparse_mode)):
        assert torch.equal(out[b, :rows.shape[0]], rows)
        assert (out[b, rows.shape[0]:] == -1).all()  # query rows past the batch's length
    if sparse_mode == 3:  # the first batch's first query sees keys 0..4 only: the rest of its row is -1
        assert (out[0, 0, 0, 5:] == -1).all() and (out[0, 0, 0, :5] >= 0).all()


def test_grouped_key_heads_sum_their_own_query_heads():
    batches = _batches(key_heads=2)
    query, key, weights, (lengths_q, lengths_k) = _bsnd(batches)
    out = indexer(query, key, weights, actual_seq_lengths_query=lengths_q, actual_seq_lengths_key=lengths_k,
                  sparse_count=4)
    for b, rows in enumerate(_loop(batches, 4, 3)):
        assert torch.equal(out[b, :rows.shape[0]], rows)


@pytest.mark.parametrize("sparse_mode", [3, 0])
def test_tnd_equals_the_loop(sparse_mode):
    batches = _batches()
    query, key, weights = (torch.cat([b[i] for b in batches]) for i in range(3))
    ends_q, ends_k = ([sum(n[i] for n in LENGTHS[:b + 1]) for b in range(len(LENGTHS))] for i in (0, 1))
    out = indexer(query, key, weights, actual_seq_lengths_query=torch.tensor(ends_q, dtype=torch.int32),
                  actual_seq_lengths_key=torch.tensor(ends_k, dtype=torch.int32), layout_query="TND",
                  layout_key="TND", sparse_count=6, sparse_mode=sparse_mode)
    assert torch.equal(out, torch.cat(_loop(batches, 6, sparse_mode)))


def test_paged_keys_follow_a_shuffled_block_table():
    batches, size = _batches(), 2
    query, _, weights, (lengths_q, lengths_k) = _bsnd(batches)
    order = torch.randperm(8, generator=torch.Generator().manual_seed(1))
    block_table = order.reshape(2, 4).int()  # each batch's 4 blocks of 2 keys, scattered over 8
    cache = torch.zeros(8, size, KEY_HEADS, DIM, dtype=torch.float64)
    for b, (_, k, _) in enumerate(batches):
        padded = torch.cat([k, k.new_zeros(8 - k.shape[0], *k.shape[1:])])
        cache[block_table[b].long()] = padded.reshape(4, size, KEY_HEADS, DIM)
    out = indexer(query, cache, weights, actual_seq_lengths_query=lengths_q, actual_seq_lengths_key=lengths_k,
                  block_table=block_table, layout_key="PA_BSND", sparse_count=6)
    for b, rows in enumerate(_loop(batches, 6, 3)):
        assert torch.equal(out[b, :rows.shape[0]], rows)


def test_undocumented_modes_skip():
    from pytest_npuprecision.ops.fused.record import UnjudgedFusedCall
    query, key, weights, _ = _bsnd(_batches())
    with pytest.raises(UnjudgedFusedCall, match="sparse_mode 1"):
        indexer(query, key, weights, sparse_count=4, sparse_mode=1)


# ---------------------------------------------------------------- judging a kernel's picks

KEYS, COUNT = 24, 6


def _inputs(tied=False, seed=0):
    """bfloat16 BSND query [2, 8, 8, 128], key [2, 24, 1, 128], weights [2, 8, 8]; tied: each key repeated
    three times (keys 3i, 3i+1, 3i+2 alike), so the best 6 of a row end in a tie that straddles the cut."""
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(2, 8, 8, 128, generator=g).bfloat16()
    key = torch.randn(2, KEYS // 3 if tied else KEYS, 1, 128, generator=g)
    key = key.repeat_interleave(3, 1) if tied else key
    weights = torch.rand(2, 8, 8, generator=g).bfloat16()
    return query, key.bfloat16(), weights


def _kernel(score_of, mask=True, later_first=False, by_position=False, count_from=0):
    """A BSND kernel (all lengths full): score_of(q, k, w) float32 [B, S_q, S_k]; the best COUNT keys of the
    visible ones, exact ties broken toward the later key where later_first, the set listed by position
    where by_position; keys before count_from never considered."""
    def kernel(query, key, weights, *, sparse_count=COUNT, sparse_mode=3, **_):
        score = score_of(query.float(), key[:, :, 0].float(), weights.float())
        q_len, k_len = score.shape[1:]
        hidden = torch.arange(k_len)[None, :] > k_len - q_len + torch.arange(q_len)[:, None]
        if mask and sparse_mode == 3:
            score = score.masked_fill(hidden, float("-inf"))
        score[..., :count_from] = float("-inf")
        flipped = score.flip(-1) if later_first else score
        ranked = torch.sort(flipped, dim=-1, descending=True, stable=True)
        picked = (k_len - 1 - ranked.indices if later_first else ranked.indices)[..., :sparse_count]
        picked = torch.where(ranked.values[..., :sparse_count] > float("-inf"), picked, -1)
        if by_position:
            picked = torch.where(picked < 0, k_len, picked).sort(-1).values
            picked = torch.where(picked == k_len, -1, picked)
        return picked[:, :, None, :].int()
    return kernel


def _fair_scores(q, k, w):
    """Each q_j . k in float32, rounded to bfloat16; the weighted sum in float32, rounded to bfloat16."""
    dots = torch.einsum("bsnd,btd->bsnt", q, k).bfloat16().float()
    return torch.einsum("bsn,bsnt->bst", w, dots.relu()).bfloat16().float()


fair = _kernel(_fair_scores)


@pytest.mark.parametrize("sparse_mode", [3, 0])
def test_fair_bfloat16_kernels_pass(sparse_mode):
    args = _inputs()
    for kernel in (indexer, fair, _kernel(_fair_scores, later_first=True), _kernel(_fair_scores, by_position=True)):
        verdict = check_call(kernel, *args, sparse_count=COUNT, sparse_mode=sparse_mode, reference=indexer)
        assert verdict.status is Status.PASS, verdict


@pytest.mark.parametrize("sparse_mode", [3, 0])
def test_picking_the_other_of_exactly_tied_keys_passes(sparse_mode):
    args = _inputs(tied=True)
    other = _kernel(_fair_scores, later_first=True)
    golden = indexer(*(a.double() for a in args), sparse_count=COUNT, sparse_mode=sparse_mode)
    assert not torch.equal(other(*args, sparse_mode=sparse_mode).long(), golden.long())  # the tie matters
    verdict = check_call(other, *args, sparse_count=COUNT, sparse_mode=sparse_mode, reference=indexer)
    assert verdict.status is Status.PASS, verdict


def _lower_pick(query, key, weights, sparse_mode=3, **kwargs):
    """The fair pick with the last key of each row swapped for the row's lowest-scored visible key."""
    picked = fair(query, key, weights, sparse_mode=sparse_mode, **kwargs)
    score = _fair_scores(query.float(), key[:, :, 0].float(), weights.float())
    q_len, k_len = score.shape[1:]
    hidden = torch.arange(k_len)[None, :] > k_len - q_len + torch.arange(q_len)[:, None]
    picked[:, :, 0, -1] = score.masked_fill(hidden, float("inf")).argmin(-1).int()
    return picked


DEFECTS = {
    "a clearly lower-scored key": _lower_pick,
    "the causal mask ignored": _kernel(_fair_scores, mask=False),
    "ReLU dropped": _kernel(lambda q, k, w: torch.einsum("bsn,bsnd,btd->bst", w, q, k)),
    "weights ignored": _kernel(lambda q, k, w: torch.einsum("bsnd,btd->bsnt", q, k).relu().sum(2)),
    "a key dropped": _kernel(_fair_scores, count_from=1),
}


@pytest.mark.parametrize("defect", DEFECTS)
def test_defects_fail(defect):
    verdict = check_call(DEFECTS[defect], *_inputs(), sparse_count=COUNT, reference=indexer)
    assert verdict.status is Status.ERROR, defect


def test_padding_must_sit_where_the_golden_pads():
    query, key, weights = _inputs()
    key = key[:, :8]  # 8 queries over 8 keys: causal row t sees t + 1 keys, so rows 0..4 end in -1
    assert check_call(_kernel(_fair_scores, by_position=True), query, key, weights, sparse_count=COUNT,
                      reference=indexer).status is Status.PASS

    def short_by_one(*args, **kwargs):  # query 2 sees keys 0..2: the last of them dropped
        picked = fair(*args, **kwargs)
        picked[:, 2, 0, 2] = -1
        return picked

    def one_past(*args, **kwargs):  # a padded row's first pad filled with the next, hidden key
        picked = fair(*args, **kwargs)
        picked[:, 2, 0, 3] = 3
        return picked

    for defect in (short_by_one, one_past):
        verdict = check_call(defect, query, key, weights, sparse_count=COUNT, reference=indexer)
        assert verdict.status is Status.ERROR, defect.__name__
