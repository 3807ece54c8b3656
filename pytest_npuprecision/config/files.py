"""Reading the files a user points the harness at: rules YAML, op case YAML, known failures, baselines.

Each is untrusted input as a dump is. One reader refuses what would hang (a FIFO), exhaust memory
(a huge file, a YAML alias bomb) or crash (nesting past Python's recursion limit, bytes that are not
UTF-8) before anything is parsed; one schema layer (pydantic) checks the parsed data. Every problem
is a ConfigError whose message reads ``FILE: key.path: problem``, which the plugin turns into a
usage error.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

MAX_BYTES = 64 * 2**20  # far above any real known-failures or baseline file
MAX_YAML_BYTES = 2**20  # far above any real rules or op case file; PyYAML reads about 1 MiB in several seconds
MAX_DEPTH = 64  # nesting of mappings and lists
MAX_NODES = 1_000_000  # YAML nodes after aliases are expanded: a billion-laughs file is far past it


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file, the key and the fix."""


def read_text(path: Path | str, what: str, limit: int = MAX_BYTES) -> str:
    """The file's text; ConfigError when it is missing, not a regular file, over ``limit`` bytes or not UTF-8.

    The kind is checked before the file is opened (opening a FIFO blocks until a writer comes), and
    again on the open file, non-blocking, in case it was swapped in between.
    """
    path = Path(path)
    try:
        _check_kind(os.stat(path), path, what, limit)
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(descriptor, "rb") as handle:
            _check_kind(os.fstat(handle.fileno()), path, what, limit)
            data = handle.read(limit + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: the {what} cannot be read ({exc.strerror})") from None
    if len(data) > limit:  # it grew after the check
        raise ConfigError(f"{path}: the {what} is more than the {limit >> 20} MiB this harness reads: give the "
                          f"right file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the {what} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None


def _check_kind(info: os.stat_result, path: Path, what: str, limit: int) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path}: the {what} is not a regular file (a folder, a FIFO or a device): give a file")
    if info.st_size > limit:
        raise ConfigError(f"{path}: the {what} is {info.st_size} bytes, more than the {limit >> 20} MiB this "
                          f"harness reads: give the right file")


def load_json(path: Path | str, what: str) -> Any:
    """A JSON file as plain data; nesting past MAX_DEPTH and a key given twice in one object are refused."""
    text = read_text(path, what)

    def unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        data = dict(pairs)
        if len(data) < len(pairs):
            seen: set[str] = set()
            twice = next(key for key, _ in pairs if key in seen or seen.add(key))
            raise ConfigError(f"{path}: the {what} gives the key {twice!r} twice in one object: keep one")
        return data

    try:
        data = json.loads(text, object_pairs_hook=unique)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: the {what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: the {what} nests deeper than {MAX_DEPTH} levels") from None
    _check_depth(data, path, what)
    return data


def _check_depth(data: Any, path: Path | str, what: str) -> None:
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise ConfigError(f"{path}: the {what} nests deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses nesting past MAX_DEPTH while it composes, before Python's recursion limit."""

    def __init__(self, text: str, path: Path | str, what: str):
        super().__init__(text)
        self._where, self._depth = (path, what), 0

    def compose_node(self, parent, index):  # noqa: ANN001 (yaml's signature)
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                path, what = self._where
                raise ConfigError(f"{path}: the {what} nests deeper than {MAX_DEPTH} levels at "
                                  f"{_line(self.peek_event().start_mark)}: flatten it")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


_TAGS = frozenset(tag for tag in yaml.SafeLoader.yaml_constructors if tag) | {"tag:yaml.org,2002:merge"}


def load_yaml(path: Path | str, what: str) -> Any:
    """A YAML file as plain data. Nesting past MAX_DEPTH, aliases that expand past MAX_NODES, tags other
    than plain data's and a key given twice in one mapping are refused before the data is built."""
    text = read_text(path, what, MAX_YAML_BYTES)
    loader = _Loader(text, path, what)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_nodes(node, path, what)
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{path}: the {what} nests deeper than YAML can be read here") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at {_line(mark)}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: the {what} is not valid YAML{where} ({problem}): fix the syntax") from None
    finally:
        loader.dispose()


def _line(mark: yaml.Mark) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _check_nodes(root: yaml.Node, path: Path | str, what: str) -> None:
    """Count the nodes an expansion of every alias would give, sharing the count of repeated nodes;
    check each node's tag and each mapping's keys once."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    # Post-order without recursion: a node's size is known once its children's are.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    on_path: set[int] = set()
    while stack:
        node, done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = _children(node)
        if not done:
            if key in on_path:  # a recursive alias: the data would be infinite
                raise ConfigError(f"{path}: the {what} holds a recursive YAML alias at {_line(node.start_mark)}")
            _check_node(node, path, what)
            on_path.add(key)
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        on_path.discard(key)
        sizes[key] = 1 + sum(sizes[id(c)] for c in children)
        depths[key] = 1 + max((depths[id(c)] for c in children), default=0)
        if sizes[key] > MAX_NODES:
            raise ConfigError(f"{path}: the {what} expands to more than {MAX_NODES} values through YAML aliases "
                              f"(an alias bomb?): write the values out")
        if depths[key] > MAX_DEPTH:  # aliases inside aliases: each anchor is shallow, their expansion is not
            raise ConfigError(f"{path}: the {what} nests deeper than {MAX_DEPTH} levels through YAML aliases at "
                              f"{_line(node.start_mark)}: write the values out")


def _check_node(node: yaml.Node, path: Path | str, what: str) -> None:
    if node.tag not in _TAGS:
        tag = node.tag.replace("tag:yaml.org,2002:", "!!")
        raise ConfigError(f"{path}: the {what} has the tag {tag!r} at {_line(node.start_mark)}, which is not "
                          f"plain data: write a string, number, list or mapping")
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    raise ConfigError(f"{path}: the {what} gives the key {key.value!r} twice in one mapping at "
                                      f"{_line(key.start_mark)}: keep one")
                seen.add(key.value)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def validate(model: Any, data: Any, path: Path | str) -> Any:
    """``data`` checked and converted by a pydantic model or type; ConfigError naming the first bad key."""
    from pydantic import TypeAdapter, ValidationError  # only runs that read a configuration file pay for it

    try:
        return TypeAdapter(model).validate_python(data)
    except ValidationError as exc:
        where, problem = describe_error(exc.errors(include_url=False)[0])
        raise ConfigError(f"{path}: {where}: {problem}") from None


def first_problem(model: Any, data: Any) -> tuple[str, str] | None:
    """The key path and the problem of the first error a pydantic model finds in ``data``; None if none."""
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(model).validate_python(data)
    except ValidationError as exc:
        return describe_error(exc.errors(include_url=False)[0])
    return None


def describe_error(error: dict) -> tuple[str, str]:
    """``("dtypes.float32", "expected a mapping of the dtype's constants (...), got 5")`` from one pydantic error.

    config/schemas.py raises kinds of its own: ``expected`` (the value is of the wrong kind: the value
    follows), ``unknown_name`` and ``unknown_key`` (the message says what to use instead), ``problem``.
    """
    keys, is_key = _keys(error)
    kind, ctx = error["type"], error.get("ctx") or {}
    if kind == "unknown_key":
        keys.append(ctx["key"])
    where = key_path(keys)
    if kind == "missing":
        return where, "is missing"
    if kind in ("unknown_key", "unknown_name", "problem"):
        shown = f"{_shown(error.get('input'))} " if kind == "unknown_name" and not is_key else ""
        return where, f"{shown}{error['msg']}"
    message = error["msg"].removeprefix("Value error, ")
    return where, f"{message[0].lower()}{message[1:]}, got {_shown(error.get('input'))}"


def key_path(keys: list[str | int]) -> str:
    """``ops.gelu.limits``, ``cases[0].inputs``; keys that hold a dot, a bracket or a space are quoted:
    ``outputs['output.0'][0]``."""
    parts = []
    for key in keys:
        if isinstance(key, int):
            parts.append(f"[{key}]")
        elif not key or any(c in key for c in ".[] '\"") or not key.isprintable():
            parts.append(f"[{key!r}]")
        else:
            parts.append(f".{key}")
    return "".join(parts).lstrip(".") or "the top level"


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "a mapping" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _keys(error: dict) -> tuple[list[str | int], bool]:
    """The error's key path without pydantic's branch names; whether the error is about a key itself."""
    from .schema_fields import BRANCH_TAGS

    loc = [part for part in error["loc"] if part not in BRANCH_TAGS]
    is_key = bool(loc) and loc[-1] == "[key]"
    return [part if isinstance(part, int) else str(part) for part in loc if part != "[key]"], is_key
