"""What the dump recorded the device computing: a case's outputs, or its inputs' gradients.

The offline check (``--npu-precision-device dumped``) judges these instead of running the op. They
are read as untrusted as the inputs are: each file is checked against its descriptor (size, dtype,
shape) and must lie inside the dump's folder. Outputs are named as the runner names them
(``output.0``, ``output.1.0``). Gradients stay in the dump's order: msprobe records the gradients of
the autograd node behind the call, whose inputs need not follow the API's arguments (linear's
AddmmBackward takes bias, input and weight.t()), so ``leaf_gradients`` maps them onto the inputs
through the golden's own autograd graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .descriptors import CaseEntries, DescriptorError, DumpDataError, TensorSpec, decode_for, decode_value
from .tensor_files import load_tensor


class NothingRecorded(Exception):
    """The entry has no recorded result tensors to judge: the message says why and what to dump."""


@dataclass(frozen=True)
class RecordedResults:
    outputs: tuple[tuple[str, torch.Tensor], ...] = ()  # forward: ("output.0", tensor), in the runner's names
    grads: tuple[torch.Tensor | None, ...] = ()  # backward: the recorded gradients in the dump's order, None for null
    output_dtypes: tuple[torch.dtype, ...] = ()  # the forward's output dtypes, from its descriptors

    def __post_init__(self) -> None:
        if not self.output_dtypes:
            object.__setattr__(self, "output_dtypes", tuple(t.dtype for _, t in self.outputs))


def recorded_results(case: Any, entries: CaseEntries, data_dir: Path) -> RecordedResults:
    """The tensors a case compares, loaded from the dump; raise NothingRecorded where it has none.
    ``entries``: the case's entries as its run read them."""
    value = entries.output(backward=case.direction != "forward")
    decoded = decode_for(case.key, lambda v: decode_value(v, "output"), value, case.source)
    named = _named(decoded if isinstance(decoded, list) else [decoded], "output")
    # msprobe writes no file for an empty tensor (index_select selecting nothing): its shape is all there is
    files = [(name, spec) for name, spec in named if spec.data_name is not None or spec.numel == 0]
    inline = _inline_results(decoded if isinstance(decoded, list) else [decoded])
    if not named and inline and case.direction == "forward":  # Tensor.__bool__: the dump holds the value itself
        return RecordedResults(outputs=inline)
    if not files or (not any(spec.data_name is not None for _, spec in files) and any(s.numel for _, s in named)):
        what = "gradients" if case.direction == "backward" else "outputs"
        raise NothingRecorded(f"{case.key}: the dump holds no {what} tensor files (a statistics dump, or "
                              f"data_mode without them), so there is no device result to judge; dump with "
                              f"task 'tensor' and data_mode 'all' to check it offline")
    loaded = tuple((name, _recorded_tensor(data_dir, spec, case.key)) for name, spec in files)
    if case.direction == "forward":
        return RecordedResults(outputs=loaded)
    by_position = dict(loaded)  # top-level positions keep their place: a null gradient is a gap, not nothing
    count = len(decoded) if isinstance(decoded, list) else 1
    grads = tuple(by_position.get(f"output.{i}") for i in range(count))
    # The forward's outputs only tell whether an inf in a gradient came from a forward overflow.
    finite = all(bool(torch.isfinite(g).all()) for g in grads if g is not None and g.is_floating_point())
    return RecordedResults(outputs=() if finite else _forward_outputs(case, entries, data_dir), grads=grads,
                           output_dtypes=_forward_dtypes(entries))


def forward_output_shapes(entries: CaseEntries) -> tuple[tuple[int, ...], ...] | None:
    """The shapes of a case's forward output tensors, from their descriptors (no file is read)."""
    try:
        return tuple(spec.shape for _, spec in output_specs(entries))
    except DescriptorError:
        return None


def forward_output_tensors(case: Any, entries: CaseEntries, data_dir: Path) -> tuple[torch.Tensor, ...]:
    """A case's recorded forward output tensors, where the dump has their files (best effort)."""
    return tuple(t for _, t in _forward_outputs(case, entries, data_dir))


def _forward_dtypes(entries: CaseEntries) -> tuple[torch.dtype, ...]:
    """The dtypes of a backward case's forward outputs, from their descriptors (no file is read)."""
    try:
        return tuple(spec.dtype for _, spec in output_specs(entries))
    except DescriptorError:
        return ()


def _forward_outputs(case: Any, entries: CaseEntries, data_dir: Path) -> tuple[tuple[str, torch.Tensor], ...]:
    """A backward case's forward outputs, where recorded: they show a forward that overflowed. Best
    effort: a forward file that cannot be read is its own forward case's input error."""
    try:
        return tuple((name, _as_tensor(load_tensor(data_dir, spec, case.forward_key)))
                     for name, spec in output_specs(entries) if spec.data_name is not None)
    except (DescriptorError, DumpDataError):  # its forward case reports the same files
        return ()


def output_specs(entries: CaseEntries, backward: bool = False) -> list[tuple[str, TensorSpec]]:
    """The forward's output descriptors (a backward entry's: its input gradients) by name ("output.0",
    "output.1.0"), none read from a file (raises DescriptorError)."""
    decoded = decode_value(entries.output(backward=backward), "output")
    return _named(decoded if isinstance(decoded, list) else [decoded], "output")


def positional_gradients(recorded: tuple[torch.Tensor, ...], inputs: dict[str, torch.Tensor],
                         notes: list[str]) -> dict[str, torch.Tensor]:
    """A torch_npu op is one autograd node whose inputs are its tensor arguments in order: the dump's
    i-th gradient is the i-th tensor argument's, where the shapes agree."""
    found: dict[str, torch.Tensor] = {}
    for index, ((path, tensor), grad) in enumerate(zip(inputs.items(), recorded)):
        if grad is None:
            continue
        if grad.shape != tensor.shape:
            notes.append(f"the dump's gradient {index} has shape {tuple(grad.shape)}, its tensor argument {path} "
                         f"{tuple(tensor.shape)}: not compared")
            continue
        found[path] = grad
    return found


# Autograd nodes between a call's last node and an input's leaf that only move or copy the gradient.
_COPIES = frozenset({"CloneBackward0", "ToCopyBackward0"})
_TRANSPOSES = frozenset({"TBackward0", "TransposeBackward0"})
_RESHAPES = frozenset({"ViewBackward0", "UnsafeViewBackward0", "ReshapeAliasBackward0"})


def leaf_gradients(recorded: tuple[torch.Tensor, ...], outputs: list, leaves: dict[str, torch.Tensor],
                   notes: list[str]) -> dict[str, torch.Tensor]:
    """The input gradients the dump's recorded ones are, by the golden's own autograd graph.

    msprobe records the gradients of the call's last autograd node, one per node input, in the
    node's order: for a 2-D linear AddmmBackward's (bias, input, weight.t()). Where a node input
    reaches an input's leaf through copies, a transpose or a reshape, the recorded gradient is that
    input's, moved back. A node input computed inside the call (cross_entropy's log_softmax) has a
    gradient no input shares: it is noted and not compared.
    """
    node = next((t.grad_fn for _, t in outputs if isinstance(t, torch.Tensor) and t.grad_fn is not None), None)
    if node is None:
        return {}
    if len(node.next_functions) != len(recorded):
        notes.append(_reshape_note(node) if node.name() in _RESHAPES else (
            f"the dump records {len(recorded)} gradients for the last step of this call's backward, where this "
            f"torch's has {len(node.next_functions)} (autograd's {node.name()}): the device computed the backward "
            f"another way, so the recorded gradients cannot be matched to the call's arguments. {_REPLAY}"))
        return {}
    by_leaf = {id(leaf): path for path, leaf in leaves.items()}
    found: dict[str, torch.Tensor] = {}
    for index, ((edge, _), grad) in enumerate(zip(node.next_functions, recorded)):
        if grad is None or edge is None:
            continue
        path, move = _leaf_of(edge, by_leaf)
        if path is None or path in found:
            notes.append(_reshape_note(node) if node.name() in _RESHAPES else (
                f"the dump's gradient {index} is that of an intermediate result inside this call (autograd's "
                f"{node.name()}), not of one of its arguments, so it has no argument's gradient to be compared "
                f"with. {_REPLAY}"))
            continue
        try:
            found[path] = move(grad, leaves[path].shape)
        except RuntimeError as exc:
            notes.append(f"the dump's gradient {index} ({tuple(grad.shape)}) does not fit {path} "
                         f"{tuple(leaves[path].shape)}: not compared ({exc})")
    return found


_REPLAY = "A replay on a device (--npu-precision-device npu or cuda) judges this backward"


def _reshape_note(node) -> str:
    """msprobe hooks the last autograd node of a call; for a 3-D linear or matmul that is a reshape."""
    return (f"msprobe recorded the gradient of a reshape inside this call (autograd's {node.name()}, the last "
            f"step of its backward), not the gradients of its arguments: a reshape holds no arithmetic to judge, "
            f"and the arguments' gradients cannot be read from it. Nothing in the dump needs fixing: the forward "
            f"case judges this call's arithmetic. {_REPLAY}")


def _leaf_of(edge, by_leaf: dict[int, str]):
    """(the input path an edge of the graph reaches, how its gradient maps onto that input)."""
    transposed = reshaped = False
    for _ in range(8):  # a short chain of copies and moves, or nothing
        name = edge.name()
        if name == "torch::autograd::AccumulateGrad":
            path = by_leaf.get(id(edge.variable))
            return path, lambda g, shape: _moved(g, shape, transposed, reshaped)
        if name in _COPIES or name in _TRANSPOSES or name in _RESHAPES:
            transposed ^= name in _TRANSPOSES
            reshaped |= name in _RESHAPES
            nexts = [e for e, _ in edge.next_functions if e is not None]
            if len(nexts) != 1:
                return None, None
            edge = nexts[0]
            continue
        return None, None
    return None, None


def _moved(grad: torch.Tensor, shape: torch.Size, transposed: bool, reshaped: bool) -> torch.Tensor:
    if transposed:
        grad = grad.reshape(torch.Size([*shape[:-2], shape[-1], shape[-2]])) if reshaped else grad
        return grad.mT
    return grad.reshape(shape) if reshaped or grad.shape != shape else grad


def _named(values: list, prefix: str) -> list[tuple[str, TensorSpec]]:
    found = []
    for i, value in enumerate(values):
        name = f"{prefix}.{i}"
        if isinstance(value, TensorSpec):
            found.append((name, value))
        elif isinstance(value, (list, tuple)):
            found.extend(_named(list(value), name))
    return found


def _inline_results(values: list) -> tuple[tuple[str, torch.Tensor], ...]:
    """A forward's outputs that dump.json holds as exact values (a bool, an int), as the runner names them."""
    exact = [isinstance(value, (bool, int)) for value in values]
    if not values or not all(exact):
        return ()
    return tuple((f"output.{i}", torch.tensor(value)) for i, value in enumerate(values))


def _recorded_tensor(data_dir: Path, spec: TensorSpec, key: str) -> torch.Tensor:
    if spec.data_name is None:  # an empty tensor, recorded by its shape and dtype alone
        return torch.empty(spec.shape, dtype=spec.dtype)
    return _as_tensor(load_tensor(data_dir, spec, key))


def _as_tensor(value: Any) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(value)
