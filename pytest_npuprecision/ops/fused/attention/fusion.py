"""npu_fusion_attention and its gradient: softmax(mask(scale * (pse + Q K^T))) V, tiled over queries.

A float64 golden of a 32k-token sequence would need B*N*S*S*8 bytes for the score matrix alone, so
the reference never builds it: query rows go in blocks whose score matrix holds at most
SCORE_BLOCK_ELEMENTS elements. Under autograd each block is checkpointed, so backward recomputes one
block at a time instead of keeping every block's probabilities alive.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch.utils.checkpoint import checkpoint

from .layout import check_layout, from_bnsd, query_head_dim, segments, to_bnsd
from .mask import Sparsity, as_4d_mask, check_mode
from ..opmath import int_list, opmath_dtype, statistic_dtype, widened
from ..record import FusedOp, RandomFusedCall, UnjudgedFusedCall

SCORE_BLOCK_ELEMENTS = 1 << 22  # 32 MiB of float64 scores per block
_STAT_COPIES = 8  # softmax_max and softmax_sum repeat each row's value 8 times, as the kernel stores them
_NO_TOKEN_LIMIT = 2147483647


def query_block_rows(batch_heads: int, kv_len: int, limit: int | None = None) -> int:
    """How many query rows keep one block's scores [batch_heads, rows, kv_len] within the limit."""
    limit = SCORE_BLOCK_ELEMENTS if limit is None else limit
    return max(1, limit // max(batch_heads * kv_len, 1))


def _grouped(t: torch.Tensor | None, kv_heads: int) -> torch.Tensor | None:
    """[B, N1 or 1, ...] -> [B, N2, G or 1, ...]: query head n uses key head n // G."""
    if t is None:
        return None
    if t.shape[1] == 1:
        return t.unsqueeze(2)
    return t.reshape(t.shape[0], kv_heads, t.shape[1] // kv_heads, *t.shape[2:])


def _block(q, k, v, pse, masked, scale: float, sink):
    """One block of query rows: (output, row max, row sum of exp(score - max))."""
    scores = q @ k.transpose(-1, -2)
    if pse is not None:
        scores = scores + pse
    scores = scores * scale
    if masked is not None:
        scores = scores.masked_fill(masked, -math.inf)
    if sink is not None:  # one more logit per head that takes part in the sum, not in the output
        scores = torch.cat([scores, sink.expand(*scores.shape[:-1], 1)], dim=-1)
    row_max = scores.detach().amax(-1, keepdim=True)
    shift = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max))
    weights = torch.exp(scores - shift)
    total = weights.sum(-1, keepdim=True)
    # a fully masked row has no weights: its output is 0, not 0/0
    probabilities = weights / torch.where(total > 0, total, torch.ones_like(total))
    if sink is not None:
        probabilities = probabilities[..., :-1]
    return probabilities @ v, row_max, total.detach()


def _attend(q, k, v, pse, sparsity: Sparsity | None, scale: float, sink):
    """q [B, N1, Sq, D], k/v [B, N2, Skv, D|Dv] in opmath -> out [B, N1, Sq, Dv], max and sum [B, N1, Sq, 1]."""
    batch, heads, q_len, _ = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    if heads % kv_heads:
        raise ValueError(f"query heads {heads} are not a multiple of key/value heads {kv_heads}")
    qg, kg, vg = _grouped(q, kv_heads), k.unsqueeze(2), v.unsqueeze(2)
    sink_g = None if sink is None else _grouped(sink.reshape(1, heads, 1, 1), kv_heads)
    rows = query_block_rows(batch * heads, kv_len)
    tracked = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad for t in (q, k, v, pse, sink))
    outs, maxes, sums = [], [], []
    for start in range(0, q_len, rows):
        stop = min(start + rows, q_len)
        pse_rows = None if pse is None else pse[..., start:stop, :] if pse.shape[-2] > 1 else pse
        masked = None if sparsity is None else sparsity.masked(start, stop, q_len, kv_len)
        args = (qg[..., start:stop, :], kg, vg, _grouped(pse_rows, kv_heads), _grouped(masked, kv_heads),
                scale, sink_g)
        out, row_max, total = checkpoint(_block, *args, use_reentrant=False) if tracked else _block(*args)
        outs.append(out)
        maxes.append(row_max)
        sums.append(total)

    def merged(parts, width):
        return torch.cat(parts, dim=-2).reshape(batch, heads, q_len, width)
    return merged(outs, v.shape[-1]), merged(maxes, 1), merged(sums, 1)


def _stats(t: torch.Tensor) -> torch.Tensor:
    return t.to(statistic_dtype(t.dtype)).expand(*t.shape[:-1], _STAT_COPIES).contiguous()


def _tnd(q, k, v, sparsity: Sparsity, scale, sink, actual_seq_qlen, actual_seq_kvlen):
    """Each sequence on its own: q [N1, T, D] -> out [N1, T, Dv], max and sum [N1, T, 1]."""
    q_bounds = segments(int_list(actual_seq_qlen), q.shape[1], "actual_seq_qlen")
    kv_bounds = segments(int_list(actual_seq_kvlen), k.shape[1], "actual_seq_kvlen")
    if len(q_bounds) != len(kv_bounds):
        raise ValueError(f"actual_seq_qlen has {len(q_bounds)} sequences, actual_seq_kvlen {len(kv_bounds)}")
    outs, maxes, sums = [], [], []
    for (q0, q1), (k0, k1) in zip(q_bounds, kv_bounds):
        if q1 == q0:
            continue
        mask = sparsity.atten_mask
        seq = replace(sparsity, atten_mask=None if mask is None else mask[..., :q1 - q0, :k1 - k0])
        out, row_max, total = _attend(q[None, :, q0:q1], k[None, :, k0:k1], v[None, :, k0:k1], None, seq,
                                      scale, sink)
        outs.append(out[0])
        maxes.append(row_max[0])
        sums.append(total[0])
    covered = q_bounds[-1][1] if q_bounds else 0
    rest = q.shape[1] - covered  # rows after the last sequence take part in nothing: zeros
    outs.append(q.new_zeros(q.shape[0], rest, v.shape[-1]))
    maxes.append(q.new_zeros(q.shape[0], rest, 1))
    sums.append(q.new_zeros(q.shape[0], rest, 1))
    return torch.cat(outs, dim=1), torch.cat(maxes, dim=1), torch.cat(sums, dim=1)


def npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None,
                         atten_mask=None, scale=1., keep_prob=1., pre_tockens=2147483647,
                         next_tockens=2147483647, inner_precise=0, prefix=None, actual_seq_qlen=None,
                         actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False,
                         softmax_layout="", sink=None, dropout_mask=None, seed=0, offset=0):
    """torch_npu.npu_fusion_attention(query, key, value, head_num, input_layout, pse=None,
    padding_mask=None, atten_mask=None, scale=1., keep_prob=1., pre_tockens=2147483647,
    next_tockens=2147483647, inner_precise=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
    sparse_mode=0, gen_mask_parallel=True, sync=False, softmax_layout="", sink=None, dropout_mask=None,
    seed=0, offset=0) -> (attention_out, softmax_max, softmax_sum, softmax_out, seed, offset, numels)

    attention_out = softmax(mask(scale * (pse + Q K^T))) V in the query's layout and dtype. The docs'
    formula adds pse before scaling; their pse example adds it after (scale * QK^T + pse): this
    follows the formula. scale defaults to 1 as in torch_npu (not 1/sqrt(D)).
    softmax_max and softmax_sum are float32 (float64 in a float64 golden) [B, N1, Sq, 8] ([T, N1, 8] for TND, the shape torch_npu's
    meta function gives whatever softmax_layout says): the row max of the scaled, masked scores and
    the sum of exp(score - max), each repeated 8 times. A fully masked row gives a zero output, max
    -inf and sum 0 (the docs leave it open). softmax_out is empty; seed and offset echo the
    arguments and numels is 0, because no dropout mask is drawn at keep_prob=1.
    """
    if float(keep_prob) < 1:
        raise RandomFusedCall(f"npu_fusion_attention with keep_prob={keep_prob} applies a random dropout "
                              "mask that no golden can reproduce")
    if padding_mask is not None:
        raise NotImplementedError("padding_mask is not supported by torch_npu either")
    layout = check_layout(input_layout)
    head_num = int(head_num)
    dtype = opmath_dtype(query.dtype)
    head_dim = query_head_dim(query, layout, head_num)
    q, k, v = (to_bnsd(t.to(dtype), layout, head_dim) for t in (query, key, value))
    if layout in ("BSH", "SBH"):  # value's D may be smaller than query's: H_v / N2
        v = to_bnsd(value.to(dtype), layout, value.shape[-1] // k.shape[1])
    mode = check_mode(int(sparse_mode))
    sink = widened(sink, dtype)
    mask = as_4d_mask(atten_mask)
    if layout == "TND":
        if pse is not None:
            raise NotImplementedError("pse with input_layout 'TND' (alibi compression only) is not supported")
        if mode in (5, 6):
            raise NotImplementedError(f"sparse_mode {mode} (prefix) with input_layout 'TND' is not supported")
        sparsity = Sparsity(mode, int(pre_tockens), int(next_tockens), mask, None)
        out, row_max, total = _tnd(q, k, v, sparsity, float(scale), sink, actual_seq_qlen, actual_seq_kvlen)
        stats = (_stats(row_max.transpose(0, 1)), _stats(total.transpose(0, 1)))
    else:
        prefix_t = None
        if mode == 6:
            if prefix is None:
                raise ValueError("sparse_mode 6 (compressed prefix) needs prefix")
            prefix_t = torch.tensor(int_list(prefix), device=q.device).reshape(-1, 1, 1, 1)
        if pse is not None and pse.shape[-2] not in (1, q.shape[2]):
            raise NotImplementedError(f"pse shape {tuple(pse.shape)} (alibi compression) is not supported")
        sparsity = Sparsity(mode, int(pre_tockens), int(next_tockens), mask, prefix_t)
        out, row_max, total = _attend(q, k, v, widened(pse, dtype), sparsity, float(scale), sink)
        stats = (_stats(row_max), _stats(total))
    softmax_out = query.new_empty(0)
    return (from_bnsd(out, layout).to(query.dtype), *stats, softmax_out, int(seed), int(offset), 0)


def npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, padding_mask=None,
                              atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
                              attention_in=None, scale_value=1.0, keep_prob=1.0, pre_tockens=2147483647,
                              next_tockens=2147483647, inner_precise=0, seed=0, offset=0, numels=0, prefix=None,
                              actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True,
                              sync=False, softmax_layout="", sink=None):
    """torch_npu.npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None,
    padding_mask=None, atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None,
    attention_in=None, scale_value=1.0, keep_prob=1.0, pre_tockens=2147483647, next_tockens=2147483647,
    inner_precise=0, seed=0, offset=0, numels=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
    sparse_mode=0, gen_mask_parallel=True, sync=False, softmax_layout="", sink=None)
    -> (dq, dk, dv, dpse) and dsink when sink is given

    Autograd of the forward reference, recomputed block by block. The device's softmax_max,
    softmax_sum, softmax_in and attention_in are not read: a golden recomputes them from Q, K, V
    rather than trust the statistics under test. dpse is None without pse.
    """
    inputs = {"query": query, "key": key, "value": value, "pse": pse, "sink": sink}
    leaves = {name: t.detach().requires_grad_() for name, t in inputs.items()
              if t is not None and t.is_floating_point()}
    with torch.enable_grad():
        out = npu_fusion_attention(
            leaves["query"], leaves["key"], leaves["value"], head_num, input_layout, pse=leaves.get("pse"),
            padding_mask=padding_mask, atten_mask=atten_mask, scale=scale_value, keep_prob=keep_prob,
            pre_tockens=pre_tockens, next_tockens=next_tockens, inner_precise=inner_precise, prefix=prefix,
            actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen, sparse_mode=sparse_mode,
            sink=leaves.get("sink"))[0]
        grads = torch.autograd.grad(out, list(leaves.values()), dy.to(out.dtype), allow_unused=True)
    by_name = dict(zip(leaves, grads))
    result = tuple(by_name.get(name) for name in ("query", "key", "value", "pse"))
    if sink is not None:
        result += (by_name["sink"],)
    return result


def mindspeed_fusion_attention(query, key, value, head_num, input_layout, *, pse=None, padding_mask=None,
                               atten_mask=None, scale=1., keep_prob=1., pre_tokens=2147483647,
                               next_tokens=2147483647, inner_precise=0, prefix=None, actual_seq_qlen=None,
                               actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False, pse_type=1,
                               q_start_idx=None, kv_start_idx=None):
    """MindSpeed's fusion_attention_v2.npu_fusion_attention(query, key, value, head_num, input_layout, *,
    pse=None, padding_mask=None, atten_mask=None, scale=1., keep_prob=1., pre_tokens=2147483647,
    next_tokens=2147483647, inner_precise=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None,
    sparse_mode=0, gen_mask_parallel=True, sync=False, pse_type=1, q_start_idx=None, kv_start_idx=None)

    torch_npu's npu_fusion_attention with the tokens spelled as words and pse_type: 1 adds pse before the
    scale (scale * (pse + Q K^T)), 0 after it (scale * Q K^T + pse); 2 and 3 build an alibi pse inside
    the kernel from q_start_idx and kv_start_idx, which this reference does not."""
    if int(pse_type) not in (0, 1) or q_start_idx is not None or kv_start_idx is not None:
        raise UnjudgedFusedCall(f"pse_type {pse_type} (an alibi built in the kernel from q_start_idx and "
                                f"kv_start_idx) has no reference here")
    if pse is not None and int(pse_type) == 0:  # scale * QK^T + pse = scale * (QK^T + pse / scale)
        pse = pse / float(scale)
    return npu_fusion_attention(query, key, value, head_num, input_layout, pse=pse, padding_mask=padding_mask,
                                atten_mask=atten_mask, scale=scale, keep_prob=keep_prob, pre_tockens=pre_tokens,
                                next_tockens=next_tokens, inner_precise=inner_precise, prefix=prefix,
                                actual_seq_qlen=actual_seq_qlen, actual_seq_kvlen=actual_seq_kvlen,
                                sparse_mode=sparse_mode, gen_mask_parallel=gen_mask_parallel, sync=sync)


MINDSPEED_FUSION_ATTENTION = FusedOp(
    "npu_fusion_attention", mindspeed_fusion_attention,
    "fusion_attention_v2.npu_fusion_attention(query, key, value, head_num, input_layout, *, pse=None, "
    "padding_mask=None, atten_mask=None, scale=1., keep_prob=1., pre_tokens=2147483647, next_tokens=2147483647, "
    "inner_precise=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, "
    "gen_mask_parallel=True, sync=False, pse_type=1, q_start_idx=None, kv_start_idx=None)",
    "as npu_fusion_attention", "pse_type 2 and 3 (an alibi built in the kernel); as npu_fusion_attention")


OPS = (
    FusedOp("npu_fusion_attention", npu_fusion_attention,
            "npu_fusion_attention(query, key, value, head_num, input_layout, pse=None, padding_mask=None, "
            "atten_mask=None, scale=1., keep_prob=1., pre_tockens=2147483647, next_tockens=2147483647, "
            "inner_precise=0, prefix=None, actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, "
            "gen_mask_parallel=True, sync=False, softmax_layout=\"\", sink=None, dropout_mask=None, seed=0, "
            "offset=0)",
            "attention_out, softmax_max [B,N,S,8] float32, softmax_sum [B,N,S,8] float32, softmax_out (empty), "
            "seed, offset, numels",
            "keep_prob < 1 (random dropout: RandomFusedCall); padding_mask (torch_npu rejects it too); "
            "sparse_mode 7 and 8; pse with TND or alibi-compressed pse; prefix modes with TND"),
    FusedOp("npu_fusion_attention_grad", npu_fusion_attention_grad,
            "npu_fusion_attention_grad(query, key, value, dy, head_num, input_layout, *, pse=None, "
            "padding_mask=None, atten_mask=None, softmax_max=None, softmax_sum=None, softmax_in=None, "
            "attention_in=None, scale_value=1.0, keep_prob=1.0, pre_tockens=2147483647, "
            "next_tockens=2147483647, inner_precise=0, seed=0, offset=0, numels=0, prefix=None, "
            "actual_seq_qlen=None, actual_seq_kvlen=None, sparse_mode=0, gen_mask_parallel=True, sync=False, "
            "softmax_layout=\"\", sink=None)",
            "dq, dk, dv, dpse (None without pse), and dsink with sink",
            "as npu_fusion_attention; the device's softmax_max/softmax_sum/attention_in are recomputed, not read"),
)
