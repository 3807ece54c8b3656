"""torch_npu's inference attention references (PFA, IFA, FIA, FIA v2) against an independent formulation.

The independent side holds every batch as plain [N, S, D] tensors, builds each batch's keep-matrix
one (query, key) pair at a time from the documented sparse_mode rules, and runs
softmax(scale * q k^T) v per head in Python loops. The layouts, the paged cache and the packed TND
sequences are built here by hand from those per-batch tensors.
"""

from __future__ import annotations

import math

import pytest
import torch
from fused_checks import BIG, dense_mask

from pytest_npuprecision import Status, check_call
from pytest_npuprecision.ops.catalogue import op_record
from pytest_npuprecision.ops.fused import UnjudgedFusedCall, fused_op

pfa = fused_op("npu_prompt_flash_attention").reference
ifa = fused_op("npu_incre_flash_attention").reference
fia = fused_op("npu_fused_infer_attention_score").reference
fia_v2 = fused_op("npu_fused_infer_attention_score_v2").reference
COMPRESSED = torch.ones(2048, 2048, dtype=torch.bool).triu(1)  # the 2048x2048 mask sparse modes 2-4 take
B, N, N_KV, S, S_KV, D = 2, 4, 2, 6, 8, 8
SCALE = 1 / math.sqrt(D)


def keeps(mode, sq, skv, pre=BIG, nxt=BIG, given=None):
    """[sq, skv] bool, True = attended, from the docs' sparse_mode rules; mode 0 without a mask keeps every pair
    (the inference ops ignore the tokens then)."""
    if mode == 0 and given is None:
        return torch.ones(sq, skv, dtype=torch.bool)
    return ~dense_mask(mode, sq, skv, pre, nxt, given)


def attend(q, k, v, scale, keep=None):
    """q [N, sq, D], k/v [N_kv, skv, D] -> ([N, sq, Dv], lse [N, sq]), one head at a time."""
    group = q.shape[0] // k.shape[0]
    outs, lses = [], []
    for h in range(q.shape[0]):
        scores = (q[h] @ k[h // group].T) * scale
        if keep is not None:
            scores = scores.masked_fill(~keep, -math.inf)
        outs.append(torch.softmax(scores, -1) @ v[h // group])
        lses.append(torch.logsumexp(scores, -1))
    return torch.stack(outs), torch.stack(lses)


def batch_inputs(seed, batch=B, heads=N, kv_heads=N_KV, sq=S, skv=S_KV, d=D, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, sq, d, generator=g, dtype=dtype)
    k = torch.randn(batch, kv_heads, skv, d, generator=g, dtype=dtype) * 2
    v = torch.randn(batch, kv_heads, skv, d, generator=g, dtype=dtype)
    return q, k, v


def in_layout(t, layout):
    """[B, N, S, D] in the named layout."""
    if layout == "BNSD":
        return t
    bsnd = t.permute(0, 2, 1, 3).contiguous()
    return bsnd if layout == "BSND" else bsnd.reshape(*bsnd.shape[:2], -1)


def packed(t, lengths):
    """[B, N, S, D] -> TND [T, N, D] of each batch's first lengths[b] rows, and the cumulative ends."""
    rows = [t[b, :, :n].permute(1, 0, 2) for b, n in enumerate(lengths)]
    return torch.cat(rows), [sum(lengths[:b + 1]) for b in range(len(lengths))]


def paged(t, lengths, block_size, order):
    """[B, N_kv, S, D] -> a (blocknum, blocksize, H) cache with its blocks in ``order``, and the table."""
    per_batch = [math.ceil(n / block_size) for n in lengths]
    blocks = []
    for b, count in enumerate(per_batch):
        rows = t[b].permute(1, 0, 2).reshape(t.shape[2], -1)
        rows = torch.cat([rows, rows.new_zeros(count * block_size - rows.shape[0], rows.shape[1])]) \
            if rows.shape[0] < count * block_size else rows[:count * block_size]
        blocks += list(rows.reshape(count, block_size, -1))
    cache = torch.stack([blocks[i] for i in order])
    where = {old: new for new, old in enumerate(order)}
    table, start = [], 0
    for count in per_batch:
        table.append([where[start + i] for i in range(count)] + [0] * (max(per_batch) - count))
        start += count
    return cache, torch.tensor(table, dtype=torch.int32)


# ---------------------------------------------------------------- prompt flash attention


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD", "BNSD_BSND"])
@pytest.mark.parametrize("mode, pre, nxt", [(0, 2, 1), (1, BIG, BIG), (2, BIG, BIG), (3, BIG, BIG), (4, 3, 0)])
def test_prompt_attention_follows_the_documented_masks_in_every_layout(layout, mode, pre, nxt):
    q, k, v = batch_inputs(1)
    q_lens, kv_lens = [5, 3], [7, 6]
    given = torch.rand(B, 1, S, S_KV, generator=torch.Generator().manual_seed(2)) < 0.3
    given[..., 0] = False  # every row keeps key 0 (no fully masked row)
    mask = given if mode in (0, 1) else COMPRESSED
    first = layout.split("_")[0]
    out = pfa(in_layout(q, first), in_layout(k, first), in_layout(v, first), atten_mask=mask,
              actual_seq_lengths=q_lens, actual_seq_lengths_kv=kv_lens, num_heads=N, scale_value=SCALE,
              pre_tokens=pre, next_tokens=nxt, input_layout=layout, num_key_value_heads=N_KV, sparse_mode=mode)
    expected = torch.zeros_like(q)  # rows past actual_seq_lengths stay zero
    for b, (sq, skv) in enumerate(zip(q_lens, kv_lens)):
        keep = keeps(mode, sq, skv, pre, nxt, given[b, 0, :sq, :skv] if mode in (0, 1) else None)
        expected[b, :, :sq] = attend(q[b, :, :sq], k[b, :, :skv], v[b, :, :skv], SCALE, keep)[0]
    torch.testing.assert_close(out, in_layout(expected, layout.split("_")[-1]), rtol=1e-12, atol=1e-12)


def test_prompt_attention_defaults_to_a_causal_band_and_ignores_tokens_without_a_mask():
    q, k, v = batch_inputs(3, skv=S)
    no_mask = pfa(q, k, v, num_heads=N, num_key_value_heads=N_KV, scale_value=SCALE, input_layout="BNSD")
    with_mask = pfa(q, k, v, num_heads=N, num_key_value_heads=N_KV, scale_value=SCALE, input_layout="BNSD",
                    atten_mask=torch.zeros(S, S, dtype=torch.bool))  # next_tokens=0: key j <= query i
    for b in range(B):
        torch.testing.assert_close(no_mask[b], attend(q[b], k[b], v[b], SCALE)[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(with_mask[b], attend(q[b], k[b], v[b], SCALE, keeps(2, S, S))[0],
                                   rtol=1e-12, atol=1e-12)


def test_prompt_attention_packs_tnd_sequences():
    q, k, v = batch_inputs(4, kv_heads=N)
    q_lens, kv_lens = [3, 5], [4, 8]
    (tq, q_ends), (tk, kv_ends), (tv, _) = packed(q, q_lens), packed(k, kv_lens), packed(v, kv_lens)
    out = pfa(tq, tk, tv, atten_mask=COMPRESSED, actual_seq_lengths=q_ends, actual_seq_lengths_kv=kv_ends,
              num_heads=N, scale_value=SCALE, input_layout="TND", sparse_mode=3)
    expected = torch.cat([attend(q[b, :, :sq], k[b, :, :skv], v[b, :, :skv], SCALE, keeps(3, sq, skv))[0]
                          .permute(1, 0, 2) for b, (sq, skv) in enumerate(zip(q_lens, kv_lens))])
    torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- incremental flash attention


@pytest.mark.parametrize("layout", ["BSH", "BSND", "BNSD"])
def test_incremental_attention_reads_a_dense_or_paged_cache_in_every_layout(layout):
    q, k, v = batch_inputs(5, sq=1, skv=12)
    kv_lens = [9, 12]
    mask = torch.zeros(B, 12, dtype=torch.bool)
    mask[0, 4] = mask[1, 0] = True  # (B, KV_S): one key left out per batch
    expected = torch.stack([attend(q[b], k[b, :, :n], v[b, :, :n], SCALE, ~mask[b, :n][None])[0]
                            for b, n in enumerate(kv_lens)])
    call = dict(atten_mask=mask, actual_seq_lengths=kv_lens, num_heads=N, scale_value=SCALE, input_layout=layout,
                num_key_value_heads=N_KV)
    dense = ifa(in_layout(q, layout), in_layout(k, layout), in_layout(v, layout), **call)
    torch.testing.assert_close(dense, in_layout(expected, layout), rtol=1e-12, atol=1e-12)
    order = [4, 0, 3, 1, 5, 2]  # block i of the cache is the sequence's block order[i]
    (kc, table), (vc, _) = paged(k, kv_lens, 4, order), paged(v, kv_lens, 4, order)
    out = ifa(in_layout(q, layout), kc, vc, block_table=table, block_size=4, **call)
    torch.testing.assert_close(out, in_layout(expected, layout), rtol=1e-12, atol=1e-12)
    if layout == "BNSD":  # the (blocknum, N_kv, blocksize, D) cache
        kc4, vc4 = (c.reshape(c.shape[0], 4, N_KV, D).transpose(1, 2) for c in (kc, vc))
        out = ifa(q, kc4, vc4, block_table=table, block_size=4, **call)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


def test_incremental_attention_left_padding_reads_the_keys_before_the_padding():
    q, k, v = batch_inputs(6, sq=1, skv=10)
    out = ifa(q, k, v, actual_seq_lengths=[5, 7], kv_padding_size=torch.tensor([2]), num_heads=N,
              scale_value=SCALE, input_layout="BNSD", num_key_value_heads=N_KV)
    for b, n in enumerate([5, 7]):
        torch.testing.assert_close(out[b], attend(q[b], k[b, :, 8 - n:8], v[b, :, 8 - n:8], SCALE)[0],
                                   rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- fused infer attention (v1 and v2)


def test_fused_attention_prompt_branch_returns_the_log_sum_exp():
    q, k, v = batch_inputs(7)
    q_lens, kv_lens = [6, 4], [8, 5]
    out, lse = fia(in_layout(q, "BSH"), in_layout(k, "BSH"), in_layout(v, "BSH"), atten_mask=COMPRESSED,
                   actual_seq_lengths=q_lens, actual_seq_lengths_kv=kv_lens, num_heads=N, scale=SCALE,
                   input_layout="BSH", num_key_value_heads=N_KV, sparse_mode=3, softmax_lse_flag=True)
    expected, expected_lse = torch.zeros_like(q), torch.full((B, N, S, 1), math.inf, dtype=q.dtype)
    for b, (sq, skv) in enumerate(zip(q_lens, kv_lens)):
        o, l = attend(q[b, :, :sq], k[b, :, :skv], v[b, :, :skv], SCALE, keeps(3, sq, skv))
        expected[b, :, :sq], expected_lse[b, :, :sq, 0] = o, l
    torch.testing.assert_close(out, in_layout(expected, "BSH"), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, expected_lse, rtol=1e-12, atol=1e-12)
    _, placeholder = fia(q, k, v, num_heads=N, num_key_value_heads=N_KV, input_layout="BNSD")
    assert placeholder.shape == (1,) and placeholder.item() == 0


def test_fused_attention_decode_branch_ignores_the_sparse_mode_and_reads_a_paged_cache():
    q, k, v = batch_inputs(8, sq=1, skv=16)
    kv_lens = [16, 11]
    order = [3, 6, 0, 5, 1, 4, 2]  # 4 + 3 blocks of 4
    (kc, table), (vc, _) = paged(k, kv_lens, 4, order), paged(v, kv_lens, 4, order)
    out, lse = fia(q, kc, vc, atten_mask=COMPRESSED, actual_seq_lengths_kv=kv_lens, block_table=table,
                   num_heads=N, scale=SCALE, input_layout="BNSD", num_key_value_heads=N_KV, sparse_mode=3,
                   block_size=4, softmax_lse_flag=True)
    for b, n in enumerate(kv_lens):
        o, l = attend(q[b], k[b, :, :n], v[b, :, :n], SCALE)
        torch.testing.assert_close(out[b], o, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse[b, :, :, 0], l, rtol=1e-12, atol=1e-12)


def test_fused_attention_shared_prefix_query_padding_and_rope():
    q, k, v = batch_inputs(9)
    prefix_k, prefix_v = (t[:1, :, :3] for t in batch_inputs(10)[1:])
    out, _ = fia(q, k, v, key_shared_prefix=prefix_k, value_shared_prefix=prefix_v,
                 actual_shared_prefix_len=torch.tensor([2]), actual_seq_lengths=[4, 3],
                 query_padding_size=torch.tensor([1]), num_heads=N, scale=SCALE, input_layout="BNSD",
                 num_key_value_heads=N_KV)
    for b, n in enumerate([4, 3]):  # query rows S - 1 - n .. S - 1, keys: the prefix's first 2, then all 8
        keys, vals = torch.cat([prefix_k[0, :, :2], k[b]], 1), torch.cat([prefix_v[0, :, :2], v[b]], 1)
        torch.testing.assert_close(out[b, :, S - 1 - n:S - 1], attend(q[b, :, S - 1 - n:S - 1], keys, vals, SCALE)[0],
                                   rtol=1e-12, atol=1e-12)
        assert not out[b, :, :S - 1 - n].any() and not out[b, :, S - 1:].any()
    q_rope, k_rope = batch_inputs(11, d=4)[:2]
    out, _ = fia(q, k, v, query_rope=q_rope, key_rope=k_rope, num_heads=N, scale=SCALE, input_layout="BNSD",
                 num_key_value_heads=N_KV)
    for b in range(B):
        expected = attend(torch.cat([q[b], q_rope[b]], -1), torch.cat([k[b], k_rope[b]], -1), v[b], SCALE)[0]
        torch.testing.assert_close(out[b], expected, rtol=1e-12, atol=1e-12)


def test_fused_attention_zeroes_fully_masked_rows_only_with_invalid_row_correction():
    q, k, v = batch_inputs(12)
    mask = torch.zeros(S, S_KV, dtype=torch.bool)
    mask[2] = True  # query 2 sees no key
    call = dict(atten_mask=mask, num_heads=N, scale=SCALE, input_layout="BNSD", num_key_value_heads=N_KV,
                sparse_mode=1, softmax_lse_flag=True)
    with pytest.raises(UnjudgedFusedCall, match="every key masked"):
        fia(q, k, v, **call)
    out, lse = fia(q, k, v, inner_precise=2, **call)
    assert not out[:, :, 2].any() and torch.isinf(lse[:, :, 2]).all()
    keep = ~mask
    keep[2] = True
    torch.testing.assert_close(out[0, :, 3], attend(q[0], k[0], v[0], SCALE, keep)[0][:, 3], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["TND", "NTD_TND", "TND_NTD"])
def test_fused_attention_v2_packs_sequences_with_grouped_heads(layout):
    q, k, v = batch_inputs(13)
    q_lens, kv_lens = [4, 6], [7, 8]
    (tq, q_ends), (tk, kv_ends), (tv, _) = packed(q, q_lens), packed(k, kv_lens), packed(v, kv_lens)
    if layout.startswith("NTD"):
        tq, tk, tv = (t.transpose(0, 1) for t in (tq, tk, tv))
    out, lse = fia_v2(tq, tk, tv, atten_mask=COMPRESSED, actual_seq_qlen=q_ends, actual_seq_kvlen=kv_ends,
                      num_query_heads=N, num_key_value_heads=N_KV, softmax_scale=SCALE, input_layout=layout,
                      sparse_mode=3, return_softmax_lse=True)
    parts = [attend(q[b, :, :sq], k[b, :, :skv], v[b, :, :skv], SCALE, keeps(3, sq, skv))
             for b, (sq, skv) in enumerate(zip(q_lens, kv_lens))]
    expected = torch.cat([o.permute(1, 0, 2) for o, _ in parts])
    torch.testing.assert_close(out, expected.transpose(0, 1) if layout.endswith("NTD") else expected,
                               rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse[..., 0], torch.cat([l.T for _, l in parts]), rtol=1e-12, atol=1e-12)


def test_fused_attention_v2_writes_nbsd_from_a_paged_decode():
    q, k, v = batch_inputs(14, sq=1, skv=8)
    order = [2, 0, 3, 1]
    (kc, table), (vc, _) = paged(k, [8, 8], 4, order), paged(v, [8, 8], 4, order)
    out, _ = fia_v2(q, kc, vc, actual_seq_kvlen=[8, 8], block_table=table, block_size=4, num_query_heads=N,
                    num_key_value_heads=N_KV, softmax_scale=SCALE, input_layout="BNSD_NBSD")
    expected = torch.stack([attend(q[b], k[b], v[b], SCALE)[0] for b in range(B)])
    torch.testing.assert_close(out, expected.transpose(0, 1), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op, extra", [
    (pfa, {"pse_shift": torch.zeros(1, N, S, S_KV)}),
    (pfa, {"quant_scale2": torch.ones(1)}),
    (pfa, {"sparse_mode": 6}),
    (ifa, {"antiquant_scale": torch.ones(2, N_KV * D)}),
    (fia, {"key_antiquant_scale": torch.ones(B, S_KV)}),
    (fia, {"sparse_mode": 9}),
    (fia_v2, {"learnable_sink": torch.zeros(N)}),
    (fia_v2, {"out_dtype": 1}),
], ids=["pfa pse_shift", "pfa int8 out", "pfa prefix mode", "ifa antiquant", "fia kv antiquant", "fia tree mask",
        "v2 learnable sink", "v2 out_dtype"])
def test_modes_without_a_reference_skip(op, extra):
    q, k, v = batch_inputs(15, dtype=torch.float32)
    heads = {"num_query_heads": N} if op is fia_v2 else {"num_heads": N}
    with pytest.raises(UnjudgedFusedCall):
        op(q, k, v, input_layout="BNSD", num_key_value_heads=N_KV, **heads, **extra)


# ---------------------------------------------------------------- the bound's reduction length


def test_the_reduction_length_is_the_longest_key_sequence_plus_the_head_dim():
    """Scores sum over D, weighted values over the keys: the bound grows with both, in every layout."""
    length = {name: op_record(name).accumulation.length for name in (
        "npu_prompt_flash_attention", "npu_incre_flash_attention", "npu_fused_infer_attention_score",
        "npu_fused_infer_attention_score_v2")}
    q, k = torch.zeros(2, 4, 3, 16), torch.zeros(2, 2, 40, 16)
    assert length["npu_prompt_flash_attention"]((q, k, k), {"input_layout": "BNSD", "num_heads": 4}) == 40 + 16
    assert length["npu_prompt_flash_attention"]((torch.zeros(2, 3, 64), torch.zeros(2, 40, 32), None),
                                                {"num_heads": 4}) == 40 + 16  # BSH: D = H / num_heads
    cache, table = torch.zeros(6, 8, 32), torch.zeros(2, 3, dtype=torch.int32)
    assert length["npu_incre_flash_attention"]((torch.zeros(2, 1, 64), cache, cache), {
        "num_heads": 4, "block_table": table, "actual_seq_lengths": [9, 20]}) == 20 + 16
    assert length["npu_fused_infer_attention_score"]((q, k, k), {
        "input_layout": "BNSD", "num_heads": 4, "key_shared_prefix": torch.zeros(1, 2, 5, 16),
        "query_rope": torch.zeros(2, 4, 3, 8)}) == 45 + 24
    assert length["npu_fused_infer_attention_score_v2"]((torch.zeros(7, 4, 16), torch.zeros(12, 2, 16), None), {
        "input_layout": "TND", "num_query_heads": 4, "actual_seq_kvlen": [5, 12]}) == 7 + 16


# ---------------------------------------------------------------- fair kernels pass, defects fail


def online_softmax_bnsd(query, key, value, *, scale, num_heads, num_key_value_heads, block=4, **_):
    """A flash kernel in float32 over blocks of keys, its probabilities rounded to the input dtype
    before P @ V, the output rounded once: what a fair NPU kernel does."""
    q, k, v = (t.float() for t in (query, key, value))
    group = num_heads // num_key_value_heads
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    row_max = torch.full(q.shape[:-1] + (1,), -math.inf)
    total, acc = torch.zeros(q.shape[:-1] + (1,)), torch.zeros(*q.shape[:-1], v.shape[-1])
    for start in range(0, k.shape[2], block):
        scores = q @ k[:, :, start:start + block].transpose(-1, -2) * scale
        new_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
        p = torch.exp(scores - new_max)
        correction = torch.exp(row_max - new_max)
        total = total * correction + p.sum(-1, keepdim=True)
        acc = acc * correction + p.to(query.dtype).float() @ v[:, :, start:start + block]
        row_max = new_max
    return (acc / total).to(query.dtype), (row_max + total.log())


def test_a_fair_online_softmax_kernel_passes():
    q, k, v = (t.bfloat16() for t in batch_inputs(16, sq=16, skv=64, d=64, dtype=torch.float32))
    call = dict(num_heads=N, num_key_value_heads=N_KV, scale=1 / 8, input_layout="BNSD", softmax_lse_flag=True)
    verdict = check_call(online_softmax_bnsd, q, k, v, reference=fia, **call)
    assert verdict.status is Status.PASS, verdict.message()


def _planted(reference):
    """Defects on attention_out of the reference's own half-precision result (float32, rounded once)."""
    def plant(change):
        def defect(*args, **kwargs):
            out = reference(*args, **kwargs)
            return (change(out[0]), *out[1:]) if isinstance(out, tuple) else change(out)
        return defect
    return {
        "1 % scale": plant(lambda o: (o.float() * 1.01).to(o.dtype)),
        "one element off": plant(lambda o: o.index_put((torch.tensor(0),) * o.dim(), o.reshape(-1)[0] + 0.25)),
    }


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_prompt_attention_fair_passes_and_defects_fail(dtype):
    q, k, v = (in_layout(t, "BSH").to(dtype) for t in batch_inputs(17, sq=16, skv=32, d=32, dtype=torch.float32))
    call = dict(atten_mask=COMPRESSED, actual_seq_lengths=[16, 12], actual_seq_lengths_kv=[32, 20], num_heads=N,
                scale_value=1 / math.sqrt(32), input_layout="BSH", num_key_value_heads=N_KV, sparse_mode=3)
    assert check_call(pfa, q, k, v, reference=pfa, **call).status is Status.PASS
    defects = _planted(pfa)
    defects.update({
        "BSH read as BNSD": lambda q, k, v, **kw: pfa(
            q.reshape(2, N, 16, 32), k.reshape(2, N_KV, 32, 32), v.reshape(2, N_KV, 32, 32),
            **{**kw, "input_layout": "BNSD"}).reshape(q.shape),
        "no causal mask": lambda q, k, v, **kw: pfa(q, k, v, **{**kw, "sparse_mode": 0, "atten_mask": None}),
        "left-up instead of right-down": lambda q, k, v, **kw: pfa(q, k, v, **{**kw, "sparse_mode": 2}),
        "last key dropped": lambda q, k, v, **kw: pfa(q, k, v, **{**kw, "actual_seq_lengths_kv": [31, 19]}),
    })
    for label, defect in defects.items():
        assert check_call(defect, q, k, v, reference=pfa, **call).status is Status.ERROR, label


def test_incremental_attention_fair_passes_and_defects_fail():
    q, k, v = (t.bfloat16() for t in batch_inputs(18, sq=1, skv=24, d=32, dtype=torch.float32))
    order = list(range(6))[::-1]  # 3 + 3 blocks of 8
    (kc, table), (vc, _) = paged(k, [24, 17], 8, order), paged(v, [24, 17], 8, order)
    call = dict(actual_seq_lengths=[24, 17], block_table=table, block_size=8, num_heads=N,
                scale_value=1 / math.sqrt(32), input_layout="BNSD", num_key_value_heads=N_KV)
    assert check_call(ifa, q, kc, vc, reference=ifa, **call).status is Status.PASS
    swapped = table.clone()  # batch 0 reads batch 1's first block and the reverse (a swap within one batch
    swapped[:, 0] = swapped.flip(0)[:, 0]  # moves keys with their values: unmasked attention cannot see it)
    ignored = torch.zeros(B, 24, dtype=torch.bool)
    ignored[:, 5] = True
    defects = _planted(ifa)
    defects.update({
        "blocks of another batch": lambda q, k, v, **kw: ifa(q, k, v, **{**kw, "block_table": swapped}),
        "one key ignored": lambda q, k, v, **kw: ifa(q, k, v, **{**kw, "atten_mask": ignored}),
        "last key dropped": lambda q, k, v, **kw: ifa(q, k, v, **{**kw, "actual_seq_lengths": [23, 16]}),
    })
    for label, defect in defects.items():
        assert check_call(defect, q, kc, vc, reference=ifa, **call).status is Status.ERROR, label


@pytest.mark.parametrize("reference, names", [
    (fia, dict(num_heads=N, scale=1 / math.sqrt(32), actual_seq_lengths_kv=[64, 40], softmax_lse_flag=True)),
    (fia_v2, dict(num_query_heads=N, softmax_scale=1 / math.sqrt(32), actual_seq_kvlen=[64, 40],
                  return_softmax_lse=True)),
], ids=["v1", "v2"])
def test_fused_attention_fair_passes_and_defects_fail(reference, names):
    q, k, v = (in_layout(t, "BSND").bfloat16()
               for t in batch_inputs(19, sq=8, skv=64, d=32, dtype=torch.float32))
    call = dict(atten_mask=COMPRESSED, input_layout="BSND", num_key_value_heads=N_KV, sparse_mode=3, **names)
    assert check_call(reference, q, k, v, reference=reference, **call).status is Status.PASS
    defects = _planted(reference)
    defects.update({
        "heads not grouped in order": lambda q, k, v, **kw: reference(q, k.flip(2), v.flip(2), **kw),
        "no causal mask": lambda q, k, v, **kw: reference(q, k, v, **{**kw, "sparse_mode": 0, "atten_mask": None}),
    })
    for label, defect in defects.items():
        assert check_call(defect, q, k, v, reference=reference, **call).status is Status.ERROR, label
