"""Lazy re-exports for a package's ``__init__``: the names other layers use, each listed once beside the
module that defines it, and loaded on first use, so that importing a package costs nothing until a name
of it is asked for (pytest imports the plugin in every run: docs/architecture.md)."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable, Mapping, Sequence


def lazy_exports(package: str, exports: Mapping[str, Sequence[str]]) -> tuple[Callable[[str], Any],
                                                                              Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for package ``package``: each name of ``exports[module]`` is
    looked up in that submodule, or is that submodule's own submodule (``"terms": ("softmax_terms",)``).
    A name is never also a submodule's name: the import system binds a submodule to its package's
    attribute, which would hide it."""
    where = {name: module for module, names in exports.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        found = importlib.import_module(f"{package}.{module}")
        value = getattr(found, name) if hasattr(found, name) else importlib.import_module(f"{found.__name__}.{name}")
        setattr(sys.modules[package], name, value)  # looked up once
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__, sorted(where)
