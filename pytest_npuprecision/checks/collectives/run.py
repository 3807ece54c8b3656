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

from ...common import format_size, shown_key
from ...dump import DescriptorError, DumpCase, DumpDataError, TensorSpec, dump_location, iter_specs, load_tensor
from ...precision import Status, error_profile
from ..judging import judge
from ..outcomes import CaseInputError, CaseResult, CaseSkipped, OutputVerdict
from .calls import CollectiveCall, CollectiveSkip, decode_collective, layout_of
from .definitions import Contribution, Expected, RanksDisagree, expected, sources
from .fused import FUSED, FusedCall, decode_fused, fused_expected
from .ranks import DumpIndex, RankEntry, StepRanks, shown_ranks

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
    me = dump_location(case.source)[1]
    step = None if index is None else index.step_of(case)
    if me is None or step is None:
        raise CollectiveSkip("ranks-missing", f"its dump.json ({case.source}) is in no rank folder of a step "
                                              f"(step<S>/rank<R>/), so its call's other ranks cannot be found")
    tensors, notes = (_fused(case, step, me, settings) if case.name in FUSED else
                      _collective(case, step, me, settings))
    if settings.baseline is not None:
        notes += ("no baseline: a collective is judged from its ranks' recorded inputs alone",)
    outputs = []
    for tensor in tensors:
        verdict = judge(tensor.actual, tensor.golden, op=case.key, standard=tensor.standard,
                        accumulation=tensor.accumulation, rules=settings.rules, notes=notes)
        profile = None if verdict.status is Status.PASS else error_profile(tensor.actual, tensor.golden)
        outputs.append(OutputVerdict(tensor.name, verdict, profile))
    return CaseResult(case, Status.worst(o.verdict.status for o in outputs), tuple(outputs), notes,
                      time.perf_counter() - started, 0.0)


def _collective(case: DumpCase, step: StepRanks, me: int, settings) -> tuple[list[Expected], tuple[str, ...]]:
    """A torch.distributed collective: its definition over the ranks it names."""
    layout = layout_of(case.name)
    call = decode_collective(case.name, case.forward)
    group = _group(call, step, me)
    wanted = sources(call, group, me)
    peers = _entries(case, step, wanted)
    calls = {rank: _peer_call(case, call, peer) for rank, peer in peers.items()}
    specs = [spec for c in calls.values() for spec in iter_specs(c.sent)] + list(iter_specs(call.received))
    _check_tensors(case, specs, len(calls), settings.max_case_bytes)
    contributions = {rank: Contribution(calls[rank], _loaded(calls[rank].sent, peers[rank], case.key))
                     for rank in wanted}
    received = _loaded(call.received, RankEntry(me, case, step.dumps[me].data_dir), case.key)
    what = f"{call.op if call.reduces else call.api} over {len(group)} ranks"
    notes = (f"a collective, judged from the dump: rank {me}'s recorded result against the float64 golden of "
             f"rank(s) {shown_ranks(wanted)}'s recorded inputs ({what}, group {shown_ranks(group)})",)
    return expected(layout, call, received, group, me, contributions), notes


def _fused(case: DumpCase, step: StepRanks, me: int, settings) -> tuple[list[Expected], tuple[str, ...]]:
    """A torch_npu matmul fused with a collective: its group is the ranks whose entry names the same hcom."""
    call = decode_fused(case.name, case.forward)
    step.default_group()  # every rank folder of the step given, or a skip that names the missing ones
    peers: dict[int, tuple[RankEntry, FusedCall]] = {}
    for rank in sorted(step.dumps):
        entry = step.entry(rank, case.key)
        if entry is not None:
            theirs = call if rank == me else _peer_fused(case, entry)
            if theirs.hcom == call.hcom:
                peers[rank] = (entry, theirs)
    if call.world_size is not None and len(peers) != call.world_size:
        raise CollectiveSkip("ranks-missing", f"{len(peers)} rank folder(s) of {step.folder} record {case.key} on "
                                              f"the communicator {call.hcom!r:.60}, whose world_size is "
                                              f"{call.world_size}: dump every rank of its group")
    group = tuple(peers)
    own = peers[me][0]
    gathers = case.name == "npu_all_gather_base_mm"
    specs = [theirs.x1 for _, theirs in peers.values()]
    specs += [call.x2] if gathers else [theirs.x2 for _, theirs in peers.values()]
    specs += [spec for spec in iter_specs(list(call.outputs)) if spec is not None]
    _check_tensors(case, specs + ([call.bias] if call.bias is not None else []), len(group), settings.max_case_bytes)
    x1s = [_loaded(theirs.x1, entry, case.key) for entry, theirs in peers.values()]
    x2s = [_loaded(call.x2, own, case.key)] * len(group) if gathers else \
        [_loaded(theirs.x2, entry, case.key) for entry, theirs in peers.values()]
    bias = None if call.bias is None else _loaded(call.bias, own, case.key)
    received = [_loaded(value, own, case.key) for value in call.outputs]
    notes = (f"a matmul fused with a collective, judged from the dump: rank {me}'s recorded result against the "
             f"float64 golden of ranks {shown_ranks(group)}'s recorded inputs (communicator {call.hcom!r:.60})",)
    return fused_expected(call, group.index(me), x1s, x2s, bias, received), notes


def _peer_fused(case: DumpCase, entry: RankEntry) -> FusedCall:
    try:
        return decode_fused(case.name, entry.case.forward)
    except (CollectiveSkip, DescriptorError) as exc:
        raise RanksDisagree(f"rank {entry.rank}'s entry of it ({entry.case.source}) cannot be read: {exc}") from None


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
        raise CollectiveSkip("ranks-missing", f"its group spans ranks {shown_ranks(call.group)}, and rank(s) "
                                              f"{shown_ranks(absent)} of it are not among the rank folders given "
                                              f"under {step.folder}")
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


def _check_tensors(case: DumpCase, specs: list[TensorSpec], ranks: int, budget: int | None) -> None:
    """Every tensor the judgement reads has a file (a statistics dump has none), and all of them fit the budget."""
    if any(spec.data_name is None and spec.numel for spec in specs):
        raise CollectiveSkip("statistics-dump", "the ranks' tensors are not saved (a statistics dump records only "
                                                "their Max, Min, Mean and Norm), and a collective is judged from "
                                                "the tensors each rank sent: dump it with task 'tensor'")
    need = sum(spec.numel * (spec.dtype.itemsize + _GOLDEN_BYTES) for spec in specs)
    if budget is not None and need > budget:
        raise CaseSkipped("too-large", f"{shown_key(case.key)}: the tensors of its {ranks} rank(s) need about "
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
