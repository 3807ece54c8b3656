"""Which query/key pairs fusion attention leaves out, per sparse_mode (True = masked out).

torch_npu's rules: without atten_mask every pair is computed and sparse_mode, pre_tockens and
next_tockens do nothing. Otherwise
  0 defaultMask: the given mask, and a band measured from the top-left corner: key j of query i is
    kept when -pre_tockens <= j - i <= next_tockens;
  1 allMask: the given mask as is;
  2 leftUpCausal: j <= i (the given mask is the compressed 2048x2048 triangle; its content is not read);
  3 rightDownCausal: j <= i + Skv - Sq;
  4 band: the band of mode 0 measured from the bottom-right corner (pre/next shifted by Skv - Sq);
  5 prefix, not compressed: the given mask as is (it holds the prefix pattern);
  6 prefix, compressed: rightDownCausal, and every key before the batch's prefix[b].
Modes 7 and 8 (varlen "outer split") are not supported.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SUPPORTED_MODES = (0, 1, 2, 3, 4, 5, 6)


@dataclass(frozen=True)
class Sparsity:
    mode: int
    pre_tokens: int
    next_tokens: int
    atten_mask: torch.Tensor | None  # bool, 4-D, broadcastable to [B, N1, Sq, Skv]
    prefix: torch.Tensor | None  # [B, 1, 1, 1] key counts every query of batch b sees (mode 6)

    def masked(self, start: int, stop: int, q_len: int, kv_len: int) -> torch.Tensor | None:
        """The mask for query rows start..stop, 4-D and broadcastable to [B, N1, stop - start, Skv]."""
        if self.atten_mask is None:
            return None
        mask = self._rows(start, stop, q_len, kv_len)
        return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))

    def _rows(self, start: int, stop: int, q_len: int, kv_len: int) -> torch.Tensor:
        if self.mode in (1, 5):
            return self.atten_mask[..., start:stop, :]
        device = self.atten_mask.device
        i = torch.arange(start, stop, device=device).unsqueeze(-1)
        j = torch.arange(kv_len, device=device)
        shift = kv_len - q_len
        if self.mode == 0:
            return self.atten_mask[..., start:stop, :] | _outside_band(j - i, self.pre_tokens, self.next_tokens)
        if self.mode == 2:
            return j > i
        if self.mode == 3:
            return j > i + shift
        if self.mode == 4:
            return _outside_band(j - i - shift, self.pre_tokens, self.next_tokens)
        return (j > i + shift) & (j >= self.prefix)  # mode 6


def _outside_band(offset: torch.Tensor, pre_tokens: int, next_tokens: int) -> torch.Tensor:
    return (offset > next_tokens) | (offset < -pre_tokens)


def as_4d_mask(atten_mask: torch.Tensor | None) -> torch.Tensor | None:
    """A BNSS, B1SS, 11SS or SS bool (or uint8) mask as a 4-D bool tensor."""
    if atten_mask is None:
        return None
    mask = atten_mask.bool()
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    if mask.dim() != 4:
        raise ValueError(f"atten_mask has shape {tuple(atten_mask.shape)}: use BNSS, B1SS, 11SS or SS")
    return mask


def check_mode(sparse_mode: int) -> int:
    if sparse_mode not in SUPPORTED_MODES:
        raise NotImplementedError(
            f"sparse_mode {sparse_mode} is not supported by the reference (varlen outer-split modes 7 and 8 "
            f"are undocumented in detail): use 0-6")
    return sparse_mode
