"""What each collective writes on one rank, from every participating rank's contribution: its float64 golden
and how a fair implementation may err.

Moving data (broadcast, gather, scatter, all-to-all) and MAX / MIN are exact: the binary standard. A sum over
N ranks is N - 1 additions in the tensor's own dtype, in an order the dump does not record (a ring, a tree,
recursive halving; gloo's 4-rank ring errs by up to 180 float32 ulps where the sum cancels), and any order's
error is within (N - 1)·u·Σ|xᵢ|: the error bound standard with the ranks' absolute sum as the terms' norm and
N - 1 roundings; AVG divides once more and PRODUCT's terms are the product itself. Integers are exact.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ...precision import Accumulation
from .calls import CollectiveCall, CollectiveSkip, Layout


class RanksDisagree(ValueError):
    """The ranks' entries of one key describe calls no run could have made together (shapes, lists)."""


@dataclass(frozen=True)
class Expected:
    """One tensor the call wrote on this rank, its golden and the standard that judges it."""

    name: str  # the parameter it was written to: "tensor", "tensor_list[1]"
    actual: torch.Tensor
    golden: torch.Tensor  # float64 for a float tensor, the exact integers otherwise
    standard: str  # "binary" or "error_bound"
    accumulation: Accumulation = field(default_factory=Accumulation)


@dataclass(frozen=True)
class Contribution:
    """One rank's call and what it sent, loaded."""

    call: CollectiveCall
    sent: Any  # a tensor, a list of tensors, or None


def sources(call: CollectiveCall, group: tuple[int, ...], me: int) -> tuple[int, ...]:
    """The ranks whose contributions this rank's result is made of; CollectiveSkip where it has no result."""
    root = root_of(call, group)
    if call.api in ("reduce", "gather") and me != root:
        what = "holds partial sums" if call.api == "reduce" else "receives nothing"
        raise CollectiveSkip("undefined-output", f"{call.api} writes its result on rank {root} alone: rank {me}'s "
                                                 f"buffer {what}, which no definition fixes")
    return (root,) if call.api in ("broadcast", "scatter") else group


def root_of(call: CollectiveCall, group: tuple[int, ...]) -> int | None:
    if call.root is not None:
        if call.root not in group:
            raise CollectiveSkip("group-unknown", f"its root, rank {call.root}, is not in its group {list(group)}")
        return call.root
    if call.root_index is None:
        return None
    if call.root_index >= len(group):
        raise CollectiveSkip("group-unknown", f"its root is place {call.root_index} of a group of {len(group)}")
    return group[call.root_index]


def expected(layout: Layout, call: CollectiveCall, received: Any, group: tuple[int, ...], me: int,
             contributions: dict[int, Contribution]) -> list[Expected]:
    """This rank's received tensors, each with its golden."""
    at = group.index(me)
    sent = {rank: contributions[rank].sent for rank in contributions}
    name = layout.received
    if call.api in ("all_reduce", "reduce"):
        return [reduced(name, received, call.op, [sent[r] for r in group])]
    if call.api == "broadcast":
        return [_moved(name, received, sent[root_of(call, group)])]
    if call.api == "scatter":
        return [_moved(name, received, _nth(sent[root_of(call, group)], at, len(group), "scatter_list"))]
    if call.api in ("all_gather", "gather"):
        _check_length(received, len(group), name)
        return [_moved(f"{name}[{i}]", out, sent[rank]) for i, (out, rank) in enumerate(zip(received, group))]
    if call.api in ("all_gather_into_tensor", "_all_gather_base"):
        return [_moved(name, received, _joined(received, [sent[r] for r in group]))]
    if call.api == "reduce_scatter":
        return [reduced(name, received, call.op, [_nth(sent[r], at, len(group), "input_list") for r in group])]
    if call.api in ("reduce_scatter_tensor", "_reduce_scatter_base"):
        return [reduced(name, received, call.op, [_share(sent[r], at, len(group), received) for r in group])]
    if call.api == "all_to_all":
        _check_length(received, len(group), name)
        return [_moved(f"{name}[{j}]", out, _nth(sent[rank], at, len(group), "input_tensor_list"))
                for j, (out, rank) in enumerate(zip(received, group))]
    assert call.api == "all_to_all_single"
    pieces = [_piece(contributions[rank], at, len(group)) for rank in group]
    return [_moved(name, received, _joined(received, pieces))]


# ---------------------------------------------------------------- data movement


def _moved(name: str, actual: Any, source: Any) -> Expected:
    actual, source = _tensor(actual, name), _tensor(source, f"the source of {name}")
    if source.shape != actual.shape or source.dtype != actual.dtype:
        raise RanksDisagree(f"{name} is {_shown(actual)} but what was sent to it is {_shown(source)}")
    return Expected(name, actual, _golden(source), "binary")


def _joined(received: Any, parts: list[Any]) -> torch.Tensor:
    """The parts, each flattened, one after another in the received tensor's shape (dim 0 order)."""
    received = _tensor(received, "the received tensor")
    parts = [_tensor(part, "a sent tensor") for part in parts]
    total = sum(part.numel() for part in parts)
    if total != received.numel():
        raise RanksDisagree(f"the received tensor holds {received.numel()} elements, the {len(parts)} ranks sent "
                            f"{total}")
    return torch.cat([part.reshape(-1) for part in parts]).reshape(received.shape)


def _nth(value: Any, at: int, size: int, name: str) -> Any:
    if not isinstance(value, list):
        raise RanksDisagree(f"{name} is not a list of tensors")
    _check_length(value, size, name)
    return value[at]


def _share(sent: Any, at: int, size: int, received: Any) -> torch.Tensor:
    """reduce_scatter_tensor's share of one rank's input for place ``at``: its ``at``-th of ``size`` equal parts."""
    sent, received = _tensor(sent, "input"), _tensor(received, "output")
    if sent.numel() != size * received.numel():
        raise RanksDisagree(f"input holds {sent.numel()} elements, not {size} times the output's {received.numel()}: "
                            f"a group of {sent.numel() / max(received.numel(), 1):g} ranks, not the {size} dumped")
    return sent.reshape(size, -1)[at].reshape(received.shape)


def _piece(contribution: Contribution, at: int, size: int) -> torch.Tensor:
    """all_to_all_single's piece of one rank's input for place ``at``, by that rank's input_split_sizes."""
    sent = _tensor(contribution.sent, "input")
    splits = contribution.call.split_sizes
    if not splits:
        if sent.dim() == 0 or sent.shape[0] % size:
            raise RanksDisagree(f"input's first dimension, {tuple(sent.shape)}, does not split into {size} parts")
        return sent.chunk(size)[at]
    if len(splits) != size or sum(splits) != sent.shape[0]:
        raise RanksDisagree(f"input_split_sizes {list(splits)} do not split a first dimension of {sent.shape[0]} "
                            f"among {size} ranks")
    return sent.split(list(splits))[at]


def _check_length(value: Any, size: int, name: str) -> None:
    if not isinstance(value, list):
        raise RanksDisagree(f"{name} is not a list of tensors")
    if len(value) != size:
        raise CollectiveSkip("ranks-missing", f"{name} holds {len(value)} tensors, one per rank of a group of "
                                              f"{len(value)}, but the dump's group has {size}: some ranks were "
                                              f"not dumped (dump every rank: msprobe's \"rank\": [])")


# ---------------------------------------------------------------- reductions


def reduced(name: str, actual: Any, op: str, parts: list[Any]) -> Expected:
    """``actual``, the reduction by ``op`` of the ranks' ``parts``, with its golden and how it may err."""
    actual = _tensor(actual, name)
    parts = [_tensor(part, f"a rank's {name}") for part in parts]
    for part in parts:
        if part.shape != actual.shape or part.dtype != actual.dtype:
            raise RanksDisagree(f"{name} is {_shown(actual)} here but a rank sent {_shown(part)}")
    if not actual.is_floating_point():
        return Expected(name, actual, _exact_reduction(op, parts, actual.dtype), "binary")
    if op in ("BAND", "BOR", "BXOR"):
        raise CollectiveSkip("no-reference", f"{op} of {actual.dtype} tensors is no arithmetic a golden computes")
    terms = torch.stack([part.to(torch.float64) for part in parts])
    count = len(parts)
    if op in ("MAX", "MIN"):
        return Expected(name, actual, terms.amax(0) if op == "MAX" else terms.amin(0), "binary")
    if op == "PRODUCT":
        golden = terms.prod(0)
        return Expected(name, actual, golden, "error_bound", Accumulation(term_norm=golden.abs(), roundings=count - 1))
    golden, norm = terms.sum(0), terms.abs().sum(0)
    if op == "AVG":  # the sum's N - 1 roundings, then one more for the division
        return Expected(name, actual, golden / count, "error_bound",
                        Accumulation(term_norm=norm / count, roundings=count))
    return Expected(name, actual, golden, "error_bound", Accumulation(term_norm=norm, roundings=count - 1))


_EXACT: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "SUM": torch.add, "PRODUCT": torch.mul, "MAX": torch.maximum, "MIN": torch.minimum,
    "BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor,
}


def _exact_reduction(op: str, parts: list[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    """Integers and booleans reduce exactly, wrapping as the dtype wraps."""
    combine = _EXACT.get(op)
    if combine is None:
        raise CollectiveSkip("no-reference", f"{op} of {dtype} tensors has no exact integer definition")
    wide = torch.int64 if dtype != torch.bool else torch.bool
    if dtype == torch.bool and op in ("SUM", "PRODUCT"):
        combine = torch.logical_or if op == "SUM" else torch.logical_and
    return functools.reduce(combine, [part.to(wide) for part in parts]).to(dtype)


def _golden(source: torch.Tensor) -> torch.Tensor:
    return source.to(torch.float64) if source.is_floating_point() else source


def _tensor(value: Any, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise RanksDisagree(f"{name} is {'missing' if value is None else type(value).__name__}, expected a tensor")
    return value


def _shown(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')}{list(tensor.shape)}"
