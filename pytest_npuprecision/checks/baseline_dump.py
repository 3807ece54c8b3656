"""A second dump as the baseline: a GPU's dump of the same model, judged offline as the device's is.
A statistics dump pairs too: its entries are judged by their statistics (checks/statistics/).

msprobe's ``compare`` sets the NPU's output of each API against the GPU's, which mixes the API's own
error with everything that diverged upstream. Here each side is judged against the float64 golden of
its own recorded inputs, so upstream divergence cancels, and the benchmark standard compares the two
errors in units of each element's error bound. The baseline's side of a case is its partner entry
(checks/dump_pairing.py) judged as ``--npu-precision-device dumped`` judges an entry; checks/case_run.py
runs it and hands its metrics to the benchmark standard, as a recorded baseline's are.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..dump import DumpFile, find_dumps, holds_tensor_files, load_dump
from .dump_pairing import DumpPairing


class BaselineDumpError(ValueError):
    """The baseline dump cannot be used: the message names it and the fix."""


@dataclass(frozen=True)
class BaselineDump:
    path: Path
    framework: str | None
    device: str | None  # where its dump.json names one; msprobe's do not
    pairing: DumpPairing = field(compare=False)
    # Its dump.json files that recorded no tensor files (statistics dumps): their entries pair by statistics.
    statistics: tuple[Path, ...] = ()

    @property
    def label(self) -> str:
        """``gpu_dump (a pytorch dump, 2 dump.json files)``: how headers and records name it."""
        count = len(self.pairing.dumps)
        on = f" taken on {self.device}" if self.device else ""
        return (f"{self.path.name or self.path} (a {self.framework or 'framework-unnamed'} dump{on}, "
                f"{count} dump.json file{'s' if count != 1 else ''})")

    def describe(self) -> dict[str, Any]:
        """The baseline dump as run.json and the reports name it."""
        return {"path": str(self.path), "framework": self.framework,
                "device": self.device or "not recorded in its dump.json",
                "dumps": [str(dump.path) for dump in self.pairing.dumps],
                "statistics_dumps": [str(path) for path in self.statistics]}

    @classmethod
    def load(cls, path: Path | str) -> "BaselineDump":
        path = Path(path)
        sources = find_dumps(path)
        if not sources:
            raise BaselineDumpError(f"--npu-precision-baseline {str(path)!r} is a folder with no dump.json: give an "
                                    f"msprobe dump (a dump root, step or rank folder), a file written by "
                                    f"--npu-precision-record, a device, or none")
        dumps = [load_dump(source.path, label=source.label, root=path) for source in sources]
        broken = [dump for dump in dumps if dump.error]
        if broken:
            raise BaselineDumpError(f"--npu-precision-baseline {str(path)!r}: {broken[0].error}")
        framework = _one((dump.framework for dump in dumps))
        device = _one((dump.device for dump in dumps))
        statistics = tuple(dump.path for dump in dumps if not _holds_tensors(dump))
        return cls(path, framework, device, DumpPairing(dumps), statistics)


def is_dump_path(value: str) -> bool:
    """A folder, or a file named dump.json: a dump. Any other file, and a folder named like a record
    (``gpu.json/``, a mistake the record's reader names), is a recorded baseline."""
    name = os.path.basename(os.path.normpath(value))
    return name == "dump.json" or (os.path.isdir(value) and not name.endswith(".json"))


def _holds_tensors(dump: DumpFile) -> bool:
    if dump.task == "statistics":
        return False
    found = holds_tensor_files(dump.path)
    return not dump.cases if found is None else found  # an empty dump holds nothing to judge, and nothing to refuse


def _one(values) -> str | None:
    found = sorted({value for value in values if value})
    return ", ".join(found) if found else None
