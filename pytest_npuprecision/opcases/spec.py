"""The records an op case is made of: what to call, with inputs drawn how, judged how.

A YAML file or a ``precision_case`` decorator becomes an :class:`OpCase`; each example Hypothesis
draws for it is a :class:`Call`. Nothing here runs an op or touches pytest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Union

import torch

Size = Union[int, str, tuple[int, int]]  # a fixed size, a dim symbol, or an inline [low, high]


@dataclass(frozen=True)
class TensorSpec:
    """How to draw one tensor input.

    The shape is ``shape`` (sizes, symbols or ranges), or any shape with ``rank`` dims of ``sides``
    each, or a shape that broadcasts to the input at position ``broadcasts_to``.
    """

    shape: tuple[Size, ...] | None = None
    rank: tuple[int, int] | None = None
    sides: tuple[int, int] | None = None
    broadcasts_to: int | None = None
    dtype: torch.dtype | None = None  # None: the case's dtype
    range: tuple[float, float] | None = None  # None: strategies.DEFAULT_RANGE (floats), [0, 8] (ints)
    indices: int | str | None = None  # integer values in [0, indices): class labels, embedding rows
    min_magnitude: float = 0.0  # floats at least this far from zero
    special: tuple[str, ...] = ()
    grad: bool = True  # differentiated in backward cases (float tensors only)


@dataclass(frozen=True)
class Fixed:
    """A value passed as written; strings naming a dim are replaced by the drawn size."""

    value: Any


@dataclass(frozen=True)
class OneOf:
    """One of several values, drawn per example (shrinks towards the first)."""

    choices: tuple[Any, ...]


@dataclass(frozen=True)
class FromFile:
    """A value saved with torch.save (a regression case's tensors), loaded with weights_only=True."""

    path: Path
    grad: bool = True


InputSpec = Union[TensorSpec, Fixed, OneOf, FromFile]


@dataclass(frozen=True)
class Call:
    """One concrete call of the op: its arguments, and which of them to differentiate."""

    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    # Positions and keyword names to differentiate in backward cases; None: every float tensor.
    requires_grad: tuple[int | str, ...] | None = None


def call(*args: Any, **kwargs: Any) -> Call:
    """The arguments of one example, for Python cases: ``return call(x, weight, eps=1e-6)``."""
    return Call(args, kwargs)


@dataclass(frozen=True)
class OpCase:
    """One op to test in some dtypes, with inputs drawn by Hypothesis or fixed (regressions)."""

    id: str
    op: str | Callable[..., Any]  # msprobe name, dotted path, registered name, or (Python) a callable
    dtypes: tuple[torch.dtype, ...]
    source: str  # where the case was written: "op_cases/norms.yaml", "tests/test_x.py::test_y"
    inputs: tuple[InputSpec, ...] = ()
    kwargs: Mapping[str, InputSpec] = field(default_factory=dict)
    dims: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    reference: str | Callable[..., Any] | None = None
    standard: str | None = None  # forces the forward standard
    limits: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # standard -> metric -> limit
    roundings: int | None = None  # intermediate roundings to the dtype the op's kernel makes (op table's otherwise)
    reason: str | None = None  # why the case deviates: its limits, roundings or narrowed inputs
    backward: bool = False
    max_examples: int | None = None
    seed: int | None = None  # the seed of the output gradients (default: from the case id)
    found_by: str | None = None  # a regression case: the case and dtype whose search found it
    # A regression case: where its standard, limits, roundings and reference come from now (the case
    # that found it, as it reads today), or why they are the ones frozen in its file.
    settings_from: str | None = None
    draw: Callable[..., Any] | None = None  # Python cases: (draw, dtype) -> Call or tuple of args

    @property
    def fixed(self) -> bool:
        """Every input is fixed: the case runs once, without Hypothesis."""
        specs = (*self.inputs, *self.kwargs.values())
        return self.draw is None and all(isinstance(s, (Fixed, FromFile)) for s in specs)

    def item_name(self, dtype: torch.dtype) -> str:
        return f"{self.id}[{dtype_name(dtype)}]"


@dataclass(frozen=True)
class BrokenCase:
    """A case (or a whole file) that cannot be read; it fails as one item with ``problem``."""

    id: str
    source: str
    problem: str


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def op_label(op: str | Callable[..., Any] | None) -> str | None:
    """How an op or reference is written in a case file: its name, or a callable's registered name or dotted path."""
    if op is None or isinstance(op, str):
        return op
    from ..ops import name_of

    return name_of(op) or f"{getattr(op, '__module__', '?')}.{getattr(op, '__qualname__', repr(op))}"
