"""The bound of a user's op that no accumulation rule describes: a kernel registered without ``like``.

A fused kernel (add + rms_norm, a custom attention) usually takes arguments that no built-in op
takes, so no rule of accumulation.py reads them. Judged as one rounding of one term per element, a
fair float32 add + rms_norm over rows of 8192 failed magnitude_bound_bias at 0.33 to 0.59 (its sum
of squares summed pairwise) and up to 18.8 (summed in order): its rounded sum of squares moves every
element of a row the same way, by about sqrt(K) u. What the reference does reveal is how many input
elements each output reads, and a fair kernel may sum all of them. So such an op gets a rule
measured from its reference: K is the most input elements one output element depends on (the
nonzero entries of its Jacobian row, by autograd, at a few outputs), and the outputs err together
(Accumulation.correlated): a bias is judged with numel / K groups as its samples, as a row's
shared factor makes them.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import torch

from ..bounds import AccumulationRule
from ..ops import ResolvedOp
from .sides import Side, flatten_outputs, side_arguments, tensor_paths


class _Reads:
    """The rule's length: the most input elements one output of the reference reads, measured on
    first use (only where a float output is judged) and kept for the gradients' bounds."""

    def __init__(self, op: ResolvedOp, golden: Side, notes: list[str]):
        self.op, self.golden, self.notes = op, golden, notes
        self.count: int | None = None

    def __call__(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
        if self.count is None:
            self.count = self._measure(args, kwargs)
        return self.count

    def _measure(self, args, kwargs) -> int:
        try:
            count, probed = most_inputs_read(self.op, args, kwargs, self.golden)
            unread = "no float output of its reference is differentiable"
        except Exception as exc:  # a reference autograd cannot follow: the plain bound, said so
            count, probed, unread = 1, 0, f"{type(exc).__name__}: {exc}"
        self.notes.append(_assumed(self.op.api_name, count, probed, unread))
        return count


_FIX = ("register it with like= a built-in op taking the same arguments, give its case roundings: with a reason, "
        "or judge it with accumulation= (docs/op-cases.md#custom-ops)")


def _assumed(name: str, count: int, probed: int, unread: str) -> str:
    """What the bound of op ``name`` assumed, for every verdict of it."""
    if not probed:
        return (f"{name} has no like= and no accumulation rule, and how many inputs each of its outputs reads is "
                f"unknown ({unread}), so its bound assumes one rounding of one term per element (K = 1, no shared "
                f"factor): a fused kernel that sums or normalizes errs past that. To judge it fairly, {_FIX}")
    judged = (f"up to {count} input elements (autograd, at {probed} outputs), so it is judged as a sum of K = {count} "
              f"terms, its outputs erring together as a shared factor's rows do") if count > 1 else \
        f"one input element (autograd, at {probed} outputs), so it is judged as one rounding of one term (K = 1)"
    return (f"{name} has no like= and no accumulation rule, so its bound counts what its reference reads: one "
            f"output element depends on {judged}. For a tighter or a wider bound, {_FIX}")


def measured_rule(op: ResolvedOp, golden: Side, notes: list[str]) -> AccumulationRule:
    """The accumulation rule of an op no table describes, read from its golden-side function ``op``."""
    return AccumulationRule(_Reads(op, golden, notes), correlated=True)


def most_inputs_read(op: ResolvedOp, args: Sequence[Any], kwargs: Mapping[str, Any], side: Side) -> tuple[int, int]:
    """The most float input elements that one output element of ``op.func`` depends on, over the
    probed outputs (a cumulative sum's last, a normalized row's largest), and how many outputs were
    probed (0: no float output is differentiable). A zero derivative counts as no dependence: an
    output of 0 in rms_norm reads only itself at first order, so the largest output is probed too."""
    paths = [p for p, t in tensor_paths(args, kwargs).items() if t.is_floating_point() or t.is_complex()]
    leaves: dict[str, torch.Tensor] = {}
    call_args, call_kwargs = side_arguments(args, kwargs, side, [], grad_paths=paths, leaves=leaves)
    most, probed = 1, 0
    with torch.enable_grad(), side.context():
        outputs = [t.reshape(-1) for _, t in flatten_outputs(op.func(*call_args, **call_kwargs))
                   if isinstance(t, torch.Tensor) and t.requires_grad and t.numel()]
        for flat in outputs:
            for index in _probes(flat.detach()):
                grads = torch.autograd.grad(flat[index].real if flat.is_complex() else flat[index],
                                            list(leaves.values()), retain_graph=True, allow_unused=True)
                most = max(most, sum(int(torch.count_nonzero(g)) for g in grads if g is not None))
                probed += 1
    return most, probed


def _probes(flat: torch.Tensor) -> list[int]:
    """The outputs probed: the first, the middle, the last and the largest in magnitude."""
    size = flat.abs()
    largest = int(torch.where(torch.isfinite(size), size, 0).argmax())
    return sorted({0, flat.numel() // 2, flat.numel() - 1, largest})
