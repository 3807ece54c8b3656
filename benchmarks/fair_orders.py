"""Issue 53's invariant 2: fair orders pass, on repeated values too.

A fair kernel of a reducing op may add its terms in any order: one at a time, in pairs, in blocks, back
to front, in the output's float32 or, for a half type, in a float32 accumulator. Each such kernel of the
plain sums (sum, mean, cumsum, matmul, linear's bias gradient as conv's is) and of the normalizations
(softmax, log_softmax, layer_norm, rms_norm) is judged here on random, constant, repeated (four
distinct values) and alternating-sign inputs: none may fail. Repeated addends are where roundings stop
being independent: each addition of one value to a partial sum in one binade errs alike.

    python benchmarks/fair_orders.py                 # every op, order, pattern, length and dtype
    python benchmarks/fair_orders.py --ops sum matmul --lengths 4096

tests/precision/test_fair_is_green.py draws from the same cells with Hypothesis.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from benchmarks.defect_kernels import sequential_sum
from pytest_npuprecision import check_call
from pytest_npuprecision.checks.one_call import CallVerdict
from pytest_npuprecision.common.torch_compat import rms_norm
from pytest_npuprecision.precision.verdict import Status

ORDERS = ("sequential", "reversed", "pairwise", "blocked")
PATTERNS = ("random", "constant", "repeated", "alternating")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
LENGTHS = (64, 1024, 4096)
ROWS = 8
BLOCK = 64


def ordered_sum(x: torch.Tensor, order: str, dim: int = -1) -> torch.Tensor:
    """x summed along ``dim`` in x's dtype, in one fair order."""
    x = x.movedim(dim, -1)
    if order == "sequential":
        return sequential_sum(x)
    if order == "reversed":
        return sequential_sum(x.flip(-1))
    if order == "pairwise":
        while x.shape[-1] > 1:
            if x.shape[-1] % 2:
                x = torch.cat([x, x.new_zeros(*x.shape[:-1], 1)], -1)
            x = x[..., 0::2] + x[..., 1::2]
        return x[..., 0]
    if order == "blocked":  # sequential within blocks, then the blocks' sums sequentially
        pad = (-x.shape[-1]) % BLOCK
        x = torch.cat([x, x.new_zeros(*x.shape[:-1], pad)], -1) if pad else x
        blocks = x.reshape(*x.shape[:-1], -1, BLOCK)
        return sequential_sum(sequential_sum(blocks))
    raise ValueError(order)


def _accumulated(x: torch.Tensor) -> torch.Tensor:
    """A half type's values in the float32 accumulator a fair kernel keeps."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def kernel(op: str, order: str) -> Callable[..., torch.Tensor]:
    """A fair kernel of ``op`` that sums in ``order``, in float32 for half types, rounded once at the end."""
    def total(x, dim=-1):
        return ordered_sum(_accumulated(x), order, dim)

    def fair(*args, **kwargs):
        if op == "sum":
            x, _ = args
            return total(x).to(x.dtype)
        if op == "mean":
            x, _ = args
            return (total(x) / x.shape[-1]).to(x.dtype)
        if op == "cumsum":
            x, _ = args
            # a prefix sum runs front to back: "reversed" is the sequential scan here
            return _prefix(_accumulated(x), "sequential" if order == "reversed" else order).to(x.dtype)
        if op == "matmul":
            a, b = args
            products = _accumulated(a).unsqueeze(-1) * _accumulated(b).unsqueeze(-3)  # [M, K, N]
            return ordered_sum(products, order, dim=-2).to(a.dtype)
        if op in ("softmax", "log_softmax"):
            x, _ = args
            acc = _accumulated(x)
            shifted = acc - acc.amax(-1, keepdim=True)
            exp = shifted.exp()
            denominator = total(exp)[..., None]
            result = exp / denominator if op == "softmax" else shifted - denominator.log()
            return result.to(x.dtype)
        if op in ("layer_norm", "rms_norm"):
            x, shape, weight = args[:3]
            acc, k = _accumulated(x), x.shape[-1]
            if op == "layer_norm":
                centred = acc - (total(acc) / k)[..., None]
                scale = torch.rsqrt(total(centred * centred) / k + kwargs["eps"])[..., None]
                return (centred * scale * _accumulated(weight) + _accumulated(args[3])).to(x.dtype)
            scale = torch.rsqrt(total(acc * acc) / k + kwargs["eps"])[..., None]
            return (acc * scale * _accumulated(weight)).to(x.dtype)
        raise ValueError(op)

    fair.__name__ = f"{op}_{order}"
    return fair


def _prefix(x: torch.Tensor, order: str) -> torch.Tensor:
    if order == "sequential":
        return torch.stack(list(itertools.accumulate(x.unbind(-1))), -1)
    if order == "blocked":  # each block's prefix, plus the running total of the blocks before it
        k = x.shape[-1]
        pad = (-k) % BLOCK
        padded = torch.cat([x, x.new_zeros(*x.shape[:-1], pad)], -1) if pad else x
        blocks = padded.reshape(*x.shape[:-1], -1, BLOCK)
        inner = _prefix(blocks, "sequential")
        offsets = _prefix(inner[..., -1], "sequential")
        offsets = torch.cat([offsets.new_zeros(*offsets.shape[:-1], 1), offsets[..., :-1]], -1)
        return (inner + offsets[..., None]).reshape(*x.shape[:-1], -1)[..., :k]
    # pairwise: a Hillis-Steele scan, log2(K) rounds of adding the prefix 2^i back
    out, step = x, 1
    while step < x.shape[-1]:
        shifted = torch.cat([out.new_zeros(*out.shape[:-1], step), out[..., :-step]], -1)
        out, step = out + shifted, step * 2
    return out


REFERENCES = {
    "sum": torch.sum,
    "mean": torch.mean,
    "cumsum": torch.cumsum,
    "matmul": torch.matmul,
    "softmax": torch.softmax,
    "log_softmax": torch.log_softmax,
    "layer_norm": F.layer_norm,
    "rms_norm": rms_norm,  # F.rms_norm from torch 2.4, its formula before
}
# The catalogue record that judges each kernel (its reference alone names a lambda).
LIKE = {"sum": "sum", "mean": "mean", "cumsum": "cumsum", "matmul": "matmul", "softmax": "softmax",
        "log_softmax": "log_softmax", "layer_norm": "layer_norm", "rms_norm": "rms_norm"}


@dataclass(frozen=True)
class Cell:
    op: str
    order: str
    pattern: str
    length: int
    dtype: torch.dtype
    seed: int = 0

    def describe(self) -> str:
        return f"{self.op} {self.order} {self.pattern} K={self.length} {str(self.dtype)[6:]} seed {self.seed}"


def values(pattern: str, shape: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    if pattern == "random":
        return torch.randn(shape, generator=generator, dtype=torch.float64)
    if pattern == "constant":
        return torch.full(shape, 0.1 + torch.rand((), generator=generator, dtype=torch.float64).item())
    if pattern == "repeated":  # four distinct values, each row its own draw of them
        choices = torch.randn(4, generator=generator, dtype=torch.float64)
        return choices[torch.randint(0, 4, shape, generator=generator)]
    if pattern == "alternating":  # a value of either sign in turn
        magnitude = 0.5 + torch.rand(shape, generator=generator, dtype=torch.float64)
        sign = 1 - 2 * (torch.arange(shape[-1]) % 2)
        return magnitude * sign
    raise ValueError(pattern)


def arguments(cell: Cell) -> tuple:
    generator = torch.Generator().manual_seed(cell.seed)
    k = cell.length
    x = values(cell.pattern, (ROWS, k), generator).to(cell.dtype)
    if cell.op == "matmul":
        return x, values(cell.pattern, (k, 16), generator).to(cell.dtype)
    if cell.op in ("layer_norm", "rms_norm"):
        weight = (1 + 0.1 * torch.randn(k, generator=generator)).to(cell.dtype)
        bias = (0.1 * torch.randn(k, generator=generator)).to(cell.dtype)
        return (x, (k,), weight, bias) if cell.op == "layer_norm" else (x, (k,), weight)
    return x, -1  # the dim, which the reduction length reads


def verdict_of(cell: Cell) -> CallVerdict:
    eps = {"layer_norm": {"eps": 1e-5}, "rms_norm": {"eps": 1e-6}}.get(cell.op, {})
    return check_call(kernel(cell.op, cell.order), *arguments(cell), reference=REFERENCES[cell.op],
                      like=LIKE[cell.op], **eps)


def failed(verdict: CallVerdict) -> bool:
    return verdict.status is Status.ERROR


def cells(ops=tuple(REFERENCES), orders=ORDERS, patterns=PATTERNS, lengths=LENGTHS, dtypes=DTYPES):
    for op, order, pattern, length, dtype in itertools.product(ops, orders, patterns, lengths, dtypes):
        yield Cell(op, order, pattern, length, dtype)


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time
    from collections import Counter

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", nargs="*", default=list(REFERENCES))
    parser.add_argument("--lengths", nargs="*", type=int, default=list(LENGTHS))
    options = parser.parse_args(argv)
    drawn, failures = Counter(), Counter()
    shown = []
    began = time.monotonic()
    for cell in cells(ops=options.ops, lengths=options.lengths):
        key = (cell.op, cell.pattern, str(cell.dtype)[6:])
        drawn[key] += 1
        verdict = verdict_of(cell)
        if failed(verdict):
            failures[key] += 1
            shown.append(f"{cell.describe()}\n    {verdict.message().splitlines()[1].strip()[:200]}")
    print(f"{'op':12} {'pattern':12} {'dtype':9} {'kernels':>7} {'failed':>6}")
    for key in sorted(drawn):
        print(f"{key[0]:12} {key[1]:12} {key[2]:9} {drawn[key]:7} {failures[key]:6}")
    print(f"\n{sum(drawn.values())} kernels judged, {sum(failures.values())} failed, {time.monotonic() - began:.0f} s")
    print("\n".join(shown))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
