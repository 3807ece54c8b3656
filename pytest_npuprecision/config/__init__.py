"""The files a user points the harness at: rules and known-failures schemas, how a file is read with an error
that names it, and the pydantic building blocks of every schema. Imports only ``common``."""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "files": ("ConfigError", "MAX_BYTES", "first_problem", "load_json", "load_yaml", "validate"),
    "schema_fields": (
        "FloatDtype", "LimitNumber", "Name", "Number", "Record", "Text", "count", "expected", "float_dtype_names",
        "list_of", "mapping", "one_of",
    ),
})
