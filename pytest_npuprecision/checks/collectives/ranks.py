"""Where a collective's other ranks are: the dump.json files of one step folder, by rank.

A collective case reads the same key from every rank folder of its step (``<root>/step<S>/rank<R>/``):
msprobe numbers each API's calls per process and restarts at each step, so the keys line up across ranks.
Only dumps collected from the paths the user gave are read; a rank folder that sits beside them on disk but
was not given makes the case skip, naming the folder to pass. No key or value in a dump chooses a file:
the ranks are the folders, the key is the case's own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ...dump import DescriptorError, DumpCase, DumpFile, EntryUnreadable, dump_location
from .calls import CollectiveSkip, decode_collective
from .fused import FUSED


@dataclass(frozen=True)
class RankEntry:
    """One rank's entry of a key, and the folder its tensors are in."""

    rank: int
    case: DumpCase
    data_dir: Path


@dataclass
class StepRanks:
    """The dumps of one step folder, by rank, and what they say of the world's size."""

    folder: Path
    dumps: dict[int, DumpFile]
    _by_key: dict[int, dict[str, DumpCase]] = field(default_factory=dict, repr=False)
    _world: tuple[int, str] | None = field(default=None, repr=False)
    _on_disk: set[int] | None = field(default=None, repr=False)

    def entry(self, rank: int, key: str) -> RankEntry | None:
        dump = self.dumps.get(rank)
        if dump is None:
            return None
        cases = self._by_key.get(rank)
        if cases is None:
            cases = self._by_key[rank] = {case.key: case for case in dump.cases
                                          if case.prefix == "Distributed" or case.name in FUSED}
        case = cases.get(key)
        return None if case is None else RankEntry(rank, case, dump.data_dir)

    def default_group(self) -> tuple[int, ...]:
        """Every rank of the step, 0 to N - 1; CollectiveSkip where the dump does not hold them all."""
        if self._on_disk is None:
            self._on_disk = _rank_folders(self.folder)
        on_disk, given = self._on_disk, set(self.dumps)
        absent = sorted(on_disk - given)
        if absent:
            raise CollectiveSkip("ranks-missing", f"the rank folder(s) {shown_ranks(absent)} of {self.folder} were "
                                                  f"not given: pass {self.folder} or the dump root, so that every "
                                                  f"rank's entry can be read")
        ranks = sorted(given)
        world, evidence = self.world()
        if ranks != list(range(len(ranks))) or world > len(ranks):
            raise CollectiveSkip("ranks-missing", f"{self.folder} holds rank folder(s) {shown_ranks(ranks)}, but the "
                                                  f"job had {max(world, ranks[-1] + 1)} ranks "
                                                  f"({evidence or 'the rank numbers'}): dump every rank (msprobe's "
                                                  f"\"rank\": []) to judge a collective of the default group")
        return tuple(ranks)

    def world(self) -> tuple[int, str]:
        """The most ranks any default-group call of the step shows (a gather's list length), and which call
        shows it; (0, "") where none does."""
        if self._world is None:
            found = (0, "")
            for rank, dump in sorted(self.dumps.items()):
                for case in dump.cases:
                    if case.prefix == "Distributed" and case.direction == "forward":
                        size = _shown_size(case)
                        if size > found[0]:
                            found = (size, f"{case.key} of rank {rank} spans {size}")
            self._world = found
        return self._world


class DumpIndex:
    """Every dump.json a process collected, found again by its step folder."""

    def __init__(self) -> None:
        self._steps: dict[Path, StepRanks] = {}

    def add(self, dump: DumpFile) -> None:
        if dump.rank is None or dump.error:
            return
        folder = dump.path.parent.parent
        step = self._steps.setdefault(folder, StepRanks(folder, {}))
        step.dumps[dump.rank] = dump

    def step_of(self, case: DumpCase) -> StepRanks | None:
        return self._steps.get(case.source.parent.parent)


def _shown_size(case: DumpCase) -> int:
    """How many ranks a call on the default group shows (a gather's list length); 0 where it shows none or
    cannot be read (its own case says why). An explicit group says only that its own ranks exist: its
    cases check that themselves, and one entry's wild group does not silence the step."""
    try:
        call = decode_collective(case.name, case.forward)
    except (CollectiveSkip, DescriptorError, EntryUnreadable, TypeError, ValueError):
        return 0
    return 0 if call.group is not None else call.implied_size() or 0


def _rank_folders(step: Path) -> set[int]:
    """The rank<N> folders beside each other in a step folder that hold a dump.json (listed, never read)."""
    found = set()
    try:
        with os.scandir(step) as entries:
            for entry in entries:
                dump_json = Path(entry.path) / "dump.json"
                rank = dump_location(dump_json)[1]
                if rank is not None and entry.is_dir(follow_symlinks=False) and os.path.isfile(dump_json):
                    found.add(rank)
    except OSError:
        pass
    return found


def shown_ranks(ranks) -> str:
    """'0, 1, 2': up to 8 ranks, then how many more."""
    ranks = list(ranks)
    shown = ", ".join(str(rank) for rank in ranks[:8])
    return shown + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
