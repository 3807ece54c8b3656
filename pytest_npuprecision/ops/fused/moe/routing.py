"""MoE routing around the experts: init_routing copies each token once per expert it chose, sorted by
expert (stably: a copy keeps its flattened (token, k) order among its expert's); finalize_routing sums
each token's expert outputs back, weighted by its scales; compute_expert_tokens counts the rows each
expert ends at. Every routing output is a gather or a count: judged bit for bit."""

from __future__ import annotations

import torch

from ..opmath import int_list, opmath_dtype
from ..record import FusedOp, UnjudgedFusedCall

_LAST = torch.iinfo(torch.int64).max  # sorts an expert below the active range after every other


def npu_moe_init_routing(x, row_idx, expert_idx, active_num):
    """torch_npu.npu_moe_init_routing(x, row_idx, expert_idx, active_num)
    -> (expanded_x, expanded_row_idx, expanded_expert_idx)

    expert_idx [N, K] flattened and sorted stably: expanded_expert_idx (int32) the sorted experts,
    sorted_row_idx row_idx's values in that order; expanded_row_idx[sorted_row_idx[i]] = i (int32);
    expanded_x[i] = x[sorted_row_idx[i] % N], its first min(N, active_num) * K rows."""
    rows, top_k = expert_idx.shape[0], expert_idx.shape[-1]
    flat = expert_idx.reshape(-1).long()
    order = torch.argsort(flat, stable=True)
    sorted_row_idx = row_idx.reshape(-1).long()[order]
    expanded_row_idx = torch.empty_like(sorted_row_idx)
    expanded_row_idx[sorted_row_idx] = torch.arange(sorted_row_idx.numel(), device=flat.device)
    kept = min(rows, int(active_num)) * top_k
    expanded_x = x.index_select(0, sorted_row_idx[:kept] % rows)
    return expanded_x, expanded_row_idx.to(torch.int32), flat[order].to(torch.int32)


def npu_moe_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1, expert_capacity=-1, expert_num=-1,
                            drop_pad_mode=0, expert_tokens_num_type=0, expert_tokens_num_flag=False, quant_mode=-1,
                            active_expert_range=(), row_idx_type=0):
    """torch_npu.npu_moe_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1,
    expert_capacity=-1, expert_num=-1, drop_pad_mode=0, expert_tokens_num_type=0, expert_tokens_num_flag=False,
    quant_mode=-1, active_expert_range=[], row_idx_type=0)
    -> (expanded_x, expanded_row_idx, expert_tokens_count_or_cumsum, expanded_scale)

    The (token, k) copies whose expert lies in active_expert_range [start, end) (default [0, expert_num)),
    sorted stably by expert: there are `available` of them. expanded_x[i] = x[copy i's token], for the
    first min(active_num, available) copies (active_num <= 0: all); the output has N * K rows
    (min(active_num, N * K) for active_num > 0). expanded_row_idx (int32): row_idx_type 0, the row each
    (token, k) copy landed in, -1 for a copy outside the range; 1, the flattened (token, k) of each
    sorted copy. expert_tokens_count_or_cumsum (int64, empty without expert_tokens_num_flag): the copies
    per expert of the range (type 1), their running sum (0), or (expert, count) pairs of the experts
    that got any, ended by (0, 0) (2). expanded_scale (float32): scale[copy's token] where scale is
    given, else empty (undefined)."""
    if int(drop_pad_mode) != 0:
        raise UnjudgedFusedCall(f"drop_pad_mode={drop_pad_mode} (torch_npu supports only 0, dropless)")
    if int(quant_mode) != -1:
        raise UnjudgedFusedCall(f"quant_mode={quant_mode}: an int8 expanded_x is judged by the quantized standard, "
                                f"this op's outputs bit for bit (quantize it with npu_dynamic_quant to judge that)")
    rows, top_k = expert_idx.shape
    flat = expert_idx.reshape(-1).long()
    start, end = _expert_range(active_expert_range, expert_num, flat)
    in_range = (flat >= start) & (flat < end)
    available = int(in_range.sum())
    order = torch.argsort(torch.where(flat < start, _LAST, flat), stable=True)
    out_rows = rows * top_k if int(active_num) <= 0 else min(int(active_num), rows * top_k)
    filled = min(out_rows, available)
    if available < rows * top_k and (filled < out_rows or int(row_idx_type) == 1):
        raise UnjudgedFusedCall(f"{rows * top_k - available} copies route outside active_expert_range [{start}, {end}): "
                                f"the output rows past the {available} routed are undefined")
    copies = order[:filled]
    expanded_x = x.index_select(0, copies // top_k)
    if int(row_idx_type) == 1:
        expanded_row_idx = order
    else:
        expanded_row_idx = torch.full_like(flat, -1)
        expanded_row_idx[order[:available]] = torch.arange(available, device=flat.device)
    counts = _expert_tokens(flat[in_range], start, end, expert_num, expert_tokens_num_type, expert_tokens_num_flag)
    expanded_scale = x.new_empty(0, dtype=torch.float32) if scale is None else scale.index_select(0, copies // top_k)
    return expanded_x, expanded_row_idx.to(torch.int32), counts, expanded_scale


def _expert_range(active_expert_range, expert_num, flat: torch.Tensor) -> tuple[int, int]:
    span = int_list(active_expert_range) or []
    if len(span) == 2:
        return span[0], span[1]
    if int(expert_num) > 0:
        return 0, int(expert_num)
    return 0, int(flat.max()) + 1 if flat.numel() else 0


def _expert_tokens(routed: torch.Tensor, start: int, end: int, expert_num, num_type, flag) -> torch.Tensor:
    """expert_tokens_count_or_cumsum for the routed copies' experts (each in [start, end))."""
    if not flag:
        return routed.new_empty(0)
    counts = torch.bincount(routed - start, minlength=end - start)
    if int(num_type) == 1:
        return counts
    if int(num_type) == 0:
        return counts.cumsum(0)
    if int(num_type) != 2:
        raise UnjudgedFusedCall(f"expert_tokens_num_type={num_type} (documented: 0 cumsum, 1 count, 2 key_value)")
    experts = torch.nonzero(counts).reshape(-1)
    if experts.numel() + 1 < int(expert_num):
        raise UnjudgedFusedCall(f"key_value counts for {experts.numel()} of {expert_num} experts: the rows after "
                                f"the (0, 0) that ends them are undefined")
    pairs = torch.stack([experts + start, counts[experts]], -1)
    end_pair = pairs.new_zeros(int(expert_num) - experts.numel(), 2)
    return torch.cat([pairs, end_pair])


def npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row,
                             export_for_source_row, drop_pad_mode=0, k=1):
    """torch_npu.npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales,
    expanded_src_to_dst_row, export_for_source_row, drop_pad_mode=0, k=1) -> Tensor

    out[i] = skip1[i] + skip2[i] + sum over k < K of scales[i, k] * (expanded_permuted_rows[
    expanded_src_to_dst_row[i + k * N]] + bias[export_for_source_row[i, k]]): the K copies k-major, as
    npu_moe_init_routing numbers them; absent terms add nothing, absent scales weigh 1 (K = k).
    Computed in float32 for half types, rounded once to the rows' dtype."""
    if drop_pad_mode is not None and int(drop_pad_mode) != 0:
        raise UnjudgedFusedCall(f"drop_pad_mode={drop_pad_mode} (torch_npu supports only 0)")
    dtype = opmath_dtype(expanded_permuted_rows.dtype)
    top_k = scales.shape[-1] if scales is not None else int(k)
    slots = expanded_src_to_dst_row.reshape(top_k, -1).long()  # [k, N]: copy i + k * N
    terms = expanded_permuted_rows.to(dtype)[slots]
    if bias is not None:
        terms = terms + bias.to(dtype)[export_for_source_row.long().t()]
    if scales is not None:
        terms = terms * scales.to(dtype).t().unsqueeze(-1)
    out = terms.sum(0)
    for skip in (skip1, skip2):
        if skip is not None:
            out = out + skip.to(dtype)
    return out.to(expanded_permuted_rows.dtype)


def npu_moe_compute_expert_tokens(sorted_expert_for_source_row, num_expert):
    """torch_npu.npu_moe_compute_expert_tokens(sorted_expert_for_source_row, num_expert) -> Tensor

    For each expert i < num_expert, the position just past its last row in the sorted experts: the
    count of rows whose expert is at most i (a running sum of the tokens per expert), in the input's
    dtype."""
    experts = torch.arange(int(num_expert), device=sorted_expert_for_source_row.device)
    ends = (sorted_expert_for_source_row.reshape(1, -1).long() <= experts[:, None]).sum(-1)
    return ends.to(sorted_expert_for_source_row.dtype)


def npu_moe_token_permute_with_routing_map(tokens, routing_map, *, probs=None, num_out_tokens=None,
                                           drop_and_pad=False):
    """torch_npu.npu_moe_token_permute_with_routing_map(tokens, routing_map, *, probs=None, num_out_tokens=None,
    drop_and_pad=False) -> (permuted_tokens, permuted_probs, sorted_indices)

    routing_map [T, E] marks topK = num_out_tokens // T experts per token (default 1). Copy i is token
    i // topK's (i % topK)-th marked expert, in expert order; the copies sorted stably by expert:
    permuted_tokens[sorted_indices[i]] = tokens[i // topK], permuted_probs the marked probs in that
    order (empty without probs), sorted_indices int32."""
    if drop_and_pad:
        raise UnjudgedFusedCall("drop_and_pad=True (capacity padding) has no reference here")
    count = tokens.shape[0]
    top_k = (count if num_out_tokens is None else int(num_out_tokens)) // max(count, 1)
    marked = routing_map.bool()
    if count and not bool((marked.sum(-1) == top_k).all()):
        raise UnjudgedFusedCall(f"rows of routing_map that do not mark topK = {top_k} experts each")
    experts = torch.nonzero(marked)[:, 1]  # row-major: token by token, experts ascending
    first = torch.argsort(experts, stable=True)
    sorted_indices = torch.argsort(first, stable=True)
    permuted_tokens = tokens.index_select(0, first // max(top_k, 1))
    permuted_probs = tokens.new_empty(0) if probs is None else probs[marked][first]
    return permuted_tokens, permuted_probs, sorted_indices.to(torch.int32)


OPS = (
    FusedOp("npu_moe_init_routing", npu_moe_init_routing, "npu_moe_init_routing(x, row_idx, expert_idx, active_num)",
            "expanded_x, expanded_row_idx (int32), expanded_expert_idx (int32)"),
    FusedOp("npu_moe_init_routing_v2", npu_moe_init_routing_v2,
            "npu_moe_init_routing_v2(x, expert_idx, *, scale=None, offset=None, active_num=-1, expert_capacity=-1, "
            "expert_num=-1, drop_pad_mode=0, expert_tokens_num_type=0, expert_tokens_num_flag=False, quant_mode=-1, "
            "active_expert_range=[], row_idx_type=0)",
            "expanded_x, expanded_row_idx (int32), expert_tokens_count_or_cumsum (int64; empty without the flag), "
            "expanded_scale (float32; empty without scale)",
            "drop_pad_mode=1; quant_mode 0 and 1 (int8 outputs); copies outside active_expert_range that leave "
            "output rows undefined; key_value counts that leave rows past their (0, 0) undefined"),
    FusedOp("npu_moe_finalize_routing", npu_moe_finalize_routing,
            "npu_moe_finalize_routing(expanded_permuted_rows, skip1, skip2, bias, scales, expanded_src_to_dst_row, "
            "export_for_source_row, drop_pad_mode=0, k=1)", "out", "drop_pad_mode other than 0"),
    FusedOp("npu_moe_compute_expert_tokens", npu_moe_compute_expert_tokens,
            "npu_moe_compute_expert_tokens(sorted_expert_for_source_row, num_expert)", "expert_tokens"),
    FusedOp("npu_moe_token_permute_with_routing_map", npu_moe_token_permute_with_routing_map,
            "npu_moe_token_permute_with_routing_map(tokens, routing_map, *, probs=None, num_out_tokens=None, "
            "drop_and_pad=False)", "permuted_tokens, permuted_probs (empty without probs), sorted_indices (int32)",
            "drop_and_pad=True; rows marking other than topK experts"),
)
