"""Term norms of softmax's, softmin's and log_softmax's input gradients: where a fair kernel's error comes from.

Backward runs from the saved output, rounded to its dtype. softmax's dx = y * (g - sum(y g)) cancels
where g_i is near the row's weighted mean, and carries y's rounding into both terms: a fair float16
kernel on a row of wide scores (|x| ~ 20) erred 6x past a bound scaled by |dx| alone.
log_softmax's dx = g - p * sum(g) cancels likewise, with p = exp(out) relatively as rounded as out
is (u |out|).

Forward, softmax's p_i = exp(x_i - max) / sum is relatively accurate however small: exp turns the
rounding of its argument into a relative error of u |x_i - max|, and the sum of positive terms errs
relatively. Its term norm p |x - max| keeps the bound relative, where the plain bound's floor of the
output's RMS let a tiny probability ten times too large pass. log_softmax's error is absolute (a
difference), which the plain bound already is.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from ..op_arguments import argument


def softmax_dim(x: torch.Tensor, dim: int | None) -> int:
    """The dim softmax normalizes: ``dim``, or torch's legacy implicit one."""
    return (0 if x.dim() in (0, 1, 3) else 1) if dim is None else dim


def _parts(args: Sequence[Any], kwargs: Mapping[str, Any]) -> tuple[torch.Tensor, int]:
    x = argument(args, kwargs, 0, "input", "self").detach().double()
    return x, softmax_dim(x, argument(args, kwargs, 1, "dim"))


def forward_terms(op: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.Tensor:
    """softmax's and softmin's term norms: p |x - max| along the normalized dim."""
    x, dim = _parts(args, kwargs)
    if op == "softmin":
        x = -x
    if x.dim() == 0:
        return torch.zeros_like(x)
    shifted = (x - x.amax(dim, keepdim=True)).abs()
    return torch.nan_to_num(torch.softmax(x, dim) * shifted, nan=0.0, posinf=0.0)


def log_sum_exp_size(args: Sequence[Any], kwargs: Mapping[str, Any]) -> torch.Tensor:
    """|logsumexp(x)| along the normalized dim, kept: what log_softmax subtracts from every element of
    a row, rounded once, so its rounding is a common offset of u times it."""
    x, dim = _parts(args, kwargs)
    if x.dim() == 0:
        return x.abs()
    return torch.nan_to_num(torch.logsumexp(x, dim, keepdim=True).abs(), nan=0.0, posinf=0.0)


def gradient_terms(op: str, args: Sequence[Any], kwargs: Mapping[str, Any],
                   cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    x, dim = _parts(args, kwargs)
    if op == "softmin":  # softmax of -x: the same terms of its own output
        x = -x
    g = cotangent.detach().double().to(x.device)
    y = torch.softmax(x, dim).nan_to_num()
    if op == "log_softmax":
        out = torch.log_softmax(x, dim)
        size = torch.where(torch.isfinite(out), out.abs(), torch.zeros_like(out))
        return {"input": g.abs() + y * (1 + size) * g.sum(dim, keepdim=True).abs()
                + y * g.abs().sum(dim, keepdim=True)}
    weighted = (y * g).sum(dim, keepdim=True)
    return {"input": y * (g.abs() + weighted.abs() + (y * g.abs()).sum(dim, keepdim=True))}


def logsumexp_gradient_terms(args: Sequence[Any], kwargs: Mapping[str, Any],
                             cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    """logsumexp's dx = g exp(x - out) reads the saved out, rounded to its dtype: exp turns the
    roundings of out and of x - out into a relative error of u (|out| + |x - out|) in each dx."""
    x = argument(args, kwargs, 0, "input", "self").detach().double()
    dim = argument(args, kwargs, 1, "dim")
    dims = [d % max(x.dim(), 1) for d in ((dim,) if isinstance(dim, int) else dim)] if x.dim() else []
    out = x.logsumexp(dims, keepdim=True) if dims else x.clone()
    g = cotangent.detach().double().to(x.device)
    if not argument(args, kwargs, 2, "keepdim", default=False):
        for d in sorted(dims):
            g = g.unsqueeze(d)
    shifted = x - out
    size = torch.where(torch.isfinite(out), out.abs(), torch.zeros_like(out)) + shifted.abs()
    return {"input": torch.nan_to_num(g.abs() * shifted.exp() * size, nan=0.0, posinf=0.0)}
