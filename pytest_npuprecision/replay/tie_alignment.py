"""Top-k selections that a fair kernel may make otherwise: a pick between tied candidates accepted, and
the golden realigned to it before judging.

A gating op ranks experts by computed scores (a softmax or sigmoid, plus a bias). Where two experts'
exact scores lie within the kernel's rounding of each other, a fair kernel may select either, or list
them in either order, and a bit-exact check of the indices would be a false alarm. So, row by row,
where the device's indices differ from the golden's, the device's choice is accepted when at every
rank its expert's golden (float64) score is the golden's own expert's within the tolerance below; the
golden's indices then become the device's, and its values the golden's values at those indices, so
the values are still judged against float64. A row where the device picked an expert that scores
clearly lower is left alone, and its indices fail. What the harness knows of each op (which outputs
are selected, the golden's scores) is its FusedOp record's ``selection``. The baseline is left as it is.

An op may return the indices alone (npu_lightning_indexer: int32 key positions, -1 where a causal row
has fewer keys than places, a set whose order the op does not promise). Its tie is then sized by the
rounding of the dtype the kernel may hold its scores in (the selection's ``score_dtype``, read from the
arguments as the device got them), its pads must match the golden's exactly, and an unordered
selection's rows are compared best score first, so a reordering of a fair set passes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import torch

from ..ops import op_record

# A score is a few correctly rounded steps from the inputs: an exp or sigmoid, the softmax's shared
# division (which moves every candidate of a row alike, so it cannot reorder them), a bias added. A
# fair kernel may also hold the scores in the output's dtype. Each step errs by at most a unit of
# rounding of the terms' size, so two candidates within TIE_UNITS units of the output dtype's
# rounding of |norm| + |bias| may be ranked either way; a wider gap is a wrong pick.
TIE_UNITS = 4
# An index row's filler where fewer candidates qualify than it has places (npu_lightning_indexer's
# causal rows): the device must pad exactly where the golden does.
PAD = -1


def tie_aligned(op, outputs: Sequence, golden_arguments: Callable[[], tuple[tuple, dict]],
                device_arguments: tuple[tuple, dict] | None = None) -> list:
    """The outputs (runner.RunOutput) of ``op`` (ops.ResolvedOp) with the golden's selection realigned
    to the device's where the device picked among tied candidates. golden_arguments: the call's
    arguments as the golden got them (float64), computed only when the indices differ. device_arguments:
    (args, kwargs) as the device got them, which size the tie of a selection with no values output."""
    fused = op_record(op.base_name).reference
    selection = None if fused is None else fused.selection
    if selection is None:
        return list(outputs)
    by_name = {o.name: o for o in outputs}
    indices_name = f"output.{selection.indices}"
    values_name = None if selection.values is None else f"output.{selection.values}"
    if indices_name not in by_name or (values_name is not None and values_name not in by_name):
        return list(outputs)
    if values_name is None and device_arguments is None:  # no dtype to size a tie with
        return list(outputs)
    indices = by_name[indices_name]
    device, golden = indices.actual.long(), indices.golden.long().to(indices.actual.device)
    if torch.equal(device, golden):
        return list(outputs)
    args, kwargs = golden_arguments()
    ranked = selection.scores(*args, **kwargs)
    if ranked is None:  # the call selects nothing (its indices come from a table)
        return list(outputs)
    score, magnitude = (t.detach().to(device.device) for t in ranked)
    unit = _unit(by_name[values_name].actual.dtype if values_name is not None else
                 selection.score_dtype(*device_arguments[0], **device_arguments[1]))
    accepted = tied_rows(device, golden, score, magnitude, unit, selection.ordered)
    if not accepted.any():
        return list(outputs)
    chosen = torch.where(accepted.unsqueeze(-1), device, golden)
    realigned = {indices_name: replace(indices, golden=chosen.to(indices.golden.dtype).to(indices.golden.device))}
    if values_name is not None:
        values = by_name[values_name]
        at_choice = selection.values_at(chosen.clamp(0, score.shape[-1] - 1).to(args_device(args)), *args, **kwargs)
        realigned[values_name] = replace(values, golden=torch.where(accepted.unsqueeze(-1).to(values.golden.device),
                                                                    at_choice.detach().to(values.golden), values.golden))
    return [realigned.get(o.name, o) for o in outputs]


def tied_rows(device: torch.Tensor, golden: torch.Tensor, score: torch.Tensor, magnitude: torch.Tensor,
              unit: float, ordered: bool = True) -> torch.Tensor:
    """Per row (all dims but the last), whether the device's selection differs from the golden's and is
    as good: padded (PAD) in the golden's places, valid distinct indices elsewhere, whose golden scores
    match the golden's own rank by rank, within TIE_UNITS * unit * the larger magnitude. An unordered
    selection (a set) is compared best score first."""
    candidates = score.shape[-1]
    pad = golden == PAD
    valid = ((device == PAD) == pad) & _in_range(device, candidates) & _in_range(golden, candidates)
    places = torch.arange(device.shape[-1], device=device.device)
    ids = torch.sort(torch.where(pad, -2 - places, device), -1).values  # pads never repeat one another
    distinct = (ids[..., 1:] != ids[..., :-1]).all(-1)
    picked, own = device.clamp(0, candidates - 1), golden.clamp(0, candidates - 1)
    mine = picked, score.gather(-1, picked), magnitude.gather(-1, picked)
    theirs = own, score.gather(-1, own), magnitude.gather(-1, own)
    if not ordered:
        mine, theirs = _best_first(pad, *mine), _best_first(pad, *theirs)
    gap = (mine[1] - theirs[1]).abs()
    size = torch.maximum(mine[2], theirs[2])
    close = (gap <= TIE_UNITS * unit * size) | (mine[0] == theirs[0])  # -inf against -inf is nan: not close
    return valid.all(-1) & distinct & close.all(-1) & (device != golden).any(-1)


def _in_range(indices: torch.Tensor, candidates: int) -> torch.Tensor:
    return (indices == PAD) | ((indices >= 0) & (indices < candidates))


def _best_first(pad: torch.Tensor, index: torch.Tensor, score: torch.Tensor, size: torch.Tensor):
    """(index, score, size) of each row reordered by score, best first, and its pads last (two stable sorts)."""
    by_score = torch.sort(score, dim=-1, descending=True, stable=True).indices
    order = by_score.gather(-1, torch.sort(pad.gather(-1, by_score).long(), dim=-1, stable=True).indices)
    return index.gather(-1, order), score.gather(-1, order), size.gather(-1, order)


def _unit(dtype: torch.dtype) -> float:
    """The output dtype's unit of rounding (half its epsilon)."""
    return torch.finfo(dtype).eps / 2 if dtype.is_floating_point else torch.finfo(torch.float32).eps / 2


def args_device(args: Sequence[Any]) -> torch.device:
    """Where the golden's arguments are: the first tensor's device (the CPU without one)."""
    return next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
