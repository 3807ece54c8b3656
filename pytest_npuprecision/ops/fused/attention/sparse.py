"""torch_npu's sparse flash attention (DeepSeek's sparse attention): each query token attends only the key
positions its row of sparse_indices names, as chosen upstream by the lightning indexer.

For query token i of a batch and key-value head n, the keys are K[sparse_indices[i, n, j]] for the valid
entries j (non-negative and inside the batch's keys; the invalid ones fill the back of the row), less, in
sparse_mode 3, those past the causal limit S_kv - S_q + i (the mask's lower-right corner). MLA's rope parts
add their own dot product: scores = scale * (q . k + q_rope . k_rope), softmax over the valid keys, times V.
Query heads share their key-value head in groups (num_heads / kv_heads). A row with no valid key is zero.
"""

from __future__ import annotations

import torch

from ..opmath import int_list, opmath_dtype
from ..record import FusedOp, UnjudgedFusedCall


def batch_rows(t: torch.Tensor | None, layout: str, lengths, batch: int):
    """t as one [S, N, D] tensor per batch: TND packed with cumulative lengths, or BSND with its first
    lengths[b] rows valid (all of them where lengths is None)."""
    if t is None:
        return [None] * batch
    if layout == "TND":
        ends = int_list(lengths)
        return [t[start:end] for start, end in zip([0, *ends[:-1]], ends)]
    rows = list(t.unbind(0))
    return rows if lengths is None else [r[:n] for r, n in zip(rows, int_list(lengths))]


def paged_rows(t: torch.Tensor | None, block_table: torch.Tensor, lengths: list[int]):
    """A paged cache [blocks, block_size, N, D] gathered into each batch's [S_kv, N, D]."""
    if t is None:
        return [None] * len(lengths)
    size = t.shape[1]
    return [t[block_table[b, :-(-length // size)].long()].reshape(-1, *t.shape[2:])[:length]
            for b, length in enumerate(lengths)]


def npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value, sparse_block_size, *,
                               block_table=None, actual_seq_lengths_query=None, actual_seq_lengths_kv=None,
                               query_rope=None, key_rope=None, layout_query='BSND', layout_kv='BSND',
                               sparse_mode=3):
    """torch_npu.npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value, sparse_block_size, *,
    block_table=None, actual_seq_lengths_query=None, actual_seq_lengths_kv=None, query_rope=None, key_rope=None,
    layout_query='BSND', layout_kv='BSND', sparse_mode=3) -> Tensor

    query [B, S_q, N, D] (BSND) or [T, N, D] (TND, cumulative actual_seq_lengths_query); key and value BSND,
    TND (cumulative actual_seq_lengths_kv) or PA_BSND ([blocks, block_size, N_kv, D] through block_table, with
    per-batch actual_seq_lengths_kv); sparse_indices [B, S_q, N_kv, K] (or [T, N_kv, K]). The output has the
    query's layout and value's head dim, in query's dtype; computed in float32 for half inputs."""
    if int(sparse_block_size) != 1:
        raise UnjudgedFusedCall(f"sparse_block_size {sparse_block_size} (indices naming blocks of keys) has no "
                                f"reference here")
    if int(sparse_mode) not in (0, 3):
        raise UnjudgedFusedCall(f"sparse_mode {sparse_mode} is not documented (0 or 3)")
    q_layout, kv_layout = str(layout_query), str(layout_kv)
    if q_layout not in ("BSND", "TND") or kv_layout not in ("BSND", "TND", "PA_BSND"):
        raise UnjudgedFusedCall(f"layouts {q_layout}/{kv_layout} are not documented")
    dtype = opmath_dtype(query.dtype)
    batch = len(int_list(actual_seq_lengths_query)) if q_layout == "TND" else query.shape[0]
    queries = batch_rows(query, q_layout, actual_seq_lengths_query, batch)
    query_ropes = batch_rows(query_rope, q_layout, actual_seq_lengths_query, batch)
    indices = batch_rows(sparse_indices, q_layout, actual_seq_lengths_query, batch)
    if kv_layout == "PA_BSND":
        lengths = int_list(actual_seq_lengths_kv)
        keys, values, key_ropes = (paged_rows(t, block_table, lengths) for t in (key, value, key_rope))
    else:
        keys, values, key_ropes = (batch_rows(t, kv_layout, actual_seq_lengths_kv, batch)
                                   for t in (key, value, key_rope))
    outs = [_attend_selected(*parts, float(scale_value), int(sparse_mode), dtype)
            for parts in zip(queries, keys, values, query_ropes, key_ropes, indices)]
    if q_layout == "TND":
        return torch.cat(outs).to(query.dtype)
    out = torch.zeros(*query.shape[:-1], value.shape[-1], dtype=dtype, device=query.device)
    for b, rows in enumerate(outs):
        out[b, :rows.shape[0]] = rows
    return out.to(query.dtype)


def _attend_selected(q, k, v, q_rope, k_rope, selected, scale: float, mode: int, dtype):
    """One batch: q [S_q, N, D], k and v [S_kv, N_kv, D], selected [S_q, N_kv, K] -> [S_q, N, D_v]."""
    q_len, heads = q.shape[:2]
    kv_len, kv_heads = k.shape[:2]
    group = heads // kv_heads
    picked = selected.long()
    valid = (picked >= 0) & (picked < kv_len)
    if mode == 3:  # the causal mask's lower-right corner: query i sees keys up to kv_len - q_len + i
        limit = kv_len - q_len + torch.arange(q_len, device=picked.device)
        valid &= picked <= limit[:, None, None]
    where = picked.clamp(0, max(kv_len - 1, 0))
    head = torch.arange(kv_heads, device=picked.device)[None, :, None]

    def gathered(t):  # [S_q, N_kv, K, D]: each query's selected rows of its key-value head
        return t.to(dtype)[where, head.expand_as(where)]

    qs = q.to(dtype).reshape(q_len, kv_heads, group, -1)  # query heads grouped by their key-value head
    scores = torch.einsum("skgd,skjd->skgj", qs, gathered(k))
    if q_rope is not None:
        scores = scores + torch.einsum("skgd,skjd->skgj", q_rope.to(dtype).reshape(q_len, kv_heads, group, -1),
                                       gathered(k_rope))
    scores = (scores * scale).masked_fill(~valid[:, :, None, :], float("-inf"))
    top = scores.amax(-1, keepdim=True)
    weights = torch.exp(scores - torch.where(torch.isfinite(top), top, 0))
    total = weights.sum(-1, keepdim=True)
    probabilities = weights / torch.where(total > 0, total, 1)
    return torch.einsum("skgj,skjd->skgd", probabilities, gathered(v)).reshape(q_len, heads, -1)


OPS = (
    FusedOp("npu_sparse_flash_attention", npu_sparse_flash_attention,
            "npu_sparse_flash_attention(query, key, value, sparse_indices, scale_value, sparse_block_size, *, "
            "block_table=None, actual_seq_lengths_query=None, actual_seq_lengths_kv=None, query_rope=None, "
            "key_rope=None, layout_query='BSND', layout_kv='BSND', sparse_mode=3)",
            "attention_out (query's layout and dtype, value's head dim)",
            "sparse_block_size other than 1 (indices naming blocks of keys)"),
)
