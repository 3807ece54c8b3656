"""What an accumulation rule says of one op: its reduction length, its term norms and sensitivities, and
which outputs err together. The rules ops share are accumulation.py's; which op follows which is its
catalogue record's (ops/table/), as are the roundings a fair kernel makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch


def elementwise(args: Sequence[Any], kwargs: Mapping[str, Any]) -> int:
    """The length of an op that sums nothing forward (its rule bounds a composite or a gradient)."""
    return 1


@dataclass(frozen=True)
class AccumulationRule:
    """How one op accumulates. ``length`` reads the op's own (golden-side) arguments."""

    length: Callable[[Sequence[Any], Mapping[str, Any]], int]  # terms per sum, bias not counted
    added: tuple[int, str] | None = None  # (position, keyword) of a bias added to every sum
    squared: bool = False  # linear in each input: term norms come from the op on squared inputs
    mean: bool = False  # divides its sum by the length, so the terms are x_i / K
    backward_length: Callable[[Sequence[Any], Mapping[str, Any]], int] | None = None
    # per output element, the L2 norm of the intermediates a fair kernel rounds, where they outgrow the
    # result; and the same for input gradients given the output's gradient, by argument name
    term_norm: Callable[[Sequence[Any], Mapping[str, Any]], torch.Tensor] | None = None
    grad_term_norms: Callable[[Sequence[Any], Mapping[str, Any], torch.Tensor], Mapping[str, torch.Tensor]] | None = None
    # per output element, and per input gradient by argument name: Accumulation.sensitivity
    sensitivity: Callable[[Sequence[Any], Mapping[str, Any]], torch.Tensor] | None = None
    grad_sensitivities: Callable[[Sequence[Any], Mapping[str, Any], torch.Tensor], Mapping[str, torch.Tensor]] | None = None
    arguments: tuple[str, ...] = ("input",)  # positional argument names, to find a gradient's argument
    # scales each run of `length` consecutive outputs by one rounded factor (Accumulation.shared), for
    # these arguments: softmax over its last dim, not over another
    shared: bool | Callable[[Sequence[Any], Mapping[str, Any]], bool] = False
    # the dim whose index each shared row keeps (batch_norm's channels, dim 1), where a row is not a
    # run of consecutive outputs (Accumulation.shared_dim)
    shared_dim: int | None = None
    # what the shared row's statistic sums (Accumulation.row_sum), and where it offsets the row, what
    # it subtracts (Accumulation.row_offset_size)
    row_sum: str | None = None
    row_offset_size: Callable[[Sequence[Any], Mapping[str, Any]], torch.Tensor] | None = None
    # with a shared factor, (weight, bias) broadcastable to the output: Accumulation.shared_offset and
    # shared_origin (a norm's affine parameters, through which its row-common errors reach the output)
    shared_affine: Callable[[Sequence[Any], Mapping[str, Any]], tuple[Any, Any]] | None = None
    # each sum's outputs err together without sharing a factor (Accumulation.correlated): a prefix
    # sum's run, a batch norm's channel (its rounded mean and rsqrt); implied by ``shared``
    correlated: bool = False
    # term norms of one output by its name and shape, flat in its order or broadcastable to it, where
    # term_norm cannot say (None: it does): the mean a norm or var_mean also returns (judged on its own
    # size, it cancels), an SVD's factors, whose shapes its arguments choose.
    output_norms: Callable[[Sequence[Any], Mapping[str, Any], str, torch.Size], torch.Tensor | None] | None = None
    # argument paths of sampling coordinates (grid_sample's grid), which move by the roundings of the
    # pixel coordinate computed from them rather than by their own ulp (bounds/terms/sampling_terms.py)
    coordinates: frozenset[str] = frozenset()

    @property
    def reduces(self) -> bool:
        """Whether its forward bound needs a reduction length from the call's inputs."""
        return self.length is not elementwise

    def argument(self, path: str) -> str | None:
        """'input_args[3]' or "input_kwargs['weight']" -> 'weight'; None for a nested or unknown path."""
        if path.startswith("input_kwargs['") and path.endswith("']"):
            return path[len("input_kwargs['"):-2]
        index = path.removeprefix("input_args[").removesuffix("]")
        if path.startswith("input_args[") and index.isdigit() and int(index) < len(self.arguments):
            return self.arguments[int(index)]
        return None
