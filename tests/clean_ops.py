"""Common ops computed by torch on CPU, with the accumulation each output carries.

Shared by the clean-op and planted-defect tests: each entry builds seeded inputs, runs the op
in a dtype and in float64, and says how much accumulation the error bound may assume.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import torch
import torch.nn.functional as F

from pytest_npuprecision import Accumulation, input_spread


@dataclass(frozen=True)
class OpSpec:
    name: str  # the op name the tables know
    fn: Callable[..., torch.Tensor]
    make_inputs: Callable[[torch.Generator], tuple]
    reduction: Callable[[tuple], int] = lambda inputs: 1
    # The same op on squared inputs, for bilinear ops: gives the squared term norms.
    squared: Callable[..., torch.Tensor] | None = None
    # A second fair implementation in the same dtype, for the baseline (default: compute in
    # float32 and round, as GPUs do for half types).
    alternative: Callable[..., torch.Tensor] | None = None

    def inputs(self, seed: int = 0) -> tuple:
        return self.make_inputs(torch.Generator().manual_seed(seed))

    def run(self, inputs: tuple, dtype: torch.dtype) -> torch.Tensor:
        cast = tuple(x.to(dtype) if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs)
        return self.fn(*cast)

    def baseline(self, inputs: tuple, dtype: torch.dtype) -> torch.Tensor:
        if self.alternative is not None:
            cast = tuple(x.to(dtype) if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs)
            return self.alternative(*cast)
        if dtype == torch.float32:
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # another blocking of the same kernel
            try:
                return self.run(inputs, dtype)
            finally:
                torch.set_num_threads(threads)
        rounded = tuple(x.to(dtype).float() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs)
        return self.fn(*rounded).to(dtype)

    def golden(self, inputs: tuple, dtype: torch.dtype) -> torch.Tensor:
        """float64 on the dtype-rounded inputs, so only the op's own error is measured."""
        rounded = tuple(
            x.to(dtype).double() if torch.is_tensor(x) and x.is_floating_point() else x for x in inputs
        )
        return self.fn(*rounded)

    def accumulation(self, inputs: tuple, dtype: torch.dtype) -> Accumulation:
        k = self.reduction(inputs)
        if self.squared is None:
            return Accumulation(k)
        rounded = tuple(x.to(dtype).double() if torch.is_tensor(x) and x.is_floating_point() else x
                        for x in inputs)
        squares = tuple(x * x if torch.is_tensor(x) and x.is_floating_point() else x for x in rounded)
        return Accumulation(k, self.squared(*squares).sqrt())


def randn(*shape):
    return lambda g: (torch.randn(*shape, generator=g),)


def positive(*shape):
    return lambda g: (torch.rand(*shape, generator=g) * 4 + 0.05,)


def two(*shape):
    return lambda g: (torch.randn(*shape, generator=g), torch.randn(*shape, generator=g))


def matmul_inputs(m, k, n, batch=()):
    return lambda g: (torch.randn(*batch, m, k, generator=g), torch.randn(*batch, k, n, generator=g))


def _layer_norm_inputs(g):
    return (torch.randn(16, 512, generator=g) * 3 + 1, torch.randn(512, generator=g), torch.randn(512, generator=g))


def _linear_inputs(g):
    return (torch.randn(32, 1024, generator=g), torch.randn(256, 1024, generator=g) / 32, torch.randn(256, generator=g))


def _conv_inputs(g):
    return (torch.randn(2, 16, 24, 24, generator=g), torch.randn(32, 16, 3, 3, generator=g) / 12)


def _attention_inputs(g):
    return tuple(torch.randn(2, 4, 64, 32, generator=g) for _ in range(3))


def _cross_entropy_inputs(g):
    return (torch.randn(64, 1000, generator=g) * 2, torch.randint(0, 1000, (64,), generator=g))


def _attention_by_parts(q, k, v):
    """Attention as three ops, each rounding to the inputs' dtype."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, -1) @ v


def _cross_entropy_by_parts(logits, target):
    return F.nll_loss(torch.log_softmax(logits, -1), target)


def _log_softmax_by_parts(x):
    return x - torch.logsumexp(x, -1, keepdim=True)


def _embedding_inputs(g):
    return (torch.randint(0, 100, (8, 16), generator=g), torch.randn(100, 64, generator=g))


CLEAN_OPS: tuple[OpSpec, ...] = (
    OpSpec("add", torch.add, two(128, 256)),
    OpSpec("sub", torch.sub, two(128, 256)),
    OpSpec("mul", torch.mul, two(128, 256)),
    OpSpec("div", torch.div, lambda g: (torch.randn(128, 256, generator=g), torch.rand(128, 256, generator=g) + 0.5)),
    OpSpec("exp", torch.exp, randn(128, 256)),
    OpSpec("log", torch.log, positive(128, 256)),
    OpSpec("sqrt", torch.sqrt, positive(128, 256)),
    OpSpec("rsqrt", torch.rsqrt, positive(128, 256)),
    OpSpec("tanh", torch.tanh, randn(128, 256)),
    OpSpec("sigmoid", torch.sigmoid, randn(128, 256)),
    OpSpec("silu", F.silu, randn(128, 256)),
    OpSpec("gelu", F.gelu, randn(128, 256)),
    OpSpec("relu", F.relu, randn(128, 256)),
    OpSpec("masked_fill", lambda x, m: x.masked_fill(m, float("-inf")),
           lambda g: (torch.randn(64, 64, generator=g), torch.rand(64, 64, generator=g) > 0.5)),
    OpSpec("transpose", lambda x: x.transpose(0, 1), randn(64, 32)),
    OpSpec("softmax", lambda x: torch.softmax(x, -1), randn(64, 4096), reduction=lambda i: i[0].shape[-1]),
    OpSpec("log_softmax", lambda x: torch.log_softmax(x, -1), randn(64, 4096), reduction=lambda i: i[0].shape[-1],
           alternative=_log_softmax_by_parts),
    OpSpec("layer_norm", lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), _layer_norm_inputs,
           reduction=lambda i: i[0].shape[-1]),
    OpSpec("rms_norm", lambda x, w: F.rms_norm(x, x.shape[-1:], w),
           lambda g: (torch.randn(16, 2048, generator=g), torch.randn(2048, generator=g)),
           reduction=lambda i: i[0].shape[-1]),
    OpSpec("matmul", torch.matmul, matmul_inputs(32, 64, 48), reduction=lambda i: i[0].shape[-1], squared=torch.matmul),
    OpSpec("matmul", torch.matmul, matmul_inputs(16, 1024, 32), reduction=lambda i: i[0].shape[-1], squared=torch.matmul),
    OpSpec("matmul", torch.matmul, matmul_inputs(8, 8192, 16), reduction=lambda i: i[0].shape[-1], squared=torch.matmul),
    OpSpec("bmm", torch.bmm, matmul_inputs(16, 256, 16, batch=(4,)), reduction=lambda i: i[0].shape[-1], squared=torch.bmm),
    OpSpec("linear", F.linear, _linear_inputs, reduction=lambda i: i[0].shape[-1], squared=F.linear),
    OpSpec("sum", lambda x: x.sum(-1), randn(32, 4096), reduction=lambda i: i[0].shape[-1], squared=lambda x: x.sum(-1)),
    OpSpec("mean", lambda x: x.mean(-1), randn(32, 4096), reduction=lambda i: i[0].shape[-1],
           squared=lambda x: x.sum(-1) / 4096**2),
    OpSpec("cumsum", lambda x: x.cumsum(-1), randn(16, 1024), reduction=lambda i: i[0].shape[-1],
           squared=lambda x: x.cumsum(-1)),
    OpSpec("conv2d", F.conv2d, _conv_inputs),
    OpSpec("scaled_dot_product_attention", F.scaled_dot_product_attention, _attention_inputs,
           reduction=lambda i: i[0].shape[-2], alternative=_attention_by_parts),
    OpSpec("cross_entropy", F.cross_entropy, _cross_entropy_inputs, reduction=lambda i: i[0].numel(),
           alternative=_cross_entropy_by_parts),
    OpSpec("mse_loss", F.mse_loss, two(64, 512), reduction=lambda i: i[0].numel()),
    OpSpec("embedding", F.embedding, _embedding_inputs),
    OpSpec("max", lambda x: x.max(-1).values, randn(64, 512)),
    OpSpec("argmax", lambda x: x.argmax(-1), randn(64, 512)),
)
DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclass(frozen=True)
class Evaluated:
    actual: torch.Tensor
    golden: torch.Tensor
    baseline: torch.Tensor
    accumulation: Accumulation


@lru_cache(maxsize=None)
def evaluate(spec: OpSpec, dtype: torch.dtype) -> Evaluated:
    """Run an op once per dtype for all the tests that judge it (results are never modified)."""
    inputs = spec.inputs()
    return Evaluated(spec.run(inputs, dtype), spec.golden(inputs, dtype), spec.baseline(inputs, dtype),
                     spec.accumulation(inputs, dtype))


@lru_cache(maxsize=None)
def spread(spec: OpSpec, dtype: torch.dtype) -> torch.Tensor | None:
    """How far the op's float64 result moves when its inputs move by their dtype's rounding."""
    inputs = tuple(x.to(dtype) if torch.is_tensor(x) and x.is_floating_point() else x for x in spec.inputs())
    return input_spread(spec.fn, inputs, golden=evaluate(spec, dtype).golden)
