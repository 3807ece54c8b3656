"""The ops of the seeded-defect suite: input regimes, fair kernels and defective kernels.

Each op is a row: its msprobe name, the float64 golden (torch's own function), seeded input regimes
(float32 masters, cast to the dtype under test), one to three fair implementations and, where the op
reduces, the defective implementation that accumulates in a low precision. A fair implementation is
one a real device might ship: torch's CPU kernel; the same maths in another order or blocking; a
fused or unfused variant; float32 inside for half types; a reciprocal-then-multiply for a divide; an
online (flash) softmax; a sum one term at a time, blocked or pairwise (torch's). Each takes the
call's arguments in the dtype under test and returns that dtype.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from pytest_npuprecision.common.torch_compat import nextafter, optional

Call = tuple[tuple, dict]  # (args, kwargs), float32 masters before the cast
Kernel = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class Op:
    name: str  # as a dump names it: "Torch.matmul", "Functional.layer_norm"
    golden: Kernel  # torch's function, run on the dtype's inputs raised to float64
    regimes: dict[str, Callable[[torch.Generator], Call]]
    fair: dict[str, Kernel]  # the first is torch's own kernel: output defects are planted in it
    low_precision: Kernel | None = None  # accumulates in the dtype under test (half types)
    hf32: Kernel | None = None  # float32 multiplies on inputs rounded to 11 significant bits (TF32/HF32)


# --- helpers ------------------------------------------------------------------------------------

def _wide(t: Any) -> Any:
    return t.float() if isinstance(t, torch.Tensor) and t.is_floating_point() else t


def in_float32(fn: Kernel) -> Kernel:
    """fn computed on float32 copies of the inputs, rounded once to the output dtype."""
    def kernel(*args, **kwargs):
        dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
        return fn(*map(_wide, args), **{k: _wide(v) for k, v in kwargs.items()}).to(dtype)
    kernel.__name__ = getattr(fn, "__name__", "kernel")
    return kernel


def correctly_rounded(fn: Kernel) -> Kernel:
    """fn in float64, rounded once: a more careful peer (a correctly rounded libm)."""
    def kernel(*args, **kwargs):
        dtype = next(a.dtype for a in args if isinstance(a, torch.Tensor) and a.is_floating_point())
        wide = [a.double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
        return fn(*wide, **kwargs).to(dtype)
    return kernel


_truncating = [False]
_accumulator_bits: list[int | None] = [None]


@contextmanager
def truncating():
    """Within it, every partial sum of sequential_sum is rounded toward zero: a wrong rounding mode."""
    _truncating[0] = True
    try:
        yield
    finally:
        _truncating[0] = False


# A float32 kernel's narrower accumulator: 3 bits short of float32's 24 (8x its unit roundoff). A plain
# float32 sum in any order is fair (sequential_f32 is a fair kernel of sum); a lower-precision sum is not.
NARROW_ACCUMULATOR_BITS = 21


@contextmanager
def narrow_accumulator(bits: int = NARROW_ACCUMULATOR_BITS):
    """Within it, every partial sum of sequential_sum keeps ``bits`` significant bits (to nearest)."""
    _accumulator_bits[0] = bits
    try:
        yield
    finally:
        _accumulator_bits[0] = None


def _to_bits(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x rounded to nearest on ``bits`` significant bits, in x's dtype."""
    mantissa, exponent = torch.frexp(x.double())
    return torch.ldexp(torch.round(torch.ldexp(mantissa, torch.full_like(exponent, bits))),
                       exponent - bits).to(x.dtype)


def toward_zero(wide: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``wide`` rounded to ``dtype`` toward zero instead of to nearest."""
    nearest = wide.to(dtype)
    away = nearest.double().abs() > wide.double().abs()
    return torch.where(away, nextafter(nearest, torch.zeros_like(nearest)), nearest)


def _added(total: torch.Tensor, term: torch.Tensor) -> torch.Tensor:
    if _truncating[0]:
        return toward_zero(total.double() + term.double(), total.dtype)
    if _accumulator_bits[0] is not None:
        return _to_bits(total + term, _accumulator_bits[0])
    return total + term


def sequential_sum(x: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None) -> torch.Tensor:
    """Sum along dim one term at a time in ``dtype`` (x's own by default): no wider accumulator."""
    x = x.movedim(dim, -1).to(dtype or x.dtype)
    total = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for k in range(x.shape[-1]):
        total = _added(total, x[..., k])
    return total


def blocked_sum(x: torch.Tensor, dim: int = -1, block: int = 128) -> torch.Tensor:
    """Partial sums of ``block`` terms, then the partials added one after another, in x's dtype."""
    x = x.movedim(dim, -1)
    k = x.shape[-1]
    pad = (-k) % block
    if pad:
        x = torch.cat([x, x.new_zeros(*x.shape[:-1], pad)], -1)
    partials = x.reshape(*x.shape[:-1], -1, block).sum(-1)
    return sequential_sum(partials)


def _tf32(t: torch.Tensor) -> torch.Tensor:
    """Round a float32 tensor to 11 significant bits (10 stored), to nearest: TF32 / HF32 inputs."""
    bits = t.contiguous().view(torch.int32)
    rounded = (bits + 0x1000 + ((bits >> 13) & 1)) & ~0x1FFF
    return rounded.view(torch.float32)


# --- input regimes ------------------------------------------------------------------------------

def _randn(g, *shape, scale=1.0):
    return torch.randn(*shape, generator=g) * scale


def _spread_out(g, *shape, octaves=6):
    """N(0, 1) times 2^U(-octaves, octaves): magnitudes over 2*octaves binades."""
    return torch.randn(*shape, generator=g) * torch.exp2((torch.rand(*shape, generator=g) * 2 - 1) * octaves)


def _cancelling_rows(g, *shape):
    """Rows whose terms nearly cancel: N(0, 1) terms moved so that each row sums to N(0, 1), about
    1/800 of the sum of the magnitudes over 1024 terms. (Rows that cancel exactly, in float32 before
    the cast, sum to their rounding noise: there zeroing the output moves it less than a fair kernel
    may err, and no checker can call that a defect.)"""
    x = torch.randn(*shape, generator=g)
    return x - x.mean(-1, keepdim=True) + torch.randn(*shape[:-1], 1, generator=g) / shape[-1]


def _near_uniform(g, *shape):
    return torch.rand(*shape, generator=g) * 2.0**-20


# --- kernels ------------------------------------------------------------------------------------

def _blocked_matmul(a, b, block=256):
    k = a.shape[-1]
    out = None
    for s in range(0, k, block):
        part = a[..., s:s + block].float() @ b[..., s:s + block, :].float()
        out = part if out is None else out + part
    return out.to(a.dtype)


def _tree_matmul(a, b, leaf=64):
    def tree(x, y):
        k = x.shape[-1]
        if k <= leaf:
            return x @ y
        h = k // 2
        return tree(x[..., :h], y[..., :h, :]) + tree(x[..., h:], y[..., h:, :])
    return tree(a.float(), b.float()).to(a.dtype)


def _low_precision_matmul(a, b):
    return sequential_sum(a.unsqueeze(-1) * b.unsqueeze(-3), dim=-2)


def _hf32_matmul(a, b):
    return _tf32(a.float()) @ _tf32(b.float())


def _linear_unfused(x, w, b):  # the GEMM rounds to the dtype, then a separate bias add
    return (x.float() @ w.float().T).to(x.dtype) + b


def _conv_im2col(x, w, padding=1):
    n, _, h, wd = x.shape
    cols = F.unfold(x.float(), w.shape[-2:], padding=padding)  # N, C*kh*kw, L
    out = w.float().reshape(w.shape[0], -1) @ cols
    return out.reshape(n, w.shape[0], h, wd).to(x.dtype)


def _conv_low_precision(x, w, padding=1):
    n, _, h, wd = x.shape
    cols = F.unfold(x, w.shape[-2:], padding=padding)
    out = _low_precision_matmul(w.reshape(w.shape[0], -1), cols)
    return out.reshape(n, w.shape[0], h, wd)


def _conv_hf32(x, w, padding=1):
    return F.conv2d(_tf32(x.float()), _tf32(w.float()), padding=padding)


def _sequential_f32_sum(x, dim=-1):
    return sequential_sum(x, dim, torch.float32).to(x.dtype)


def _blocked_f32_sum(x, dim=-1):
    return blocked_sum(x.float(), dim).to(x.dtype)


def _scaled_then_summed_mean(x, dim=-1):
    return (x.float() * (1.0 / x.shape[dim])).sum(dim).to(x.dtype)


def _blocked_mean(x, dim=-1):
    return (blocked_sum(x.float(), dim) / x.shape[dim]).to(x.dtype)


def _blocked_cumsum(x, dim=-1, block=64):
    y = x.float()
    k = y.shape[-1]
    parts, carry = [], torch.zeros(y.shape[:-1] + (1,))
    for s in range(0, k, block):
        local = y[..., s:s + block].cumsum(-1) + carry
        parts.append(local)
        carry = local[..., -1:]
    return torch.cat(parts, -1).to(x.dtype)


def _low_precision_cumsum(x, dim=-1):
    out, total = [], torch.zeros(x.shape[:-1], dtype=x.dtype)
    for k in range(x.shape[-1]):
        total = _added(total, x[..., k])
        out.append(total)
    return torch.stack(out, -1)


def _softmax_divide(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def _softmax_reciprocal(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e * (1.0 / blocked_sum(e, dim).unsqueeze(dim))


def _softmax_low_precision(x, dim=-1):
    e = (x.float() - x.float().amax(dim, keepdim=True)).exp().to(x.dtype)
    return (e.float() / sequential_sum(e, dim).unsqueeze(dim).float()).to(x.dtype)


def _log_softmax_unfused(x, dim=-1):
    shifted = x - x.amax(dim, keepdim=True)
    return shifted - shifted.exp().sum(dim, keepdim=True).log()


def _log_softmax_logsumexp(x, dim=-1):
    return x - torch.logsumexp(x, dim, keepdim=True)


def _log_softmax_low_precision(x, dim=-1):
    shifted = x.float() - x.float().amax(dim, keepdim=True)
    total = sequential_sum(shifted.exp().to(x.dtype), dim).unsqueeze(dim)
    return (shifted - total.float().log()).to(x.dtype)


def _layer_norm_two_pass(x, shape, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    centred = x - mean
    return centred * torch.rsqrt(centred.square().mean(-1, keepdim=True) + eps) * w + b


def _layer_norm_divide(x, shape, w, b, eps=1e-5):
    mean = blocked_sum(x, -1).unsqueeze(-1) / x.shape[-1]
    centred = x - mean
    var = blocked_sum(centred.square(), -1).unsqueeze(-1) / x.shape[-1]
    return centred / torch.sqrt(var + eps) * w + b


def _layer_norm_low_precision(x, shape, w, b, eps=1e-5):
    k = x.shape[-1]
    mean = (sequential_sum(x, -1) / k).unsqueeze(-1)
    centred = x - mean
    var = (sequential_sum(centred * centred, -1) / k).unsqueeze(-1)
    return ((centred.float() * torch.rsqrt(var.float() + eps)) * w.float() + b.float()).to(x.dtype)


def _rms_norm_rsqrt(x, shape, w, eps=1e-6):
    return x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps) * w


def _rms_norm_divide(x, shape, w, eps=1e-6):
    return x / torch.sqrt(blocked_sum(x.square(), -1).unsqueeze(-1) / x.shape[-1] + eps) * w


def _rms_norm_rounded_factor(x, shape, w, eps=1e-6):
    """float32 inside, the row's rsqrt rounded once to the output dtype (a kernel that keeps rstd so)."""
    factor = torch.rsqrt(x.float().square().mean(-1, keepdim=True) + eps).to(x.dtype)
    return (x.float() * factor.float()).to(x.dtype) * w


def _rms_norm_low_precision(x, shape, w, eps=1e-6):
    ms = (sequential_sum(x * x, -1) / x.shape[-1]).unsqueeze(-1)
    return (x.float() * torch.rsqrt(ms.float() + eps) * w.float()).to(x.dtype)


def _gelu_erf(x):
    return 0.5 * x * (1 + torch.erf(x * (1 / math.sqrt(2))))


def _gelu_erfc(x):
    return 0.5 * x * torch.erfc(-x * (1 / math.sqrt(2)))


def _attention_unfused(q, k, v):
    scores = (q @ k.transpose(-2, -1)) * (1 / math.sqrt(q.shape[-1]))
    return torch.softmax(scores, -1) @ v


def _attention_online(q, k, v, block=64):
    """Flash attention's order: key blocks, a running max and sum, the output rescaled as it goes."""
    scale = 1 / math.sqrt(q.shape[-1])
    m = torch.full(q.shape[:-1] + (1,), -math.inf)
    s = torch.zeros(q.shape[:-1] + (1,))
    acc = torch.zeros(q.shape[:-1] + (v.shape[-1],))
    for start in range(0, k.shape[-2], block):
        scores = (q @ k[..., start:start + block, :].transpose(-2, -1)) * scale
        new_m = torch.maximum(m, scores.amax(-1, keepdim=True))
        p = (scores - new_m).exp()
        correction = (m - new_m).exp()
        s = s * correction + p.sum(-1, keepdim=True)
        acc = acc * correction + p @ v[..., start:start + block, :]
        m = new_m
    return acc / s


def _attention_low_precision(q, k, v):
    scores = (_low_precision_matmul(q, k.transpose(-2, -1)).float() / math.sqrt(q.shape[-1]))
    p = torch.softmax(scores, -1).to(q.dtype)
    return _low_precision_matmul(p, v)


def _attention_hf32(q, k, v):
    scores = (_tf32(q) @ _tf32(k).transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return _tf32(torch.softmax(scores, -1)) @ _tf32(v)


def _cross_entropy_gathered(x, target):
    return -(x.gather(1, target[:, None])[:, 0] - torch.logsumexp(x, 1)).mean()


def _cross_entropy_unfused(x, target):
    return F.nll_loss(_log_softmax_unfused(x, 1), target)


def _cross_entropy_low_precision(x, target):
    shifted = x.float() - x.float().amax(1, keepdim=True)
    lse = sequential_sum(shifted.exp().to(x.dtype), 1).float().log()
    losses = (lse - shifted.gather(1, target[:, None])[:, 0]).to(x.dtype)
    return sequential_sum(losses, 0) / losses.shape[0]


def _batch_norm_two_pass(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5):
    dims = (0, 2, 3)
    mean = x.mean(dims, keepdim=True)
    centred = x - mean
    var = centred.square().mean(dims, keepdim=True)
    return centred * torch.rsqrt(var + eps) * w[:, None, None] + b[:, None, None]


def _batch_norm_low_precision(x, rm, rv, w, b, training=True, momentum=0.1, eps=1e-5):
    flat = x.transpose(0, 1).reshape(x.shape[1], -1)
    n = flat.shape[1]
    mean = sequential_sum(flat, -1) / n
    centred = flat - mean[:, None]
    var = sequential_sum(centred * centred, -1) / n
    out = centred.float() * torch.rsqrt(var.float() + eps)[:, None] * w.float()[:, None] + b.float()[:, None]
    return out.reshape(x.shape[1], x.shape[0], *x.shape[2:]).transpose(0, 1).to(x.dtype)


def _mse_blocked(x, y):
    return blocked_sum((x.float() - y.float()).square().reshape(-1), -1) / x.numel()


def _mse_sequential(x, y):
    return sequential_sum((x.float() - y.float()).square().reshape(-1), -1) / x.numel()


def _mse_low_precision(x, y):
    return sequential_sum((x - y).square().reshape(-1), -1) / x.numel()


def _blocked_amax(x, dim=-1, block=64):
    return x.reshape(*x.shape[:-1], -1, block).amax(-1).amax(-1)


def _add_unfused(x, y, alpha=1):  # alpha * y rounded to the dtype, then the add: two roundings
    return x + (y * alpha) if alpha != 1 else x + y


def _div_reciprocal(x, y):
    return x * (1 / y)


def _silu_product(x):
    return x * torch.sigmoid(x)


def _silu_quotient(x):
    return x / (1 + torch.exp(-x))


def _sigmoid_quotient(x):
    return 1 / (1 + torch.exp(-x))


# --- the table ----------------------------------------------------------------------------------

def _matmul_regimes(m, k, n, long_k=8192):
    return {
        "normal": lambda g: ((_randn(g, m, k), _randn(g, k, n)), {}),
        "wide": lambda g: ((_spread_out(g, m, 256, octaves=4), _spread_out(g, 256, n, octaves=4)), {}),
        "long": lambda g: ((_randn(g, 8, long_k), _randn(g, long_k, 8)), {}),
    }


def _rows(shape, long_shape=(16, 8192), **extra):
    regimes = {"normal": lambda g: ((_randn(g, *shape),), {"dim": -1}),
               "long": lambda g: ((_randn(g, *long_shape),), {"dim": -1})}
    regimes.update(extra)
    return regimes


def _softmax_regimes():
    return {"normal": lambda g: ((_randn(g, 64, 1024),), {"dim": -1}),
            "wide": lambda g: ((_randn(g, 64, 1024, scale=8.0),), {"dim": -1}),
            "near_uniform": lambda g: ((_near_uniform(g, 16, 1024),), {"dim": -1}),
            "long": lambda g: ((_randn(g, 16, 8192),), {"dim": -1})}


def _affine(g, d):
    return 1 + 0.1 * torch.randn(d, generator=g), 0.1 * torch.randn(d, generator=g)


def _layer_norm_call(x_of, d):
    def make(g):
        x = x_of(g)
        w, b = _affine(g, d)
        return (x, (d,), w, b), {"eps": 1e-5}
    return make


def _rms_norm_call(x_of, d):
    def make(g):
        x = x_of(g)
        return (x, (d,), _affine(g, d)[0]), {"eps": 1e-6}
    return make


def _attention_call(b, h, length, d, scale=1.0):
    return lambda g: ((_randn(g, b, h, length, d, scale=scale), _randn(g, b, h, length, d, scale=scale),
                       _randn(g, b, h, length, d)), {})


def _cross_entropy_call(scale):
    return lambda g: ((_randn(g, 256, 1000, scale=scale), torch.randint(0, 1000, (256,), generator=g)), {})


def _batch_norm_call(offset):
    def make(g):
        w, b = _affine(g, 32)
        return (_randn(g, 16, 32, 8, 8) + offset, None, None, w, b), {"training": True, "eps": 1e-5}
    return make


def _signed(g, n, octaves):
    sign = torch.randint(0, 2, (n,), generator=g) * 2 - 1
    return sign * torch.exp2((torch.rand(n, generator=g) * 2 - 1) * octaves)


def _uniform(g, n, low, high):
    return low + (high - low) * torch.rand(n, generator=g)


def _one(x_of):
    return lambda g: ((x_of(g),), {})


N = 16384  # elements of an elementwise op's input
OPS = (
    Op("Torch.matmul", torch.matmul, _matmul_regimes(32, 1024, 32),
       {"torch": torch.matmul, "blocked256": _blocked_matmul, "tree64": _tree_matmul},
       _low_precision_matmul, _hf32_matmul),
    Op("Torch.bmm", torch.bmm,
       {"normal": lambda g: ((_randn(g, 4, 32, 512), _randn(g, 4, 512, 32)), {}),
        "long": lambda g: ((_randn(g, 2, 8, 4096), _randn(g, 2, 4096, 8)), {})},
       {"torch": torch.bmm, "blocked256": _blocked_matmul, "tree64": _tree_matmul},
       _low_precision_matmul, _hf32_matmul),
    Op("Functional.linear", F.linear,
       {"normal": lambda g: ((_randn(g, 64, 1024), _randn(g, 128, 1024, scale=0.03), _randn(g, 128, scale=0.1)), {}),
        "wide": lambda g: ((_spread_out(g, 64, 1024, octaves=4), _randn(g, 128, 1024, scale=0.03),
                            _randn(g, 128)), {})},
       {"torch": F.linear, "float32": in_float32(F.linear), "unfused_bias": _linear_unfused},
       lambda x, w, b: _low_precision_matmul(x, w.T) + b, lambda x, w, b: _hf32_matmul(x, w.T) + b),
    Op("Functional.conv2d", F.conv2d,
       {"normal": lambda g: ((_randn(g, 4, 16, 16, 16), _randn(g, 32, 16, 3, 3, scale=0.1)), {"padding": 1}),
        "wide": lambda g: ((_spread_out(g, 4, 16, 16, 16, octaves=4), _randn(g, 32, 16, 3, 3, scale=0.1)),
                           {"padding": 1})},
       {"torch": F.conv2d, "im2col": _conv_im2col}, _conv_low_precision, _conv_hf32),
    Op("Torch.sum", torch.sum,
       _rows((64, 1024), wide=lambda g: ((_spread_out(g, 64, 1024, octaves=8),), {"dim": -1}),
             cancelling=lambda g: ((_cancelling_rows(g, 64, 1024),), {"dim": -1})),
       {"torch": torch.sum, "blocked128": _blocked_f32_sum, "sequential_f32": _sequential_f32_sum},
       lambda x, dim=-1: sequential_sum(x, dim)),
    Op("Torch.mean", torch.mean,
       _rows((64, 1024), cancelling=lambda g: ((_cancelling_rows(g, 64, 1024),), {"dim": -1})),
       {"torch": torch.mean, "blocked128": _blocked_mean, "scaled_first": _scaled_then_summed_mean},
       lambda x, dim=-1: sequential_sum(x, dim) / x.shape[dim]),
    Op("Torch.cumsum", torch.cumsum, _rows((32, 1024), long_shape=(8, 8192)),
       {"torch": torch.cumsum, "blocked64": _blocked_cumsum, "float32": in_float32(torch.cumsum)},
       _low_precision_cumsum),
    Op("Torch.softmax", torch.softmax, _softmax_regimes(),
       {"torch": torch.softmax, "divide": in_float32(_softmax_divide), "reciprocal": in_float32(_softmax_reciprocal)},
       _softmax_low_precision),
    Op("Torch.log_softmax", torch.log_softmax, _softmax_regimes(),
       {"torch": torch.log_softmax, "unfused": in_float32(_log_softmax_unfused),
        "logsumexp": in_float32(_log_softmax_logsumexp)},
       _log_softmax_low_precision),
    Op("Functional.layer_norm", F.layer_norm,
       {"normal": _layer_norm_call(lambda g: _randn(g, 64, 1024), 1024),
        "offset": _layer_norm_call(lambda g: 50 + _randn(g, 64, 1024), 1024),
        "long": _layer_norm_call(lambda g: _randn(g, 8, 8192), 8192)},
       {"torch": F.layer_norm, "two_pass": in_float32(_layer_norm_two_pass), "divide": in_float32(_layer_norm_divide)},
       _layer_norm_low_precision),
    Op("Functional.rms_norm", optional(F, "rms_norm"),
       {"normal": _rms_norm_call(lambda g: _randn(g, 64, 1024), 1024),
        "wide": _rms_norm_call(lambda g: _spread_out(g, 64, 1024, octaves=4), 1024),
        "long": _rms_norm_call(lambda g: _randn(g, 4, 8192), 8192)},
       {"torch": optional(F, "rms_norm"), "rsqrt": in_float32(_rms_norm_rsqrt), "divide": in_float32(_rms_norm_divide),
        "rounded_factor": _rms_norm_rounded_factor},
       _rms_norm_low_precision),
    Op("Functional.gelu", F.gelu,
       {"normal": _one(lambda g: _randn(g, N, scale=3.0)), "wide": _one(lambda g: _spread_out(g, N, octaves=4)),
        "left_tail": _one(lambda g: _uniform(g, N, -8.0, -3.0))},
       {"torch": F.gelu, "erf": in_float32(_gelu_erf), "erfc": in_float32(_gelu_erfc)}),
    Op("Functional.silu", F.silu,
       {"normal": _one(lambda g: _randn(g, N, scale=3.0)), "wide": _one(lambda g: _uniform(g, N, -20.0, 20.0))},
       {"torch": F.silu, "product": in_float32(_silu_product), "quotient": in_float32(_silu_quotient)}),
    Op("Torch.exp", torch.exp,
       {"normal": _one(lambda g: _randn(g, N)), "wide": _one(lambda g: _uniform(g, N, -10.0, 10.0))},
       {"torch": torch.exp, "float32": in_float32(torch.exp), "correctly_rounded": correctly_rounded(torch.exp)},
       ),
    Op("Torch.log", torch.log,
       {"normal": _one(lambda g: _uniform(g, N, 0.05, 4.0)), "wide": _one(lambda g: _signed(g, N, 14).abs()),
        "near_one": _one(lambda g: 1 + _randn(g, N, scale=1e-2))},
       {"torch": torch.log, "float32": in_float32(torch.log), "correctly_rounded": correctly_rounded(torch.log)},
       ),
    Op("Torch.tanh", torch.tanh,
       {"normal": _one(lambda g: _randn(g, N, scale=2.0)), "small": _one(lambda g: _randn(g, N, scale=1e-3))},
       {"torch": torch.tanh, "float32": in_float32(torch.tanh), "correctly_rounded": correctly_rounded(torch.tanh)},
       ),
    Op("Torch.sigmoid", torch.sigmoid,
       {"normal": _one(lambda g: _randn(g, N, scale=3.0)), "wide": _one(lambda g: _uniform(g, N, -20.0, 20.0))},
       {"torch": torch.sigmoid, "quotient": in_float32(_sigmoid_quotient),
        "correctly_rounded": correctly_rounded(torch.sigmoid)}),
    Op("Torch.add", torch.add,
       {"normal": lambda g: ((_randn(g, N), _randn(g, N)), {}),
        "sgd_update": lambda g: ((_randn(g, N), _randn(g, N)), {"alpha": -1e-3}),
        "cancelling": lambda g: (lambda x: ((x, -x * (1 + 1e-3 * _randn(g, N))), {}))(_randn(g, N))},
       {"torch": torch.add, "unfused": _add_unfused, "correctly_rounded": correctly_rounded(torch.add)}),
    Op("Torch.mul", torch.mul,
       {"normal": lambda g: ((_randn(g, N), _randn(g, N)), {}),
        "wide": lambda g: ((_spread_out(g, N), _spread_out(g, N)), {})},
       {"torch": torch.mul, "correctly_rounded": correctly_rounded(torch.mul)}),
    Op("Torch.div", torch.div,
       {"normal": lambda g: ((_randn(g, N), _signed(g, N, 1)), {}),
        "wide": lambda g: ((_spread_out(g, N), _signed(g, N, 6)), {})},
       {"torch": torch.div, "reciprocal": in_float32(_div_reciprocal), "correctly_rounded": correctly_rounded(torch.div)},
       ),
    Op("Functional.scaled_dot_product_attention", F.scaled_dot_product_attention,
       {"normal": _attention_call(2, 4, 128, 64), "wide_scores": _attention_call(2, 4, 128, 64, scale=3.0),
        "long": _attention_call(1, 1, 512, 64)},
       {"torch": F.scaled_dot_product_attention, "unfused": in_float32(_attention_unfused),
        "online": in_float32(_attention_online)},
       _attention_low_precision, _attention_hf32),
    Op("Functional.cross_entropy", F.cross_entropy,
       {"normal": _cross_entropy_call(1.0), "confident": _cross_entropy_call(10.0),
        "near_uniform": _cross_entropy_call(1e-3)},
       {"torch": F.cross_entropy, "gathered": in_float32(_cross_entropy_gathered),
        "unfused": in_float32(_cross_entropy_unfused)},
       _cross_entropy_low_precision),
    Op("Functional.batch_norm", F.batch_norm,
       {"normal": _batch_norm_call(0.0), "offset": _batch_norm_call(20.0)},
       {"torch": F.batch_norm, "two_pass": in_float32(_batch_norm_two_pass)}, _batch_norm_low_precision),
    Op("Functional.mse_loss", F.mse_loss,  # a scalar: the mean of 4096 squared differences
       {"normal": lambda g: ((_randn(g, 4096), _randn(g, 4096)), {}),
        "close": lambda g: (lambda x: ((x, x + _randn(g, 4096, scale=1e-2)), {}))(_randn(g, 4096))},
       {"torch": F.mse_loss, "blocked128": in_float32(_mse_blocked), "sequential_f32": in_float32(_mse_sequential)},
       _mse_low_precision),
    Op("Torch.amax", torch.amax,
       {"normal": lambda g: ((_randn(g, 64, 1024),), {"dim": -1}),
        "wide": lambda g: ((_spread_out(g, 64, 1024, octaves=8),), {"dim": -1})},
       {"torch": torch.amax, "blocked64": _blocked_amax}),
)
