"""Rotary position embedding: out = x * cos + rotate(x) * sin, rotate per rotary_mode."""

from __future__ import annotations

import torch

from .norms import rms_normalised
from .opmath import int_list, opmath_dtype
from .record import FusedOp, UnjudgedFusedCall


def _rotated(x: torch.Tensor, mode: str) -> torch.Tensor:
    """'half': (x1, x2) = halves of D -> (-x2, x1); 'interleave': pairs (x[2i], x[2i+1]) -> (-x[2i+1], x[2i])."""
    if mode == "half":
        first, second = x.chunk(2, dim=-1)
        return torch.cat((-second, first), dim=-1)
    if mode == "interleave":
        even, odd = x[..., ::2], x[..., 1::2]
        return torch.stack((-odd, even), dim=-1).flatten(-2)
    raise NotImplementedError(f"rotary_mode {mode!r} is not supported: use 'half' or 'interleave'")


def _embedded(x, cos, sin, mode: str, rotate=None):
    dtype = opmath_dtype(x.dtype)
    xs = x.to(dtype)
    turned = xs @ rotate.to(dtype) if rotate is not None else _rotated(xs, mode)
    return (xs * cos.to(dtype) + turned * sin.to(dtype)).to(x.dtype)


def npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None):
    """torch_npu.npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None) -> Tensor

    input * r1 + rotate(input) * r2, r1/r2 broadcast over input (11SD, 1S1D, B1SD, ... as documented).
    With rotate (a D x D matrix) rotate(input) = input @ rotate; torch_npu has no backward then,
    the reference still differentiates.
    """
    return _embedded(input, r1, r2, str(rotary_mode), rotate)


def npu_apply_rotary_pos_emb(query, key, cos, sin, *, layout='BSND', rotary_mode='half'):
    """torch_npu.npu_apply_rotary_pos_emb(query, key, cos, sin, *, layout='BSND', rotary_mode='half')
    -> (query_out, key_out)

    The same rotation on query and key; cos and sin broadcast in the given layout (BSND (B,S,1,D),
    TND (T,1,D), ...). torch_npu updates query and key in place; the reference returns new tensors.
    The 'quarter' mode is not documented beyond its name, and a cos narrower than D is not
    supported either: both raise.
    """
    if cos.shape[-1] != query.shape[-1]:
        raise NotImplementedError(f"cos with D={cos.shape[-1]} narrower than query's D={query.shape[-1]}")
    return _embedded(query, cos, sin, str(rotary_mode)), _embedded(key, cos, sin, str(rotary_mode))


def npu_interleave_rope(x, cos, sin):
    """torch_npu.npu_interleave_rope(x, cos, sin) -> Tensor

    x (B, N, S, D) is first de-interleaved, its pairs' first elements then their second (reshape to
    (..., D/2, 2), transpose the last two dims), then rotated by halves: q * cos + (-q2, q1) * sin, with
    cos and sin (B, 1, S or 1, D) broadcast. The result stays in the de-interleaved order."""
    q = x.reshape(*x.shape[:-1], x.shape[-1] // 2, 2).transpose(-1, -2).reshape(x.shape)
    return _embedded(q, cos, sin, "half")


def npu_mrope(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None, rotary_mode='half',
              cache_mode='default'):
    """torch_npu.npu_mrope(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None,
    rotary_mode='half', cache_mode='default') -> (query_out, key_out)

    query (T, Nq * head_size) and key (T, Nk * head_size) rotated per head over their first rotary_dim
    elements, the rest passed through. cos_sin_cache (max_seq_len, rotary_dim) holds cos then sin, rotary_dim
    / 2 each, per position. positions (T,) picks each token's row (rope); positions (3, T) with mrope_section
    [t, h, w] summing to rotary_dim / 2 (mrope) takes the first t cos/sin values from the temporal position's
    row, the next h from the height's, the last w from the width's. rotary_mode 'half' rotates by halves,
    'interleave' the pairs (x[2i], x[2i+1]), each pair i by angle i."""
    if str(cache_mode) != "default":
        raise UnjudgedFusedCall(f"cache_mode {cache_mode!r} (cos and sin interleaved in the cache) has no reference "
                                f"here")
    mode = str(rotary_mode)
    if mode not in ("half", "interleave"):
        raise UnjudgedFusedCall(f"rotary_mode {mode!r} has no reference here")
    dtype = opmath_dtype(query.dtype)
    cos, sin = cos_sin_cache.to(dtype)[positions.long()].chunk(2, dim=-1)
    sections = int_list(mrope_section) or [0, 0, 0]
    if positions.dim() == 2 and any(sections):
        # each section's angles from its own position row: (3, T, R/2) -> (T, R/2)
        cos = torch.cat([part[row] for row, part in enumerate(cos.split(sections, dim=-1))], dim=-1)
        sin = torch.cat([part[row] for row, part in enumerate(sin.split(sections, dim=-1))], dim=-1)
    elif positions.dim() == 2:
        cos, sin = cos[0], sin[0]
    if mode == "half":
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    else:
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    size = int(head_size)

    def rotated(x):
        heads = x.to(dtype).reshape(x.shape[0], -1, size)
        width = cos.shape[-1]
        turned = _embedded(heads[..., :width], cos[:, None], sin[:, None], mode)
        return torch.cat((turned, heads[..., width:]), dim=-1).reshape(x.shape).to(x.dtype)

    return rotated(query), rotated(key)


def npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None, c_kv_scale=None,
                              k_rope_offset=None, c_kv_offset=None, epsilon=1e-5, cache_mode='Norm',
                              is_output_kv=False):
    """torch_npu.npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None,
    c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, epsilon=1e-5, cache_mode='Norm', is_output_kv=False)
    -> (k_cache, ckv_cache, k_rope, c_kv)

    MLA's latent cache write. kv [B, 1, S, Dv + Dk] splits along its last dim: c_kv = rms_norm(kv[..., :Dv]) *
    gamma (Dv = gamma's size), k_rope = kv[..., Dv:] de-interleaved and rotated by halves (npu_interleave_rope)
    with cos and sin [B, 1, S, Dk]. Each token's results are written into copies of the caches: 'Norm' caches
    [B, 1, S_cache, D] at index[b, s] of its batch; 'PA' and 'PA_BNSD' caches [blocks, block_size, 1, D] at slot
    index[b * S + s]; an index of -1 writes nothing. torch_npu writes the caches in place; the reference returns
    new ones, by which the call is judged."""
    mode = str(cache_mode)
    if mode not in ("Norm", "PA", "PA_BNSD"):
        raise UnjudgedFusedCall(f"cache_mode {mode!r} (NZ or block-indexed caches) has no reference here")
    if any(t is not None for t in (k_rope_scale, c_kv_scale, k_rope_offset, c_kv_offset)) or \
            not k_cache.is_floating_point() or not ckv_cache.is_floating_point():
        raise UnjudgedFusedCall("int8 caches (quantised by k_rope_scale, c_kv_scale) have no reference here")
    dtype = opmath_dtype(kv.dtype)
    values = kv.to(dtype)
    latent = gamma.shape[-1]
    c_kv = rms_normalised(values[..., :latent], gamma.to(dtype), epsilon)[0]
    k_rope = npu_interleave_rope(values[..., latent:], cos, sin)
    caches = []
    for cache, written in ((k_cache, k_rope), (ckv_cache, c_kv)):
        cache = cache.to(torch.promote_types(cache.dtype, written.dtype)).clone()
        rows = written.reshape(-1, written.shape[-1])
        slots = index.reshape(-1).long()
        kept = slots >= 0
        if mode == "Norm":  # [B, 1, S_cache, D]: token (b, s) to row index[b, s] of batch b
            batch = torch.arange(written.shape[0], device=slots.device).repeat_interleave(written.shape[2])
            cache[batch[kept], 0, slots[kept]] = rows[kept].to(cache.dtype)
        else:  # [blocks, block_size, 1, D]: token i to slot index[i]
            flat = cache.reshape(-1, cache.shape[-1])
            flat[slots[kept]] = rows[kept].to(cache.dtype)
        caches.append(cache)
    return caches[0].to(k_cache.dtype), caches[1].to(ckv_cache.dtype), k_rope.to(kv.dtype), c_kv.to(kv.dtype)


OPS = (
    FusedOp("npu_rotary_mul", npu_rotary_mul, "npu_rotary_mul(input, r1, r2, rotary_mode='half', rotate=None)",
            "output (input's dtype)"),
    FusedOp("npu_apply_rotary_pos_emb", npu_apply_rotary_pos_emb,
            "npu_apply_rotary_pos_emb(query, key, cos, sin, *, layout='BSND', rotary_mode='half')",
            "query_out, key_out (new tensors, not in place)",
            "rotary_mode 'quarter' (undocumented) and cos/sin narrower than D"),
    FusedOp("npu_interleave_rope", npu_interleave_rope, "npu_interleave_rope(x, cos, sin)",
            "output (x's dtype, its last dim de-interleaved)"),
    FusedOp("npu_mrope", npu_mrope,
            "npu_mrope(positions, query, key, cos_sin_cache, head_size, *, mrope_section=None, rotary_mode='half', "
            "cache_mode='default')", "query_out, key_out", "cache_mode 'interleave' (its layout is not documented)"),
    FusedOp("npu_kv_rmsnorm_rope_cache", npu_kv_rmsnorm_rope_cache,
            "npu_kv_rmsnorm_rope_cache(kv, gamma, cos, sin, index, k_cache, ckv_cache, *, k_rope_scale=None, "
            "c_kv_scale=None, k_rope_offset=None, c_kv_offset=None, epsilon=1e-5, cache_mode='Norm', "
            "is_output_kv=False)", "k_cache, ckv_cache (updated copies), k_rope, c_kv",
            "NZ and block-indexed cache modes (PA_NZ, PA_BLK_*), int8 caches"),
)
