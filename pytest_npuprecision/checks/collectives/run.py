"""One rank's collective case: its recorded result against the float64 golden of every participating rank's
recorded contribution to the same call (the same key in each rank folder of the step).

Offline by nature, whatever the device: a collective cannot be re-run alone, and the dump holds the only run
there is. Tensors are read on demand from each rank's folder, within the case's memory budget.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch

from ...common.memory_sizes import format_size
from ...common.shown_text import shown_key
from ...dump.descriptors import DescriptorError, DumpDataError, TensorSpec, iter_specs
from ...dump.dump_cases import DumpCase
from ...dump.locations import dump_location
from ...dump.tensor_files import load_tensor
from ...precision.error_profile import error_profile
from ...precision.verdict import Status
from ..judging import judge
from ..outcomes import CaseInputError, CaseResult, CaseSkipped, OutputVerdict
from .calls import CollectiveCall, CollectiveSkip, decode_collective, layout_of
from .definitions import Contribution, RanksDisagree, expected, sources
from .ranks import DumpIndex, RankEntry, StepRanks

_GOLDEN_BYTES = 8 + 8  # each element's float64 golden and its metrics' float64 work


def run_collective(case: DumpCase, settings, index: DumpIndex | None) -> CaseResult:
    """Judge one rank's collective entry; raise CaseSkipped or CaseInputError where it cannot be judged."""
    started = time.perf_counter()
    try:
        return _judged(case, settings, index, started)
    except CollectiveSkip as skip:
        raise CaseSkipped(skip.reason, f"{shown_key(case.key)}: {skip}") from None
    except DescriptorError as exc:
        raise CaseSkipped("malformed-entry", f"{shown_key(case.key)} ({case.source}): {exc}; re-dump this API or "
                                             f"delete the entry") from None
    except (RanksDisagree, DumpDataError) as exc:
        raise CaseInputError(f"{shown_key(case.key)} ({case.source}): {exc}") from None


def _judged(case: DumpCase, settings, index: DumpIndex | None, started: float) -> CaseResult:
    if case.direction != "forward":
        raise CollectiveSkip("no-reference", "msprobe records a collective forward only; no definition here judges "
                                             "its backward")
    layout = layout_of(case.name)
    call = decode_collective(case.name, case.forward)
    me = dump_location(case.source)[1]
    step = None if index is None else index.step_of(case)
    if me is None or step is None:
        raise CollectiveSkip("ranks-missing", f"its dump.json ({case.source}) is in no rank folder of a step "
                                              f"(step<S>/rank<R>/), so its call's other ranks cannot be found")
    group = _group(call, step, me)
    wanted = sources(call, group, me)
    peers = _entries(case, step, wanted)
    calls = {rank: _peer_call(case, call, peer) for rank, peer in peers.items()}
    _check_tensors(case, calls, call, settings.max_case_bytes)
    contributions = {rank: Contribution(calls[rank], _loaded(calls[rank].sent, peers[rank], case.key))
                     for rank in wanted}
    received = _loaded(call.received, RankEntry(me, case, step.dumps[me].data_dir), case.key)
    notes = _notes(call, group, me, wanted, settings)
    outputs = []
    for tensor in expected(layout, call, received, group, me, contributions):
        verdict = judge(tensor.actual, tensor.golden, op=case.key, standard=tensor.standard,
                        accumulation=tensor.accumulation, rules=settings.rules, notes=notes)
        profile = None if verdict.status is Status.PASS else error_profile(tensor.actual, tensor.golden)
        outputs.append(OutputVerdict(tensor.name, verdict, profile))
    return CaseResult(case, Status.worst(o.verdict.status for o in outputs), tuple(outputs), notes,
                      time.perf_counter() - started, 0.0)


def _group(call: CollectiveCall, step: StepRanks, me: int) -> tuple[int, ...]:
    """The call's ranks in group order: its recorded group, or every rank of the step."""
    if call.group is None:
        group = step.default_group()
        implied = call.implied_size()
        if implied is not None and implied != len(group):
            raise CollectiveSkip("ranks-missing", f"its shapes span {implied} ranks, but {step.folder} holds "
                                                  f"{len(group)}: dump every rank (msprobe's \"rank\": [])")
        return group
    absent = [rank for rank in call.group if rank not in step.dumps]
    if absent:
        raise CollectiveSkip("ranks-missing", f"its group spans ranks {list(call.group)[:16]}, and rank(s) "
                                              f"{absent[:8]} of it are not among the rank folders given under "
                                              f"{step.folder}")
    if me not in call.group:
        raise RanksDisagree(f"rank {me} records a call on the group {list(call.group)}, which does not hold it")
    implied = call.implied_size()
    if implied is not None and implied != len(call.group):
        raise RanksDisagree(f"its shapes span {implied} ranks, but its group holds {len(call.group)}")
    return call.group


def _entries(case: DumpCase, step: StepRanks, wanted: tuple[int, ...]) -> dict[int, RankEntry]:
    found = {}
    for rank in wanted:
        entry = step.entry(rank, case.key)
        if entry is None:
            raise CollectiveSkip("ranks-missing", f"rank {rank}'s dump ({step.dumps[rank].path}) holds no entry "
                                                  f"{shown_key(case.key)}: the ranks' calls do not line up (a "
                                                  f"rank that dumped a subset, or made another number of calls)")
        found[rank] = entry
    return found


def _peer_call(case: DumpCase, own: CollectiveCall, peer: RankEntry) -> CollectiveCall:
    """A rank's call of the same key, which must be the same collective on the same group with the same op."""
    if peer.case is case:
        return own
    try:
        theirs = decode_collective(case.name, peer.case.forward)
    except (CollectiveSkip, DescriptorError) as exc:
        raise RanksDisagree(f"rank {peer.rank}'s entry of it ({peer.case.source}) cannot be read: {exc}") from None
    for what in ("op", "group", "root", "root_index"):
        if getattr(theirs, what) != getattr(own, what):
            raise RanksDisagree(f"rank {peer.rank}'s entry of it ({peer.case.source}) records {what} "
                                f"{getattr(theirs, what)!r}, this rank's {getattr(own, what)!r}: the ranks' calls "
                                f"do not line up")
    return theirs


def _check_tensors(case: DumpCase, calls: dict[int, CollectiveCall], own: CollectiveCall,
                   budget: int | None) -> None:
    """Every tensor the judgement reads has a file (a statistics dump has none), and all of them fit the budget."""
    specs = [spec for rank_call in calls.values() for spec in iter_specs(rank_call.sent)]
    specs += list(iter_specs(own.received))
    if any(spec.data_name is None and spec.numel for spec in specs):
        raise CollectiveSkip("statistics-dump", "the ranks' tensors are not saved (a statistics dump records only "
                                                "their Max, Min, Mean and Norm), and a collective is judged from "
                                                "the tensors each rank sent: dump it with task 'tensor'")
    need = sum(spec.numel * (spec.dtype.itemsize + _GOLDEN_BYTES) for spec in specs)
    if budget is not None and need > budget:
        raise CaseSkipped("too-large", f"{shown_key(case.key)}: the tensors of its {len(calls)} rank(s) need about "
                                       f"{format_size(need)}, past the budget of {format_size(budget)}; raise "
                                       f"--npu-precision-max-case-memory to run it")


def _loaded(value: Any, entry: RankEntry, key: str) -> Any:
    """A decoded value with each tensor loaded from its rank's folder."""
    if isinstance(value, TensorSpec):
        if value.numel == 0:
            return torch.empty(value.shape, dtype=value.dtype)
        tensor = load_tensor(Path(entry.data_dir), value, f"rank {entry.rank}'s {key}")
        return tensor if isinstance(tensor, torch.Tensor) else torch.from_numpy(tensor)
    if isinstance(value, list):
        return [_loaded(item, entry, key) for item in value]
    return value


def _notes(call: CollectiveCall, group: tuple[int, ...], me: int, wanted: tuple[int, ...], settings) -> tuple[str, ...]:
    reduces = call.api in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base")
    what = f"{call.op} over {len(group)} ranks" if reduces else f"{call.api} over {len(group)} ranks"
    notes = [f"a collective, judged from the dump: rank {me}'s recorded result against the float64 golden of "
             f"rank(s) {_listed(wanted)}'s recorded inputs ({what}, group {_listed(group)})"]
    if settings.baseline is not None:
        notes.append("no baseline: a collective is judged from its ranks' recorded inputs alone")
    return tuple(notes)


def _listed(ranks: tuple[int, ...]) -> str:
    shown = ", ".join(str(rank) for rank in ranks[:8])
    return shown + (f" … ({len(ranks)} ranks)" if len(ranks) > 8 else "")
