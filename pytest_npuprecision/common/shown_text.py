"""A dump's own text as terminals, ids and reports show it: escaped where it is not printable, cut
where it is long. A dump is untrusted, and an ANSI escape in an API name would clear the screen."""

from __future__ import annotations

import re

_QUOTED = 120  # characters of a key that a message quotes


def shown_key(key: str) -> str:
    """``key`` with every control or other unprintable character escaped, backslashes too, so that no
    two keys show alike; every key msprobe writes is returned as it is."""
    if key.isprintable() and "\\" not in key:
        return key
    return key.encode("unicode_escape").decode("ascii")


def quoted_key(key: str) -> str:
    """``key`` as a message quotes it: escaped, in quotes, and cut where it is long."""
    shown = shown_key(key)
    if len(shown) <= _QUOTED:
        return f"'{shown}'"
    return f"'{shown[:_QUOTED]}…' ({len(shown) - _QUOTED} more characters)"


def folder_name(text: str, limit: int) -> str:
    """An id (a case id, a test's node id) as one folder name: letters, digits, ``._-`` and ``_`` for the
    rest, at most ``limit`` characters; never a path separator, never ``..`` alone."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_.")[:limit] or "case"
