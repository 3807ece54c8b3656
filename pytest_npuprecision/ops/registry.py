"""Custom ops by name: fused kernels, torch_npu ops and autograd Functions a team wants to test.

``register_op("my_rms_norm", fn, reference=..., standard=...)`` makes the op nameable from YAML
op cases (``op: my_rms_norm`` or ``op: Custom.my_rms_norm``) and from msprobe dumps
(``Custom.my_rms_norm``, or the bare name under any prefix when torch has no op of that name).
Packages register theirs through the entry-point group ``pytest_npuprecision.ops``: each entry
names a module or a zero-argument function whose import or call registers the ops. Entry points
load once, on the first lookup.
"""

from __future__ import annotations

import importlib.metadata
import re
from dataclasses import dataclass
from typing import Any, Callable

from ..precision import STANDARDS

ENTRY_POINT_GROUP = "pytest_npuprecision.ops"
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class CustomOp:
    """One registered op and how to judge it."""

    name: str  # as registered, without a "Custom." prefix
    fn: Callable[..., Any]
    reference: Callable[..., Any] | None = None  # the golden side calls this instead of fn
    standard: str | None = None  # the forward standard; None: the op table's, by name or ``like``
    like: str | None = None  # a built-in op with the same arguments whose table row and accumulation apply

    @property
    def api_name(self) -> str:
        return self.name if "." in self.name else f"Custom.{self.name}"


_REGISTRY: dict[str, CustomOp] = {}
_entry_points_loaded = False
_entry_point_errors: list[str] = []
_LISTENERS: list[Callable[[], None]] = []


def _key(name: str) -> str:
    return name.removeprefix("Custom.")


def _origin(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def register_op(name: str, fn: Callable[..., Any], *, reference: Callable[..., Any] | None = None,
                standard: str | None = None, like: str | None = None) -> CustomOp:
    """Register ``fn`` under ``name``; return the record.

    reference: what the golden computes in float64 (default: ``fn`` itself on float64 inputs).
    standard: the forward standard (binary, absolute, ulp, thousandth, error_bound); gradients keep
    the op table's backward standard. like: a built-in op name (``rms_norm``) when ``fn`` takes
    that op's arguments: its standard, limits and reduction length apply.
    Registering the same name again from the same function (a re-imported conftest) replaces it;
    a different function under a taken name is an error.
    """
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"op name {name!r} is not a dotted identifier: use a name such as 'my_rms_norm'")
    for what, value in (("fn", fn), ("reference", reference)):
        if value is not None and not callable(value):
            raise TypeError(f"{what} for op {name!r} is a {type(value).__name__}, not a callable: pass the function")
    if fn is None:
        raise TypeError(f"fn for op {name!r} is None: pass the function to register")
    if standard is not None and standard not in STANDARDS.names:
        raise ValueError(f"standard {standard!r} for op {name!r} is unknown: use one of {', '.join(STANDARDS.names)}")
    if like is not None and (not isinstance(like, str) or not _NAME.match(like)):
        raise ValueError(f"like={like!r} for op {name!r} is not an op name: use a built-in name such as 'rms_norm'")
    key = _key(name)
    old = _REGISTRY.get(key)
    if old is not None and _origin(old.fn) != _origin(fn):
        raise ValueError(f"op {key!r} is already registered to {_origin(old.fn)}: pick another name or "
                         f"unregister_op({key!r}) first")
    op = CustomOp(key, fn, reference, standard, like)
    _REGISTRY[key] = op
    _forget_resolutions()
    return op


def unregister_op(name: str) -> None:
    """Remove a registered op; unknown names are ignored."""
    _REGISTRY.pop(_key(name), None)
    _forget_resolutions()


def registered_op(name: str) -> CustomOp | None:
    """The op registered under ``name`` (with or without ``Custom.``), or None."""
    _load_entry_points()
    return _REGISTRY.get(_key(name))


def registered_ops() -> dict[str, CustomOp]:
    _load_entry_points()
    return dict(_REGISTRY)


def name_of(fn: Callable[..., Any]) -> str | None:
    """The registered name of a function, if it is registered."""
    for op in registered_ops().values():
        if op.fn is fn:
            return op.name
    return None


def entry_point_errors() -> tuple[str, ...]:
    """Entry points that failed to load, one sentence each; lookups go on without them."""
    _load_entry_points()
    return tuple(_entry_point_errors)


def _load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = entry.load()
            if callable(loaded):
                loaded()
        except Exception as exc:  # one broken package must not hide the others' ops
            _entry_point_errors.append(f"entry point {entry.name} = {entry.value} of group {ENTRY_POINT_GROUP} "
                                       f"failed to load ({type(exc).__name__}: {exc})")


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` after every registration or removal: resolution.py forgets the names it cached."""
    _LISTENERS.append(listener)


def _forget_resolutions() -> None:
    for listener in _LISTENERS:
        listener()
