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

MAX_BYTES = 64 * 2**20  # far above any real rules, cases or baseline file
MAX_DEPTH = 64  # nesting of mappings and lists
MAX_NODES = 1_000_000  # YAML nodes after aliases are expanded: a billion-laughs file is far past it


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message names the file, the key and the fix."""


def read_text(path: Path | str, what: str) -> str:
    """The file's text; ConfigError when it is missing, not a regular file, too large or not UTF-8."""
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"{path}: the {what} cannot be read ({exc.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{path}: the {what} is not a regular file (a folder, a FIFO or a device): give a file")
    if info.st_size > MAX_BYTES:
        raise ConfigError(f"{path}: the {what} is {info.st_size} bytes, more than the {MAX_BYTES} this harness reads")
    try:
        with open(path, "rb") as handle:
            return handle.read(MAX_BYTES + 1).decode("utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: the {what} cannot be read ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: the {what} is not UTF-8 text (byte {exc.start}): save it as UTF-8") from None


def load_json(path: Path | str, what: str) -> Any:
    text = read_text(path, what)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: the {what} is not valid JSON ({exc})") from None
    except RecursionError:
        raise ConfigError(f"{path}: the {what} nests deeper than JSON can be read here") from None
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
    """SafeLoader: plain data only, no ``!!python`` tags."""


def load_yaml(path: Path | str, what: str) -> Any:
    """A YAML file as plain data; aliases that expand past MAX_NODES or nesting past MAX_DEPTH are refused
    before the data is built, since building and walking them is what costs."""
    text = read_text(path, what)
    loader = _Loader(text)
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
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: the {what} is not valid YAML{where} ({problem}): fix the syntax") from None
    finally:
        loader.dispose()


def _check_nodes(root: yaml.Node, path: Path | str, what: str) -> None:
    """Count the nodes an expansion of every alias would give, sharing the count of repeated nodes."""
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
                raise ConfigError(f"{path}: the {what} holds a recursive YAML alias")
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
        if depths[key] > MAX_DEPTH:
            raise ConfigError(f"{path}: the {what} nests deeper than {MAX_DEPTH} levels")


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
        # Of a union's failed branches, the one that got deepest into the data says what is wrong.
        errors = exc.errors(include_url=False)
        deepest = max(errors, key=lambda e: len(_keys(e)))
        raise ConfigError(f"{path}: {describe_error(deepest)}") from None


def describe_error(error: dict) -> str:
    """'dtypes.float32: expected a mapping, got 5' from one pydantic error."""
    where = "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in _keys(error)).lstrip(".")
    where = where or "the top level"
    if error["type"] == "missing":
        return f"{where}: is missing"
    value = error.get("input")
    shown = repr(value) if not isinstance(value, (dict, list)) else type(value).__name__
    message = error["msg"].removeprefix("Value error, ").split(" or instance of ")[0]
    message = message[0].lower() + message[1:]
    return f"{where}: {message}, got {shown}"


def _keys(error: dict) -> list[str | int]:
    return [part if isinstance(part, int) else str(part) for part in error["loc"] if not _is_type_name(part)]


def _is_type_name(part: Any) -> bool:
    """pydantic puts the branch of a union into an error's location: a type, not a key."""
    return isinstance(part, str) and (part in _BRANCHES or "[" in part or part.startswith(("function-", "constrained")))


_BRANCHES = frozenset({"float", "int", "str", "bool", "list", "dict", "Limit", "LimitPair", "OpEntry", "DtypeEntry",
                       "none", "literal", "union"})
