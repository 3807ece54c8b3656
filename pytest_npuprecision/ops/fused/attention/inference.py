"""torch_npu's inference attention: prompt (PFA), incremental (IFA) and fused (FIA, v1 and v2).

Each is softmax(scale * Q K^T, masked) V computed one batch (or TND sequence) at a time, so that
each batch takes its own valid query rows (actual_seq_lengths, query left padding) and keys (actual
lengths, kv left padding, a paged KV cache gathered through block_table, a shared prefix in front).
The masks and sparse modes are fusion attention's (mask.Sparsity), measured per batch on its valid
lengths; the tiled softmax is fusion attention's too (fusion._attend).

Where the docs leave a row's result open the reference says so rather than guess:
  * query rows past a batch's valid length are zeros, and their softmax_lse is +inf, which the
    aclnn docs name the mark of invalid data;
  * a valid row whose every key is masked is zero (lse +inf) where the kernel corrects invalid rows
    (FIA's inner_precise 2 or 3, or sparse_mode 3, which enables it by itself); elsewhere the kernel
    gives whatever its finite mask value makes of it, and the call skips (UnjudgedFusedCall).
Quantised inputs or outputs, pse_shift (the docs give no order for scale and pse), tree masks, MLA's
NZ-format cache and learnable sinks are not computed: those calls skip, naming the mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from .fusion import _attend
from .layout import from_bnsd, segments, to_bnsd
from .mask import Sparsity
from ..opmath import int_list, opmath_dtype, statistic_dtype
from ..record import FusedOp, UnjudgedFusedCall

_NO_LIMIT = 2147483647
_COMPUTED_MODES = (0, 1, 2, 3, 4)
# input_layout -> (layout of query/key/value, layout of attention_out)
_LAYOUTS = {
    "BSH": ("BSH", "BSH"), "BSND": ("BSND", "BSND"), "BNSD": ("BNSD", "BNSD"), "TND": ("TND", "TND"),
    "BNSD_BSND": ("BNSD", "BSND"), "BSH_NBSD": ("BSH", "NBSD"), "BSND_NBSD": ("BSND", "NBSD"),
    "BNSD_NBSD": ("BNSD", "NBSD"), "TND_NTD": ("TND", "NTD"), "NTD_TND": ("NTD", "TND"),
}
_PACKED = ("TND", "NTD")  # sequences packed along T, cumulative actual lengths


@dataclass(frozen=True)
class _Call:
    """One call's options, spelled alike for all four ops."""

    layout: str
    num_heads: int
    num_kv_heads: int  # 0: as many as num_heads
    scale: float
    atten_mask: torch.Tensor | None = None
    sparse_mode: int = 0
    pre_tokens: int = _NO_LIMIT
    next_tokens: int = _NO_LIMIT
    q_lens: object = None  # actual lengths as given (per batch, or cumulative for TND)
    kv_lens: object = None
    block_table: torch.Tensor | None = None
    block_size: int = 0
    query_padding: torch.Tensor | None = None  # left padding: valid rows end this far before S
    kv_padding: torch.Tensor | None = None
    key_prefix: torch.Tensor | None = None  # shared prefix in key's layout, batch 1
    value_prefix: torch.Tensor | None = None
    prefix_len: object = None
    query_rope: torch.Tensor | None = None  # MLA: scores add query_rope . key_rope
    key_rope: torch.Tensor | None = None
    row_fix: bool = False  # fully masked rows are zeroed (FIA inner_precise bit 1)
    incremental: bool = False  # IFA: the mask as given, no sparse mode and no tokens


def _skip_if_given(op: str, **arguments) -> None:
    for name, value in arguments.items():
        if value is not None:
            raise UnjudgedFusedCall(f"{op} with {name} (quantisation or an undocumented order of operations) "
                                    f"has no reference here")


def _split_layout(layout: str) -> tuple[str, str]:
    if layout not in _LAYOUTS:
        raise ValueError(f"input_layout {layout!r} is not one of {', '.join(_LAYOUTS)}")
    return _LAYOUTS[layout]


def _heads_first(t: torch.Tensor, layout: str, heads: int) -> torch.Tensor:
    """[B, N, S, D] for the batch layouts, [N, T, D] for TND and NTD."""
    if layout == "NTD":
        return t
    if layout == "BSH":
        if t.shape[-1] % heads:
            raise ValueError(f"hidden size {t.shape[-1]} is not a multiple of {heads} heads")
        return to_bnsd(t, layout, t.shape[-1] // heads)
    return to_bnsd(t, layout, t.shape[-1])


def _heads_out(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "NBSD":
        return t.permute(1, 0, 2, 3)
    if layout == "NTD":
        return t
    return from_bnsd(t, layout)


def _per_batch(lengths, batch: int, full: int, name: str) -> list[int]:
    values = int_list(lengths)
    if values is None:
        return [full] * batch
    if len(values) == 1:
        values = values * batch
    if len(values) < batch:
        raise ValueError(f"{name} has {len(values)} values for {batch} batches: give 1 or at least {batch}")
    values = values[:batch]
    if any(v < 0 or v > full for v in values):
        raise ValueError(f"{name} {values} lie outside 0..{full}")
    return values


def _mask_4d(mask: torch.Tensor | None, incremental: bool) -> torch.Tensor | None:
    """[B|1, 1, Sq, Skv] bool (True = left out) from the documented shapes; (B, Skv) when Q_S is 1."""
    if mask is None:
        return None
    mask = mask.bool()
    if mask.dim() == 2:
        return mask[:, None, None, :] if incremental else mask[None, None]
    if mask.dim() == 3:
        return mask[:, None]
    if mask.dim() != 4:
        raise ValueError(f"atten_mask has shape {tuple(mask.shape)}: use (B,1,Q_S,KV_S), (B,Q_S,KV_S) or (Q_S,KV_S)")
    return mask


class _Keys:
    """Where batch b's keys (or values) sit: a dense tensor, packed sequences or a paged cache."""

    def __init__(self, t: torch.Tensor, layout: str, heads: int, dtype: torch.dtype, call: _Call):
        self.paged = call.block_table is not None
        if self.paged:
            if t.dim() not in (3, 4):
                raise UnjudgedFusedCall(f"a paged KV cache of shape {tuple(t.shape)} (the NZ format) has no "
                                        f"reference here")
            self.block_size = t.shape[1] if t.dim() == 3 else t.shape[2]
            if call.block_size and int(call.block_size) != self.block_size:
                raise ValueError(f"block_size {call.block_size} does not match the cache's blocks of "
                                 f"{self.block_size}")
            self.table = call.block_table.long()
            self.heads = heads if t.dim() == 3 else t.shape[1]
            self.t = t.to(dtype)
        else:
            self.t = _heads_first(t.to(dtype), layout, heads)
            self.heads = self.t.shape[-3]
        self.packed = layout in _PACKED

    @property
    def length(self) -> int:  # the S (or T) the tensor holds
        return self.t.shape[-2]

    @property
    def head_dim(self) -> int:
        return self.t.shape[-1] // self.heads if self.paged and self.t.dim() == 3 else self.t.shape[-1]

    def rows(self, b: int, start: int, stop: int) -> torch.Tensor:
        """[1, heads, stop - start, D]: positions start..stop of batch b's sequence."""
        if not self.paged:
            return self.t[None, :, start:stop] if self.packed else self.t[b:b + 1, :, start:stop]
        blocks = self.t[self.table[b, :math.ceil(stop / self.block_size)]]
        if blocks.dim() == 3:  # (n, block_size, H)
            flat = blocks.reshape(-1, blocks.shape[-1])[start:stop]
            return flat.reshape(stop - start, self.heads, -1).permute(1, 0, 2)[None]
        return blocks.permute(1, 0, 2, 3).reshape(self.heads, -1, blocks.shape[-1])[None, :, start:stop]


def _kv_spans(call: _Call, keys: _Keys, batch: int, op: str) -> list[tuple[int, int]]:
    """(start, stop) of each batch's valid keys."""
    if keys.paged:
        if call.kv_lens is None:
            raise ValueError(f"{op} with block_table needs the per-batch key lengths")
        lengths = int_list(call.kv_lens)
        lengths = lengths * batch if len(lengths) == 1 else lengths[:batch]
        if call.kv_padding is not None:
            raise ValueError("kv left padding does not combine with a paged KV cache (block_table)")
        return [(0, n) for n in lengths]
    if keys.packed:
        return segments(int_list(call.kv_lens), keys.length, "actual_seq_lengths_kv")
    lengths = _per_batch(call.kv_lens, batch, keys.length, "the key lengths")
    if call.kv_padding is None or call.kv_lens is None:
        return [(0, n) for n in lengths]
    pads = [max(p, 0) for p in _per_batch(call.kv_padding, batch, keys.length, "kv_padding_size")]
    return [(keys.length - p - n, keys.length - p) for n, p in zip(lengths, pads)]


def _q_spans(call: _Call, q: torch.Tensor, packed: bool) -> list[tuple[int, int]]:
    if packed:
        return segments(int_list(call.q_lens), q.shape[1], "actual_seq_lengths")
    batch, q_len = q.shape[0], q.shape[2]
    if call.incremental:
        return [(0, q_len)] * batch
    lengths = _per_batch(call.q_lens, batch, q_len, "actual_seq_lengths")
    if call.query_padding is None or call.q_lens is None:
        return [(0, n) for n in lengths]
    pads = [max(p, 0) for p in _per_batch(call.query_padding, batch, q_len, "query_padding_size")]
    if any(p + n > q_len for n, p in zip(lengths, pads)):
        raise ValueError(f"query_padding_size {pads} with actual_seq_lengths {lengths} start before row 0 of "
                         f"Q_S={q_len}")
    return [(q_len - p - n, q_len - p) for n, p in zip(lengths, pads)]


def _batch_mask(call: _Call, mask: torch.Tensor | None, b: int, q_len: int, kv_len: int, op: str):
    """The Sparsity of batch b, its mask cut to the batch's valid lengths."""
    mode = 1 if call.incremental else call.sparse_mode
    if mask is None:
        if mode in (2, 3, 4):
            raise ValueError(f"{op} sparse_mode {mode} needs the compressed 2048x2048 atten_mask")
        return None
    if mode in (0, 1):
        if call.query_padding is not None or call.kv_padding is not None:
            raise UnjudgedFusedCall(f"{op} with atten_mask and left padding: the docs do not say which part of "
                                    f"the mask the padded rows read")
        if mask.shape[-2] < q_len or mask.shape[-1] < kv_len:
            raise ValueError(f"atten_mask {tuple(mask.shape)} is smaller than a batch's {q_len} x {kv_len} "
                             f"valid queries and keys")
        mask = mask[b if mask.shape[0] > 1 else 0][None, :, :q_len, :kv_len]
    return Sparsity(mode, call.pre_tokens, call.next_tokens, mask, None)


def _infer_attention(op: str, query, key, value, call: _Call, want_lse: bool):
    """(attention_out, softmax_lse or its [1] zero placeholder)."""
    in_layout, out_layout = _split_layout(call.layout)
    if not query.is_floating_point() or not key.is_floating_point():
        raise UnjudgedFusedCall(f"{op} with {query.dtype} query and {key.dtype} key (int8 or int4 quantised "
                                f"attention) has no reference here")
    if call.sparse_mode not in _COMPUTED_MODES:
        raise UnjudgedFusedCall(f"{op} with sparse_mode {call.sparse_mode} (prefix, global, dilated, "
                                f"block_local or tree mask) has no reference here")
    dtype = opmath_dtype(query.dtype)
    heads = int(call.num_heads)
    kv_heads = int(call.num_kv_heads) or heads
    packed = in_layout in _PACKED
    q = _heads_first(query.to(dtype), in_layout, heads)
    keys, values = (_Keys(t, in_layout, kv_heads, dtype, call) for t in (key, value))
    rope = None
    if call.query_rope is not None:
        q = torch.cat([q, _heads_first(call.query_rope.to(dtype), in_layout, heads)], -1)
        rope = _Keys(call.key_rope, in_layout, kv_heads, dtype, call)
    prefix = _prefix(call, in_layout, kv_heads, dtype)
    q_spans = _q_spans(call, q, packed)
    batches = len(q_spans)
    kv_spans = _kv_spans(call, keys, batches, op)
    if len(kv_spans) != batches:
        raise ValueError(f"{batches} query sequences but {len(kv_spans)} key sequences")
    mask = _mask_4d(call.atten_mask, call.incremental)
    out = q.new_zeros(*q.shape[:-1], values.head_dim)  # the valid rows are overwritten below
    lse = torch.full((*q.shape[:-1], 1), math.inf, dtype=dtype, device=q.device)
    for b, ((q0, q1), (k0, k1)) in enumerate(zip(q_spans, kv_spans)):
        if q1 <= q0 or k0 < 0:  # no query, or kv padding before the cache's start: zeros, as IFA documents
            continue
        qb = q[None, :, q0:q1] if packed else q[b:b + 1, :, q0:q1]
        kb, vb = keys.rows(b, k0, k1), values.rows(b, k0, k1)
        if rope is not None:
            kb = torch.cat([kb, rope.rows(b, k0, k1)], -1)
        if prefix is not None:
            kb, vb = torch.cat([prefix[0], kb], 2), torch.cat([prefix[1], vb], 2)
        if kb.shape[2] == 0:  # no keys: zeros
            continue
        sparsity = _batch_mask(call, mask, b, q1 - q0, kb.shape[2], op)
        ob, row_max, total = _attend(qb, kb, vb, None, sparsity, call.scale, None)
        dead = ~torch.isfinite(row_max)
        if dead.any() and not (call.row_fix or call.sparse_mode == 3 and not call.incremental):
            raise UnjudgedFusedCall(f"{op}: a query row of batch {b} has every key masked; without invalid-row "
                                    f"correction (inner_precise 2 or 3) its output is the kernel's own")
        lse_b = torch.where(dead, torch.full_like(row_max, math.inf), row_max + torch.log(total))
        if packed:
            out[:, q0:q1], lse[:, q0:q1] = ob[0], lse_b[0]
        else:
            out[b, :, q0:q1], lse[b, :, q0:q1] = ob[0], lse_b[0]
    result = _heads_out(out, out_layout).to(query.dtype)
    stat = statistic_dtype(query.dtype)
    if not want_lse:
        return result, torch.zeros(1, dtype=stat, device=query.device)
    return result, (lse.transpose(0, 1) if packed else lse).to(stat)  # (T, N, 1) or (B, N, S, 1)


def _prefix(call: _Call, layout: str, kv_heads: int, dtype: torch.dtype):
    """The shared prefix's (keys, values) as [1, N2, P, D], cut to actual_shared_prefix_len."""
    if call.key_prefix is None and call.value_prefix is None:
        return None
    if call.key_prefix is None or call.value_prefix is None:
        raise ValueError("key_shared_prefix and value_shared_prefix come together")
    if call.block_table is not None:
        raise ValueError("a shared prefix does not combine with a paged KV cache (block_table)")
    k, v = (_heads_first(t.to(dtype), layout, kv_heads) for t in (call.key_prefix, call.value_prefix))
    length = k.shape[2] if call.prefix_len is None else int_list(call.prefix_len)[0]
    return k[:1, :, :length], v[:1, :, :length]


def npu_prompt_flash_attention(query, key, value, *, pse_shift=None, padding_mask=None, atten_mask=None,
                               actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
                               quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0,
                               pre_tokens=2147483647, next_tokens=0, input_layout="BSH", num_key_value_heads=0,
                               actual_seq_lengths_kv=None, sparse_mode=0):
    """torch_npu.npu_prompt_flash_attention(query, key, value, *, pse_shift=None, padding_mask=None,
    atten_mask=None, actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None,
    quant_scale2=None, quant_offset2=None, num_heads=1, scale_value=1.0, pre_tokens=2147483647,
    next_tokens=0, input_layout="BSH", num_key_value_heads=0, actual_seq_lengths_kv=None, sparse_mode=0)
    -> Tensor

    softmax(scale_value * Q K^T, masked) V in the query's layout and dtype (BNSD_BSND: BSND out).
    next_tokens defaults to 0: with a sparse_mode 0 mask the band is causal from the top-left corner.
    """
    op = "npu_prompt_flash_attention"
    _skip_if_given(op, pse_shift=pse_shift, deq_scale1=deq_scale1, quant_scale1=quant_scale1,
                   deq_scale2=deq_scale2, quant_scale2=quant_scale2, quant_offset2=quant_offset2)
    call = _Call(input_layout, num_heads, num_key_value_heads, float(scale_value), atten_mask, int(sparse_mode),
                 int(pre_tokens), int(next_tokens), actual_seq_lengths, actual_seq_lengths_kv)
    return _infer_attention(op, query, key, value, call, want_lse=False)[0]


def npu_incre_flash_attention(query, key, value, *, padding_mask=None, pse_shift=None, atten_mask=None,
                              actual_seq_lengths=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
                              quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None,
                              block_table=None, kv_padding_size=None, num_heads=1, scale_value=1.0,
                              input_layout="BSH", num_key_value_heads=0, block_size=0, inner_precise=1):
    """torch_npu.npu_incre_flash_attention(query, key, value, *, padding_mask=None, pse_shift=None,
    atten_mask=None, actual_seq_lengths=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None,
    quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None, block_table=None,
    kv_padding_size=None, num_heads=1, scale_value=1.0, input_layout="BSH", num_key_value_heads=0,
    block_size=0, inner_precise=1) -> Tensor

    One query token per batch against its keys: actual_seq_lengths are the key lengths, atten_mask
    ((B, KV_S) or (B, 1, 1, KV_S)) is applied as given. With block_table, key and value are a paged
    cache (blocknum, blocksize, H) or (blocknum, N2, blocksize, D); kv_padding_size left-pads.
    """
    op = "npu_incre_flash_attention"
    _skip_if_given(op, pse_shift=pse_shift, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1,
                   dequant_scale2=dequant_scale2, quant_scale2=quant_scale2, quant_offset2=quant_offset2,
                   antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset)
    call = _Call(input_layout, num_heads, num_key_value_heads, float(scale_value), atten_mask,
                 kv_lens=actual_seq_lengths, block_table=block_table, block_size=int(block_size),
                 kv_padding=kv_padding_size, incremental=True)
    return _infer_attention(op, query, key, value, call, want_lse=False)[0]


def _query_len(query, layout: str) -> int | None:
    """Q_S of a batch layout (None for TND/NTD, whose S varies by sequence)."""
    first = _split_layout(layout)[0]
    if first in _PACKED:
        return None
    return query.shape[2] if first == "BNSD" else query.shape[1]


def _fused(op, query, key, value, call: _Call, want_lse: bool):
    """FIA's branches: Q_S == 1 without rope is the incremental one, where sparse_mode and the tokens do
    nothing; sparse_mode 3 then keeps every key, and 2 and 4 have no documented meaning."""
    if _query_len(query, call.layout) == 1 and call.query_rope is None:
        if call.sparse_mode in (2, 4):
            raise UnjudgedFusedCall(f"{op} with Q_S 1 and sparse_mode {call.sparse_mode}: the docs say the mode "
                                    f"is ignored and do not say what the compressed mask then does")
        keep_all = call.sparse_mode == 3
        call = replace(call, incremental=True, sparse_mode=0, atten_mask=None if keep_all else call.atten_mask)
    return _infer_attention(op, query, key, value, call, want_lse)


def npu_fused_infer_attention_score(
        query, key, value, *, pse_shift=None, atten_mask=None, actual_seq_lengths=None, actual_seq_lengths_kv=None,
        dequant_scale1=None, quant_scale1=None, dequant_scale2=None, quant_scale2=None, quant_offset2=None,
        antiquant_scale=None, antiquant_offset=None, block_table=None, query_padding_size=None,
        kv_padding_size=None, key_antiquant_scale=None, key_antiquant_offset=None, value_antiquant_scale=None,
        value_antiquant_offset=None, key_shared_prefix=None, value_shared_prefix=None, actual_shared_prefix_len=None,
        query_rope=None, key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0,
        pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH", num_key_value_heads=0, sparse_mode=0,
        inner_precise=0, block_size=0, antiquant_mode=0, softmax_lse_flag=False, key_antiquant_mode=0,
        value_antiquant_mode=0):
    """torch_npu.npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None,
    actual_seq_lengths=None, actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None,
    dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None,
    block_table=None, query_padding_size=None, kv_padding_size=None, key_antiquant_scale=None,
    key_antiquant_offset=None, value_antiquant_scale=None, value_antiquant_offset=None, key_shared_prefix=None,
    value_shared_prefix=None, actual_shared_prefix_len=None, query_rope=None, key_rope=None,
    key_rope_antiquant_scale=None, num_heads=1, scale=1.0, pre_tokens=2147483647, next_tokens=2147483647,
    input_layout="BSH", num_key_value_heads=0, sparse_mode=0, inner_precise=0, block_size=0, antiquant_mode=0,
    softmax_lse_flag=False, key_antiquant_mode=0, value_antiquant_mode=0) -> (attention_out, softmax_lse)

    PFA's computation for Q_S > 1, IFA's for Q_S == 1, with a shared prefix placed before each batch's
    keys and MLA's rope parts added to the scores. softmax_lse = max + log(sum exp(score - max)),
    float32 (B, N, Q_S, 1) or (T, N, 1) for TND, +inf on invalid rows; a float32 [0] without the flag.
    """
    op = "npu_fused_infer_attention_score"
    _skip_if_given(op, pse_shift=pse_shift, dequant_scale1=dequant_scale1, quant_scale1=quant_scale1,
                   dequant_scale2=dequant_scale2, quant_scale2=quant_scale2, quant_offset2=quant_offset2,
                   antiquant_scale=antiquant_scale, antiquant_offset=antiquant_offset,
                   key_antiquant_scale=key_antiquant_scale, key_antiquant_offset=key_antiquant_offset,
                   value_antiquant_scale=value_antiquant_scale, value_antiquant_offset=value_antiquant_offset,
                   key_rope_antiquant_scale=key_rope_antiquant_scale)
    call = _Call(input_layout, num_heads, num_key_value_heads, float(scale), atten_mask, int(sparse_mode),
                 int(pre_tokens), int(next_tokens), actual_seq_lengths, actual_seq_lengths_kv, block_table,
                 int(block_size), query_padding_size, kv_padding_size, key_shared_prefix, value_shared_prefix,
                 actual_shared_prefix_len, query_rope, key_rope, bool(int(inner_precise) & 2))
    return _fused(op, query, key, value, call, bool(softmax_lse_flag))


def npu_fused_infer_attention_score_v2(
        query, key, value, *, query_rope=None, key_rope=None, pse_shift=None, atten_mask=None, actual_seq_qlen=None,
        actual_seq_kvlen=None, block_table=None, dequant_scale_query=None, dequant_scale_key=None,
        dequant_offset_key=None, dequant_scale_value=None, dequant_offset_value=None, dequant_scale_key_rope=None,
        quant_scale_out=None, quant_offset_out=None, quant_scale_p=None, learnable_sink=None, num_query_heads=1,
        num_key_value_heads=0, softmax_scale=1.0, pre_tokens=2147483647, next_tokens=2147483647,
        input_layout="BSH", sparse_mode=0, block_size=0, query_quant_mode=0, key_quant_mode=0, value_quant_mode=0,
        inner_precise=0, return_softmax_lse=False, query_dtype=None, key_dtype=None, value_dtype=None,
        query_rope_dtype=None, key_rope_dtype=None, key_shared_prefix_dtype=None, value_shared_prefix_dtype=None,
        dequant_scale_query_dtype=None, dequant_scale_key_dtype=None, dequant_scale_value_dtype=None,
        dequant_scale_key_rope_dtype=None, out_dtype=None):
    """torch_npu.npu_fused_infer_attention_score_v2(query, key, value, *, query_rope=None, key_rope=None,
    pse_shift=None, atten_mask=None, actual_seq_qlen=None, actual_seq_kvlen=None, block_table=None,
    dequant_scale_query=None, dequant_scale_key=None, dequant_offset_key=None, dequant_scale_value=None,
    dequant_offset_value=None, dequant_scale_key_rope=None, quant_scale_out=None, quant_offset_out=None,
    quant_scale_p=None, learnable_sink=None, num_query_heads=1, num_key_value_heads=0, softmax_scale=1.0,
    pre_tokens=2147483647, next_tokens=2147483647, input_layout="BSH", sparse_mode=0, block_size=0,
    query_quant_mode=0, key_quant_mode=0, value_quant_mode=0, inner_precise=0, return_softmax_lse=False,
    query_dtype=None, key_dtype=None, value_dtype=None, query_rope_dtype=None, key_rope_dtype=None,
    key_shared_prefix_dtype=None, value_shared_prefix_dtype=None, dequant_scale_query_dtype=None,
    dequant_scale_key_dtype=None, dequant_scale_value_dtype=None, dequant_scale_key_rope_dtype=None,
    out_dtype=None) -> (attention_out, softmax_lse)

    npu_fused_infer_attention_score with the arguments renamed, the *_NBSD and NTD layouts added, and
    no padding sizes or shared prefix. With block_table, actual_seq_kvlen are per-batch lengths.
    """
    op = "npu_fused_infer_attention_score_v2"
    _skip_if_given(op, pse_shift=pse_shift, dequant_scale_query=dequant_scale_query,
                   dequant_scale_key=dequant_scale_key, dequant_offset_key=dequant_offset_key,
                   dequant_scale_value=dequant_scale_value, dequant_offset_value=dequant_offset_value,
                   dequant_scale_key_rope=dequant_scale_key_rope, quant_scale_out=quant_scale_out,
                   quant_offset_out=quant_offset_out, quant_scale_p=quant_scale_p, learnable_sink=learnable_sink,
                   out_dtype=out_dtype)
    call = _Call(input_layout, num_query_heads, num_key_value_heads, float(softmax_scale), atten_mask,
                 int(sparse_mode), int(pre_tokens), int(next_tokens), actual_seq_qlen, actual_seq_kvlen, block_table,
                 int(block_size), query_rope=query_rope, key_rope=key_rope, row_fix=bool(int(inner_precise) & 2))
    return _fused(op, query, key, value, call, bool(return_softmax_lse))


_SKIPS = ("pse_shift (the docs give no order for scale and pse); int8/int4 inputs and every quantisation "
          "argument (dequant/quant scales and offsets, antiquant); sparse_mode 5-9; a paged cache in NZ format; "
          "a fully masked query row without invalid-row correction")
OPS = (
    FusedOp("npu_prompt_flash_attention", npu_prompt_flash_attention,
            "npu_prompt_flash_attention(query, key, value, *, pse_shift=None, padding_mask=None, atten_mask=None, "
            "actual_seq_lengths=None, deq_scale1=None, quant_scale1=None, deq_scale2=None, quant_scale2=None, "
            "quant_offset2=None, num_heads=1, scale_value=1.0, pre_tokens=2147483647, next_tokens=0, "
            "input_layout=\"BSH\", num_key_value_heads=0, actual_seq_lengths_kv=None, sparse_mode=0)",
            "attention_out (zeros past each batch's actual_seq_lengths)", _SKIPS),
    FusedOp("npu_incre_flash_attention", npu_incre_flash_attention,
            "npu_incre_flash_attention(query, key, value, *, padding_mask=None, pse_shift=None, atten_mask=None, "
            "actual_seq_lengths=None, dequant_scale1=None, quant_scale1=None, dequant_scale2=None, "
            "quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None, block_table=None, "
            "kv_padding_size=None, num_heads=1, scale_value=1.0, input_layout=\"BSH\", num_key_value_heads=0, "
            "block_size=0, inner_precise=1)",
            "attention_out", _SKIPS),
    FusedOp("npu_fused_infer_attention_score", npu_fused_infer_attention_score,
            "npu_fused_infer_attention_score(query, key, value, *, pse_shift=None, atten_mask=None, "
            "actual_seq_lengths=None, actual_seq_lengths_kv=None, dequant_scale1=None, quant_scale1=None, "
            "dequant_scale2=None, quant_scale2=None, quant_offset2=None, antiquant_scale=None, antiquant_offset=None, "
            "block_table=None, query_padding_size=None, kv_padding_size=None, key_antiquant_scale=None, "
            "key_antiquant_offset=None, value_antiquant_scale=None, value_antiquant_offset=None, "
            "key_shared_prefix=None, value_shared_prefix=None, actual_shared_prefix_len=None, query_rope=None, "
            "key_rope=None, key_rope_antiquant_scale=None, num_heads=1, scale=1.0, pre_tokens=2147483647, "
            "next_tokens=2147483647, input_layout=\"BSH\", num_key_value_heads=0, sparse_mode=0, inner_precise=0, "
            "block_size=0, antiquant_mode=0, softmax_lse_flag=False, key_antiquant_mode=0, value_antiquant_mode=0)",
            "attention_out, softmax_lse (B,N,Q_S,1) or (T,N,1) float32, +inf on invalid rows; [1] zero without "
            "softmax_lse_flag",
            _SKIPS + "; sparse_mode 2 or 4 with Q_S 1"),
    FusedOp("npu_fused_infer_attention_score_v2", npu_fused_infer_attention_score_v2,
            "npu_fused_infer_attention_score_v2(query, key, value, *, query_rope=None, key_rope=None, pse_shift=None, "
            "atten_mask=None, actual_seq_qlen=None, actual_seq_kvlen=None, block_table=None, "
            "dequant_scale_query=None, dequant_scale_key=None, dequant_offset_key=None, dequant_scale_value=None, "
            "dequant_offset_value=None, dequant_scale_key_rope=None, quant_scale_out=None, quant_offset_out=None, "
            "quant_scale_p=None, learnable_sink=None, num_query_heads=1, num_key_value_heads=0, softmax_scale=1.0, "
            "pre_tokens=2147483647, next_tokens=2147483647, input_layout=\"BSH\", sparse_mode=0, block_size=0, "
            "query_quant_mode=0, key_quant_mode=0, value_quant_mode=0, inner_precise=0, return_softmax_lse=False, "
            "query_dtype=None, key_dtype=None, value_dtype=None, query_rope_dtype=None, key_rope_dtype=None, "
            "key_shared_prefix_dtype=None, value_shared_prefix_dtype=None, dequant_scale_query_dtype=None, "
            "dequant_scale_key_dtype=None, dequant_scale_value_dtype=None, dequant_scale_key_rope_dtype=None, "
            "out_dtype=None)",
            "as npu_fused_infer_attention_score",
            _SKIPS + "; learnable_sink; out_dtype; sparse_mode 2 or 4 with Q_S 1"),
)
