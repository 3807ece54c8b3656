"""Normalisations: RMSNorm (alone and after a residual add), eval-mode LayerNorm, GroupNorm + SiLU."""

from __future__ import annotations

import torch

from .opmath import opmath_dtype, statistic_dtype, widened
from .record import FusedOp


def rms_normalised(x: torch.Tensor, gamma: torch.Tensor, epsilon: float):
    """(x / rms(x) * gamma, rstd) with the mean over gamma's trailing dims; rstd keeps them as 1."""
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    rstd = torch.rsqrt(x.square().mean(dims, keepdim=True) + float(epsilon))
    return x * rstd * gamma, rstd


def npu_rms_norm(self, gamma, epsilon=1e-06):
    """torch_npu.npu_rms_norm(self, gamma, epsilon=1e-06) -> (y, rstd)

    y = self / sqrt(mean(self^2) + epsilon) * gamma, the mean over the trailing dims gamma covers;
    y in self's dtype, rstd float32 (float64 in a float64 golden) shaped like self with those dims 1.
    """
    dtype = opmath_dtype(self.dtype)
    y, rstd = rms_normalised(self.to(dtype), gamma.to(dtype), epsilon)
    return y.to(self.dtype), rstd.to(statistic_dtype(dtype))


def npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06):
    """torch_npu.npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06) -> (y, rstd, x)

    x = x1 + x2, y = rms_norm(x) * gamma. The docs do not say whether the norm reads the sum before
    or after it is rounded to x1's dtype; a fair kernel keeps it in float32, so the norm reads the
    unrounded sum. y and x in x1's dtype, rstd float32 (float64 in a float64 golden).
    """
    dtype = opmath_dtype(x1.dtype)
    x = x1.to(dtype) + x2.to(dtype)
    y, rstd = rms_normalised(x, gamma.to(dtype), epsilon)
    return y.to(x1.dtype), rstd.to(statistic_dtype(dtype)), x.to(x1.dtype)


def npu_layer_norm_eval(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    """torch_npu.npu_layer_norm_eval(input, normalized_shape, weight=None, bias=None, eps=1e-05) -> Tensor

    LayerNorm with the population variance; weight and bias apply (msprobe's reference drops them).
    """
    dtype = opmath_dtype(input.dtype)
    shape = [int(n) for n in normalized_shape]
    y = torch.nn.functional.layer_norm(input.to(dtype), shape, widened(weight, dtype), widened(bias, dtype),
                                       float(eps))
    return y.to(input.dtype)


def npu_group_norm_silu(input, weight, bias, group, eps=0.00001):
    """torch_npu.npu_group_norm_silu(input, weight, bias, group, eps=0.00001) -> (out, mean, rstd)

    out = silu(group_norm(input) * weight + bias) over channels (dim 1) split into `group` groups;
    mean and rstd are [N, group], all three in input's dtype. weight and bias may be None.
    """
    return _group_norm_swish(input, group, weight, bias, eps, 1.0)


def npu_group_norm_swish(input, num_groups, weight, bias, eps=1e-5, swish_scale=1.0):
    """torch_npu.npu_group_norm_swish(input, num_groups, weight, bias, eps=1e-5, swish_scale=1.0)
    -> (out, mean, rstd)

    npu_group_norm_silu with swish(y) = y * sigmoid(swish_scale * y) in place of silu."""
    return _group_norm_swish(input, num_groups, weight, bias, 1e-5 if eps is None else eps,
                             1.0 if swish_scale is None else swish_scale)


def _group_norm_swish(input, group, weight, bias, eps, swish_scale):
    """(swish(group_norm(input) * weight + bias), mean, rstd) over channels (dim 1) in ``group`` groups; mean and
    rstd [N, group]; all three in input's dtype."""
    dtype = opmath_dtype(input.dtype)
    x = input.to(dtype)
    batch, channels, group = x.shape[0], x.shape[1], int(group)
    grouped = x.reshape(batch, group, -1)
    mean = grouped.mean(-1, keepdim=True)
    rstd = torch.rsqrt((grouped - mean).square().mean(-1, keepdim=True) + float(eps))
    y = ((grouped - mean) * rstd).reshape(x.shape)
    per_channel = (1, channels) + (1,) * (x.dim() - 2)
    if weight is not None:
        y = y * weight.to(dtype).reshape(per_channel)
    if bias is not None:
        y = y + bias.to(dtype).reshape(per_channel)
    out = y * torch.sigmoid(float(swish_scale) * y)
    return out.to(input.dtype), mean.reshape(batch, group).to(input.dtype), rstd.reshape(batch, group).to(input.dtype)


def npu_rms_norm_backward(dy, self, gamma, rstd):
    """torch_npu.npu_rms_norm_backward(dy, self, gamma, rstd) -> (dx, dgamma)

    npu_rms_norm's gradients given the rstd its forward returned: with n the elements gamma covers,
    dx = (dy * gamma - self * rstd * mean(dy * gamma * self * rstd)) * rstd over those dims, and
    dgamma = sum over the leading dims of dy * self * rstd, gamma's shape. dx in self's dtype, dgamma
    float32 (float64 in a float64 golden). msprobe's reference leaves dgamma unsummed."""
    dtype = opmath_dtype(self.dtype)
    x, g, r, grad = self.to(dtype), gamma.to(dtype), rstd.to(dtype), dy.to(dtype)
    dims = tuple(range(x.dim() - gamma.dim(), x.dim()))
    normalised = x * r
    dx = (grad * g - normalised * (grad * g * normalised).mean(dims, keepdim=True)) * r
    dgamma = (grad * normalised).reshape(-1, *gamma.shape).sum(0)
    return dx.to(self.dtype), dgamma.to(statistic_dtype(dtype))


OPS = (
    FusedOp("npu_group_norm_swish", npu_group_norm_swish,
            "npu_group_norm_swish(input, num_groups, weight, bias, eps=1e-5, swish_scale=1.0)",
            "out, mean, rstd (input's dtype)"),
    FusedOp("npu_rms_norm_backward", npu_rms_norm_backward, "npu_rms_norm_backward(dy, self, gamma, rstd)",
            "dx (self's dtype), dgamma (float32)"),
    FusedOp("npu_rms_norm", npu_rms_norm, "npu_rms_norm(self, gamma, epsilon=1e-06)",
            "y, rstd (float32, self's shape with the normalised dims 1)"),
    FusedOp("npu_add_rms_norm", npu_add_rms_norm, "npu_add_rms_norm(x1, x2, gamma, epsilon=1e-06)",
            "y, rstd (float32), x = x1 + x2",
            "the docs leave open whether the norm reads the rounded sum: the reference reads the unrounded one"),
    FusedOp("npu_layer_norm_eval", npu_layer_norm_eval,
            "npu_layer_norm_eval(input, normalized_shape, weight=None, bias=None, eps=1e-05)", "y"),
    FusedOp("npu_group_norm_silu", npu_group_norm_silu, "npu_group_norm_silu(input, weight, bias, group, eps=0.00001)",
            "out, mean [N, group], rstd [N, group] (all in input's dtype)"),
)
