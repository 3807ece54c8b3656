"""From msprobe value descriptors to plain values and ``TensorSpec`` records, with no file touched.

``decode_call`` / ``decode_value`` turn the JSON descriptors of a dump entry into Python values and
tensor descriptions; dump_cases.py uses them at collection time to decide skips, and arguments.py
later makes the tensors they describe.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import torch

TENSOR_TYPES = frozenset({"torch.Tensor", "torch.nn.parameter.Parameter", "numpy.ndarray"})
_SCALAR_TYPES = {"int": int, "float": float, "bool": bool, "str": str}
# numpy scalars are written by their bare type name ("float32"); the value is already a plain number.
_NUMPY_SCALARS = frozenset(
    {"bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
     "float16", "float32", "float64", "longlong", "intc", "double", "half", "single"}
)
_STAT_TYPES = frozenset({int, float, bool, type(None)})


class DescriptorError(ValueError):
    """A value descriptor that cannot become an argument; ``where`` locates it in the entry."""

    def __init__(self, where: str, problem: str):
        problem = shortened(problem)
        super().__init__(f"{where} {problem}")
        self.where = where
        self.problem = problem


MAX_MESSAGE = 2000  # characters of a dump's own text that a message repeats


def shortened(text: str) -> str:
    """A message that quotes the dump keeps its length bounded: a 50 MB value is cut, and says so."""
    if len(text) <= MAX_MESSAGE:
        return text
    return f"{text[:MAX_MESSAGE // 2]}… ({len(text) - MAX_MESSAGE} characters cut) …{text[-MAX_MESSAGE // 2:]}"


class MalformedDescriptor(DescriptorError):
    """The descriptor's structure is wrong (not an object, a shape that is not a list, ...)."""


class UnsupportedDescriptor(DescriptorError):
    """The descriptor is well formed but names something this harness cannot rebuild."""


class DumpDataError(Exception):
    """A tensor file that cannot be used; the message names the API key, the argument and the file."""

    def __init__(self, key: str, where: str, path: Path | str, problem: str):
        super().__init__(f"{key} {where}: {path} {problem}")
        self.key = key
        self.where = where
        self.path = str(path)
        self.problem = problem


@dataclass(frozen=True)
class TensorSpec:
    """What a dump says about one tensor. Statistics keep their JSON values: ±inf and nan stay."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    max: float | bool | None
    min: float | bool | None
    mean: float | None
    norm: float | None
    requires_grad: bool
    data_name: str | None
    where: str
    ndarray: bool = False  # the argument was a numpy array, not a tensor
    checksum: str | None = None  # msprobe's "md5" (summary_mode md5: a CRC32 of the bytes, despite its name)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def rebuildable(self) -> bool:
        """True when there is a file to load, nothing to make, or the extremes to synthesize from."""
        return self.data_name is not None or self.numel == 0 or (self.max is not None and self.min is not None)


@dataclass(frozen=True)
class DumpedDevice:
    """A ``torch.device`` argument, kept as a marker: the runner puts its own device there."""

    original: str


@dataclass(frozen=True)
class DecodedCall:
    """The decoded positional and keyword arguments of one forward entry."""

    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    guesses: tuple[str, ...] = ()  # arguments rebuilt from other parts of the entry, said in the case's notes

    def specs(self) -> Iterator[TensorSpec]:
        yield from iter_specs(self.args)
        yield from iter_specs(self.kwargs)

    def top_level(self) -> dict[str, Any]:
        """Each top-level argument by its ``where``, for rules that look at a neighbouring argument."""
        values = {f"input_args[{i}]": v for i, v in enumerate(self.args)}
        values.update({f"input_kwargs[{k!r}]": v for k, v in self.kwargs.items()})
        return values


@dataclass(frozen=True)
class CaseEntries:
    """One case's entries as dump.json has them, read once when the case runs and decoded at most
    once there: its thread count, memory budget, skip, arguments and recorded results all read them
    here. Nothing keeps them after the run (a 100k-entry dump would hold every entry)."""

    name: str  # the op's bare name ("to"), which decodes some arguments msprobe leaves empty
    forward: Any  # the forward entry, or None
    backward: Any = None  # the backward entry when it is an object, else None

    @functools.cached_property
    def call(self) -> DecodedCall:
        """The forward's arguments (raises DescriptorError, and again on each use)."""
        return decode_call(self.forward, self.name)

    @functools.cached_property
    def grads(self) -> tuple[TensorSpec | None, ...]:
        """The backward's gradients into the outputs (raises DescriptorError, and again on each use)."""
        return decode_grads(self.backward)

    def output(self, backward: bool = False) -> Any:
        """The recorded 'output' of the forward entry (of the backward one: the input gradients), or None."""
        entry = self.backward if backward else self.forward
        return entry.get("output") if isinstance(entry, dict) else None


# ---------------------------------------------------------------- decoding


def decode_call(entry: Any, name: str = "") -> DecodedCall:
    """Decode a forward entry's ``input_args`` and ``input_kwargs``; ``name`` is the op's bare name
    (``to``), for arguments msprobe leaves empty that the entry can still tell."""
    if not isinstance(entry, dict):
        raise MalformedDescriptor("the entry", f"is {_kind(entry)}, expected an object")
    args, kwargs = entry.get("input_args"), entry.get("input_kwargs")
    if not isinstance(args, list):
        raise MalformedDescriptor("input_args", f"is {_kind(args)}, expected a list")
    if not isinstance(kwargs, dict):
        raise MalformedDescriptor("input_kwargs", f"is {_kind(kwargs)}, expected an object")
    decoded, guesses = list(args), ()
    if name == "to":
        decoded, guesses = _positional_to(args, entry.get("output"))
    elif name in _DTYPE_POSITIONS:
        decoded, guesses = _positional_dtype(args, entry.get("output"), _DTYPE_POSITIONS[name])
    return DecodedCall(
        tuple(v.value if isinstance(v, _Rebuilt) else decode_value(v, f"input_args[{i}]")
              for i, v in enumerate(decoded)),
        {key: decode_value(d, f"input_kwargs[{key!r}]") for key, d in kwargs.items()},
        guesses,
    )


@dataclass(frozen=True)
class _Rebuilt:
    value: Any


def _positional_to(args: list, output: Any) -> tuple[list, tuple[str, ...]]:
    """``x.to(torch.float32)`` and ``x.to(device)``: msprobe writes a positional dtype or device as
    ``{}``. The recorded output tells them apart: another dtype than the input's is a cast to it;
    the same dtype is a device move (the harness puts its own device there anyway). With two empty
    arguments, ``to(device, dtype)``. Anything else stays empty and skips, saying so."""
    empty = [i for i, d in enumerate(args) if i > 0 and d == {}]
    source = args[0] if args and isinstance(args[0], dict) else {}
    target, dtype = _output_dtype(output)
    if not empty or dtype is None or not isinstance(source.get("dtype"), str):
        return args, ()
    rebuilt = list(args)
    if empty == [1] and target != source["dtype"]:
        rebuilt[1] = _Rebuilt(dtype)
        return rebuilt, (f"input_args[1] was written as {{}} by msprobe; rebuilt as {target}, the recorded "
                         f"output's dtype",)
    if empty == [1]:
        rebuilt[1] = _Rebuilt(DumpedDevice("unknown"))
        return rebuilt, ("input_args[1] was written as {} by msprobe; the output keeps the input's dtype, so it "
                         "was a device, rebuilt as this run's device",)
    if empty == [1, 2]:
        rebuilt[1], rebuilt[2] = _Rebuilt(DumpedDevice("unknown")), _Rebuilt(dtype)
        return rebuilt, (f"input_args[1:3] were written as {{}} by msprobe; rebuilt as (device, {target}) from the "
                         f"recorded output's dtype",)
    if empty == [2]:  # to(device, dtype, ...): the device was written, the dtype was not
        rebuilt[2] = _Rebuilt(dtype)
        return rebuilt, (f"input_args[2] was written as {{}} by msprobe; rebuilt as {target}, the recorded output's "
                         f"dtype",)
    return args, ()


# Internal backward ops msprobe hooks whose input_dtype (at this position) it writes as {}: the
# recorded output has that dtype.
_DTYPE_POSITIONS = {"_softmax_backward_data": 3, "_log_softmax_backward_data": 3}


def _positional_dtype(args: list, output: Any, position: int) -> tuple[list, tuple[str, ...]]:
    target, dtype = _output_dtype(output)
    if len(args) <= position or args[position] != {} or dtype is None:
        return args, ()
    rebuilt = list(args)
    rebuilt[position] = _Rebuilt(dtype)
    return rebuilt, (f"input_args[{position}] was written as {{}} by msprobe; rebuilt as {target}, the recorded "
                     f"output's dtype",)


def _output_dtype(output: Any) -> tuple[str | None, torch.dtype | None]:
    """The recorded first output's dtype, as written and parsed; (None, None) where it has none."""
    result = output[0] if isinstance(output, list) and output else output
    target = result.get("dtype") if isinstance(result, dict) else None
    try:
        return (target, parse_dtype(target)) if isinstance(target, str) else (None, None)
    except ValueError:
        return None, None


def decode_grads(entry: Any) -> tuple[TensorSpec | None, ...]:
    """Decode a backward entry's ``input``: one tensor (or ``None``) per API output."""
    if not isinstance(entry, dict):
        raise MalformedDescriptor("the backward entry", f"is {_kind(entry)}, expected an object")
    grads = entry.get("input")
    if not isinstance(grads, list):
        raise MalformedDescriptor("backward input", f"is {_kind(grads)}, expected a list")
    decoded = tuple(decode_value(d, f"backward input[{i}]") for i, d in enumerate(grads))
    for i, grad in enumerate(decoded):
        if grad is not None and not isinstance(grad, TensorSpec):
            raise UnsupportedDescriptor(f"backward input[{i}]", f"is {_kind(grad)}, expected a tensor or null")
    return decoded


# msprobe nests arguments as deep as the call did (a list of tuples of tensors); far deeper is no call.
MAX_NESTING = 32


def decode_value(desc: Any, where: str, depth: int = 0) -> Any:
    """One descriptor to a Python value, a ``TensorSpec`` or a ``DumpedDevice``."""
    if desc is None:
        return None
    if isinstance(desc, list):
        if depth >= MAX_NESTING:
            raise MalformedDescriptor(where, f"nests lists deeper than {MAX_NESTING} levels; no API call does")
        return [decode_value(d, f"{where}[{i}]", depth + 1) for i, d in enumerate(desc)]
    if not isinstance(desc, dict):
        raise MalformedDescriptor(where, f"is {_kind(desc)}, expected a descriptor object")
    kind = desc.get("type")
    if kind in TENSOR_TYPES:
        return _tensor_spec(desc, where)
    if kind in _SCALAR_TYPES:
        return _scalar(desc, kind, where)
    if kind in _NUMPY_SCALARS or (isinstance(kind, str) and kind.removeprefix("numpy.") in _NUMPY_SCALARS):
        return desc.get("value")
    decode = _OTHER_TYPES.get(kind)
    if decode is None:
        if not desc:
            raise UnsupportedDescriptor(where, "is written as {}: msprobe writes a positional torch.dtype or "
                                               "torch.device so, and objects it cannot describe; nothing in the "
                                               "entry tells which, so it cannot be rebuilt")
        if kind is None:
            raise UnsupportedDescriptor(where, f"has no 'type' (keys {sorted(desc)}), so it cannot be rebuilt")
        raise UnsupportedDescriptor(where, f"has type {kind!r}, which this harness cannot rebuild")
    try:
        return decode(desc)
    except (TypeError, ValueError, AttributeError) as exc:
        value = desc.get("value")
        raise MalformedDescriptor(where, f"of type {kind!r} has an unusable value {value!r} ({exc})") from None


def require_rebuildable(spec: TensorSpec) -> None:
    """Raise ``UnsupportedDescriptor`` for a tensor with neither a file nor the statistics to make it."""
    if not spec.rebuildable:
        dtype = str(spec.dtype).removeprefix("torch.")
        raise UnsupportedDescriptor(
            spec.where, f"is a {dtype} tensor with no data file and no Min/Max to synthesize it from; "
            "dump with task 'tensor' to test this API")


def require_finite_extremes(spec: TensorSpec) -> None:
    """Raise ``MalformedDescriptor`` for an integer tensor whose Max or Min is nan or infinite: no
    integer is, so the statistics that would make it are corrupt (a float tensor may overflow)."""
    if spec.dtype.is_floating_point or spec.dtype.is_complex or spec.dtype == torch.bool:
        return
    for field, value in (("Max", spec.max), ("Min", spec.min)):
        if isinstance(value, float) and not math.isfinite(value):
            dtype = str(spec.dtype).removeprefix("torch.")
            raise MalformedDescriptor(spec.where, f"has {field} {value}, which no {dtype} value can be; the "
                                                  "statistics are corrupt: re-dump this API or delete the entry")


def iter_specs(value: Any) -> Iterator[TensorSpec]:
    """Every ``TensorSpec`` inside a decoded value, depth first."""
    if isinstance(value, TensorSpec):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from iter_specs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from iter_specs(item)


def parse_dtype(name: Any) -> torch.dtype:
    """``"torch.float16"`` to ``torch.float16``; anything else raises ValueError."""
    dtype = _DTYPES.get(name) if isinstance(name, str) else None
    if dtype is None:
        raise ValueError(f"{name!r} is not a torch dtype")
    return dtype


# Built once: a big dump spells out a dtype for every tensor.
_DTYPES = {str(v): v for v in vars(torch).values() if isinstance(v, torch.dtype)}


def _tensor_spec(desc: dict, where: str) -> TensorSpec:
    ndarray = desc["type"] == "numpy.ndarray"
    try:
        dtype = parse_dtype(desc.get("dtype") if not ndarray else _numpy_dtype_name(desc.get("dtype")))
    except ValueError:
        raise UnsupportedDescriptor(where, f"has dtype {desc.get('dtype')!r}, which this torch does not know") from None
    shape = desc.get("shape")
    if type(shape) is not list or not {type(d) for d in shape} <= {int} or (shape and min(shape) < 0):
        raise MalformedDescriptor(where, f"has shape {shape!r}, expected a list of non-negative ints")
    stats = (desc.get("Max"), desc.get("Min"), desc.get("Mean"), desc.get("Norm"))
    if not {type(s) for s in stats} <= _STAT_TYPES:
        raise MalformedDescriptor(where, f"has statistics {list(stats)!r}, expected numbers, booleans or null")
    data_name = desc.get("data_name")
    if data_name is not None and not isinstance(data_name, str):
        raise MalformedDescriptor(where, f"has data_name {data_name!r}, expected a file name")
    checksum = desc.get("md5")
    if checksum is not None and not isinstance(checksum, str):
        raise MalformedDescriptor(where, f"has md5 {checksum!r}, expected a checksum string")
    return TensorSpec(dtype, tuple(shape), *stats, requires_grad=desc.get("requires_grad") is True,
                      data_name=data_name, where=where, ndarray=ndarray, checksum=checksum)


def _numpy_dtype_name(name: Any) -> str:
    return name if isinstance(name, str) and name.startswith("torch.") else f"torch.{name}"


def _scalar(desc: dict, kind: str, where: str) -> Any:
    value = desc.get("value")
    expected = _SCALAR_TYPES[kind]
    if kind == "float" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if (kind == "int" and isinstance(value, bool)) or not isinstance(value, expected):
        raise MalformedDescriptor(where, f"has value {value!r}, which is not of type {kind!r}")
    return value


def _memory_format(desc: dict) -> torch.memory_format:
    fmt = getattr(torch, str(desc.get("format", desc.get("value"))).removeprefix("torch."), None)
    if not isinstance(fmt, torch.memory_format):
        raise ValueError("not a torch memory format")
    return fmt


def _slice(desc: dict) -> slice:
    value = desc["value"]
    if not isinstance(value, list) or len(value) != 3:
        raise ValueError("expected [start, stop, step]")
    return slice(*value)


_OTHER_TYPES = {
    "slice": _slice,
    "ellipsis": lambda desc: ...,
    "torch.Size": lambda desc: torch.Size(desc["value"]),
    "torch.dtype": lambda desc: parse_dtype(desc["value"]),
    "torch.device": lambda desc: DumpedDevice(str(desc["value"])),
    "torch.memory_format": _memory_format,
}


def _kind(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__}"


def decode_for(key: str, decode, value: Any, source: Path):
    """``decode(value)``, with a descriptor problem reported as a ``DumpDataError`` on dump.json."""
    try:
        return decode(value)
    except DescriptorError as exc:
        raise DumpDataError(key, exc.where, source, f"says it {exc.problem}") from None
