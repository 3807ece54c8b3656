"""torch_npu's lightning indexer (DeepSeek V3.2's sparse attention): for each query token, the key positions
its sparse attention (npu_sparse_flash_attention) will attend.

For query token t and key s of a batch, with index heads j of the key head's group (N1 / N2 query heads per
key head), the index score is I[t, s] = sum_j weights[t, j] * ReLU(q[t, j] . k[s]): the ReLU before the
weights, no scale. Each row keeps the sparse_count best keys among those it may see: the batch's
actual_seq_lengths_key keys, less, in sparse_mode 3, those past the mask's lower-right corner,
s <= S_k - S_q + t with the batch's actual lengths. The row lists them best first (a stable sort: an exact
tie goes to the lower position) and pads with -1 where fewer keys are visible; query rows past the batch's
actual length are all -1. This follows the formula of CANN's aclnnLightningIndexer docs and the CPU golden
of its tests (ops-transformer attention/lightning_indexer), which scores in float32 and, before comparing,
sorts both the kernel's and its own index rows: the op promises a set, not an order, so the tie rule
(replay/tie_alignment.py) compares rows as sets, and a kernel's pick between keys whose scores lie within
its rounding passes.
"""

from __future__ import annotations

import torch

from ..opmath import int_list, opmath_dtype
from ..record import FusedOp, TopKSelection, UnjudgedFusedCall
from .sparse import batch_rows, paged_rows


def npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None, actual_seq_lengths_key=None,
                          block_table=None, layout_query='BSND', layout_key='BSND', sparse_count=2048,
                          sparse_mode=3):
    """torch_npu.npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None,
    actual_seq_lengths_key=None, block_table=None, layout_query='BSND', layout_key='BSND', sparse_count=2048,
    sparse_mode=3) -> Tensor

    query [B, S1, N1, D] (BSND) or [T, N1, D] (TND, cumulative actual_seq_lengths_query); key BSND, TND
    (cumulative actual_seq_lengths_key) or PA_BSND ([blocks, block_size, N2, D] through block_table, with
    per-batch actual_seq_lengths_key); weights [B, S1, N1] or [T, N1]. The output is int32, [B, S1, N2,
    sparse_count] or [T, N2, sparse_count]; scores computed in float32 for half inputs."""
    score = _layout_scores(query, key, weights, actual_seq_lengths_query, actual_seq_lengths_key, block_table,
                           layout_query, layout_key, sparse_mode, opmath_dtype(query.dtype))[0]
    count = int(sparse_count)
    ranked = torch.sort(score, dim=-1, descending=True, stable=True)
    kept = ranked.values[..., :count] > float("-inf")
    picked = torch.where(kept, ranked.indices[..., :count], -1)
    return torch.nn.functional.pad(picked, (0, count - picked.shape[-1]), value=-1).to(torch.int32)


def _layout_scores(query, key, weights, lengths_q, lengths_k, block_table, layout_query, layout_key, sparse_mode,
                   dtype):
    """(score, magnitude) of every key for every query row, in the output's layout with the widest batch's
    keys as the last dim: -inf (and 0) where a key is not visible or the row is padding."""
    q_layout, k_layout, mode = str(layout_query), str(layout_key), int(sparse_mode)
    if mode not in (0, 3):
        raise UnjudgedFusedCall(f"sparse_mode {sparse_mode} is not documented (0 or 3)")
    if q_layout not in ("BSND", "TND") or k_layout not in ("BSND", "TND", "PA_BSND"):
        raise UnjudgedFusedCall(f"layouts {q_layout}/{k_layout} are not documented")
    batch = len(int_list(lengths_q)) if q_layout == "TND" else query.shape[0]
    queries, row_weights = (batch_rows(t, q_layout, lengths_q, batch) for t in (query, weights))
    if k_layout == "PA_BSND":
        keys = paged_rows(key, block_table, int_list(lengths_k))
    else:
        keys = batch_rows(key, k_layout, lengths_k, batch)
    width = max([1] + [k.shape[0] for k in keys])
    parts = [_batch_scores(q, k, w, mode, dtype, width) for q, k, w in zip(queries, keys, row_weights)]
    rows = query.shape[0] if q_layout == "TND" else query.shape[1]
    shape = (rows, key.shape[-2], width) if q_layout == "TND" else (batch, rows, key.shape[-2], width)
    score = torch.full(shape, float("-inf"), dtype=dtype, device=query.device)
    magnitude = torch.zeros(shape, dtype=dtype, device=query.device)
    start = 0
    for b, (batch_score, batch_magnitude) in enumerate(parts):
        n = batch_score.shape[0]
        at = (slice(start, start + n),) if q_layout == "TND" else (b, slice(0, n))
        score[at], magnitude[at] = batch_score, batch_magnitude
        start += n
    return score, magnitude


def _batch_scores(q, k, w, mode: int, dtype, width: int):
    """One batch: q [S_q, N1, D], k [S_k, N2, D], w [S_q, N1] -> (score, magnitude) [S_q, N2, width]. The
    magnitude sum_j |w_j| |q_j . k| sizes a kernel's rounding of the score (_score_dtype, tie_alignment)."""
    q_len, heads = q.shape[:2]
    k_len, k_heads = k.shape[:2]
    qs = q.to(dtype).reshape(q_len, k_heads, heads // k_heads, -1)  # query heads grouped by their key head
    ws = w.to(dtype).reshape(q_len, k_heads, heads // k_heads)
    dots = torch.einsum("sngd,tnd->sngt", qs, k.to(dtype))
    score = torch.einsum("sng,sngt->snt", ws, torch.relu(dots))
    magnitude = torch.einsum("sng,sngt->snt", ws.abs(), dots.abs())
    if mode == 3:  # the causal mask's lower-right corner: query t sees keys up to S_k - S_q + t
        limit = k_len - q_len + torch.arange(q_len, device=q.device)
        hidden = torch.arange(k_len, device=q.device)[None, :] > limit[:, None]
        score = score.masked_fill(hidden[:, None, :], float("-inf"))
    pad = (0, width - k_len)
    return (torch.nn.functional.pad(score, pad, value=float("-inf")),
            torch.nn.functional.pad(magnitude, pad, value=0.0))


def _indexer_scores(query, key, weights, *, actual_seq_lengths_query=None, actual_seq_lengths_key=None,
                    block_table=None, layout_query='BSND', layout_key='BSND', sparse_count=2048, sparse_mode=3):
    """(score, magnitude) of every key as the reference ranks them, for the tie rule."""
    return _layout_scores(query, key, weights, actual_seq_lengths_query, actual_seq_lengths_key, block_table,
                          layout_query, layout_key, sparse_mode, opmath_dtype(query.dtype))


def _score_dtype(query, *args, **kwargs) -> torch.dtype:
    """The dtype whose rounding sizes a tie: the query's. A fair kernel accumulates each q_j . k in float32
    but may hold the dot products, the weighted terms or the scores in the inputs' dtype (bfloat16, as
    the Triton port of CANN's golden does), so the conservative unit is that dtype's. Each such rounding
    errs by at most one unit of sum_j |w_j| |q_j . k| (the magnitude _batch_scores gives): a dot product
    by a unit of |q_j . k|, a weighted term of |w_j q_j . k|, the score of |score|, which the magnitude
    bounds. The float32 accumulation over D (128) errs by at most D * 2^-24 of sum_d |q_jd k_d|, some
    1e-5 of it, far below a half-precision unit unless the dot product cancels almost entirely. Two
    candidates each off by two units differ by four: TIE_UNITS."""
    return query.dtype


OPS = (
    FusedOp("npu_lightning_indexer", npu_lightning_indexer,
            "npu_lightning_indexer(query, key, weights, *, actual_seq_lengths_query=None, "
            "actual_seq_lengths_key=None, block_table=None, layout_query='BSND', layout_key='BSND', "
            "sparse_count=2048, sparse_mode=3)",
            "sparse_indices (int32; -1 where fewer keys are visible; a set, best first)",
            "sparse_mode other than 0 and 3",
            selection=TopKSelection(values=None, indices=0, scores=_indexer_scores, score_dtype=_score_dtype,
                                    ordered=False)),
)
