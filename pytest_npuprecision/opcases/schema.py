"""Read op case YAML files into OpCase records, naming the file, the case and the field of any error.

A file that is not YAML, or not a mapping with a ``cases`` list, is one BrokenCase; a case with a
bad field is a BrokenCase of its own and the file's other cases still run. docs/op-cases.md ("The YAML
schema") documents it with a complete example.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, Mapping

from ..common import parse_dtype
from ..config import ConfigError, MAX_BYTES, first_problem, load_yaml
from ..precision import MAX_ROUNDINGS, STANDARDS
from ..strategies import DEFAULT_RANGE, SPECIAL_VALUES
from .spec import BrokenCase, Fixed, FromFile, InputSpec, OneOf, OpCase, Size, TensorSpec

CASE_FIELDS = ("id", "op", "dtypes", "dims", "inputs", "kwargs", "reference", "standard", "limits", "roundings",
               "reason", "backward", "max_examples", "seed", "found_by")
TENSOR_FIELDS = ("shape", "dtype", "range", "min_magnitude", "indices", "special", "grad")
CASE_DTYPES = ("float16", "bfloat16", "float32", "float64")
MAX_ELEMENTS = 1 << 16  # per tensor: op cases stay small so that hundreds of examples run in seconds
MAX_EXAMPLES = 10_000  # per case and dtype: past this a search is a benchmark, not a test
MAX_CASES = 1_000  # per file: a file past this is generated, and its cases belong in several files
MAX_RANK = 16  # dims of one tensor
MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed's range
MAX_INDICES = 2**31 - 1  # classes or embedding rows an index tensor draws from
MAX_WHOLE = 2**63 - 1  # int64, the widest integer tensor a range can fill
_FLOAT_MAX = 1.7976931348623157e308
_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class SchemaError(ValueError):
    """One field of one case is wrong: ``field`` names it, the message says what to write instead."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"field {field}: {problem}")


def load_case_file(path: Path, root: Path | None = None) -> list[OpCase | BrokenCase]:
    """Every case of one YAML file, each an OpCase or a BrokenCase; never raises for bad content."""
    source = _relative(path, root)
    try:
        data = load_yaml(path, "op case file")
    except ConfigError as exc:
        # The reader names the path as given; the case list names it from the rootdir.
        return [BrokenCase(path.name, source, str(exc).replace(f"{path}: the op case file", source, 1))]
    if not isinstance(data, Mapping) or not isinstance(data.get("cases"), list):
        return [BrokenCase(path.name, source, f"{source} holds no 'cases' list: write a mapping with "
                                              f"cases: [...] (and optionally defaults: {{...}})")]
    unknown = sorted(set(data) - {"cases", "defaults"})
    if unknown:
        return [BrokenCase(path.name, source, f"{source}: top-level keys {unknown} are unknown: use cases and defaults")]
    if len(data["cases"]) > MAX_CASES:
        return [BrokenCase(path.name, source, f"{source} holds {len(data['cases'])} cases, more than the {MAX_CASES} "
                                              f"one file may hold: split it into several files")]
    defaults = data.get("defaults") or {}
    if not isinstance(defaults, Mapping) or set(defaults) - set(CASE_FIELDS) - {"id"} or "id" in defaults:
        return [BrokenCase(path.name, source, f"{source}: defaults must map case fields other than id "
                                              f"({', '.join(CASE_FIELDS[1:])}) to values")]
    cases: list[OpCase | BrokenCase] = []
    seen: dict[str, int] = {}  # case id -> index, for duplicates
    for index, raw in enumerate(data["cases"]):
        label = _label(raw, index)
        try:
            if not isinstance(raw, Mapping):
                raise SchemaError("-", f"{raw!r} is not a mapping: write op:, dtypes: and inputs:")
            case = parse_case({**defaults, **raw}, source=source, base_dir=path.parent)
            if case.id in seen:
                raise SchemaError("id", f"{case.id!r} is also the id of case #{seen[case.id] + 1}: give each case its own id")
        except SchemaError as exc:
            wanted = raw.get("id") if isinstance(raw, Mapping) else None
            name = wanted if isinstance(wanted, str) and _ID.match(wanted) and wanted not in seen else f"case{index + 1}"
            seen.setdefault(name, index)
            where = f"field {exc.field}: " if exc.field != "-" else ""
            cases.append(BrokenCase(name, source, f"{source}, case {label}, {where}{exc.problem}"))
            continue
        seen[case.id] = index
        cases.append(case)
    return cases


def _label(raw: Any, index: int) -> str:
    if isinstance(raw, Mapping) and isinstance(raw.get("id"), str):
        return repr(raw["id"])
    if isinstance(raw, Mapping) and isinstance(raw.get("op"), str):
        return f"#{index + 1} ({raw['op']})"
    return f"#{index + 1}"


def _relative(path: Path, root: Path | None) -> str:
    if root is not None:
        try:
            return path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    return str(path)


# ---------------------------------------------------------------- one case


def parse_case(raw: Mapping[str, Any], *, source: str, base_dir: Path) -> OpCase:
    """One case mapping -> OpCase; raise SchemaError naming the first bad field."""
    unknown = sorted(set(raw) - set(CASE_FIELDS))
    if unknown:
        raise SchemaError(unknown[0], f"is unknown: use {', '.join(CASE_FIELDS)}")
    op = raw.get("op")
    if not isinstance(op, str) or not op.strip():
        raise SchemaError("op", f"{op!r} is not an op name: write an msprobe name (Functional.gelu), a dotted "
                                f"path (torch.nn.functional.gelu) or a registered name")
    op = op.strip()
    case_id = raw.get("id", _default_id(op))
    if not isinstance(case_id, str) or not _ID.match(case_id):
        raise SchemaError("id", f"{case_id!r} is not an id: use letters, digits and _ . + -")
    dims = _dims(raw.get("dims") or {})
    inputs_raw = raw.get("inputs", [])
    if not isinstance(inputs_raw, list):
        raise SchemaError("inputs", f"{inputs_raw!r} is not a list: give one entry per positional input")
    inputs: list[InputSpec] = []
    for i, entry in enumerate(inputs_raw):
        inputs.append(_input(entry, f"inputs[{i}]", dims, inputs, base_dir))
    kwargs_raw = raw.get("kwargs") or {}
    if not isinstance(kwargs_raw, Mapping):
        raise SchemaError("kwargs", f"{kwargs_raw!r} is not a mapping: write name: value pairs")
    kwargs = {}
    for name, entry in kwargs_raw.items():
        if not isinstance(name, str) or not _SYMBOL.match(name):
            raise SchemaError("kwargs", f"{name!r} is not a keyword name: use a Python identifier")
        kwargs[name] = _input(entry, f"kwargs.{name}", dims, inputs, base_dir)
    limits, reason = parse_limits(raw.get("limits"), raw.get("reason"))
    roundings = count(raw.get("roundings"), "roundings", minimum=0, maximum=MAX_ROUNDINGS,
                      cap="intermediate roundings a precision standard allows")
    if roundings is not None and reason is None:
        raise SchemaError("reason", "is missing: a case that sets roundings must say which intermediates its kernel "
                                    "rounds, in reason:")
    return OpCase(
        id=case_id, op=op, dtypes=parse_dtypes(raw.get("dtypes")), source=source, inputs=tuple(inputs), kwargs=kwargs,
        dims=dims, reference=_optional_name(raw.get("reference"), "reference"),
        standard=parse_standard(raw.get("standard")), limits=limits, roundings=roundings, reason=reason,
        backward=_bool(raw.get("backward", False), "backward"),
        max_examples=count(raw.get("max_examples"), "max_examples", minimum=1, maximum=MAX_EXAMPLES),
        seed=count(raw.get("seed"), "seed", minimum=0, maximum=MAX_SEED, cap="torch.manual_seed takes"),
        found_by=_optional_name(raw.get("found_by"), "found_by"),
    )


def _default_id(op: str) -> str:
    name = op.rsplit(".", 1)[-1]
    return name if _ID.match(name) else "case"


def parse_dtypes(raw: Any) -> tuple:
    if raw is None:
        raise SchemaError("dtypes", f"is missing: list the dtypes to test, some of {', '.join(CASE_DTYPES)}")
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names:
        raise SchemaError("dtypes", f"{raw!r} is not a list of dtypes: write e.g. [float16, bfloat16, float32]")
    dtypes = []
    for name in names:
        try:
            dtype = parse_dtype(name)
        except (TypeError, ValueError) as exc:
            raise SchemaError("dtypes", str(exc)) from None
        if str(dtype).removeprefix("torch.") not in CASE_DTYPES:
            raise SchemaError("dtypes", f"{name!r} is not a float dtype a case can draw: use {', '.join(CASE_DTYPES)}")
        if dtype in dtypes:
            raise SchemaError("dtypes", f"{name!r} is listed twice: list each dtype once")
        dtypes.append(dtype)
    return tuple(dtypes)


def _range(raw: Any, field: str, *, whole: bool = False) -> tuple:
    kind = "whole numbers" if whole else "numbers"
    if not isinstance(raw, list) or len(raw) != 2:
        raise SchemaError(field, f"{raw!r} is not a range: write [low, high] with two {kind}")
    for value in raw:
        wrong = not isinstance(value, int) if whole else not isinstance(value, (int, float))
        if wrong or isinstance(value, bool) or value != value:
            raise SchemaError(field, f"{raw!r} is not a range: write [low, high] with two {kind}")
        if abs(value) > (MAX_WHOLE if whole else _FLOAT_MAX):
            raise SchemaError(field, f"{raw!r} reaches past what a tensor holds: keep both ends within "
                                     f"{'±2**63 - 1' if whole else '±1.8e308'}")
    if raw[0] > raw[1]:
        raise SchemaError(field, f"{raw!r} is empty: give [low, high] with low <= high")
    return tuple(raw)


def _size_range(raw: Any, field: str) -> tuple[int, int]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        raw = [raw, raw]
    low, high = _range(raw, field, whole=True)
    if low < 0:
        raise SchemaError(field, f"{raw!r} has a negative size: sizes are whole numbers >= 0")
    return low, high


def _dims(raw: Any) -> dict[str, tuple[int, int]]:
    if not isinstance(raw, Mapping):
        raise SchemaError("dims", f"{raw!r} is not a mapping: write symbol: [low, high] pairs, e.g. {{K: [1, 32]}}")
    dims = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not _SYMBOL.match(name):
            raise SchemaError("dims", f"{name!r} is not a symbol: use an identifier such as K or batch")
        dims[name] = _size_range(value, f"dims.{name}")
    return dims


def _input(raw: Any, field: str, dims: Mapping[str, tuple[int, int]], previous: list[InputSpec],
           base_dir: Path) -> InputSpec:
    if not isinstance(raw, Mapping):
        return Fixed(raw)
    if "value" in raw:
        if len(raw) != 1:
            raise SchemaError(field, "mixes value: with other keys: a fixed value stands alone")
        return Fixed(raw["value"])
    if "one_of" in raw:
        if len(raw) != 1 or not isinstance(raw["one_of"], list) or not raw["one_of"]:
            raise SchemaError(field, f"{dict(raw)!r} is not a choice: write one_of: [a, b, ...] alone")
        return OneOf(tuple(raw["one_of"]))
    if "file" in raw:
        extra = sorted(set(raw) - {"file", "grad"})
        if extra or not isinstance(raw["file"], str):
            raise SchemaError(field, f"{dict(raw)!r} is not a file input: write file: name.pt and optionally grad:")
        grad = _bool(raw.get("grad", True), f"{field}.grad")
        return FromFile(_input_file(raw["file"], f"{field}.file", base_dir), grad)
    if "shape" not in raw:
        raise SchemaError(field, f"{dict(raw)!r} is not an input: give a tensor (shape: ...), value:, one_of: or file:")
    unknown = sorted(set(raw) - set(TENSOR_FIELDS))
    if unknown:
        raise SchemaError(f"{field}.{unknown[0]}", f"is unknown: a tensor takes {', '.join(TENSOR_FIELDS)}")
    return _tensor(raw, field, dims, previous)


def _input_file(name: str, field: str, base_dir: Path) -> Path:
    """A regression input's path: inside the case file's folder (after links), a regular file, not huge.
    Nothing is opened here; torch.load(weights_only=True) reads it when the case runs."""
    path = base_dir / name
    if os.path.isabs(name) or not Path(os.path.realpath(path)).is_relative_to(os.path.realpath(base_dir)):
        raise SchemaError(field, f"{name!r} leads out of the case file's folder: keep regression inputs next to the "
                                 f"case file")
    try:
        info = os.stat(path)
    except OSError:
        raise SchemaError(field, f"{name!r} does not exist next to the case file: restore it or delete the case") \
            from None
    if not stat.S_ISREG(info.st_mode):
        raise SchemaError(field, f"{name!r} is not a regular file (a folder, a FIFO or a device): write it again "
                                 f"with torch.save")
    if info.st_size > MAX_BYTES:
        raise SchemaError(field, f"{name!r} is {info.st_size} bytes, more than the {MAX_BYTES} a regression input "
                                 f"may have: op case tensors hold at most {MAX_ELEMENTS} elements")
    return path


def _tensor(raw: Mapping[str, Any], field: str, dims, previous: list[InputSpec]) -> TensorSpec:
    spec: dict[str, Any] = {}
    shape = raw["shape"]
    if isinstance(shape, list):
        if len(shape) > MAX_RANK:
            raise SchemaError(f"{field}.shape", f"has {len(shape)} dims: keep tensors within {MAX_RANK} dims")
        spec["shape"] = tuple(_size(s, f"{field}.shape[{i}]", dims) for i, s in enumerate(shape))
    elif isinstance(shape, Mapping) and set(shape) == {"broadcasts_to"}:
        target = shape["broadcasts_to"]
        if not isinstance(target, int) or isinstance(target, bool) or not 0 <= target < len(previous) \
                or not isinstance(previous[target], TensorSpec):
            raise SchemaError(f"{field}.shape.broadcasts_to", f"{target!r} is not the position of an earlier "
                                                              f"tensor input: give its index, e.g. 0")
        spec["broadcasts_to"] = target
    elif isinstance(shape, Mapping) and set(shape) <= {"rank", "sides"} and "rank" in shape:
        spec["rank"] = _size_range(shape["rank"], f"{field}.shape.rank")
        if spec["rank"][1] > MAX_RANK:
            raise SchemaError(f"{field}.shape.rank", f"{shape['rank']!r} reaches past {MAX_RANK} dims: keep tensors "
                                                     f"within {MAX_RANK} dims")
        spec["sides"] = _size_range(shape.get("sides", [1, 8]), f"{field}.shape.sides")
    else:
        raise SchemaError(f"{field}.shape", f"{shape!r} is not a shape: write [sizes or symbols], "
                                            f"{{rank: [1, 3], sides: [1, 8]}} or {{broadcasts_to: 0}}")
    dtype = None
    if "dtype" in raw:
        try:
            dtype = parse_dtype(raw["dtype"])
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"{field}.dtype", str(exc)) from None
    if "indices" in raw:
        count = raw["indices"]
        if isinstance(count, str):
            if count not in dims:
                raise SchemaError(f"{field}.indices", f"{count!r} is not a dim of this case: declare it under dims")
        elif not isinstance(count, int) or isinstance(count, bool) or not 1 <= count <= MAX_INDICES:
            raise SchemaError(f"{field}.indices", f"{count!r} is not a count: give a whole number from 1 to "
                                                  f"{MAX_INDICES} or a dim symbol")
        if {"range", "special", "min_magnitude"} & set(raw):
            raise SchemaError(f"{field}.indices", "excludes range, min_magnitude and special: indices are drawn "
                                                  "in [0, indices)")
        dtype = dtype or parse_dtype("int64")
        if dtype.is_floating_point:
            raise SchemaError(f"{field}.dtype", f"{dtype} cannot hold indices: use int64 or leave dtype out")
        spec["indices"] = count
    is_float = dtype is None or dtype.is_floating_point
    if "range" in raw:
        spec["range"] = _range(raw["range"], f"{field}.range", whole=not is_float)
    if "min_magnitude" in raw:
        magnitude = raw["min_magnitude"]
        if isinstance(magnitude, bool) or not isinstance(magnitude, (int, float)) or not 0 <= magnitude <= _FLOAT_MAX:
            raise SchemaError(f"{field}.min_magnitude", f"{magnitude!r} is not a number >= 0: write one")
        if not is_float:
            raise SchemaError(f"{field}.min_magnitude", f"needs a float tensor, not {dtype}: narrow the range instead")
        low, high = spec.get("range", DEFAULT_RANGE)
        if high < magnitude and low > -magnitude:
            raise SchemaError(f"{field}.min_magnitude", f"{magnitude} leaves no value in the range [{low}, {high}]: "
                                                        f"lower it or widen the range")
        spec["min_magnitude"] = float(magnitude)
    if "special" in raw:
        kinds = raw["special"] if isinstance(raw["special"], list) else [raw["special"]]
        for kind in kinds:
            if kind not in SPECIAL_VALUES:
                raise SchemaError(f"{field}.special", f"{kind!r} is unknown: use some of {', '.join(SPECIAL_VALUES)}")
        if not is_float:
            raise SchemaError(f"{field}.special", f"needs a float tensor, not {dtype}: drop special")
        spec["special"] = tuple(kinds)
    spec["grad"] = _bool(raw.get("grad", True), f"{field}.grad")
    tensor = TensorSpec(dtype=dtype, **spec)
    _check_size(tensor, field, dims, previous)
    return tensor


def _size(raw: Any, field: str, dims) -> Size:
    if isinstance(raw, str):
        if raw not in dims:
            raise SchemaError(field, f"{raw!r} is not a dim of this case: declare it under dims, e.g. {{{raw}: [1, 16]}}")
        return raw
    if isinstance(raw, list):
        return _size_range(raw, field)
    if isinstance(raw, int) and not isinstance(raw, bool) and raw >= 0:
        return raw
    raise SchemaError(field, f"{raw!r} is not a size: give a whole number, a dim symbol or [low, high]")


def _largest(tensor: TensorSpec, dims, previous: list[InputSpec]) -> int:
    if tensor.broadcasts_to is not None:
        target = previous[tensor.broadcasts_to]
        return _largest(target, dims, previous) if isinstance(target, TensorSpec) else 0
    if tensor.rank is not None:
        return tensor.sides[1] ** tensor.rank[1]
    total = 1
    for size in tensor.shape or ():
        total *= dims[size][1] if isinstance(size, str) else size[1] if isinstance(size, tuple) else size
    return total


def _check_size(tensor: TensorSpec, field: str, dims, previous) -> None:
    largest = _largest(tensor, dims, previous)
    if largest > MAX_ELEMENTS:
        raise SchemaError(f"{field}.shape", f"may hold {largest} elements: keep tensors within {MAX_ELEMENTS} "
                                            f"elements (smaller dims, or fewer of them)")


def parse_limits(raw: Any, reason: Any) -> tuple[dict, str | None]:
    if reason is not None and (not isinstance(reason, str) or not reason.strip()):
        raise SchemaError("reason", f"{reason!r} is not a sentence: say why the case needs its own limits")
    if raw is None:
        return {}, reason
    if not isinstance(raw, Mapping) or not raw:
        raise SchemaError("limits", f"{raw!r} is not a mapping: write {{standard: {{metric: limit}}}}")
    if reason is None:
        raise SchemaError("reason", "is missing: a case with its own limits must say why, in reason:")
    from ..precision import schema_vocabulary
    from ..precision import (  # the same limits, checked by the same layer, as a rules file's
        case_limits,
    )

    problem = first_problem(case_limits(schema_vocabulary()), dict(raw))
    if problem is not None:
        where, text = problem
        raise SchemaError(f"limits.{where}", text)
    for standard, metrics in raw.items():
        if not metrics:
            raise SchemaError(f"limits.{standard}", f"{metrics!r} is not a mapping: write {{metric: limit}}")
    return {standard: dict(metrics) for standard, metrics in raw.items()}, reason


def parse_standard(raw: Any) -> str | None:
    choices = [s.name for s in STANDARDS.listed if not s.needs_baseline]
    beside = ", ".join(s.name for s in STANDARDS.listed if s.needs_baseline)
    if raw is not None and raw not in choices:
        raise SchemaError("standard", f"{raw!r} is not a standard op cases use: use one of {', '.join(choices)} "
                                      f"({beside} is no case's own standard: it judges beside one when the run "
                                      f"has a live --npu-precision-baseline)")
    return raw


def _optional_name(raw: Any, field: str) -> str | None:
    if raw is not None and (not isinstance(raw, str) or not raw.strip()):
        raise SchemaError(field, f"{raw!r} is not a name: write a dotted path or a registered name")
    return raw.strip() if raw is not None else None


def _bool(raw: Any, field: str) -> bool:
    if not isinstance(raw, bool):
        raise SchemaError(field, f"{raw!r} is not true or false: write true or false")
    return raw


def count(raw: Any, field: str, *, minimum: int, maximum: int | None = None,
          cap: str = "this harness runs for one case") -> int | None:
    """A whole number from ``minimum`` to ``maximum``; ``cap`` says what the maximum is."""
    if raw is None:
        return None
    if not isinstance(raw, int) or isinstance(raw, bool) or raw < minimum:
        raise SchemaError(field, f"{raw!r} is not a whole number >= {minimum}: write one")
    if maximum is not None and raw > maximum:
        raise SchemaError(field, f"{raw} is more than the {maximum} {cap}: write at most {maximum}")
    return raw
