"""The arguments of a call as its caller wrote them.

A Python function in torch.nn.functional hands torch's function mode its arguments re-sorted (F.layer_norm
passes weight, bias and eps as keywords however they were given), and msprobe records what the caller
wrote. The caller's call instruction still says how many arguments were positional and which keywords it
named, so the mode's view is re-bound to that split. Where the instruction cannot tell (``f(*args)``, an
unknown interpreter), the mode's view is kept.
"""

from __future__ import annotations

import dis
import functools
import inspect
from types import FrameType
from typing import Any, Callable


def as_called(func: Callable[..., Any], args: tuple, kwargs: dict, frame: FrameType | None) -> tuple[tuple, dict]:
    code = getattr(func, "__code__", None)
    if code is None or frame is None:
        return args, kwargs  # a C function receives what the caller passed
    while frame is not None and frame.f_code is not code:
        frame = frame.f_back
    caller = frame.f_back if frame is not None else None
    if caller is None:
        return args, kwargs
    split = _call_split(caller.f_code, caller.f_lasti)
    if split is None:
        return args, kwargs
    positional, names = split
    if params_of(func)[:1] == ["self"]:
        positional += 1  # a method: the call instruction does not count the instance
    try:
        params = list(inspect.signature(func).parameters.values())
        bound = inspect.signature(func).bind(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return args, kwargs
    if positional > len(params) or any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params[:positional]):
        return args, kwargs
    if any(name not in bound and name not in {p.name for p in params} for name in names):
        return args, kwargs
    new_args = tuple(bound.get(p.name, p.default) for p in params[:positional])
    new_kwargs = {name: bound.get(name, _default(params, name)) for name in names}
    return new_args, new_kwargs


def params_of(func: Callable[..., Any]) -> list[str]:
    try:
        return list(inspect.signature(func).parameters)
    except (TypeError, ValueError):
        return []


def _default(params: list, name: str) -> Any:
    return next(p.default for p in params if p.name == name)


@functools.lru_cache(maxsize=4096)
def _call_split(code, offset: int) -> tuple[int, tuple[str, ...]] | None:
    """(positional count, keyword names) of the call at ``offset``; None for a call it cannot read."""
    instructions = list(dis.get_instructions(code))
    # f_lasti may point into the call's inline cache entries: the call is the last instruction at or before it
    at = next((i for i in range(len(instructions) - 1, -1, -1) if instructions[i].offset <= offset), None)
    if at is None:
        return None
    call = instructions[at]
    if call.opname == "CALL":  # 3.11 (KW_NAMES, PRECALL, CALL) and 3.12 (KW_NAMES, CALL)
        names: tuple = ()
        for back in instructions[max(0, at - 2):at]:
            if back.opname == "KW_NAMES":  # 3.11's dis gives the constant's index, 3.12's the names
                value = back.argval if isinstance(back.argval, tuple) else code.co_consts[back.arg]
                names = tuple(value) if isinstance(value, tuple) else ()
        return call.arg - len(names), names
    if call.opname == "CALL_KW" and at > 0 and isinstance(instructions[at - 1].argval, tuple):  # 3.13
        names = instructions[at - 1].argval
        return call.arg - len(names), names
    return None
