"""Run one example of an op case: the op on the device, its reference on the golden, every output judged.

This is the pure core under both the Hypothesis search and fixed (regression) cases: a Call in,
an ExampleResult out. The runner does the running (runner.run_call) and the standards do the
judging (judging.judge); this module only resolves what the case names and ranks how bad a result is.
"""

from __future__ import annotations

import time
import unittest
import zlib
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from ..backends import Backend
from ..checks import OutputVerdict, judge
from ..common import DEFAULT_POLICY, missing_kernel, newer_op
from ..ops import CustomOp, ResolvedOp, entry_point_errors, judged_like, registered_op, resolve
from ..precision import Accumulation, Check, Rules, Status, Verdict, error_profile
from ..replay import GoldenNotWide, OpExecutionError, run_call, threads
from ..reports import excess, failing_outputs
from .schema import SchemaError
from .spec import Call, OpCase, op_label

_PREFIXES = ("Functional", "Tensor", "Torch", "Aten", "NPU", "Custom", "VF", "Distributed", "MindSpeed", "Module")
HOW_TO_NAME = ("use an msprobe name (Functional.gelu), a dotted path (torch.nn.functional.gelu) "
               "or a name registered with register_op")


class CaseSpecError(ValueError):
    """The case cannot run as written: the inputs it draws do not fit the op, or its reference."""


class OpUnavailable(unittest.SkipTest):
    """This torch lacks the op, or its kernel for the case's dtype on the device: the case is skipped.
    A SkipTest, so that Hypothesis stops at once instead of shrinking it as a failure."""


@dataclass(frozen=True)
class Target:
    """What a case runs and how it is judged, resolved once per case."""

    op: ResolvedOp
    reference: Callable[..., Any] | None  # None: the op itself on the golden
    reference_label: str
    rules: Rules  # the tables, with the case's standard, limits and roundings for its op


@dataclass(frozen=True)
class ExampleResult:
    outputs: tuple[OutputVerdict, ...] = ()
    notes: tuple[str, ...] = ()
    problem: str | None = None  # the op raised on the device, or device and golden results differ in structure
    seconds: float = 0.0
    strict_warnings: bool = False  # warnings fail too

    @property
    def failures(self) -> tuple[OutputVerdict, ...]:
        return tuple(failing_outputs(self.outputs, self.strict_warnings))

    @property
    def failed(self) -> bool:
        return self.problem is not None or bool(self.failures)

    @property
    def severity(self) -> float:
        """The worst check's value over its limit (above 1 fails): what Hypothesis maximizes."""
        if self.problem is not None:
            return _CEILING
        return max((verdict_severity(o.verdict) for o in self.outputs), default=0.0)


_CEILING = 1e9  # target() needs a finite number


def check_severity(check: Check) -> float:
    return min(max(excess(check.value, check.limit, check.upper), 0.0), _CEILING)


def _judged(out, op: str, target: Target, notes: tuple[str, ...], float32: str) -> OutputVerdict:
    verdict = judge(out.actual, out.golden, baseline=out.baseline, op=op, accumulation=out.accumulation or Accumulation(),
                    rules=target.rules, notes=notes, spread=out.spread, float32=float32)
    # The error profile draws the report's plots; only outputs that do not pass need one.
    profile = None if verdict.status is Status.PASS else error_profile(out.actual, out.golden)
    return OutputVerdict(out.name, verdict, profile)


def verdict_severity(verdict: Verdict) -> float:
    return max((check_severity(c) for c in verdict.checks), default=0.0)


def case_seed(case: OpCase) -> int:
    """The seed of the output gradients: the case's own, else derived from its id (never a global RNG)."""
    return case.seed if case.seed is not None else zlib.crc32(case.id.encode())


# ---------------------------------------------------------------- naming ops


# Dotted import paths an op case may use, and the msprobe prefix each one means.
_PATH_PREFIXES = (("torch.nn.functional.", "Functional."), ("torch.Tensor.", "Tensor."), ("torch.ops.aten.", "Aten."),
                  ("torch_npu.", "NPU."), ("torch.", "Torch."))


def _as_api_name(path: str) -> str | None:
    """``torch.nn.functional.gelu`` -> ``Functional.gelu``; None for a path outside torch and torch_npu."""
    return next((prefix + path[len(start):] for start, prefix in _PATH_PREFIXES if path.startswith(start)), None)


def resolve_op(name: str | Callable[..., Any], field: str) -> tuple[ResolvedOp, CustomOp | None]:
    """An op or reference as a case names it; raise SchemaError naming ``field`` when it is no op."""
    if callable(name) and not isinstance(name, str):
        label = op_label(name)
        custom = registered_op(label)
        if custom is not None and custom.fn is name:
            return resolve(custom.api_name), custom
        return ResolvedOp(api_name=label, func=name), None
    custom = registered_op(name)
    if custom is not None:
        return resolve(custom.api_name), custom
    api_name = name if name.partition(".")[0] in _PREFIXES else _as_api_name(name)
    if api_name is not None:
        op = resolve(api_name)
        if op.unsupported and newer_op(api_name):
            raise OpUnavailable(newer_op(api_name))
        if op.unsupported:
            raise SchemaError(field, f"{name!r} cannot run here ({op.unsupported.removeprefix('unsupported: ')}): "
                                     f"{HOW_TO_NAME}")
        return (op if api_name == name else replace(op, api_name=name)), registered_op(name)
    why = ("only torch and torch_npu operators and registered ops run from a case file" if "." in name
           else "no op of that name is registered")
    errors = "; ".join(entry_point_errors())
    raise SchemaError(field, f"{name!r} is not an op ({why}{'; ' + errors if errors else ''}): {HOW_TO_NAME}")


def prepare(case: OpCase, rules: Rules) -> Target:
    """Resolve the case's op and reference and its rules; raise SchemaError for a name that is no op."""
    op, custom = resolve_op(case.op, "op")
    reference, reference_label = None, "the op itself in float64"
    if case.reference is not None:
        ref_op, _ = resolve_op(case.reference, "reference")
        reference, reference_label = ref_op.func, f"{op_label(case.reference)} in float64"
    elif op.reference is not None:
        reference, reference_label = op.reference, f"{op_label(op.reference)} in float64"
    standard = case.standard or (custom.standard if custom is not None else None)
    return Target(op, reference, reference_label, _case_rules(rules, op, case, standard))


def _case_rules(rules: Rules, op: ResolvedOp, case: OpCase, standard: str | None) -> Rules:
    """The tables, with the op's row (its built-in twin's, for a custom op with ``like``) under the
    op's own name, plus the case's own forward standard, limits and roundings. In the table, not
    forced: a baseline's ratios then judge beside that standard."""
    if not op.like and not case.limits and case.roundings is None and standard is None:
        return rules
    return judged_like(rules, op.api_name, op.like, standard=standard, limits=case.limits, roundings=case.roundings)


# ---------------------------------------------------------------- one example


def _differentiable(call: Call) -> tuple[int | str, ...]:
    def float_tensor(value: Any) -> bool:
        return isinstance(value, torch.Tensor) and value.is_floating_point()

    return (*(i for i, a in enumerate(call.args) if float_tensor(a)),
            *(k for k, v in call.kwargs.items() if float_tensor(v)))


def _reference_raises(target: Target, call: Call) -> bool:
    """Whether the golden side raises too: then the inputs, not the device, are at fault."""
    def golden(value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.detach().to(torch.float64)
        return value

    try:
        with torch.no_grad():
            (target.reference or target.op.func)(*map(golden, call.args),
                                                  **{k: golden(v) for k, v in call.kwargs.items()})
    except Exception:
        return True
    return False


def run_example(case: OpCase, target: Target, call: Call, device: Backend | torch.device,
                golden: Backend | None = None, baseline: Backend | None = None, *,
                strict_warnings: bool = False, float32: str = DEFAULT_POLICY) -> ExampleResult:
    """Run and judge one example (against a live baseline too, if given); raise CaseSpecError when
    the inputs do not fit the op at all."""
    with threads.for_case(threads.call_elements(call.args, call.kwargs)):
        return _run_example(case, target, call, device, golden, baseline, strict_warnings, float32)


def _run_example(case: OpCase, target: Target, call: Call, device: Backend | torch.device, golden: Backend | None,
                 baseline: Backend | None, strict_warnings: bool, float32: str) -> ExampleResult:
    started = time.perf_counter()
    requires = call.requires_grad if call.requires_grad is not None else _differentiable(call)
    try:
        run = run_call(target.op, call.args, call.kwargs, device=device, golden=golden, baseline=baseline,
                       backward=case.backward,
                       requires_grad=requires if case.backward else (), seed=case_seed(case),
                       reference=target.reference)
    except OpExecutionError as exc:
        lacking = missing_kernel(target.op.api_name, exc.side, exc.__cause__) if exc.side.startswith("device") else None
        if lacking is not None:
            raise OpUnavailable(lacking) from None
        if exc.side.startswith("device") and not _reference_raises(target, call):
            return ExampleResult(problem=str(exc), seconds=time.perf_counter() - started)
        raise CaseSpecError(f"the drawn inputs do not fit the op: {exc}: fix the case's shapes, dtypes or "
                            f"values") from None
    except GoldenNotWide as exc:
        raise CaseSpecError(str(exc)) from None
    if run.error:
        return ExampleResult(notes=run.notes, problem=run.error, seconds=time.perf_counter() - started)
    name = target.op.api_name
    outputs = [_judged(out, name, target, run.notes, float32) for out in run.outputs]
    outputs += [_judged(out, f"{name}.0.backward", target, run.notes, float32) for out in run.grads]
    return ExampleResult(tuple(outputs), run.notes, seconds=time.perf_counter() - started,
                         strict_warnings=strict_warnings)
