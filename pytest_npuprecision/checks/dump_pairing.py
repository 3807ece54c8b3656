"""Pairing the entries of two dumps of the same model: an NPU dump's calls with a GPU dump's.

Entries pair by step, rank, API name, call index and direction: the dump.json key within the dump
of the same step and rank. The index is built once from the keys collection already holds (no
entry is decoded); whether two paired calls took arguments of the same shapes and dtypes is told
when the case runs, from their descriptors (``argument_difference``), and a pair whose arguments
differ is no pair.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..dump import DescriptorError, DumpCase, DumpFile, TensorSpec, decode_call, decode_value, dump_location, iter_specs


@dataclass(frozen=True)
class Partner:
    """A device case's partner in the baseline dump, with the folder its tensors are in."""

    case: DumpCase
    dump: DumpFile


class DumpPairing:
    """The baseline dump's cases, found by the device case's place (label, else step and rank) and key."""

    def __init__(self, dumps: Iterable[DumpFile]):
        self.dumps = tuple(dumps)
        self._by_label: dict[str, dict[str, Partner]] = {}
        by_place: dict[tuple, list[str]] = {}
        for dump in self.dumps:
            self._by_label[dump.location] = {case.key: Partner(case, dump) for case in dump.cases}
            by_place.setdefault((dump.step, dump.rank), []).append(dump.location)
        # A step and rank that one baseline dump alone holds pairs whatever folders lead to it; a dump without
        # a rank (proc<PID>, a process id that differs from run to run) pairs by its step where it is alone.
        self._by_place = {place: labels[0] for place, labels in by_place.items() if len(labels) == 1}

    def partner(self, case: DumpCase) -> Partner | None:
        """The baseline's case of the same step, rank and key as ``case``; None where it has none."""
        entries = self._entries_of(case)
        return None if entries is None else entries.get(case.key)

    def holds_place_of(self, case: DumpCase) -> bool:
        """Whether the baseline holds a dump of ``case``'s step and rank at all."""
        return self._entries_of(case) is not None

    def baseline_only(self, device: DumpFile) -> list[DumpCase]:
        """The baseline's cases of ``device``'s step and rank that the device dump does not hold, in order."""
        entries = self._entries(device.location, (device.step, device.rank)) or {}
        keys = {case.key for case in device.cases}
        return [partner.case for key, partner in entries.items() if key not in keys]

    def _entries_of(self, case: DumpCase) -> dict[str, Partner] | None:
        return self._entries(case.case_id.rpartition("::")[0], dump_location(case.source)[:2])

    def _entries(self, location: str, place: tuple) -> dict[str, Partner] | None:
        found = self._by_label.get(location)
        if found is None:
            label = self._by_place.get(place)
            found = None if label is None else self._by_label[label]
        return found


def argument_difference(case: DumpCase, partner: DumpCase) -> str | None:
    """How the two calls' arguments differ in kind, shape or dtype; None where they agree."""
    try:
        ours = _signature(case)
        theirs = _signature(partner)
    except DescriptorError as exc:  # the case's own run reports a malformed entry; here it only unpairs
        return f"an argument cannot be read ({exc})"
    for where in list(ours) + [w for w in theirs if w not in ours]:
        if ours.get(where) != theirs.get(where):
            return f"{where} is {ours.get(where, 'absent')} here but {theirs.get(where, 'absent')} in the baseline dump"
    return None


def _signature(case: DumpCase) -> dict[str, str]:
    """Each tensor argument's dtype and shape by its place; for a backward case, its gradients' too."""
    call = decode_call(case.forward, case.name)
    shown = {spec.where: _shown(spec) for spec in call.specs()}
    if case.direction == "backward" and isinstance(case.backward, dict):
        grads = decode_value(case.backward.get("input"), "grad_outputs")
        shown.update({f"grad_outputs {i}": _shown(spec) for i, spec in enumerate(iter_specs(grads))})
    return shown


def _shown(spec: TensorSpec) -> str:
    return f"{str(spec.dtype).removeprefix('torch.')}{list(spec.shape)}"
