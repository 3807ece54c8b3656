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
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Sequence

import torch

from ..ops.catalogue import op_record

# A score is a few correctly rounded steps from the inputs: an exp or sigmoid, the softmax's shared
# division (which moves every candidate of a row alike, so it cannot reorder them), a bias added. A
# fair kernel may also hold the scores in the output's dtype. Each step errs by at most a unit of
# rounding of the terms' size, so two candidates within TIE_UNITS units of the output dtype's
# rounding of |norm| + |bias| may be ranked either way; a wider gap is a wrong pick.
TIE_UNITS = 4


def tie_aligned(op, outputs: Sequence, golden_arguments: Callable[[], tuple[tuple, dict]]) -> list:
    """The outputs (runner.RunOutput) of ``op`` (ops.ResolvedOp) with the golden's selection realigned
    to the device's where the device picked among tied candidates. golden_arguments: the call's
    arguments as the golden got them (float64), computed only when the indices differ."""
    fused = op_record(op.base_name).reference
    selection = None if fused is None else fused.selection
    by_name = {o.name: o for o in outputs}
    values_name, indices_name = (None, None) if selection is None else \
        (f"output.{selection.values}", f"output.{selection.indices}")
    if values_name not in by_name or indices_name not in by_name:
        return list(outputs)
    values, indices = by_name[values_name], by_name[indices_name]
    device, golden = indices.actual.long(), indices.golden.long().to(indices.actual.device)
    if torch.equal(device, golden):
        return list(outputs)
    args, kwargs = golden_arguments()
    ranked = selection.scores(*args, **kwargs)
    if ranked is None:  # the call selects nothing (its indices come from a table)
        return list(outputs)
    score, magnitude = (t.detach().to(device.device) for t in ranked)
    accepted = tied_rows(device, golden, score, magnitude, _unit(values.actual.dtype))
    if not accepted.any():
        return list(outputs)
    chosen = torch.where(accepted.unsqueeze(-1), device, golden)
    at_choice = selection.values_at(chosen.clamp(0, score.shape[-1] - 1).to(args_device(args)), *args, **kwargs)
    realigned = {
        indices_name: replace(indices, golden=chosen.to(indices.golden.dtype).to(indices.golden.device)),
        values_name: replace(values, golden=torch.where(accepted.unsqueeze(-1).to(values.golden.device),
                                                        at_choice.detach().to(values.golden), values.golden)),
    }
    return [realigned.get(o.name, o) for o in outputs]


def tied_rows(device: torch.Tensor, golden: torch.Tensor, score: torch.Tensor, magnitude: torch.Tensor,
              unit: float) -> torch.Tensor:
    """Per row (all dims but the last), whether the device's selection differs from the golden's and is
    as good: valid, distinct indices whose golden scores match the golden's own rank by rank, within
    TIE_UNITS * unit * the larger magnitude."""
    candidates = score.shape[-1]
    valid = ((device >= 0) & (device < candidates) & (golden >= 0) & (golden < candidates)).all(-1)
    ordered = torch.sort(device, -1).values
    distinct = (ordered[..., 1:] != ordered[..., :-1]).all(-1)
    picked, own = device.clamp(0, candidates - 1), golden.clamp(0, candidates - 1)
    gap = (score.gather(-1, picked) - score.gather(-1, own)).abs()
    size = torch.maximum(magnitude.gather(-1, picked), magnitude.gather(-1, own))
    close = (gap <= TIE_UNITS * unit * size) | (picked == own)  # -inf against -inf is nan: not close
    return valid & distinct & close.all(-1) & (device != golden).any(-1)


def _unit(dtype: torch.dtype) -> float:
    """The output dtype's unit of rounding (half its epsilon)."""
    return torch.finfo(dtype).eps / 2 if dtype.is_floating_point else torch.finfo(torch.float32).eps / 2


def args_device(args: Sequence[Any]) -> torch.device:
    """Where the golden's arguments are: the first tensor's device (the CPU without one)."""
    return next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
