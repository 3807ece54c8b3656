"""Grouped matmul (MoE experts): y_g = x_g @ w_g + b_g for each group of rows (or of K)."""

from __future__ import annotations

import torch

from .opmath import int_list, opmath_dtype
from .record import FusedOp, UnjudgedFusedCall

_ACTIVATIONS = {
    0: lambda y: y,
    1: torch.relu,
    2: lambda y: torch.nn.functional.gelu(y, approximate="tanh"),
    4: lambda y: y * torch.sigmoid(1.702 * y),
    5: torch.nn.functional.silu,
}


def group_sizes(group_list, group_list_type: int | None) -> list[tuple[int, int]]:
    """(weight index, rows) per group. A list of ints is cumulative; a tensor follows group_list_type:
    0 cumulative ends, 1 sizes, 2 [[weight index, size], ...]."""
    if isinstance(group_list, torch.Tensor) and int(group_list_type or 0) == 2:
        return [(int(i), int(n)) for i, n in group_list.reshape(-1, 2).tolist()]
    values = int_list(group_list)
    if isinstance(group_list, torch.Tensor) and int(group_list_type or 0) == 1:
        return list(enumerate(values))
    ends = [0] + values
    return [(g, ends[g + 1] - ends[g]) for g in range(len(values))]


def _weights(weight, count: int) -> list[torch.Tensor]:
    """A list of [K, N] matrices, or one [G, K, N] tensor, as G matrices."""
    if len(weight) == 1 and weight[0].dim() == 3:
        return list(weight[0].unbind(0))
    if len(weight) == 1 and count > 1:
        return [weight[0]] * count
    return list(weight)


def _biases(bias, count: int):
    if bias is None:
        return [None] * count
    bias = [bias] if isinstance(bias, torch.Tensor) else list(bias)
    if len(bias) == 1 and bias[0].dim() == 2:
        return list(bias[0].unbind(0))
    return bias


def _matmul(x, w, b, dtype, act):
    y = x.to(dtype) @ w.to(dtype)
    return act(y if b is None else y + b.to(dtype))


def _grouped_rows(x, groups, width: int, dtype, product):
    """One x [M, K] cut into row groups, each group's rows ``product(index, rows)``; rows after the last
    group give zeros (the device leaves them unset), [M - covered, width] of ``dtype``."""
    outs, start = [], 0
    for index, size in groups:
        outs.append(product(index, slice(start, start + size)))
        start += size
    if start > x.shape[0]:
        raise ValueError(f"group_list covers {start} rows, x has {x.shape[0]}")
    tail = torch.zeros(x.shape[0] - start, width, dtype=dtype, device=x.device)
    return outs, tail


def _grouped_k(x, weight, groups, dtype):
    """k-axis groups: y_g = x[:, K_g] @ w[K_g, :], stacked as [G, M, N]."""
    outs, start = [], 0
    for _, size in groups:
        outs.append(x[:, start:start + size].to(dtype) @ weight[start:start + size].to(dtype))
        start += size
    return torch.stack(outs)


def npu_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None, antiquant_offset=None,
                       per_token_scale=None, group_list=None, activation_input=None, activation_quant_scale=None,
                       activation_quant_offset=None, split_item=0, group_type=None, group_list_type=0, act_type=0,
                       output_dtype=None, tuning_config=None):
    """torch_npu.npu_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None,
    antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None,
    activation_quant_scale=None, activation_quant_offset=None, split_item=0, group_type=None,
    group_list_type=0, act_type=0, output_dtype=None, tuning_config=None) -> List[Tensor]

    Quantised row groups as _Dequantized computes them. Without group_list, y_i = x_i @ weight_i + bias_i for
    lists of equal length.
    With group_list the one x [M, K] is cut into row groups (group_type None, -1 or 0; weight a list
    of [K, N] or one [G, K, N]), or for group_type 2 its K is cut against one weight [K, N] into a
    [G, M, N] output. split_item 0/1 returns one tensor per group, 2/3 one tensor (the groups
    concatenated, rows past the last group zero). act_type: 0 none, 1 relu, 2 tanh gelu, 4 fast
    gelu, 5 silu.
    """
    xs = [x] if isinstance(x, torch.Tensor) else list(x)
    weights = [weight] if isinstance(weight, torch.Tensor) else list(weight)
    if int(act_type) not in _ACTIVATIONS:
        raise UnjudgedFusedCall(f"act_type {act_type} has no reference here: 0, 1, 2, 4 and 5 do")
    act = _ACTIVATIONS[int(act_type)]
    quantised = _Dequantized.of(xs, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, output_dtype)
    if quantised is not None:
        if group_list is None or (group_type is not None and int(group_type) == 2):
            raise UnjudgedFusedCall("a quantised grouped matmul without row groups has no reference here")
        return quantised.rows(xs[0], weights, bias, group_sizes(group_list, group_list_type), act,
                              single=int(split_item) in (2, 3))
    out_dtype = output_dtype or xs[0].dtype
    dtype = opmath_dtype(xs[0].dtype)
    single = int(split_item) in (2, 3)
    if group_list is None:
        biases = _biases(bias, len(weights))
        outs = [_matmul(xi, wi, bi, dtype, act) for xi, wi, bi in zip(xs, _weights(weights, len(xs)), biases)]
        outs = [torch.cat(outs)] if single else outs
    elif group_type is not None and int(group_type) == 2:
        outs = [_grouped_k(xs[0], weights[0], group_sizes(group_list, group_list_type), dtype)]
    else:
        groups = group_sizes(group_list, group_list_type)
        count = max((index for index, _ in groups), default=-1) + 1
        weights, biases = _weights(weights, count), _biases(bias, count)
        outs, tail = _grouped_rows(xs[0], groups, weights[0].shape[-1], dtype,
                                   lambda g, rows: _matmul(xs[0][rows], weights[g], biases[g], dtype, act))
        outs = [torch.cat(outs + [tail])] if single else outs
    return [y.to(out_dtype) for y in outs]


class _Dequantized:
    """A quantised grouped matmul's row groups (the formulas of torch_npu's docs): int8 x and weight
    multiply exactly (int32 accumulation); an int32 bias adds before the scale, a float one after it;
    scale is per group and output channel, offset adds after it, per_token_scale multiplies each row.
    Pseudo-quantised (float x, int8 weight): the weight is (w + antiquant_offset) * antiquant_scale."""

    def __init__(self, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, dtype, output_dtype):
        self.scale, self.offset, self.per_token_scale = scale, offset, per_token_scale
        self.antiquant_scale, self.antiquant_offset = antiquant_scale, antiquant_offset
        self.dtype, self.output_dtype = dtype, output_dtype

    @classmethod
    def of(cls, xs, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, output_dtype):
        given = [_first(v) for v in (scale, offset, antiquant_scale, antiquant_offset, per_token_scale) if v is not None]
        if not given:
            return None
        floats = [t for t in given if t.is_floating_point()]
        if scale is not None and not _first(scale).is_floating_point():
            raise UnjudgedFusedCall("an int64 scale (packed by npu_trans_quant_param) has no reference here")
        if antiquant_scale is None and (output_dtype is None or not output_dtype.is_floating_point):
            raise UnjudgedFusedCall("an int8 output (its rounding and saturation) has no reference here")
        wide = torch.float64 if any(t.dtype == torch.float64 for t in floats) else torch.float32
        return cls(scale, offset, antiquant_scale, antiquant_offset, per_token_scale, wide, output_dtype)

    def rows(self, x, weights, bias, groups, act, single: bool):
        count = max((index for index, _ in groups), default=-1) + 1
        weights, biases = _weights(weights, count), _biases(bias, count)
        scales, offsets = self._each(self.scale, count), self._each(self.offset, count)
        a_scales, a_offsets = self._each(self.antiquant_scale, count), self._each(self.antiquant_offset, count)

        def product(index: int, rows: slice) -> torch.Tensor:
            w = weights[index].to(self.dtype)
            if a_scales[index] is not None:
                w = (w + (0 if a_offsets[index] is None else a_offsets[index].to(self.dtype))) \
                    * a_scales[index].to(self.dtype)
            y = x[rows].to(self.dtype) @ w
            b = biases[index]
            integer_bias = b is not None and not b.is_floating_point()
            if integer_bias:
                y = y + b.to(self.dtype)
            if scales[index] is not None:
                y = y * scales[index].to(self.dtype)
            if offsets[index] is not None:
                y = y + offsets[index].to(self.dtype)
            if self.per_token_scale is not None:
                y = y * _first(self.per_token_scale).to(self.dtype)[rows, None]
            if b is not None and not integer_bias:
                y = y + b.to(self.dtype)
            return act(y)

        outs, tail = _grouped_rows(x, groups, weights[0].shape[-1], self.dtype, product)
        outs = [torch.cat(outs + [tail])] if single else outs
        return [y.to(self.output_dtype or x.dtype) for y in outs]

    @staticmethod
    def _each(value, count: int) -> list:
        """One tensor per group: from a list, or the rows of one [G, N] tensor; None where absent."""
        if value is None:
            return [None] * count
        values = [value] if isinstance(value, torch.Tensor) else list(value)
        if len(values) == 1 and values[0].dim() == 2 and values[0].shape[0] == count:
            return list(values[0].unbind(0))
        return values * count if len(values) == 1 else values


def _first(value) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else value[0]


def npu_gmm(x, weight, *, bias=None, group_list=None, group_type=0):
    """MindSpeed's npu_gmm(x, weight, *, bias=None, group_list=None, group_type=0) -> Tensor

    group_list holds cumulative ends. group_type 0: x [M, K] row groups against weight [G, K, N],
    out [M, N]; group_type 2: K groups against weight [K, N], out [G, M, N].
    """
    return _gmm(x, weight, bias, group_list, group_type, counts=False)


def npu_gmm_v2(x, weight, *, bias=None, group_list=None, group_type=0):
    """MindSpeed's npu_gmm_v2(x, weight, *, bias=None, group_list=None, group_type=0) -> Tensor:
    npu_gmm with group_list holding each group's size."""
    return _gmm(x, weight, bias, group_list, group_type, counts=True)


def _gmm(x, weight, bias, group_list, group_type, counts: bool):
    group_list = torch.as_tensor(int_list(group_list))
    return npu_grouped_matmul(
        [x], [weight], bias=None if bias is None else [bias], group_list=group_list, split_item=3,
        group_type=int(group_type), group_list_type=1 if counts else 0)[0]


OPS = (
    FusedOp("npu_grouped_matmul", npu_grouped_matmul,
            "npu_grouped_matmul(x, weight, *, bias=None, scale=None, offset=None, antiquant_scale=None, "
            "antiquant_offset=None, per_token_scale=None, group_list=None, activation_input=None, "
            "activation_quant_scale=None, activation_quant_offset=None, split_item=0, group_type=None, "
            "group_list_type=0, act_type=0, output_dtype=None, tuning_config=None)",
            "list of y (one per group for split_item 0/1, one tensor for 2/3)",
            "quantised calls without row groups, an int64 (packed) scale, an int8 output; act_type 3"),
    FusedOp("npu_gmm", npu_gmm, "npu_gmm(x, weight, *, bias=None, group_list=None, group_type=0)", "y",
            "MindSpeed's op: gemm_fusion and original_weight are not accepted"),
    FusedOp("npu_gmm_v2", npu_gmm_v2, "npu_gmm_v2(x, weight, *, bias=None, group_list=None, group_type=0)", "y",
            "MindSpeed's op: gemm_fusion and original_weight are not accepted"),
)
