"""The files of one captured step and rank: dump.json (entries in call order), stack.json (each
forward call's Python stack), construct.json (empty: an API-level dump has no module tree)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .describe import TensorSink


class DumpWriter:
    def __init__(self, folder: Path, task: str, sink: TensorSink):
        self.folder = folder
        self.task = task
        self.sink = sink
        self.data: dict[str, Any] = {}
        self.stacks: list[tuple[str, list[str]]] = []

    def add(self, key: str, entry: dict, stack: list[str] | None) -> None:
        self.data[key] = entry
        if stack is not None:
            self.stacks.append((key, stack))

    def write(self) -> None:
        dump = {"task": self.task, "level": "L1", "framework": "pytorch",
                "dump_data_dir": str(self.sink.folder) if self.sink.folder is not None else None,
                "data": self.data}
        # json writes NaN and Infinity bare, as msprobe's files have them
        (self.folder / "dump.json").write_text(json.dumps(dump, indent=1))
        stacks = {str(i): [[key], lines] for i, (key, lines) in enumerate(self.stacks)}
        (self.folder / "stack.json").write_text(json.dumps(stacks, indent=1))
        (self.folder / "construct.json").write_text("{}")
