"""Turn a case's input specs into a Hypothesis strategy of Calls, or load a fixed case's Call.

Dim symbols are drawn first, once per example, so that inputs sharing ``K`` agree; each input is
then drawn in order, which lets ``broadcasts_to`` read the shape of an earlier input. Everything is
drawn through Hypothesis, so every part of an example shrinks: sizes towards their low bound,
values towards 0 and simple numbers, choices towards the first.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch
from hypothesis import strategies as st

from .. import strategies as nst
from ..common import load_tensors
from .spec import Call, Fixed, FromFile, InputSpec, OneOf, OpCase, TensorSpec


class CaseInputError(ValueError):
    """A fixed input cannot be loaded, or a Python case's draw function returned something unusable."""


def call_strategy(case: OpCase, dtype: torch.dtype) -> st.SearchStrategy[Call]:
    """The examples of one case in one dtype."""
    if case.draw is not None:
        return st.composite(lambda draw: as_call(case.draw(draw, dtype), case))()

    @st.composite
    def draw_call(draw) -> Call:
        sizes = {name: draw(st.integers(low, high)) for name, (low, high) in case.dims.items()}
        args: list[Any] = []
        for spec in case.inputs:
            args.append(_draw(draw, spec, dtype, sizes, args))
        kwargs = {name: _draw(draw, spec, dtype, sizes, args) for name, spec in case.kwargs.items()}
        return Call(tuple(args), kwargs, grad_inputs(case))

    return draw_call()


def fixed_call(case: OpCase, dtype: torch.dtype) -> Call:
    """The one Call of a case whose inputs are all fixed values or files."""
    args = tuple(_fixed(spec, {}) for spec in case.inputs)
    kwargs = {name: _fixed(spec, {}) for name, spec in case.kwargs.items()}
    return Call(args, kwargs, grad_inputs(case))


def grad_inputs(case: OpCase) -> tuple[int | str, ...]:
    """Positions and keyword names of the inputs a backward case differentiates (float ones only)."""
    def wants(spec: InputSpec) -> bool:
        if isinstance(spec, TensorSpec):
            return spec.grad and spec.indices is None and (spec.dtype is None or spec.dtype.is_floating_point)
        return isinstance(spec, FromFile) and spec.grad

    return (*(i for i, spec in enumerate(case.inputs) if wants(spec)),
            *(name for name, spec in case.kwargs.items() if wants(spec)))


def as_call(value: Any, case: OpCase) -> Call:
    if isinstance(value, Call):
        return value
    if isinstance(value, tuple):
        return Call(value, {})
    raise CaseInputError(f"{case.source}: the draw function returned a {type(value).__name__}: "
                         f"return call(*args, **kwargs) or a tuple of positional arguments")


def _substitute(value: Any, sizes: Mapping[str, int]) -> Any:
    if isinstance(value, str) and value in sizes:
        return sizes[value]
    if isinstance(value, list):
        return [_substitute(v, sizes) for v in value]
    return value


def _fixed(spec: InputSpec, sizes: Mapping[str, int]) -> Any:
    if isinstance(spec, Fixed):
        return _substitute(spec.value, sizes)
    if isinstance(spec, FromFile):
        try:
            return load_tensors(spec.path)
        except Exception as exc:
            raise CaseInputError(f"{spec.path} cannot be loaded with torch.load(weights_only=True) "
                                 f"({type(exc).__name__}: {exc}): write it again with torch.save") from None
    raise TypeError(f"{spec!r} is not a fixed input")


def _draw(draw, spec: InputSpec, dtype: torch.dtype, sizes: Mapping[str, int], args: list[Any]) -> Any:
    if isinstance(spec, OneOf):
        return _substitute(draw(st.sampled_from(spec.choices)), sizes)
    if not isinstance(spec, TensorSpec):
        return _fixed(spec, sizes)
    shape = draw(_shape(spec, sizes, args))
    tensor_dtype = spec.dtype or dtype
    if spec.indices is not None:
        count = sizes[spec.indices] if isinstance(spec.indices, str) else spec.indices
        return draw(nst.tensors(tensor_dtype, shape, min_value=0, max_value=count - 1))
    low, high = spec.range if spec.range is not None else (None, None)
    return draw(nst.tensors(tensor_dtype, shape, min_value=low, max_value=high, min_magnitude=spec.min_magnitude,
                            special=spec.special))


def _shape(spec: TensorSpec, sizes: Mapping[str, int], args: list[Any]) -> st.SearchStrategy:
    if spec.broadcasts_to is not None:
        return nst.broadcastable_shapes(tuple(args[spec.broadcasts_to].shape))
    if spec.rank is not None:
        return nst.shapes(min_dims=spec.rank[0], max_dims=spec.rank[1], min_side=spec.sides[0],
                          max_side=spec.sides[1])
    parts = []
    for size in spec.shape or ():
        if isinstance(size, str):
            parts.append(st.just(sizes[size]))
        elif isinstance(size, tuple):
            parts.append(st.integers(size[0], size[1]))
        else:
            parts.append(st.just(size))
    return st.tuples(*parts)
