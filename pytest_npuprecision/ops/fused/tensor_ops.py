"""Ops that cast, fill, pad, index, scatter or pack: each output element is an input element, a constant or its
sign, so a fair kernel returns them bit for bit (the binary standard)."""

from __future__ import annotations

import torch

from .opmath import int_list
from .record import FusedOp, UnjudgedFusedCall


def npu_dtype_cast(input, dtype, input_dtype=None):
    """torch_npu.npu_dtype_cast(input, dtype, input_dtype=None) -> Tensor: input converted to dtype (a float
    rounded to nearest, a float to an integer truncated towards zero: the documented 0.5 -> 0, -1. -> -1)."""
    if input_dtype is not None and input_dtype != input.dtype:
        raise UnjudgedFusedCall(f"input_dtype {input_dtype} reinterprets a {input.dtype} input: no reference here")
    return input.to(dtype)


def npu_one_hot(input, num_classes=-1, depth=1, on_value=1, off_value=0):
    """torch_npu.npu_one_hot(input, num_classes=-1, depth=1, on_value=1, off_value=0) -> Tensor

    A new dim of size depth at position num_classes (-1: last) holding on_value where its index equals the
    input's class, off_value elsewhere (float32, as the documented example returns)."""
    classes = input.long().unsqueeze(-1)
    hits = classes == torch.arange(int(depth), device=input.device)
    out = torch.where(hits, torch.tensor(float(on_value), device=input.device),
                      torch.tensor(float(off_value), device=input.device)).to(torch.float32)
    return out.movedim(-1, int(num_classes))


def npu_pad(input, paddings):
    """torch_npu.npu_pad(input, paddings) -> Tensor: zeros before and after each dim, paddings listing
    (before, after) from the first dim on (torch's pad lists them from the last)."""
    pairs = int_list(paddings)
    flipped = [n for dim in reversed(range(len(pairs) // 2)) for n in pairs[2 * dim:2 * dim + 2]]
    return torch.nn.functional.pad(input, flipped)


def npu_reshape(self, shape, can_refresh=False):
    """torch_npu.npu_reshape(self, shape, can_refresh=False) -> Tensor: the same data in shape."""
    return self.reshape(int_list(shape)).clone()


def _extreme(self, dim, keepdim, largest: bool):
    values, indices = (torch.max if largest else torch.min)(self, int(dim), keepdim=bool(keepdim))
    return values, indices.to(torch.int32)


def npu_max(self, dim, keepdim=False):
    """torch_npu.npu_max(self, dim, keepdim=False) -> (values, indices): torch.max along dim, indices int32."""
    return _extreme(self, dim, keepdim, largest=True)


def npu_min(self, dim, keepdim=False):
    """torch_npu.npu_min(self, dim, keepdim=False) -> (values, indices): torch.min along dim, indices int32."""
    return _extreme(self, dim, keepdim, largest=False)


def npu_indexing(self, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0,
                 shrink_axis_mask=0):
    """torch_npu.npu_indexing(self, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0,
    new_axis_mask=0, shrink_axis_mask=0) -> Tensor

    A strided slice: along dim i, begin[i]:end[i]:strides[i]; bit i of begin_mask (end_mask) set takes the
    dim from its start (to its end). The ellipsis, new-axis and shrink masks are not computed here."""
    if int(ellipsis_mask) or int(new_axis_mask) or int(shrink_axis_mask):
        raise UnjudgedFusedCall("ellipsis_mask, new_axis_mask and shrink_axis_mask have no reference here")
    if any(step <= 0 for step in int_list(strides)):
        raise UnjudgedFusedCall("a negative or zero stride has no reference here")
    index = tuple(slice(None if int(begin_mask) >> i & 1 else start, None if int(end_mask) >> i & 1 else stop, step)
                  for i, (start, stop, step) in enumerate(zip(int_list(begin), int_list(end), int_list(strides))))
    return self[index].contiguous()


def npu_masked_fill_range(self, start, end, value, axis=-1):
    """torch_npu.npu_masked_fill_range(self, start, end, value, axis=-1) -> Tensor

    self (N, D); start and end (num, R) int32; value (num,): mask k fills row r's elements
    start[k, r]:end[k, r] along the last dim with value[k], masks in order (rows past R untouched)."""
    if self.dim() != 2 or int(axis) not in (-1, 1):
        raise UnjudgedFusedCall(f"a {self.dim()}-D input filled along axis {axis} has no reference here (only 2-D "
                                f"along the last axis, as documented)")
    out = self.clone()
    columns = torch.arange(self.shape[-1], device=self.device)
    rows = min(start.shape[1], self.shape[0])
    for k in range(start.shape[0]):  # masks in order: a later one overwrites an earlier
        inside = (columns >= start[k, :rows, None]) & (columns < end[k, :rows, None])
        out[:rows] = torch.where(inside, value[k].to(self.dtype), out[:rows])
    return out


def scatter_update(data, indices, updates, axis):
    """torch_npu.scatter_update(data, indices, updates, axis) -> Tensor: a copy of data whose slices
    indices[i] along axis are updates' slices i (1-D indices; data itself is not written)."""
    if indices.dim() != 1:
        raise UnjudgedFusedCall("2-D indices (batch, position pairs) have no reference here")
    return data.index_copy(int(axis), indices.long(), updates.to(data.dtype))


def npu_sign_bits_pack(self, size):
    """torch_npu.npu_sign_bits_pack(self, size) -> Tensor

    1-bit Adam's packing: bit j of byte i set where self[8i + j] >= 0 (least significant bit first), self
    padded with -1.0 to a multiple of 8; uint8, reshaped to (size, -1)."""
    flat = self.reshape(-1)
    padded = torch.cat([flat, flat.new_full(((-flat.numel()) % 8,), -1.0)])
    bits = (padded >= 0).to(torch.int64).reshape(-1, 8)
    weights = torch.tensor([1 << j for j in range(8)], dtype=torch.int64, device=self.device)
    return (bits * weights).sum(-1).to(torch.uint8).reshape(int(size), -1)


def npu_sign_bits_unpack(input, size, dtype):
    """torch_npu.npu_sign_bits_unpack(input, size, dtype) -> Tensor: each uint8's 8 bits, least significant
    first, as +1.0 (set) or -1.0, reshaped to (size, -1); dtype torch.float16 or 1 gives float16, else float32."""
    half = dtype in (torch.float16, 1)
    shifts = torch.arange(8, device=input.device)
    bits = (input.reshape(-1, 1).to(torch.int64) >> shifts) & 1
    signs = bits.to(torch.float32) * 2 - 1
    return signs.to(torch.float16 if half else torch.float32).reshape(int(size), -1)


def one(self):
    """torch_npu.one_(self) -> Tensor: self filled with ones (torch_npu writes in place; the reference
    returns the result, by which the in-place spelling is judged)."""
    return torch.ones_like(self)


OPS = (
    FusedOp("npu_dtype_cast", npu_dtype_cast, "npu_dtype_cast(input, dtype, input_dtype=None)", "output",
            "an input_dtype other than the input's (a reinterpretation)"),
    FusedOp("npu_one_hot", npu_one_hot, "npu_one_hot(input, num_classes=-1, depth=1, on_value=1, off_value=0)",
            "output (float32)"),
    FusedOp("npu_pad", npu_pad, "npu_pad(input, paddings)", "output"),
    FusedOp("npu_reshape", npu_reshape, "npu_reshape(self, shape, can_refresh=False)", "output"),
    FusedOp("npu_max", npu_max, "npu_max(self, dim, keepdim=False)", "values, indices (int32)"),
    FusedOp("npu_min", npu_min, "npu_min(self, dim, keepdim=False)", "values, indices (int32)"),
    FusedOp("npu_indexing", npu_indexing,
            "npu_indexing(self, begin, end, strides, begin_mask=0, end_mask=0, ellipsis_mask=0, new_axis_mask=0, "
            "shrink_axis_mask=0)", "output", "ellipsis, new-axis and shrink masks; negative strides"),
    FusedOp("npu_masked_fill_range", npu_masked_fill_range, "npu_masked_fill_range(self, start, end, value, axis=-1)",
            "output", "inputs other than 2-D filled along the last axis"),
    FusedOp("scatter_update", scatter_update, "scatter_update(data, indices, updates, axis)", "output",
            "2-D indices"),
    FusedOp("npu_sign_bits_pack", npu_sign_bits_pack, "npu_sign_bits_pack(self, size)", "output (uint8)"),
    FusedOp("npu_sign_bits_unpack", npu_sign_bits_unpack, "npu_sign_bits_unpack(input, size, dtype)",
            "output (float16 or float32)"),
    FusedOp("one", one, "one_(self)", "output (ones, self's shape and dtype)"),
)
