"""The public entry points: judge an output against its golden, or assert that it is precise."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Mapping, Sequence

import torch

from ..common import DEFAULT_POLICY, MathMode, POLICIES, float_format, parse_dtype
from ..ops import op_record, op_rule
from ..precision import (
    Accumulation, Check, Element, Metrics, OpName, Rules, STANDARDS, Standard, Status, Subject, Verdict,
    beside_baseline, compute_metrics, compute_metrics_each, element_index, inf_nan_gate, parse_op_name, render_message,
    rounding_gate, widened,
)


def judge(
    actual: Any,
    golden: Any,
    *,
    baseline: Any = None,
    op: str | None = None,
    dtype: Any = None,
    standard: str | None = None,
    accumulation: Accumulation | None = None,
    rules: Rules | None = None,
    notes: tuple[str, ...] = (),
    overflowed: str | None = None,
    inputs: tuple[Sequence[Any], Mapping[str, Any]] | None = None,
    spread: torch.Tensor | Callable[[], torch.Tensor | str | None] | None = None,
    float32: str = DEFAULT_POLICY,
) -> Verdict:
    """Judge a device-under-test output against a high-precision golden.

    actual: the device's output. golden: the same output computed in higher precision (float64).
    baseline: optionally the same op in the same dtype on a trusted device, for the benchmark
    standard (which then judges beside the op's own standard, wherever the baseline meets it): its
    output tensor, or its ``Metrics`` against the golden as recorded on another machine.
    op: the op's name ("Functional.gelu", "matmul") to pick its standard and limits.
    dtype: the dtype whose standards apply (default: actual's). standard: force one standard.
    accumulation: the reduction length and term norms for the error-bound standard; or
    inputs: the call's ``(args, kwargs)``, from which they are derived as dump cases derive them. An op
    that reduces (matmul, sum, softmax, the norms...) needs one of the two: without them its bound
    would be that of a single product, and a fair kernel would fail.
    overflowed: what overflowed upstream of this output, fairly for its dtype (the forward of a
    gradient): then infs where the exact result is finite, and nothing else wrong, are an overflow,
    not an error. Without it they are an error: a kernel may not invent an inf.
    spread: per element, how far the exact result moves when the inputs move by their dtype's
    rounding (or a function that measures it, called only when needed, returning a reason string
    where it cannot). A failing output without a baseline is then judged again, its elements within
    a few spreads excused: the second look (precision/second_look.py). Dump cases and check_call measure it.
    float32: where ``accumulation.math_mode`` says the device ran float32 in a narrower format (TF32,
    HF32): "as-run" judges at that format's rounding of the inputs, "ieee" at float32's own; either
    way a note names the mode (common/math_modes.py).
    """
    rules = rules or Rules.default()
    actual = _tensor(actual, "actual")
    golden = _tensor(golden, "golden")
    target = actual.dtype if dtype is None else parse_dtype(dtype)
    if actual.dtype != target:
        actual = actual.to(target)
    _check_shape(golden, actual, "golden")
    recorded = baseline if isinstance(baseline, Metrics) else None
    if recorded is not None:
        _check_recorded(recorded, actual)
        baseline = None
    elif baseline is not None:
        baseline = _tensor(baseline, "baseline")
        _check_shape(baseline, actual, "baseline")
        baseline = baseline.to(target)
    forced = None if standard is None else STANDARDS.named(standard)
    if forced is not None and forced.needs_baseline and baseline is None and recorded is None:
        raise ValueError(f"standard {standard!r} needs a baseline: pass baseline=<same op on a trusted device>")
    if target.is_complex:
        raise ValueError(f"dtype {target} is complex: judge the real and imaginary parts separately")
    name = parse_op_name(op) if op is not None else None

    rule = op_rule(rules, name)
    accumulation = _accumulation(name, op, accumulation, inputs)
    if rules.roundings(name, rule) > accumulation.roundings:
        accumulation = dataclasses.replace(accumulation, roundings=rules.roundings(name, rule))
    if float32 not in POLICIES:
        raise ValueError(f"float32 {float32!r} is not a policy: use one of {', '.join(POLICIES)}")
    mode = accumulation.math_mode if target.is_floating_point and accumulation.input_share(float_format(target)) \
        else None
    if mode is not None and float32 != "as-run":
        accumulation = dataclasses.replace(accumulation, math_mode=None)
    elif mode is not None and (baseline is not None or recorded is not None):
        # A baseline's errors are an IEEE kernel's (a cuda baseline runs with TF32 off): no measure of
        # what a TF32 kernel may err, so the op's own standard judges, at the mode's rounding.
        notes = (*notes, f"the baseline is not compared: its errors are not those of a {mode.label} kernel")
        baseline = recorded = None
    judged = _Judgement(rules, name, op, target, rule, accumulation, standard, tuple(notes), overflowed)
    verdict = _looked_twice(judged, actual, golden, baseline, recorded, spread)
    return verdict if mode is None else _mode_noted(judged, verdict, mode, float32, actual, golden, baseline, recorded)


def _looked_twice(judged: "_Judgement", actual, golden, baseline, recorded, spread) -> Verdict:
    """The verdict, and where it fails with nothing to compare against, the second look's."""
    first = judged.verdict(actual, golden, baseline, recorded)
    # With a baseline, its own error shows what these inputs allow a fair kernel: no second look; nor
    # where the op rounds nothing (an exact standard): the inputs' conditioning excuses no element.
    if spread is None or first.status is not Status.ERROR or first.own.exact \
            or baseline is not None or recorded is not None \
            or first.checks[0].metric == "nonfinite_mismatch" and first.checks[0].status is Status.ERROR:
        return first
    if judged.accumulation.exactly_rounded:
        return dataclasses.replace(first, notes=first.notes + (
            "second look not taken: the op rounds its exact result once, so however far the result "
            "cancels, the inputs' conditioning explains no more than half an ulp of it",))
    return _second_look(judged, first, actual, golden, spread)


def _mode_noted(judged: "_Judgement", verdict: Verdict, mode: MathMode, float32: str, actual, golden, baseline,
                recorded) -> Verdict:
    """The verdict with a note that names the float32 math mode and what it changed."""
    ran = f"the device ran this float32 op in {mode.label} ({mode.setting})"
    if float32 == "as-run":
        ieee = dataclasses.replace(judged, accumulation=dataclasses.replace(judged.accumulation, math_mode=None))
        own = ieee.verdict(actual, golden, baseline, recorded)
        past = [c.describe() for c in own.checks if c.status is Status.ERROR]
        against = ("within float32's own bound too" if not past else
                   "against float32's own bound it would fail: " + "; ".join(past))
        note = (f"{ran}: judged at {mode.label}'s rounding of the inputs ({mode.mantissa_bits} mantissa bits); "
                f"{against}; --npu-precision-fp32 ieee demands IEEE float32")
    elif verdict.status is Status.ERROR:
        note = (f"{ran}: a fair {mode.label} kernel errs past float32's own bound. Turn it off in training with "
                f"`{mode.switch_off}`, check the kernel without it with --npu-precision-fp32 run-ieee, or judge it "
                f"as run with --npu-precision-fp32 as-run")
    else:
        note = f"{ran}, and stays within float32's own bound"
    return dataclasses.replace(verdict, notes=verdict.notes + (note,))


def _second_look(judged: "_Judgement", first: Verdict, actual, golden, spread) -> Verdict:
    """The failing verdict judged again against goldens widened by the op's conditioning: the second
    verdict where it passes, else the first with a note of how little conditioning explains."""
    spread = spread() if callable(spread) else spread
    if spread is None:
        return first
    if isinstance(spread, str):  # why the spread could not be measured
        return dataclasses.replace(first, notes=first.notes + (f"second look not taken: {spread}",))
    _check_shape(spread, actual, "spread")
    moved, excused = widened(actual, golden, spread)
    if excused is None:
        return dataclasses.replace(first, notes=first.notes + (
            "second look: the op's conditioning at these inputs explains no element's error",))
    second = judged.verdict(actual, moved, None, None)
    if second.status is Status.ERROR:
        still = [c.metric for c in second.failures if c.status is Status.ERROR]  # their values are above
        return dataclasses.replace(first, notes=first.notes + (
            f"{excused.describe()}; the rest still fail {', '.join(still)}",))
    return dataclasses.replace(second, notes=second.notes + (excused.describe(),), excused=excused)


@dataclasses.dataclass(frozen=True)
class _Judgement:
    """Everything a verdict depends on besides the tensors: judged once, or twice by the second look."""

    rules: Rules
    name: OpName | None
    op: str | None
    target: torch.dtype
    rule: Any
    accumulation: Accumulation
    standard: str | None
    notes: tuple[str, ...]
    overflowed: str | None

    def verdict(self, actual, golden, baseline, recorded) -> Verdict:
        rules, name, target, rule, standard = self.rules, self.name, self.target, self.rule, self.standard
        overflowed = self.overflowed
        params = rules.params(target)
        base_metrics = recorded
        if baseline is None:
            metrics = compute_metrics(actual, golden, params, self.accumulation)
        else:  # one pass over the golden for both
            metrics, base_metrics = compute_metrics_each((actual, baseline), golden, params, self.accumulation)
        subject = Subject(rule.standard_of(name), target, base_metrics is not None)
        chosen = STANDARDS.select(subject, standard)
        floor = rules.benchmark_floor(target)
        checks = chosen.checks(metrics, rules.limits_for(chosen.name, target, rule), base_metrics, floor)
        judged_by, worst_field, forgiven = (chosen,), chosen.worst, []
        worst_standard = chosen
        if base_metrics is not None and standard is None and chosen.needs_baseline:
            own = STANDARDS.select(dataclasses.replace(subject, has_baseline=False))
            own_checks, forgiven = beside_baseline(own, metrics, base_metrics,
                                                   rules.limits_for(own.name, target, rule), floor)
            if _fails(own_checks) and not _fails(checks):
                worst_field = own.worst  # only the own standard fails it: point at its worst element
                worst_standard = own
            checks, judged_by = checks + own_checks, (chosen, own)
        if target.is_floating_point:
            rounding = rounding_gate(metrics) if not chosen.exact else None
            if rounding is not None:
                checks.append(rounding)
            checks.insert(0, inf_nan_gate(metrics))
        if overflowed is not None and _only_overflow(checks, metrics):
            checks[0] = dataclasses.replace(checks[0], status=Status.OVERFLOW)
        status = Status.worst(c.status for c in checks)
        if checks[0].metric == "nonfinite_mismatch" and checks[0].status in (Status.ERROR, Status.OVERFLOW):
            worst_field = "nonfinite"
        elif metrics.range_overflow and status is not Status.ERROR:
            # The result itself left the dtype's range, fairly: not an error, but what overflow hunters look for.
            status, worst_field = Status.OVERFLOW, "range_overflow"
            overflowed = (f"{metrics.range_overflow} element(s) overflowed {str(target).removeprefix('torch.')} "
                          f"fairly: the exact result is past its largest value")
        all_notes = self.notes + _notes(actual, golden, metrics, base_metrics) + tuple(forgiven)
        if status is Status.OVERFLOW:
            all_notes += (overflowed,)
        return Verdict(
            status=status,
            judged_by=judged_by,
            op=self.op.strip() if self.op is not None else None,
            dtype=str(target).removeprefix("torch."),
            shape=tuple(actual.shape),
            checks=tuple(checks),
            metrics=metrics,
            baseline_metrics=base_metrics,
            worst=_with_allowance(_element(getattr(metrics.worst, worst_field), actual, golden, baseline),
                                  worst_standard if worst_field == worst_standard.worst else None, metrics,
                                  params, rules.limits_for(worst_standard.name, target, rule), target,
                                  self.accumulation.roundings),
            notes=all_notes,
        )


def parted_checks(verdict: Verdict) -> tuple[Check, ...]:
    """The checks by which the device errs worse than its baseline beyond the benchmark's limits: a
    benchmark ratio that fails (not one the benchmark excuses to a warning, where the device meets its
    own bound by a wide margin), or infs and nans the baseline does not have. Empty without a baseline."""
    base, first = verdict.baseline_metrics, verdict.judged_by[0]
    if base is None or not first.needs_baseline:
        return ()
    ratios = first.metrics
    found = []
    for check in verdict.checks:  # the gate first, then the benchmark's ratios (_Judgement.verdict)
        if check.metric == "nonfinite_mismatch":
            if check.status is not Status.PASS and not base.nonfinite_mismatch:
                found.append(check)
        elif check.metric in ratios and check.status is Status.ERROR:
            found.append(check)
        if check.metric == ratios[-1]:
            break
    return tuple(found)


def _accumulation(name, op: str | None, accumulation: Accumulation | None,
                  inputs: tuple[Sequence[Any], Mapping[str, Any]] | None) -> Accumulation:
    if inputs is not None:
        if accumulation is not None:
            raise ValueError("pass inputs= or accumulation=, not both: inputs derive the accumulation")
        if name is None:
            raise ValueError("inputs= needs op=: the op says how its inputs accumulate")
        from ..ops import resolve  # the tables of ops and their rules, only where a call is described
        from ..replay import accumulation_for

        # The API without index and direction ("Torch.matmul.0.forward" -> "Torch.matmul"); a bare
        # name is torch's own ("matmul").
        api = name.qualified if "." in name.qualified else f"Torch.{name.qualified}"
        resolved = resolve(api)
        if resolved.func is None and resolved.reference is None:
            raise ValueError(f"inputs= cannot derive the accumulation of op {op!r}: {resolved.unsupported}")
        args, kwargs = inputs
        return accumulation_for(resolved, args, kwargs)
    if accumulation is None and name is not None and op_record(name.bare).reduces:
        raise ValueError(f"op {op!r} reduces: its error bound needs the reduction length. Pass the call's "
                         f"arguments as inputs=(args, kwargs), or accumulation=Accumulation(length, term_norms)")
    return accumulation or Accumulation()


def assert_precise(actual: Any, golden: Any, **kwargs: Any) -> Verdict:
    """Like :func:`judge`, but raise ``AssertionError`` with the rendered message on an error."""
    verdict = judge(actual, golden, **kwargs)
    if verdict.status is Status.ERROR:
        raise AssertionError(render_message(verdict))
    return verdict


def _only_overflow(checks, metrics: Metrics) -> bool:
    """Every disagreeing inf or nan is an inf of the right sign where the golden is finite, and the
    finite elements pass: the result left the dtype's range, the kernel is not imprecise."""
    gate, rest = checks[0], checks[1:]
    return (gate.metric == "nonfinite_mismatch" and gate.status is Status.ERROR
            and metrics.overflow == metrics.nonfinite_mismatch and not _fails(rest))


def _fails(checks) -> bool:
    return any(c.status is Status.ERROR for c in checks)


def _tensor(value: Any, what: str) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, (bool, int, float)):
        return torch.tensor(value, dtype=torch.float64 if isinstance(value, float) else None)
    raise TypeError(f"{what} must be a torch.Tensor (or a Python number), not {type(value).__name__}")


def _check_shape(other: torch.Tensor, actual: torch.Tensor, what: str) -> None:
    if other.shape != actual.shape:
        raise ValueError(
            f"{what} shape {tuple(other.shape)} does not match actual shape {tuple(actual.shape)}: "
            f"pass the {what} of the same output"
        )


def _check_recorded(recorded: Metrics, actual: torch.Tensor) -> None:
    dtype = str(actual.dtype).removeprefix("torch.")
    if recorded.shape != tuple(actual.shape) or recorded.dtype != dtype:
        raise ValueError(f"the recorded baseline is {recorded.dtype}{list(recorded.shape)} but the output is "
                         f"{dtype}{list(actual.shape)}: record the baseline from the same op and inputs")


def _element(flat_index: int, actual, golden, baseline) -> Element | None:
    if flat_index < 0:
        return None
    index = element_index(flat_index, actual.shape)

    def value(t: torch.Tensor) -> float:
        return t.reshape(-1)[flat_index].item()

    return Element(index, value(actual), value(golden), None if baseline is None else value(baseline))


def _with_allowance(element: Element | None, standard: Standard | None, metrics: Metrics, params, limits,
                    dtype: torch.dtype, roundings: int) -> Element | None:
    """The element with the error its standard allows there, in the tensor's own units (None where the
    standard judges no single element: the benchmark ratios, a disagreeing inf or nan)."""
    if element is None or standard is None or not math.isfinite(element.golden):
        return element
    allowed = standard.allowed(element, metrics, params, limits, dtype, roundings)
    return element if allowed is None else dataclasses.replace(element, allowed=allowed)


def _notes(actual, golden, metrics: Metrics, base: Metrics | None) -> tuple[str, ...]:
    notes = []
    if actual.numel() == 0:
        notes.append("empty output: nothing to compare")
    elif actual.dtype.is_floating_point and metrics.finite == 0:
        notes.append("no element is finite on both sides: only where inf and nan fall was compared")
    if actual.dtype.is_floating_point and golden.dtype.is_floating_point:
        if torch.finfo(golden.dtype).eps >= torch.finfo(actual.dtype).eps and actual.dtype != torch.float64:
            notes.append(f"golden is {golden.dtype}, no more precise than the output: errors are understated")
    if base is not None and base.nonfinite_mismatch:
        notes.append(f"the baseline itself has {base.nonfinite_mismatch} inf/nan mismatches with the golden")
    return tuple(notes)


__all__ = ["judge", "assert_precise", "Accumulation", "OpName"]
