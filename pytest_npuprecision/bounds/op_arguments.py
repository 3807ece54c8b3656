"""Reading one argument of a recorded call, as the op itself would bind it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def argument(args: Sequence[Any], kwargs: Mapping[str, Any], index: int, *names: str, default: Any = None) -> Any:
    """The argument given by any of ``names`` as a keyword, else at position ``index``, else ``default``."""
    for name in names:
        if name in kwargs:
            return kwargs[name]
    return args[index] if index < len(args) else default
