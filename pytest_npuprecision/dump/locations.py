"""Where msprobe dumps are: the dump.json files under a path given on the command line, their labels,
and the step and rank their folders name. Plain paths, no tensor and no JSON: the xdist controller
checks the --npu-precision paths with this alone.

A dump root holds ``step<N>/rank<R>/dump.json`` (or ``proc<PID>`` without a rank).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

DATA_DIR_NAME = "dump_tensor_data"
_STEP_DIR = re.compile(r"step(\d+)")
_RANK_DIR = re.compile(r"(rank|proc)(\d*)")


@dataclass(frozen=True)
class DumpSource:
    """One dump.json found under a path given on the command line, and its place there."""

    path: Path
    label: str  # the case-id prefix: "mlp_tensor/step0/rank0" under examples/dumps, "step0/rank0" for one dump


def is_dump_part(folder: Path) -> bool:
    """Whether a folder is part of an msprobe dump: a step or rank folder, or one that holds a dump.json or
    step folders."""
    if _STEP_DIR.fullmatch(folder.name) or _RANK_DIR.fullmatch(folder.name):
        return True
    try:
        return (folder / "dump.json").is_file() or any(
            _STEP_DIR.fullmatch(child.name) and child.is_dir() for child in folder.iterdir())
    except OSError:
        return False


def find_dump_files(path: Path | str) -> list[Path]:
    """Every dump.json at or under ``path``, in natural order (step2 before step10)."""
    return [source.path for source in find_dumps(path)]


def find_dumps(path: Path | str) -> list[DumpSource]:
    """Every dump.json at or under ``path`` with its label, in natural order (step2 before step10).

    Symbolic links to folders are not followed, so a link out of the dump or a loop inside it adds
    nothing; a dump.json that is itself a link out of ``path`` is found here and refused by load_dump.
    """
    path = Path(path)
    if path.is_file():
        return [DumpSource(path, _label(Path(), path))]
    if not path.is_dir():
        raise FileNotFoundError(
            f"dump path {str(path)!r} does not exist; pass a dump.json or a folder that contains one"
        )
    found = []
    for root, dirs, files in os.walk(path):  # followlinks=False: links to folders are not entered
        dirs[:] = [d for d in dirs if d != DATA_DIR_NAME]  # thousands of tensor files, never a dump.json
        if "dump.json" in files:
            found.append(Path(root) / "dump.json")
    found.sort(key=lambda p: _natural_key(p.relative_to(path)))
    return [DumpSource(p, _label(p.parent.relative_to(path), p)) for p in found]


def holds_tensor_files(dump_json: Path) -> bool | None:
    """Whether the tensor folder beside ``dump_json`` holds a file (a tensor dump's does, a statistics
    dump's has none); None where the folder cannot be read (it is absent, say)."""
    try:
        with os.scandir(Path(dump_json).parent / DATA_DIR_NAME) as entries:
            return any(entry.is_file() for entry in entries)
    except OSError:
        return None


def dump_location(path: Path) -> tuple[int | None, int | None, int | None, str]:
    """(step, rank, pid, "step0/rank0") of a dump.json, from the folders it sits in."""
    folder = path.parent
    step = rank = pid = None
    parts: list[str] = []
    match = _RANK_DIR.fullmatch(folder.name)
    if match:
        parts.append(folder.name)
        number = int(match[2]) if match[2] else None
        rank, pid = (number, None) if match[1] == "rank" else (None, number)
        folder = folder.parent
    match = _STEP_DIR.fullmatch(folder.name)
    if match:
        parts.insert(0, folder.name)
        step = int(match[1])
    return step, rank, pid, "/".join(parts)


def _label(relative: Path, path: Path) -> str:
    """The folders between the given path and the dump, with the dump's step and rank always in."""
    location = dump_location(path)[3]
    tail = [part for part in location.split("/") if part]
    head = list(relative.parts)
    while head and tail and head[-1] in tail:
        head.pop()
    return "/".join(head + tail)


def _natural_key(relative: Path) -> tuple:
    return tuple(
        tuple(int(chunk) if chunk.isdigit() else chunk for chunk in re.split(r"(\d+)", part))
        for part in relative.parts
    )
