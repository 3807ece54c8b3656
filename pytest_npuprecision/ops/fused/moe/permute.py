"""MoE token routing: permute gathers each token once per expert it chose, sorted by expert; unpermute
gathers them back and sums each token's copies weighted by its routing probabilities."""

from __future__ import annotations

import torch

from ..opmath import opmath_dtype
from ..record import FusedOp, UnjudgedFusedCall


def npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False):
    """torch_npu.npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False)
    -> (permuted_tokens, sorted_indices)

    tokens [T, H]; indices [T, topK] (or [T]: topK 1) the experts each token chose. The flattened
    indices sorted by expert, stably (copies of one expert keep their token order): first =
    argsort(flatten(indices)); sorted_indices = argsort(first) (int32), where each (token, k) copy
    lands; permuted_tokens[sorted_indices[i]] = tokens[i // topK], its first num_out_tokens rows
    (the rest dropped by a capacity factor) when that is given and positive."""
    if padded_mode:
        raise UnjudgedFusedCall("padded_mode=True (torch_npu does not support it either)")
    top_k = 1 if indices.dim() == 1 else indices.shape[-1]
    flat = indices.reshape(-1)
    first = torch.argsort(flat, stable=True)
    sorted_indices = torch.argsort(first, stable=True)
    rows = first // top_k  # the token each sorted slot copies
    permuted = tokens.index_select(0, rows)
    if num_out_tokens is not None and int(num_out_tokens) > 0:
        permuted = permuted[:int(num_out_tokens)]
    return permuted, sorted_indices.to(torch.int32)


def npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False, restore_shape=None):
    """torch_npu.npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False,
    restore_shape=None) -> Tensor

    out[i] = sum over k < topK of permuted_tokens[sorted_indices[i * topK + k]] * probs[i, k] (probs
    None: weight 1, topK 1); a copy whose slot lies past the permuted rows (dropped by a capacity
    factor) adds nothing. Computed in float32 for half types, rounded once to permuted_tokens' dtype."""
    if padded_mode:
        raise UnjudgedFusedCall("padded_mode=True (torch_npu does not support it either)")
    dtype = opmath_dtype(permuted_tokens.dtype)
    if probs is not None and probs.dtype == torch.float64:
        dtype = torch.float64
    slots = sorted_indices.reshape(-1).long()
    kept = slots < permuted_tokens.shape[0]
    gathered = permuted_tokens.to(dtype).index_select(0, torch.where(kept, slots, 0))
    gathered = torch.where(kept[:, None], gathered, 0)
    top_k = 1 if probs is None else probs.shape[-1]
    gathered = gathered.reshape(-1, top_k, permuted_tokens.shape[-1])
    if probs is not None:
        gathered = gathered * probs.to(dtype).reshape(-1, top_k, 1)
    return gathered.sum(1).to(permuted_tokens.dtype)


OPS = (
    FusedOp("npu_moe_token_permute", npu_moe_token_permute,
            "npu_moe_token_permute(tokens, indices, num_out_tokens=None, padded_mode=False)",
            "permuted_tokens, sorted_indices (int32)", "padded_mode=True (torch_npu rejects it too)"),
    FusedOp("npu_moe_token_unpermute", npu_moe_token_unpermute,
            "npu_moe_token_unpermute(permuted_tokens, sorted_indices, probs=None, padded_mode=False, "
            "restore_shape=None)", "unpermuted_tokens", "padded_mode=True (torch_npu rejects it too)"),
)
