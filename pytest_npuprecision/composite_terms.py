"""Term norms of functionals torch composes from several ops, whose gradients add paths that cancel.

Autograd differentiates ``softsign(x) = x / (1 + |x|)`` and ``normalize(x) = x / ||x||`` through each
use of x and adds the paths: g / (1 + |x|) - g |x| / (1 + |x|)^2 for softsign, which leaves
g / (1 + |x|)^2 ten times smaller at |x| = 9; g / N - dN * sum(g x) / N^2 for normalize, which
leaves exactly 0 over a dim of one element (the result is sign(x)). A fair kernel rounds each path,
so its error follows the paths' magnitudes, not the result: those are the term norms.
"""

from __future__ import annotations

import torch

from .call_arguments import argument


def _double(t) -> torch.Tensor:
    return t.detach().double()


def softsign_gradient_terms(args, kwargs, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    x = _double(argument(args, kwargs, 0, "input"))
    g = _double(cotangent).to(x.device).abs()
    denominator = 1 + x.abs()
    return {"input": g / denominator + g * x.abs() / denominator.square()}


def normalize_gradient_terms(args, kwargs, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    x = _double(argument(args, kwargs, 0, "input")).requires_grad_()
    p = argument(args, kwargs, 1, "p", default=2.0)
    dim = argument(args, kwargs, 2, "dim", default=1)
    eps = argument(args, kwargs, 3, "eps", default=1e-12)
    g = _double(cotangent).to(x.device).abs()
    with torch.enable_grad():
        norm = x.norm(p, dim, keepdim=True)
        slope, = torch.autograd.grad(norm.sum(), x)  # dN/dx_i, each element's own norm
    norm = norm.detach().clamp_min(eps)
    through_norm = slope.abs() * (g * x.detach().abs()).sum(dim, keepdim=True) / norm.square()
    return {"input": g / norm + torch.nan_to_num(through_norm, nan=0.0)}
