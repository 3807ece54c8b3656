"""One ``Distributed.<api>.<n>.forward`` entry read as the collective call it records.

msprobe saves ``input_args`` / ``input_kwargs`` before the call and ``output`` after it: every positional
argument, then every keyword value, in that order. A collective's output buffers are ``null`` among the
inputs (its hook skips them), so what a rank contributes is read from the inputs and what it received from
the outputs. Never recorded: the world size, the rank (its folder names it), the default op (SUM) and the
default group (every rank). The entry is untrusted: a group, a root or a split that no run could have made
skips the case or fails it as malformed, and nothing here opens a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...dump import MalformedDescriptor, TensorSpec, decode_value


class CollectiveSkip(Exception):
    """The call cannot be judged from the dump; ``reason`` is its skip reason, the message says why."""

    def __init__(self, reason: str, message: str):
        self.reason = reason
        super().__init__(message)


@dataclass(frozen=True)
class Layout:
    """A collective's positional parameters in torch.distributed's order, the one its rank contributes
    (read before the call) and the one it writes (judged), and its root's, where one rank is the root."""

    params: tuple[str, ...]
    sent: str
    received: str
    root: str | None = None  # "src" or "dst": a global rank; "group_src" / "group_dst" index the group


_ALL_GATHER_TENSOR = Layout(("output_tensor", "input_tensor", "group", "async_op"), "input_tensor", "output_tensor")
_REDUCE_SCATTER_TENSOR = Layout(("output", "input", "op", "group", "async_op"), "input", "output")

LAYOUTS: dict[str, Layout] = {
    "all_reduce": Layout(("tensor", "op", "group", "async_op"), "tensor", "tensor"),
    "reduce": Layout(("tensor", "dst", "op", "group", "async_op", "group_dst"), "tensor", "tensor", "dst"),
    "broadcast": Layout(("tensor", "src", "group", "async_op", "group_src"), "tensor", "tensor", "src"),
    "all_gather": Layout(("tensor_list", "tensor", "group", "async_op"), "tensor", "tensor_list"),
    "all_gather_into_tensor": _ALL_GATHER_TENSOR,
    "_all_gather_base": _ALL_GATHER_TENSOR,
    "reduce_scatter": Layout(("output", "input_list", "op", "group", "async_op"), "input_list", "output"),
    "reduce_scatter_tensor": _REDUCE_SCATTER_TENSOR,
    "_reduce_scatter_base": _REDUCE_SCATTER_TENSOR,
    "all_to_all": Layout(("output_tensor_list", "input_tensor_list", "group", "async_op"), "input_tensor_list",
                         "output_tensor_list"),
    "all_to_all_single": Layout(("output", "input", "output_split_sizes", "input_split_sizes", "group", "async_op"),
                                "input", "output"),
    "scatter": Layout(("tensor", "scatter_list", "src", "group", "async_op", "group_src"), "scatter_list", "tensor",
                      "src"),
    "gather": Layout(("tensor", "gather_list", "dst", "group", "async_op", "group_dst"), "tensor", "gather_list",
                     "dst"),
}

# Sends and receives pair across ranks by the order of their calls, not by one key: recv.0 of one rank may
# take isend.3 of another. Objects (all_gather_object, broadcast_object_list) are pickled: never loaded.
POINT_TO_POINT = frozenset({"send", "recv", "isend", "irecv", "batch_isend_irecv"})

# The collectives that combine their ranks' values by a ReduceOp; the others move them.
REDUCING = frozenset({"all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base"})

# ReduceOp.PREMUL_SUM's factor is not recorded: no golden without it.
REDUCE_OPS = frozenset({"SUM", "AVG", "MAX", "MIN", "PRODUCT", "BAND", "BOR", "BXOR"})

# No job has more ranks than this: a larger group is no group a run made (and would cost its length to check).
MAX_RANKS = 1 << 20


@dataclass(frozen=True)
class CollectiveCall:
    """What one rank's entry says: the op, the group, the root, its contribution and what it received."""

    api: str  # "all_reduce"
    op: str  # "SUM" where none is recorded
    group: tuple[int, ...] | None  # global ranks in group order; None: the default group, every rank
    root: int | None  # src or dst as a global rank, where the call has a root
    root_index: int | None  # group_src or group_dst: the root's place in the group, where given instead
    split_sizes: tuple[int, ...] | None  # all_to_all_single's input_split_sizes, where given
    sent: Any  # this rank's contribution: a TensorSpec, a list of them, or None (not this rank's to give)
    received: Any  # what the call wrote on this rank: a TensorSpec, a list of them, or None

    @property
    def reduces(self) -> bool:
        """Whether the call combines its ranks' values by its op (a sum, a max), rather than moving them."""
        return self.api in REDUCING

    def implied_size(self) -> int | None:
        """The group size the call's own shapes imply (a gather's list holds one tensor per rank, a
        reduce-scatter's input N outputs); None where they imply none (all_reduce, broadcast)."""
        for value in (self.received, self.sent):
            if isinstance(value, list) and value and all(isinstance(item, TensorSpec) for item in value):
                return len(value)
        if isinstance(self.sent, TensorSpec) and isinstance(self.received, TensorSpec):
            small, large = {"all_gather_into_tensor": (self.sent, self.received),
                            "_all_gather_base": (self.sent, self.received),
                            "reduce_scatter_tensor": (self.received, self.sent),
                            "_reduce_scatter_base": (self.received, self.sent)}.get(self.api, (None, None))
            if small is not None and small.numel and large.numel % small.numel == 0:
                return large.numel // small.numel
        return None


def layout_of(api: str) -> Layout:
    """The layout of a collective the harness judges; raises CollectiveSkip for any other."""
    layout = LAYOUTS.get(api)
    if layout is not None:
        return layout
    if api in POINT_TO_POINT:
        raise CollectiveSkip("point-to-point", f"{api} is a point-to-point transfer: a send and its receive pair by "
                                               f"the order of the calls, not by one key across rank folders, so "
                                               f"nothing says which entry sent what this one received")
    raise CollectiveSkip("no-reference", f"Distributed.{api} is no collective this harness defines; the judged ones "
                                         f"are {', '.join(sorted(LAYOUTS))}")


def decode_collective(api: str, entry: Any) -> CollectiveCall:
    """The call one rank's forward entry records (raises CollectiveSkip or MalformedDescriptor)."""
    layout = layout_of(api)
    if not isinstance(entry, dict):
        raise MalformedDescriptor("the entry", f"is {type(entry).__name__}, expected an object")
    before, after = _bound(layout, entry)
    op = _op(before.get("op"))
    root = _rank(before.get(layout.root), layout.root) if layout.root else None
    index_name = f"group_{layout.root}" if layout.root else None
    root_index = _rank(before.get(index_name), index_name) if index_name else None
    if layout.root and root is None and root_index is None:
        if api in ("broadcast", "reduce"):
            raise MalformedDescriptor(f"input {layout.root}", f"is not recorded, and {api} has no default root")
        root_index = 0  # gather's and scatter's default
    splits = before.get("input_split_sizes")
    return CollectiveCall(
        api=api, op=op, group=_group(before.get("group")), root=root, root_index=root_index,
        split_sizes=None if splits is None else _sizes(splits, "input_split_sizes"),
        sent=decode_value(before.get(layout.sent), f"input {layout.sent}"),
        received=decode_value(after.get(layout.received), f"output {layout.received}"))


def _bound(layout: Layout, entry: dict) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each parameter's descriptor before the call and after it, by name."""
    args, kwargs, output = entry.get("input_args", []), entry.get("input_kwargs", {}), entry.get("output")
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        raise MalformedDescriptor("input_args", "is not a list, or input_kwargs not an object")
    if len(args) > len(layout.params):
        raise MalformedDescriptor("input_args", f"holds {len(args)} values, more than the {len(layout.params)} "
                                                f"parameters of {', '.join(layout.params)}")
    if not isinstance(output, list) or len(output) != len(args) + len(kwargs):
        raise MalformedDescriptor("output", f"is not the list of the call's {len(args) + len(kwargs)} arguments "
                                            "after it, as msprobe records a collective")
    names = [*layout.params[:len(args)], *kwargs]
    before = dict(zip(layout.params, args))
    before.update(kwargs)
    return before, dict(zip(names, output))


def _op(desc: Any) -> str:
    if desc is None:
        return "SUM"
    value = desc.get("value") if isinstance(desc, dict) and desc.get("type") == "torch.distributed.ReduceOp" else None
    if not isinstance(value, str):
        raise MalformedDescriptor("input op", f"is {_shown(desc)}, expected a torch.distributed.ReduceOp")
    name = value.rpartition(".")[2].upper()
    if name not in REDUCE_OPS:
        raise CollectiveSkip("no-reference", f"the reduce op {value} has no golden here (PREMUL_SUM's factor is not "
                                             f"recorded); judged ops: {', '.join(sorted(REDUCE_OPS))}")
    return name


def _group(desc: Any) -> tuple[int, ...] | None:
    if desc is None:
        return None
    if not isinstance(desc, dict) or desc.get("type") != "torch.ProcessGroup":
        raise MalformedDescriptor("input group", f"is {_shown(desc)}, expected a torch.ProcessGroup")
    ranks = desc.get("group_ranks")
    if not isinstance(ranks, list):
        raise CollectiveSkip("group-unknown", f"its group {desc.get('group_id', '')!s:.40} is recorded without its "
                                              f"ranks (group_ranks), so the ranks it spans are unknown")
    if not 0 < len(ranks) <= MAX_RANKS:
        raise MalformedDescriptor("input group", f"names {len(ranks)} ranks; a group has 1 to {MAX_RANKS}")
    if any(type(rank) is not int or rank < 0 for rank in ranks) or len(set(ranks)) != len(ranks):
        raise MalformedDescriptor("input group", "has group_ranks that are not distinct non-negative integers")
    return tuple(ranks)


def _rank(desc: Any, where: str) -> int | None:
    value = decode_value(desc, f"input {where}")
    if value is None:
        return None
    if type(value) is not int or not 0 <= value < MAX_RANKS:
        raise MalformedDescriptor(f"input {where}", f"is {value!r}, not a rank")
    return value


def _sizes(desc: Any, where: str) -> tuple[int, ...]:
    value = decode_value(desc, f"input {where}")
    if not isinstance(value, list) or any(type(size) is not int or size < 0 for size in value):
        raise MalformedDescriptor(f"input {where}", f"is {_shown(value)}, expected a list of non-negative ints")
    return tuple(value)


def _shown(value: Any) -> str:
    return f"{value!r:.80}"
