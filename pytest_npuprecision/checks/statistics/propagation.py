"""Two statistics dumps of the same step: whether a call's outputs part from its partner's beyond what their
inputs' parting explains.

A device's fair kernels part from a GPU's everywhere, and what one call does differently flows into every later
call, often magnified (a softmax turns a small change of its scores into a large relative one). So each output
statistic's parting is set against what could move it: the inputs' parting pushed through the op at inputs
like the recorded ones, plus each side's fair rounding of the output and of the statistic itself.

- How far the inputs part: each input's parting is estimated from its statistics' (the largest of its Max's
  and Min's movement, its Norm's, and its Mean's times sqrt(n), past what computing those statistics rounds),
  and taken as a spread of that size over every element.
- What that does to the outputs: the op runs in float64 on inputs made to the partner's statistics (its real
  tensors where the partner dump saved them), then again with each input moved by its estimated spread in
  random directions: the largest change of each output statistic, times DRIFT (and sqrt(K) where the output
  sums K terms: drift that is coherent along the sum adds K times, where random draws add sqrt(K) times); and
  once scaled and offset as far as its Norm and Mean allow, times SHIFTED. The larger is what the inputs
  explain.
- Fair rounding: the error bound of each output element (the error-bound standard's, from the op's
  accumulation) moves Max and Min by at most its largest value, the Mean by its mean, the Norm by its norm.

An output statistic that parts by more than that sum blames the call; one that parts within it is inherited.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...backends import Backend
from ...common import float_format, format_size
from ...dump import DescriptorError, DumpCase, DumpDataError, TensorSpec, materialize
from ...precision import error_bound, flat_term_norm
from ...ops import unsafe_argument
from ...replay import GoldenNotWide, OpExecutionError, RunOutput, case_bytes, run_call
from .summaries import STATISTICS, CallSummaries, Summary
from .verdicts import Finding, finding

# The inputs' estimated parting, moved through the op in random directions, explains up to this many times the
# largest change it made there: one sample of the parting's direction stands for every one it might take.
DRIFT = 8.0
DRAWS = 2
SHIFTED = 2.0


class NoPropagation(Exception):
    """The pair cannot be weighed by its statistics; the message says why."""


def parting_findings(case: DumpCase, partner: Any, ours: CallSummaries, theirs: CallSummaries, op: Any,
                     settings: Any, notes: list[str]) -> dict[str, list[Finding]]:
    """Per output name, one finding per statistic: how far it parts from the partner's over what may part it."""
    spreads = _input_spreads(ours, theirs)
    backward = case.direction == "backward"
    inputs = _replay_inputs(case, partner, op, settings)
    base = _run(op, inputs, inputs.args, inputs.kwargs, inputs.grad_outputs, backward, settings, case.seed)
    generator = torch.Generator().manual_seed(case.seed & 0x7FFFFFFF)
    shifts = _input_shifts(ours, theirs)

    def spread(where: str, tensor: torch.Tensor) -> torch.Tensor:
        return _spread(tensor, spreads.get(where, 0.0), generator)

    def shift(where: str, tensor: torch.Tensor) -> torch.Tensor:
        scale, offset = shifts.get(where, (0.0, 0.0))
        return (tensor.detach().double() * (1 + scale) + offset).requires_grad_(tensor.requires_grad)

    moved = [_run(op, inputs, *_moved_inputs(partner.entries, inputs, move), backward, settings, case.seed)
             for move in (spread,) * DRAWS]
    shifted = _run(op, inputs, *_moved_inputs(partner.entries, inputs, shift), backward, settings, case.seed)
    found: dict[str, list[Finding]] = {}
    for name, out in _matched(ours, base, backward).items():
        mine, partner_out = ours.output(name), theirs.output(name)
        if partner_out is None or mine.max is None or partner_out.max is None:
            continue
        others = [_output_named(run, out.name) for run in moved]
        found[name] = _parting(mine, partner_out, out, others, _output_named(shifted, out.name), notes)
    if not found:
        shapes = ", ".join(str(list(s.shape)) for s in ours.outputs)
        replayed = ", ".join(str(list(o.golden.shape)) for o in base if o.golden.is_floating_point())
        raise NoPropagation(f"none of its recorded outputs ({shapes or 'none'}) is one its replay computes "
                            f"({replayed or 'none'})" + (": msprobe records the gradients of the call's last "
                                                          "autograd node, which may be a reshape inside it"
                                                          if backward else ""))
    return found


def _replay_inputs(case: DumpCase, partner: Any, op: Any, settings: Any):
    """Inputs made to the partner's statistics (its tensors where it saved them), refused as a replay refuses them:
    an op that cannot run here, a call past the memory budget, an argument the allow-list refuses."""
    if op.func is None or op.unsupported:
        raise NoPropagation(f"{op.api_name} cannot run here ({op.unsupported or 'no callable'}), so how its inputs' "
                            f"parting moves its outputs is unknown")
    # The made-up inputs and one moved copy of them live at once, each with its float64 golden.
    need = 2 * case_bytes(partner.entries, direction=case.direction, baseline=False)
    if settings.max_case_bytes is not None and need > settings.max_case_bytes:
        raise NoPropagation(f"its replay needs about {format_size(need)}, past the budget of "
                            f"{format_size(settings.max_case_bytes)} (--npu-precision-max-case-memory)")
    try:
        inputs = materialize(partner.case, partner.data_dir, entries=partner.entries)
    except (DumpDataError, DescriptorError) as exc:
        raise NoPropagation(f"its partner's inputs cannot be made: {exc}") from None
    unsafe = unsafe_argument(op.base_name, inputs.args, inputs.kwargs)
    if unsafe is not None:
        raise NoPropagation(unsafe)
    return inputs


def input_spread(mine: Summary, theirs: Summary) -> float:
    """How far apart the two sides' elements are, from their statistics: a spread over every element of this size
    moves Max and Min by about it, the Norm by about it (its projection on the tensor) and the Mean by it over
    sqrt(n). What computing Mean and Norm rounds is no parting."""
    parts = [abs(mine.max - theirs.max), abs(mine.min - theirs.min)]
    for statistic, weight in (("Norm", 1.0), ("Mean", math.sqrt(max(mine.numel, 1)))):
        a, b = mine.value(statistic), theirs.value(statistic)
        if a is not None and b is not None:
            parts.append(weight * max(0.0, abs(a - b) - mine.slack(statistic) - theirs.slack(statistic)))
    return max(parts)


def _input_spreads(ours: CallSummaries, theirs: CallSummaries) -> dict[str, float]:
    spreads = {}
    for mine in ours.inputs:
        other = theirs.input(mine.name)
        if other is None or mine.max is None or other.max is None:
            continue
        if not (mine.finite and other.finite):
            raise NoPropagation(f"{mine.name} holds an inf or nan on one side, so how far the inputs part is unknown")
        if not mine.floating:
            if (mine.max, mine.min) != (other.max, other.min):
                raise NoPropagation(f"its integer input {mine.name} differs from its partner's (Max {mine.max:g}, "
                                    f"Min {mine.min:g} against {other.max:g}, {other.min:g}): another selection, "
                                    f"whose effect statistics cannot weigh")
            continue
        spreads[mine.name] = input_spread(mine, other)
    return spreads


def _spread(tensor: torch.Tensor, size: float, generator: torch.Generator) -> torch.Tensor:
    moved = tensor.detach().double()
    if size > 0 and moved.numel():
        moved = moved + size * torch.randn(moved.shape, generator=generator, dtype=torch.float64)
    return moved.requires_grad_(tensor.requires_grad)


def _input_shifts(ours: CallSummaries, theirs: CallSummaries) -> dict[str, tuple[float, float]]:
    """Each float input's parting read as a scale and an offset of the partner's: the Norm's relative change, and
    the Mean's change beyond that scale, each as large as the statistics allow once their own rounding is counted
    (a bfloat16 Mean rounded by msprobe hides a change its float32 output shows). Drift that builds up along a
    model is often this coherent, and then moves a Mean or a Norm downstream far more than a spread in random
    directions does."""
    shifts = {}
    for mine in ours.inputs:
        other = theirs.input(mine.name)
        if other is None or not mine.floating or None in (mine.norm, other.norm, mine.mean, other.mean) or \
                not other.norm:
            continue
        norm = mine.norm - other.norm
        scale = math.copysign(abs(norm) + mine.slack("Norm") + other.slack("Norm"), norm) / other.norm
        mean = mine.mean - other.mean - scale * other.mean
        shifts[mine.name] = (scale, math.copysign(abs(mean) + mine.slack("Mean") + other.slack("Mean"), mean))
    return shifts


def _moved_inputs(entries, inputs, move):
    """The arguments and output gradients with each float tensor moved by ``move(where, tensor)``, in float64."""
    call = entries.call
    grads = tuple(None if g is None else move(f"grad_outputs.{i}", g) for i, g in enumerate(inputs.grad_outputs))
    return _moved(call.args, inputs.args, move), _moved(call.kwargs, inputs.kwargs, move), grads


def _moved(specs, values, move):
    if isinstance(specs, TensorSpec) and isinstance(values, torch.Tensor) and values.is_floating_point():
        return move(specs.where, values)
    if isinstance(specs, (list, tuple)) and isinstance(values, (list, tuple)):
        return type(values)(_moved(s, v, move) for s, v in zip(specs, values))
    if isinstance(specs, dict) and isinstance(values, dict):
        return {k: _moved(specs.get(k), v, move) for k, v in values.items()}
    return values


def _run(op, inputs, args, kwargs, grads, backward: bool, settings: Any, seed: int):
    try:
        run = run_call(op, args, kwargs, device=Backend("cpu"), golden=settings.golden, backward=backward,
                       grad_outputs=grads if backward else None, requires_grad=inputs.requires_grad, seed=seed)
    except (OpExecutionError, GoldenNotWide) as exc:
        raise NoPropagation(f"its float64 replay on inputs made to its partner's statistics fails: {exc}") from None
    if run.error:
        raise NoPropagation(f"its float64 replay does not match the dump's outputs: {run.error}")
    return run.grads if backward else run.outputs


def _output_named(outputs, name: str) -> RunOutput | None:
    return next((o for o in outputs if o.name == name), None)


def _matched(ours: CallSummaries, outputs, backward: bool) -> dict[str, RunOutput]:
    """Each dumped output with the replay's output it is: by name forward; backward, the dump lists the input
    gradients by position and the replay by input, so each takes the next one of its shape."""
    if not backward:
        return {s.name: o for s in ours.outputs if (o := _output_named(outputs, s.name)) is not None
                and o.golden.is_floating_point() and tuple(o.golden.shape) == s.shape}
    free = [o for o in outputs if o.golden.is_floating_point()]
    matched = {}
    for summary in ours.outputs:
        index = next((i for i, o in enumerate(free) if tuple(o.golden.shape) == summary.shape), None)
        if index is not None:
            matched[summary.name] = free.pop(index)
    return matched


def statistics_of(tensor: torch.Tensor) -> dict[str, float]:
    flat = tensor.detach().double().reshape(-1)
    if not flat.numel():
        return dict.fromkeys(STATISTICS, 0.0)
    return {"Max": float(flat.max()), "Min": float(flat.min()), "Mean": float(flat.mean()),
            "Norm": float(torch.linalg.vector_norm(flat))}


def _rounding(out: RunOutput) -> dict[str, float]:
    """How far a fair kernel's output statistics may sit from the exact ones: through each element's error bound."""
    golden = out.golden.detach().double().reshape(-1)
    if out.accumulation is None or not golden.numel():
        return dict.fromkeys(STATISTICS, 0.0)
    acc, fmt = out.accumulation, float_format(out.actual.dtype)
    shape = tuple(out.golden.shape)
    rms = float(golden.square().mean().sqrt())
    bound = error_bound(golden.abs(), flat_term_norm(acc.term_norm, shape, golden.device, torch.float64),
                        flat_term_norm(acc.sensitivity, shape, golden.device, torch.float64), fmt,
                        acc.per_scale(fmt), rms, torch.float64, acc.input_share(fmt), acc.roundings)
    bound = torch.where(torch.isfinite(bound), bound, torch.zeros_like(bound))
    top = float(bound.max())
    return {"Max": top, "Min": top, "Mean": float(bound.mean()), "Norm": float(torch.linalg.vector_norm(bound))}


def _parting(mine: Summary, theirs: Summary, out: RunOutput, moved: list[RunOutput | None],
             shifted: RunOutput | None, notes: list[str]) -> list[Finding]:
    base = statistics_of(out.golden)
    # Made-up inputs may be smaller than the real ones: each side rounds its output at least once, as recorded.
    once = {s: mine.unit_roundoff * (mine.rms if s == "Mean" else abs(mine.value(s) or 0.0)) for s in STATISTICS}
    rounding = {s: max(r, once[s]) for s, r in _rounding(out).items()}
    # Random draws add a parting over a sum of K terms as sqrt(K) of one term's; coherent drift adds it K times.
    coherence = math.sqrt(out.accumulation.length) if out.accumulation is not None else 1.0
    changes = {s: max((abs(statistics_of(m.golden)[s] - base[s]) for m in moved if m is not None), default=0.0)
               for s in STATISTICS}
    # The shift is no sample but the most the statistics allow: twice its change, for the op's curvature.
    coherent = statistics_of(shifted.golden) if shifted is not None else base
    changes = {s: max(DRIFT * coherence * changes[s], SHIFTED * abs(coherent[s] - base[s])) for s in STATISTICS}
    found, inherited = [], []
    for statistic in STATISTICS:
        a, b = mine.value(statistic), theirs.value(statistic)
        if a is None or b is None:
            continue
        metric = f"parted_{statistic.lower()}"
        if not (math.isfinite(a) and math.isfinite(b)):
            same = a == b or (math.isnan(a) and math.isnan(b))
            found.append(finding(mine.name, metric, 0.0 if same else math.inf, 1.0,
                                 f"{mine.name} {statistic} is {a:.9g} here and {b:.9g} in its partner"))
            continue
        explained = changes[statistic]
        fair = 2 * rounding[statistic] + mine.slack(statistic) + theirs.slack(statistic) + \
            float_format(mine.dtype).smallest_subnormal
        parted = abs(a - b)
        found.append(finding(mine.name, metric, parted, explained + fair,
                             f"{mine.name} {statistic} {a:.9g} against its partner's {b:.9g} parts by {parted:.3g}, "
                             f"where its inputs' parting explains {explained:.3g} and fair rounding {fair:.3g}"))
        if parted > fair and parted <= explained + fair:
            inherited.append(statistic)
    if inherited:
        notes.append(f"{mine.name}: {', '.join(inherited)} part from the partner's by more than rounding, "
                     f"inherited: its inputs' parting explains it")
    return found
