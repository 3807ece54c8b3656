"""The concrete arguments of one dump case: ``materialize`` turns a case into ``CallInputs``.

Tensors come from ``dump_tensor_data/`` (task ``tensor``, read by tensor_files.py) or are synthesized
from their statistics (task ``statistics``, synthesis.py), each with a seed of its own.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from .descriptors import (
    CaseEntries, DumpedDevice, TensorSpec, decode_for, require_finite_extremes, require_rebuildable,
)
from .synthesis import Role, RoleKind, role_for, synthesize
from .tensor_files import load_tensor

if TYPE_CHECKING:
    from .dump_cases import DumpCase

@dataclass(frozen=True)
class CallInputs:
    """Concrete CPU arguments of one case.

    Tensors that required grad when dumped come with ``requires_grad=True`` (floating dtypes only);
    ``requires_grad`` lists where they were. ``grad_outputs`` is the dumped ``backward.input``:
    the gradients flowing into the API's outputs (``()`` for a forward case).
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    grad_outputs: tuple[torch.Tensor | None, ...] = ()
    requires_grad: tuple[str, ...] = ()
    guesses: tuple[str, ...] = ()  # see DecodedCall.guesses

    def with_device(self, device: torch.device | str) -> "CallInputs":
        """The same inputs with every dumped ``torch.device`` argument replaced by ``device``."""
        device = torch.device(device)
        return replace(self, args=tuple(_mapped(self.args, DumpedDevice, lambda _: device)),
                       kwargs=_mapped(self.kwargs, DumpedDevice, lambda _: device))

def materialize(case: "DumpCase", data_dir: Path, *, seed: int | None = None,
                entries: CaseEntries | None = None) -> CallInputs:
    """Concrete inputs of ``case``: real tensor files where the dump has them, else synthesized.

    Synthesized tensors get per-tensor seeds from the forward case id and the argument's position,
    so a backward case sees exactly its forward case's inputs, in any run order. ``seed`` is an
    optional run-wide salt: give the same value to every case (not ``case.seed``) to draw a
    different but equally reproducible set of inputs. ``entries``: the case's entries as its run
    has read and decoded them (read here where not given).
    """
    entries = case.read() if entries is None else entries
    call = decode_for(case.forward_key, lambda read: read.call, entries, case.source)
    context = call.top_level()
    grad_paths: list[str] = []

    def build(spec: TensorSpec, key: str, base_seed: int, role: Role | None) -> torch.Tensor:
        if spec.data_name is not None:
            return load_tensor(data_dir, spec, key)
        decode_for(key, require_rebuildable, spec, case.source)
        decode_for(key, require_finite_extremes, spec, case.source)
        return synthesize(spec, tensor_seed(base_seed, spec.where, seed), role=role)

    def forward_tensor(spec: TensorSpec) -> torch.Tensor:
        role = resolve_role(role_for(case.name, spec.where), context)
        tensor = build(spec, case.forward_key, case.forward_seed, role)
        differentiable = isinstance(tensor, torch.Tensor) and (tensor.is_floating_point() or tensor.is_complex())
        if spec.requires_grad and differentiable:
            grad_paths.append(spec.where)
            tensor.requires_grad_(True)
        return tensor

    args = tuple(_mapped(call.args, TensorSpec, forward_tensor))
    kwargs = _mapped(call.kwargs, TensorSpec, forward_tensor)
    grads: tuple[torch.Tensor | None, ...] = ()
    if case.direction == "backward":
        specs = decode_for(case.key, lambda read: read.grads, entries, case.source)
        grads = tuple(None if s is None else build(s, case.key, case.seed, None) for s in specs)
    return CallInputs(args, kwargs, grads, tuple(grad_paths), call.guesses)


def tensor_seed(base_seed: int, where: str, salt: int | None = None) -> int:
    """The generator seed of one synthesized tensor: the case seed mixed with its position."""
    text = where if salt is None else f"{salt}:{where}"
    return zlib.crc32(text.encode(), base_seed & 0xFFFFFFFF)


def resolve_role(role: Role | None, context: dict[str, Any]) -> Role | None:
    """Fill in the bound of an index or class-target role from the call's other arguments.

    Returns ``None`` when the bound cannot be found: the statistics alone then decide.
    """
    if role is None or role.kind not in (RoleKind.INDEX, RoleKind.CLASS_TARGET):
        return role
    source = _first(context, role.size_of)
    if not isinstance(source, TensorSpec):
        return None
    if role.kind is RoleKind.CLASS_TARGET:
        dim = 1 if len(source.shape) >= 2 else 0  # class scores are (C,) or (N, C, ...)
    elif role.dim_from:
        dim = _first(context, role.dim_from)
        if not isinstance(dim, int) or isinstance(dim, bool):
            return None
    else:
        dim = role.dim
    if dim is None:
        limit = source.numel
    elif isinstance(dim, int) and -len(source.shape) <= dim < len(source.shape):
        limit = source.shape[dim]
    else:
        return None
    ignore = _first(context, role.ignore_from) if role.ignore_from else None
    ignore = ignore if isinstance(ignore, int) and not isinstance(ignore, bool) else role.ignore_default
    return replace(role, limit=limit, ignore_index=ignore)


def _first(context: dict[str, Any], wheres: tuple[str, ...]) -> Any:
    for where in wheres:
        if where in context:
            return context[where]
    return None


def _mapped(value: Any, kind: type, make) -> Any:
    """``value`` with each ``kind`` inside it, in lists, tuples and dicts, replaced by ``make(it)``."""
    if isinstance(value, kind):
        return make(value)
    if isinstance(value, list):
        return [_mapped(v, kind, make) for v in value]
    if isinstance(value, tuple):
        return tuple(_mapped(v, kind, make) for v in value)
    if isinstance(value, dict):
        return {k: _mapped(v, kind, make) for k, v in value.items()}
    return value
