"""What a fair centring normalization rounds: its term norms, forward and backward.

batch_norm, layer_norm, group_norm and instance_norm compute x - mean. When the values sit far
from their mean (2 values per channel at 1x1, a row whose mean is 100x its std), that difference
cancels: a kernel that rounds x and the mean once each errs by u * (|x| + |mean|) before it
multiplies by invstd, however small the normalized result. Such a kernel is backward stable (one
ulp moved in its inputs explains its error), so the error bound must scale with the pre-centring
magnitudes, not with the result: per element (|x| + |mean|) * invstd * |w| + |b| forward, and the
same magnitudes carried through each gradient's terms.

Every function reads the op's own arguments, raises the inputs to float64, and returns term norms
broadcastable to the output or gradient it scales.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..op_arguments import argument


def _double(t: Any) -> torch.Tensor | None:
    return t.detach().double() if isinstance(t, torch.Tensor) else None


@dataclass(frozen=True)
class _Centred:
    """One normalization call, every tensor expanded to the input's shape."""

    x: torch.Tensor
    mean: torch.Tensor
    spread: torch.Tensor  # what the mean's own rounding scales with: mean(|x|), or |running_mean|
    invstd: torch.Tensor
    weight: torch.Tensor  # ones where the call has none
    bias: torch.Tensor | None
    dims: tuple[int, ...]  # the dims each mean runs over (of the grouped view, see ``grouped``)
    batch_stats: bool  # the statistics come from this batch, so the gradient flows through them
    groups: int = 0  # group_norm: the input is viewed as [N, groups, -1] for its statistics

    @property
    def magnitude(self) -> torch.Tensor:
        """|x - mean| as a fair kernel computes it: up to u * (|x| + mean |x|) off, in invstd units
        (the mean is a sum of the |x| it averages, and errs with them, even where it is near zero)."""
        return (self.x.abs() + self.spread) * self.invstd

    @property
    def normalized(self) -> torch.Tensor:
        return (self.x - self.mean) * self.invstd

    def grouped(self, t: torch.Tensor) -> torch.Tensor:
        """An input-shaped tensor viewed so that ``dims`` run over each statistic's values."""
        return t.reshape(t.shape[0], self.groups, -1) if self.groups else t

    def reduce_mean(self, t: torch.Tensor) -> torch.Tensor:
        """The mean over the statistics' dims, expanded back to the input's shape."""
        view = self.grouped(t)
        return view.mean(dim=self.dims, keepdim=True).expand(view.shape).reshape(t.shape)


def _statistics(x: torch.Tensor, dims: tuple[int, ...], eps: float,
                groups: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """mean, mean(|x|) and invstd over ``dims``, expanded to x's shape."""
    view = x.reshape(x.shape[0], groups, -1) if groups else x

    def expanded(t: torch.Tensor) -> torch.Tensor:
        return t.expand(view.shape).reshape(x.shape)

    var = view.var(dim=dims, keepdim=True, unbiased=False)
    return (expanded(view.mean(dim=dims, keepdim=True)), expanded(view.abs().mean(dim=dims, keepdim=True)),
            expanded((var + eps).rsqrt()))


def _per_channel(t: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
    """A [C] tensor broadcast along dim 1 of x."""
    if t is None:
        return None
    return t.reshape([1, -1] + [1] * (x.dim() - 2)).expand(x.shape)


def _batch_norm(args, kwargs) -> _Centred:
    x = _double(argument(args, kwargs, 0, "input"))
    running_mean, running_var = _double(argument(args, kwargs, 1, "running_mean")), _double(argument(args, kwargs, 2, "running_var"))
    weight, bias = _double(argument(args, kwargs, 3, "weight")), _double(argument(args, kwargs, 4, "bias"))
    training = bool(argument(args, kwargs, 5, "training", default=False)) or running_mean is None
    eps = float(argument(args, kwargs, 7, "eps", default=1e-5))
    dims = tuple(d for d in range(x.dim()) if d != 1)
    if training:
        mean, spread, invstd = _statistics(x, dims, eps)
    else:
        mean, invstd = _per_channel(running_mean, x), _per_channel((running_var + eps).rsqrt(), x)
        spread = mean.abs()
    return _Centred(x, mean, spread, invstd, _ones_or(_per_channel(weight, x), x), _per_channel(bias, x), dims, training)


def _instance_norm(args, kwargs) -> _Centred:
    x = _double(argument(args, kwargs, 0, "input"))
    weight, bias = _double(argument(args, kwargs, 3, "weight")), _double(argument(args, kwargs, 4, "bias"))
    eps = float(argument(args, kwargs, 7, "eps", default=1e-5))
    dims = tuple(range(2, x.dim()))
    mean, spread, invstd = _statistics(x, dims, eps)
    return _Centred(x, mean, spread, invstd, _ones_or(_per_channel(weight, x), x), _per_channel(bias, x), dims, True)


def _layer_norm(args, kwargs) -> _Centred:
    x = _double(argument(args, kwargs, 0, "input"))
    shape = argument(args, kwargs, 1, "normalized_shape")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    weight, bias = _double(argument(args, kwargs, 2, "weight")), _double(argument(args, kwargs, 3, "bias"))
    eps = float(argument(args, kwargs, 4, "eps", default=1e-5))
    dims = tuple(range(x.dim() - len(shape), x.dim()))
    mean, spread, invstd = _statistics(x, dims, eps)
    expand = (lambda t: None if t is None else t.expand(x.shape))
    return _Centred(x, mean, spread, invstd, _ones_or(expand(weight), x), expand(bias), dims, True)


def _group_norm(args, kwargs) -> _Centred:
    x = _double(argument(args, kwargs, 0, "input"))
    groups = int(argument(args, kwargs, 1, "num_groups"))
    weight, bias = _double(argument(args, kwargs, 2, "weight")), _double(argument(args, kwargs, 3, "bias"))
    eps = float(argument(args, kwargs, 4, "eps", default=1e-5))
    mean, spread, invstd = _statistics(x, (2,), eps, groups)
    return _Centred(x, mean, spread, invstd, _ones_or(_per_channel(weight, x), x), _per_channel(bias, x), (2,), True,
                    groups)


def _ones_or(t: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(x) if t is None else t


_READERS = {"batch_norm": _batch_norm, "instance_norm": _instance_norm, "layer_norm": _layer_norm,
            "group_norm": _group_norm}
# Positional names of each op's differentiable arguments, to match a gradient's path.
ARGUMENTS = {
    "batch_norm": ("input", "running_mean", "running_var", "weight", "bias"),
    "instance_norm": ("input", "running_mean", "running_var", "weight", "bias"),
    "layer_norm": ("input", "normalized_shape", "weight", "bias"),
    "group_norm": ("input", "num_groups", "weight", "bias"),
}


def forward_terms(op: str, args, kwargs) -> torch.Tensor:
    """(|x| + mean |x|) * invstd * |w| + |b|, per output element."""
    c = _READERS[op](args, kwargs)
    terms = c.magnitude * c.weight.abs()
    return terms if c.bias is None else terms + c.bias.abs()


def mean_terms(op: str, args, kwargs) -> torch.Tensor:
    """Per statistic, flat in its order: the L2 norm of the terms x / n its mean sums. A mean near zero
    still errs with the values it averages, as any sum does."""
    c = _READERS[op](args, kwargs)
    return _mean_norm(c.grouped(c.x), c.dims)


def invstd_terms(op: str, args, kwargs) -> torch.Tensor | None:
    """Per statistic, flat in its order: the term norm of the saved invstd (rstd), 1/sqrt(var + eps),
    which moves by invstd³/2 per unit of var; var sums (x - mean)², whose terms cancel in x - mean as
    var's do (|x - mean|·2(|x| + mean |x|)/N each), so a fair kernel's rstd errs with the values'
    distance from their mean: torch's float32 group_norm rstd of values 5000 spreads from zero errs 1300 u.
    None with running statistics: the kernel sums nothing then."""
    c = _READERS[op](args, kwargs)
    if not c.batch_stats:
        return None
    terms = (c.x - c.mean).abs() * 2 * (c.x.abs() + c.spread)  # var's, over N: a mean's
    invstd = c.grouped(c.invstd).amax(dim=c.dims).reshape(-1)  # one value per statistic
    return 0.5 * invstd.pow(3) * _mean_norm(c.grouped(terms), c.dims)


def _mean_norm(x: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    """The L2 norm of the terms x / n of each mean over ``dims``, flat."""
    count = math.prod(x.shape[d] for d in dims) if x.dim() else 1
    return x.square().sum(dim=dims).sqrt().reshape(-1) / max(count, 1)


def offset_over_spread(op: str, args, kwargs) -> torch.Tensor:
    """mean * invstd per output element, signed: how far the values sit from zero in units of their
    spread. A one-pass variance, E[x^2] - mean^2, errs with its square (row_statistics.RowSums)."""
    c = _READERS[op](args, kwargs)
    return c.mean * c.invstd


def affine(op: str, args, kwargs) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight (ones without one) and the bias (None without one), expanded to the output."""
    c = _READERS[op](args, kwargs)
    return c.weight, c.bias


def gradient_terms(op: str, args, kwargs, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    """Term norms of the input's, the weight's and the bias's gradients, by argument name.

    With batch statistics, dx = invstd * (h - mean(h) - x^ * mean(h * x^)) for h = g * w: each
    term carries x^'s error u * |x - mean|-before-cancellation, and invstd its own, as large. With
    running statistics dx = g * w * invstd cancels nothing and gets no term norm. dw sums g * x^
    and db sums g over the statistics' dims: their terms' L2 norms, as for any sum.
    """
    c = _READERS[op](args, kwargs)
    g = cotangent.detach().double().to(c.x.device).expand(c.x.shape)
    h = g * c.weight
    found: dict[str, torch.Tensor] = {}
    if c.batch_stats:
        x_hat, size = c.normalized, c.magnitude
        bracket = h - c.reduce_mean(h) - x_hat * c.reduce_mean(h * x_hat)
        spread = c.reduce_mean(size * x_hat.abs())  # invstd's relative error, from the variance's sum
        found["input"] = c.invstd * (h.abs() + c.reduce_mean(h.abs()) + size * c.reduce_mean(h * x_hat).abs()
                                     + x_hat.abs() * c.reduce_mean(h.abs() * size) + bracket.abs() * spread)
    weight_terms = g.abs() * (c.magnitude + c.normalized.abs())
    target = _parameter_shape(op, args, kwargs, c.x)
    if target is not None:
        found["weight"] = _summed_norm(weight_terms, target)
        found["bias"] = _summed_norm(g, target)
    return found


def _parameter_shape(op: str, args, kwargs, x: torch.Tensor) -> tuple[int, ...] | None:
    """The weight's shape as broadcast over the input: [1, C, 1, ...] or the normalized shape."""
    if op == "layer_norm":
        shape = argument(args, kwargs, 1, "normalized_shape")
        return (shape,) if isinstance(shape, int) else tuple(shape)
    return (1, x.shape[1]) + (1,) * (x.dim() - 2) if x.dim() >= 2 else None


def _summed_norm(terms: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    norm = terms.square().sum_to_size(shape).sqrt()
    return norm.reshape(-1) if len(shape) > 1 and shape[0] == 1 else norm


@dataclass(frozen=True)
class _Reduced:
    """One var, std, var_mean or std_mean call: its input in float64 and the dims it reduces."""

    x: torch.Tensor
    dims: tuple[int, ...]
    correction: float
    keepdim: bool

    @property
    def count(self) -> int:
        return math.prod(self.x.shape[d] for d in self.dims) if self.x.dim() else 1

    @property
    def divisor(self) -> float:
        return max(self.count - self.correction, 1.0)

    def centred_terms(self) -> torch.Tensor:
        """Per input element, 2 (|x| + mean |x|) / (N - correction): what one rounding of x - mean in the
        sum of squares costs, per unit of |x - mean| (and of the gradient's cotangent)."""
        return 2 * (self.x.abs() + self.x.abs().mean(self.dims, keepdim=True)) / self.divisor

    def std(self) -> torch.Tensor:
        return self.x.var(self.dims, correction=self.correction, keepdim=True).sqrt()

    def result_shaped(self, t: torch.Tensor) -> torch.Tensor:
        """A keepdim reduction's result, shaped as the call's output."""
        return t if self.keepdim else t.reshape([n for d, n in enumerate(t.shape) if d not in self.dims])


def _reduced(args, kwargs) -> _Reduced | None:
    """var(input, dim, unbiased, keepdim) as of old, var(input, dim, *, correction, keepdim) as of now;
    a bool in dim's place is the legacy ``unbiased`` over every dim."""
    x = _double(argument(args, kwargs, 0, "input", "self"))
    if x is None or not x.numel():
        return None
    dim = argument(args, kwargs, 1, "dim")
    unbiased = dim if isinstance(dim, bool) else kwargs.get("unbiased", args[2] if len(args) > 2 and
                                                              isinstance(args[2], bool) else True)
    if dim is None or isinstance(dim, bool) or (isinstance(dim, (list, tuple)) and not dim):
        dims = tuple(range(x.dim()))
    else:
        dims = tuple(d % max(x.dim(), 1) for d in (dim if isinstance(dim, (list, tuple)) else (dim,)))
    correction = kwargs.get("correction")
    correction = float(1 if unbiased else 0) if correction is None else float(correction)
    keepdim = bool(kwargs.get("keepdim", args[3] if len(args) > 3 and isinstance(args[3], bool) else False))
    return _Reduced(x, dims, correction, keepdim)


def statistic_terms(op: str, args, kwargs) -> torch.Tensor | None:
    """var's (std's) output: the sum of (x - mean)^2 cancels in x - mean as a centring normalization
    does (a Welford kernel's running mean errs with |x|, as CUDA's does): per output element, the L2
    norm of |x - mean| 2 (|x| + mean |x|) / (N - correction), over 2 std for std."""
    r = _reduced(args, kwargs)
    if r is None:
        return None
    terms = (r.x - r.x.mean(r.dims, keepdim=True)).abs() * r.centred_terms()
    norm = terms.square().sum(r.dims, keepdim=True).sqrt()
    if op in ("std", "std_mean"):
        norm = norm / (2 * r.std()).clamp(min=torch.finfo(torch.float64).tiny)
    return r.result_shaped(norm)


def statistic_mean_terms(args, kwargs) -> torch.Tensor | None:
    """var_mean's and std_mean's mean (output.1): the L2 norm of the x / N it sums, flat."""
    r = _reduced(args, kwargs)
    return None if r is None else _mean_norm(r.x, r.dims)


def statistic_gradient_terms(op: str, args, kwargs, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    """var's input gradient 2 (x - mean) g / (N - correction) (std's, over 2 std) cancels in x - mean
    as a centring normalization does: its terms scale with |x| + mean |x|, not with the result."""
    r = _reduced(args, kwargs)
    if r is None:
        return {}
    g = cotangent.detach().double().to(r.x.device)
    for d in sorted(r.dims):  # the reduced dims back, where keepdim dropped them
        if g.dim() < r.x.dim():
            g = g.unsqueeze(d)
    terms = r.centred_terms() * g.abs()
    if op in ("std", "std_mean"):
        terms = terms / (2 * r.std()).clamp(min=torch.finfo(torch.float64).tiny)
    return {"input": terms.expand(r.x.shape)}
