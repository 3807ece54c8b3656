"""Turning each API call of an msprobe dump.json into a case record (dump/locations.py finds the files).

Every ``data`` entry becomes one ``DumpCase``, in file order, which is execution order. An entry that
cannot be re-run still becomes a case, with a ``SkipReason`` and a message naming its key, so a
bad entry never hides the rest of the dump. Nothing here loads tensors.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import gc
import math
import os
import re
import stat
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from ..common import quoted_key, shown_key
from .descriptors import (
    CaseEntries, MalformedDescriptor, UnsupportedDescriptor, decode_grads, iter_specs, require_rebuildable,
)
from .entries import MAX_ENTRY_BYTES, Entry, LoadedEntry, read_dump
from .locations import DATA_DIR_NAME, dump_location

_API_KEY = re.compile(
    r"(?P<prefix>[A-Za-z][A-Za-z0-9_]*)\.(?P<name>.+)\.(?P<index>\d+)\.(?P<direction>forward|backward)"
)
_MODULE_KEY = re.compile(r"Module\.(?P<name>.+)\.(?P<direction>forward|backward|parameters_grad)\.(?P<index>\d+)")
# MindSpeed's ops resolve to the references of the torch_npu ops they wrap, or skip as no-reference;
# Distributed ones are collectives, judged from every rank's entry (checks/collectives).
_UNSUPPORTED_PREFIXES = frozenset({"VF"})


class SkipReason(enum.Enum):
    """Why a case is not run. The description is printed verbatim in the docs."""

    MODULE_ENTRY = ("module-entry", "A module-level (L0) entry or a parameters_grad entry, not one API call.")
    UNSUPPORTED_PREFIX = ("unsupported-prefix", "A VF API (torch's internal RNN functions), which cannot be re-run alone.")
    NO_FORWARD = ("no-forward", "A backward entry whose forward entry is not in the dump, so its inputs are unknown.")
    MISSING_DATA = ("missing-data", "An argument the dump does not describe well enough to rebuild.")
    MALFORMED_ENTRY = ("malformed-entry", "An entry whose structure is not what msprobe writes.")

    def __new__(cls, value: str, description: str):
        member = object.__new__(cls)
        member._value_ = value
        member.description = description
        return member


@dataclass(frozen=True)
class DumpCase:
    """One API call in one direction; a backward case re-runs the forward from its inputs."""

    key: str  # exactly as in dump.json: "Functional.gelu.0.forward"
    api: str  # "Functional.gelu.0"
    prefix: str  # "Functional", "Tensor", "Torch", "NPU", "Module", ...
    name: str  # "gelu", "linalg.inv", "atb.npu_mla_preprocess"
    call_index: int
    direction: str  # "forward" or "backward" ("parameters_grad" for those Module entries)
    forward_key: str
    forward_entry: Entry | None  # where the forward entry is (dump.json's text is decoded on use), or None
    backward_entry: Entry | None  # where the backward entry is, when it is an object; else None
    case_id: str  # "step0/rank0::Functional.gelu.0.forward"
    location: str  # the case id's prefix, "step0/rank0" ("" where there is none)
    order: int  # position in dump.json, i.e. execution order
    source: Path  # the dump.json
    known_skip: tuple[SkipReason, str] | None = None  # a reason its key or a missing entry gives at once
    input_error: str | None = None  # the dump is at fault whatever the entry says (an ambiguous or unprintable key)
    overflow_recorded: bool = False  # the dump's statistics show an inf or nan in what this case compares

    @property
    def seed(self) -> int:
        """zlib.crc32 of case_id (made when the case runs: collection makes 100k cases)."""
        return zlib.crc32(self.case_id.encode())

    @property
    def forward_seed(self) -> int:
        """zlib.crc32 of the forward case's id: a backward case rebuilds the same inputs."""
        return zlib.crc32(_case_id(self.location, self.forward_key).encode())

    @property
    def forward(self) -> Any:
        """The forward entry as dump.json has it, or None; read from the file again on use (raises
        EntryUnreadable when it cannot be). A run of the case reads it once, through ``read``."""
        return None if self.forward_entry is None else self.forward_entry.value

    @property
    def backward(self) -> Any:
        """The backward entry as dump.json has it when it is an object, else None."""
        return None if self.backward_entry is None else self.backward_entry.value

    def read(self) -> CaseEntries:
        """Its entries for one run of the case, read from dump.json once (raises EntryUnreadable); a
        forward case needs no backward entry."""
        return CaseEntries(self.name, self.forward, self.backward if self.direction == "backward" else None)

    def decoded_skip(self, entries: CaseEntries) -> tuple[SkipReason, str] | None:
        """(reason, message) where the case's entries, read for this run, cannot be replayed (malformed,
        missing data); None where they can (whether the op draws random numbers is the catalogue's to say:
        checks/prepared_case.py). A reason its key gives is ``known_skip``'s."""
        found = _decoded_skip(self, entries)
        return None if found is None else (found[0], self.skip_message_of(found[1]))

    def skip_message_of(self, detail: str) -> str:
        return f"{shown_key(self.key)}: {detail}"

    @functools.cached_property
    def _skip(self) -> tuple[SkipReason | None, str]:
        # Reasons that need the entries decoded are found on first use, when the case runs: collecting
        # a dump of 100k entries then decodes none of them.
        if self.known_skip is not None:
            return self.known_skip
        return _decoded_skip(self, self.read()) or (None, "")

    @property
    def skip(self) -> SkipReason | None:
        """Why the case cannot run (None when it can)."""
        return self._skip[0]

    @property
    def skip_detail(self) -> str:
        return self._skip[1]

    @property
    def skip_message(self) -> str:
        return self.skip_message_of(self.skip_detail) if self.skip else ""


@dataclass(frozen=True)
class DumpFile:
    """One dump.json. When ``error`` is set the file was unusable and ``cases`` is empty."""

    path: Path
    data_dir: Path  # dump.json's folder / dump_tensor_data; the recorded dump_data_dir is ignored
    task: str | None
    level: str | None
    framework: str | None
    step: int | None
    rank: int | None
    pid: int | None  # from a proc<PID> folder, used when msprobe knew no rank
    location: str  # the case-id prefix: "step0/rank0", or "mlp_tensor/step0/rank0" under a folder of dumps
    cases: tuple[DumpCase, ...]
    error: str | None = None
    device: str | None = None  # where a dump.json names the device it was taken on (msprobe's own do not)


def load_dump(path: Path | str, label: str | None = None, root: Path | str | None = None) -> DumpFile:
    """Read one dump.json into a ``DumpFile``; a file that is not a dump gives ``error``, never raises.

    ``label`` prefixes the case ids (default: the step and rank folders); ``root`` is the folder the
    user named, out of which the file may not lead through a symbolic link.
    """
    with without_cyclic_gc():
        return _load_dump(Path(path), label, root)


@contextlib.contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """No cyclic garbage collection while a dump is parsed into cases (or its cases into test items),
    and none of their objects in later passes: json makes no cycles, yet each pass walked every dict
    it made (60 % of the time at 100k entries). Reference counting still frees what is dropped."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _load_dump(path: Path, label: str | None, root: Path | str | None) -> DumpFile:
    step, rank, pid, location = dump_location(path)
    label = location if label is None else label
    empty = dict(path=path, data_dir=path.parent / DATA_DIR_NAME, step=step, rank=rank, pid=pid, location=label)
    problem = _unreadable(path, root)
    if problem is not None:
        return DumpFile(**empty, task=None, level=None, framework=None, cases=(), error=_file_error(path, problem))
    try:
        # Python's json accepts the bare NaN/Infinity msprobe writes; entries stay in the file, summarized.
        document, reader = read_dump(path, _facts)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        problem = f"is not readable JSON ({_first_line(exc)})"
        return DumpFile(**empty, task=None, level=None, framework=None, cases=(), error=_file_error(path, problem))
    if not isinstance(document, dict):
        return DumpFile(**empty, task=None, level=None, framework=None, cases=(),
                        error=_file_error(path, f"holds a JSON {type(document).__name__}, expected an object"))
    meta = {name: _text(document.get(name)) for name in ("task", "level", "framework", "device")}
    data = document.get("data")
    if not isinstance(data, dict):
        problem = "has no 'data' object" if data is None else f"has a 'data' {type(data).__name__}, expected an object"
        return DumpFile(**empty, **meta, cases=(), error=_file_error(path, problem))
    if reader is None:  # read whole: the entries are kept decoded
        data = {key: (_facts(key, value), LoadedEntry(value)) for key, value in data.items()}
    duplicates = {} if reader is None else reader.duplicates
    return DumpFile(**empty, **meta, cases=tuple(_cases(data, path, label, duplicates, meta["level"])))


def _unreadable(path: Path, root: Path | str | None) -> str | None:
    """Why a dump.json must not be opened: a link out of the dump, or no regular file (a FIFO would hang)."""
    if root is not None:
        real_root = os.path.realpath(root)
        real = os.path.realpath(path)
        if real != real_root and not Path(real).is_relative_to(real_root):
            return f"is a link to {real}, outside {root}; copy the file into the dump instead"
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    return None if stat.S_ISREG(mode) else "is not a regular file"


def _file_error(path: Path, problem: str) -> str:
    return f"{path} {problem}; re-dump it with msprobe or remove it from the dump folder"


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0]


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# ---------------------------------------------------------------- cases


class _Facts(NamedTuple):
    """What collection needs of one entry; the entry itself stays in dump.json."""

    is_object: bool
    is_null: bool
    nonfinite: bool  # its recorded outputs' statistics show an inf or nan
    grads_problem: str | None  # a backward entry that is no object: why its gradients cannot be read


def _facts(key: str, entry: Any) -> _Facts:
    if isinstance(entry, dict):
        return _Facts(True, False, _has_nonfinite(entry.get("output"), depth=0), None)
    problem = None
    if key.endswith(".backward"):
        try:
            decode_grads(entry)
        except MalformedDescriptor as exc:
            problem = str(exc)
    return _Facts(False, entry is None, False, problem)


def _cases(data: dict[str, tuple[_Facts, Entry]], source: Path, location: str, duplicates: dict[str, int],
           level: str | None = None):
    for order, (key, (facts, entry)) in enumerate(data.items()):
        case = _case(key, facts, entry, order, data, source, location, level)
        problem = _key_problem(case, source, duplicates) if duplicates or not key.isprintable() else None
        yield case if problem is None else dataclasses.replace(case, input_error=problem)


def _case_id(location: str, key: str) -> str:
    key = shown_key(key)
    return f"{location}::{key}" if location else key


def _key_problem(case: DumpCase, source: Path, duplicates: dict[str, int]) -> str | None:
    """Why a key alone makes its case the dump's fault: given twice, or holding unprintable characters."""
    if duplicates:
        for key, role in ((case.key, ""), (case.forward_key, f", the forward entry of {quoted_key(case.key)},")):
            if key in duplicates:
                return (f"{source}: the key {quoted_key(key)}{role} appears {duplicates[key]} times, so which entry "
                        "it names is ambiguous; re-dump the model or keep one entry under each key")
    if case.known_skip is not None and case.known_skip[0] is SkipReason.MALFORMED_ENTRY:
        return None  # a key that fits no msprobe pattern (a newline in it) is already malformed
    if not case.key.isprintable():
        return (f"{source}: the key {quoted_key(case.key)} holds control or unprintable characters, which msprobe "
                "never writes; re-dump the model or correct the key")
    return None


def _case(key: str, facts: _Facts, entry: Entry, order: int, data: dict[str, tuple[_Facts, Entry]], source: Path,
          location: str, level: str | None = None) -> DumpCase:
    parsed = _parse_key(key)
    if parsed is None:
        parsed = (key.split(".", 1)[0], "", -1, "", key, key)
        problem = ("the key fits neither '<Prefix>.<api>.<index>.<forward|backward>' nor "
                   "'Module.<path>.<Class>.<direction>.<index>'; msprobe did not write this entry")
        skip = (SkipReason.MALFORMED_ENTRY, problem)
    else:
        skip = None
    prefix, name, index, direction, api, forward_key = parsed
    forward = (facts, entry) if direction == "forward" else data.get(forward_key)
    backward = (facts, entry) if direction == "backward" else data.get(_backward_key(parsed))
    if forward is not None and forward[0].is_null:
        forward = None  # a null entry is no entry
    case_id = _case_id(location, key)
    if skip is None:
        skip = _known_skip(prefix, direction, forward_key, forward, level)
    if skip is None and direction == "backward" and facts.grads_problem is not None:  # the case keeps no such entry
        skip = (SkipReason.MALFORMED_ENTRY, f"{facts.grads_problem}; re-dump this API or delete the entry")
    backward = backward if backward is not None and backward[0].is_object else None
    if skip is None:
        skip = _oversized(key, source, forward, backward)
    return DumpCase(
        key=key, api=api, prefix=prefix, name=name, call_index=index, direction=direction,
        forward_key=forward_key, forward_entry=None if forward is None else forward[1],
        backward_entry=None if backward is None else backward[1],
        case_id=case_id, location=location, order=order, source=source, known_skip=skip,
        overflow_recorded=facts.nonfinite,
    )


def _oversized(key: str, source: Path, *entries) -> tuple[SkipReason, str] | None:
    """An entry past MAX_ENTRY_BYTES is never decoded again: its case is malformed."""
    for entry in entries:
        if entry is not None and entry[1].size > MAX_ENTRY_BYTES:
            return (SkipReason.MALFORMED_ENTRY,
                    f"{entry[1].size / 2**20:.0f} MiB of JSON in {source}, past the {MAX_ENTRY_BYTES // 2**20} MiB "
                    f"one API call can need; re-dump this API or delete the entry")
    return None


def _parse_key(key: str) -> tuple[str, str, int, str, str, str] | None:
    """(prefix, name, call index, direction, api, forward key), or None for a key msprobe never writes."""
    match = _MODULE_KEY.fullmatch(key)
    if match:
        name, index = match["name"], int(match["index"])
        return "Module", name, index, match["direction"], f"Module.{name}.{index}", f"Module.{name}.forward.{index}"
    match = _API_KEY.fullmatch(key)
    if match:
        api = f"{match['prefix']}.{match['name']}.{match['index']}"
        return match["prefix"], match["name"], int(match["index"]), match["direction"], api, f"{api}.forward"
    return None


def _backward_key(parsed: tuple) -> str:
    prefix, name, index, _, api, _ = parsed
    return f"Module.{name}.backward.{index}" if prefix == "Module" else f"{api}.backward"


def _known_skip(prefix: str, direction: str, forward_key: str, forward: Any,
                level: str | None = None) -> tuple[SkipReason, str] | None:
    """(reason, detail) for a case that cannot run, from its key and which entries exist; else None."""
    if prefix == "Module" or direction == "parameters_grad":
        if level == "mix":  # the API calls inside the module are in this dump too, each its own case
            return SkipReason.MODULE_ENTRY, ("a module-level entry, not one API call: this mix dump also holds the "
                                             "API calls inside the module, and each of them is judged")
        return SkipReason.MODULE_ENTRY, "module-level entries are not single API calls; dump with level L1 or mix"
    if prefix in _UNSUPPORTED_PREFIXES:
        return SkipReason.UNSUPPORTED_PREFIX, f"{prefix} APIs cannot be re-run as a single op"
    if direction == "backward" and forward is None:
        return (SkipReason.NO_FORWARD,
                f"its forward entry {forward_key} is not in dump.json, so its inputs are unknown; "
                "dump with data_mode 'all'")
    return None


def _decoded_skip(case: DumpCase, entries: CaseEntries) -> tuple[SkipReason, str] | None:
    """(reason, detail) for a case whose entries cannot be replayed (malformed, missing data)."""
    if case.prefix == "Distributed":  # a collective's entry is read by checks/collectives, which says its skips
        return None
    direction = case.direction
    of_forward = "" if direction == "forward" else f"forward entry {case.forward_key}: "
    try:
        call = entries.call
        _check_rebuildable(call.specs())
        if direction == "backward":
            of_forward = ""
            _check_rebuildable(entries.grads)
    except MalformedDescriptor as exc:
        return SkipReason.MALFORMED_ENTRY, f"{of_forward}{exc}; re-dump this API or delete the entry"
    except UnsupportedDescriptor as exc:
        return SkipReason.MISSING_DATA, f"{of_forward}{exc}"
    return None


def _check_rebuildable(specs) -> None:
    for spec in iter_specs(tuple(specs)):
        require_rebuildable(spec)


def recorded_nonfinite(case: DumpCase) -> bool:
    """Whether the dump's statistics show an inf or nan in what this case compares: the forward's
    outputs, or for a backward case the input gradients. Read from dump.json alone, at collection."""
    return case.overflow_recorded


def _has_nonfinite(value: Any, depth: int) -> bool:
    # Plain loops: this runs for every case at collection, 100k times for a large dump.
    if depth > 32:  # dump.json is untrusted: its nesting is bounded here as in its decoding
        return False
    if isinstance(value, list):
        for item in value:
            if _has_nonfinite(item, depth + 1):
                return True
        return False
    if not isinstance(value, dict):
        return False
    if value.get("type") == "torch.Tensor":
        for name in _STATISTICS:
            number = value.get(name)
            if number.__class__ is float:
                if number - number != 0:  # inf - inf and nan - nan are nan
                    return True
            elif _nonfinite_number(number):
                return True
        return False
    for item in value.values():
        if (item.__class__ is dict or item.__class__ is list) and _has_nonfinite(item, depth + 1):
            return True
    return False


_STATISTICS = ("Max", "Min", "Mean", "Norm")


def _nonfinite_number(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("inf", "-inf", "+inf", "infinity", "-infinity", "nan")
    return isinstance(value, float) and not math.isfinite(value)
