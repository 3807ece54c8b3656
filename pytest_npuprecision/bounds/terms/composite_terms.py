"""Term norms of functionals torch composes from several ops, whose results or gradients cancel.

Autograd differentiates ``softsign(x) = x / (1 + |x|)`` and ``normalize(x) = x / ||x||`` through each
use of x and adds the paths: g / (1 + |x|) - g |x| / (1 + |x|)^2 for softsign, which leaves
g / (1 + |x|)^2 ten times smaller at |x| = 9; g / N - dN * sum(g x) / N^2 for normalize, which
leaves exactly 0 over a dim of one element (the result is sign(x)). A fair kernel rounds each path,
so its error follows the paths' magnitudes, not the result: those are the term norms.
"""

from __future__ import annotations

import torch

from ..op_arguments import argument


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


# Unit roundoffs that a fair vectorized erf or tanh errs by near +-1: torch's CPU gelu errs 4.7 units
# of 2^-24 times |x| at x = -4.6, where torch.erf alone errs 0.54.
APPROXIMATION = 4


_SQRT_2_OVER_PI = 0.7978845608028654
_TANH_CUBIC = 0.044715  # tanh's approximation: f = tanh(sqrt(2 / pi) (x + 0.044715 x^3))


def _gelu_factor(args, kwargs) -> tuple[torch.Tensor, torch.Tensor, bool]:
    """(x in float64, f = erf(x / sqrt 2) or its tanh form, whether the tanh form) of a gelu call."""
    x = _double(argument(args, kwargs, 0, "input"))
    tanh = argument(args, kwargs, 1, "approximate", default="none") == "tanh"
    f = torch.tanh(_SQRT_2_OVER_PI * (x + _TANH_CUBIC * x.pow(3))) if tanh else torch.erf(x * 0.7071067811865476)
    return x, f, tanh


def gelu_terms(args, kwargs) -> torch.Tensor:
    """gelu(x) = x/2 (1 + erf(x / sqrt 2)) (or tanh's approximation): below x of about -3 the factor
    1 + erf cancels to a few ulp of 1, which a fair kernel rounds there; the terms are x/2 and x/2 erf,
    the second to within APPROXIMATION unit roundoffs."""
    x, f, _ = _gelu_factor(args, kwargs)
    return 0.5 * x.abs() * (1 + APPROXIMATION * f.abs())


def gelu_mul_terms(args, kwargs) -> torch.Tensor:
    """npu_gelu_mul: gelu(x1) * x2 for the halves of the last dim, each gelu term scaled by |x2| (one more rounding
    of the product, which the roundings count)."""
    x = argument(args, kwargs, 0, "input")
    first, second = x.chunk(2, dim=-1)
    return gelu_terms((first,), {"approximate": kwargs.get("approximate", "none")}) * _double(second).abs()


def gelu_gradient_terms(args, kwargs, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    """gelu'(x) = (1 + f)/2 + x f'/2 with f = erf(x / sqrt 2) (or the tanh form): near x = -0.75 the two
    halves cancel to a tenth of either, which a fair vectorized kernel computes to a few ulp each.
    The terms are g/2 (1 + |f|) and g |x f'| / 2, each to within APPROXIMATION unit roundoffs; f' also
    moves with its exponential's rounded argument, x^2/2 of them (with tanh, 1 - f^2 with each square)."""
    x, f, tanh = _gelu_factor(args, kwargs)
    g = _double(cotangent).to(x.device).abs()
    if tanh:
        moved = _SQRT_2_OVER_PI * (1 + 3 * _TANH_CUBIC * x.square()) * APPROXIMATION * (1 + f.square())
    else:
        moved = _SQRT_2_OVER_PI * torch.exp(-x.square() / 2) * (APPROXIMATION + x.square() / 2)
    return {"input": g * 0.5 * ((1 + APPROXIMATION * f.abs()) + x.abs() * moved)}


def trapezoid_terms(args, kwargs, cumulative: bool = False) -> torch.Tensor:
    """trapezoid(y, x) sums dx_i (y_i + y_i+1) / 2, which cancel where y or dx changes sign; a fair
    kernel rounds each difference, sum and product: the terms are |dx_i| (|y_i| + |y_i+1|) / 2, and
    their L2 norm along the dim (cumulatively, so far) is the scale. Without x, one spacing dx."""
    y = _double(argument(args, kwargs, 0, "y"))
    dim = kwargs.get("dim", -1) % y.dim()
    n = y.shape[dim]
    x = argument(args, kwargs, 1, "x")
    if isinstance(x, torch.Tensor) and x.dim() == 1:  # spacings along dim only
        shape = [1] * y.dim()
        shape[dim] = n - 1
        spacing = _double(x).diff().abs().reshape(shape)
    elif isinstance(x, torch.Tensor):
        spacing = _double(x).diff(dim=dim).abs()
    else:
        spacing = abs(float(kwargs.get("dx") or 1.0))
    terms = spacing * (y.narrow(dim, 0, n - 1).abs() + y.narrow(dim, 1, n - 1).abs()) / 2
    squares = terms.square()
    return (squares.cumsum(dim) if cumulative else squares.sum(dim)).sqrt()


def cosine_similarity_gradient_terms(args, kwargs, cotangent: torch.Tensor) -> dict[str, torch.Tensor]:
    """cos = sum(x1/N1 * x2/N2): autograd's dx1 = g (x2/(N1 N2) - cos x1/N1^2) cancels where x1 and
    x2 point alike, and each path is rounded: the terms are the two paths' sizes (x2 likewise)."""
    a, b = _double(argument(args, kwargs, 0, "x1")), _double(argument(args, kwargs, 1, "x2"))
    dim = argument(args, kwargs, 2, "dim", default=1)
    eps = argument(args, kwargs, 3, "eps", default=1e-8)
    x1, x2 = torch.broadcast_tensors(a, b)
    n1, n2 = (x.norm(2, dim, keepdim=True).clamp_min(eps) for x in (x1, x2))
    cos = ((x1 / n1) * (x2 / n2)).sum(dim, keepdim=True).abs()
    g = _double(cotangent).to(x1.device).unsqueeze(dim).abs()
    # A broadcast input's gradient sums its copies' paths.
    return {"x1": (g * (x2.abs() / (n1 * n2) + cos * x1.abs() / n1.square())).sum_to_size(a.shape),
            "x2": (g * (x1.abs() / (n1 * n2) + cos * x2.abs() / n2.square())).sum_to_size(b.shape)}


def mse_loss_terms(args, kwargs) -> torch.Tensor:
    """mse_loss sums the squared differences (over their count, for 'mean'): the norm of those terms,
    per output element (each its own term for 'none')."""
    x = _double(argument(args, kwargs, 0, "input"))
    y = _double(argument(args, kwargs, 1, "target")).to(x.device)
    squares = (x - y).square()
    reduction = argument(args, kwargs, 4, "reduction", default="mean")
    if reduction == "none":
        return squares
    norm = squares.square().sum().sqrt()
    return norm / max(squares.numel(), 1) if reduction == "mean" else norm
