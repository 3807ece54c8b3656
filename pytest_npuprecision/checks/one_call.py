"""One call checked from Python, as a dump case checks one: the op runs on the device under test, on
the float64 golden and on a baseline if given; every output is judged, and with ``backward=True``
every floating-point input's gradient, with the reduction lengths and term norms the harness derives
from the inputs. For users' own tests, next to ``torch.testing.assert_close``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from ..backends import Backend, load_backend
from ..common import DEFAULT_POLICY
from ..ops import (
    NoSingleNamesake, ResolvedOp, SAME_FUNCTION, choose_namesake, operator_name, reference_like, registered_op, resolve,
)
from ..precision import Accumulation, Rules, Status, Verdict, render_message
from ..replay import PreparedCall, RunResult, replay
from .judging import judge


@dataclass(frozen=True)
class CallVerdict:
    """The verdicts of one call: one per output, then one per input gradient."""

    op: str
    outputs: tuple[tuple[str, Verdict], ...]  # ("output.0", verdict), ("grad.input_args[0]", verdict)
    notes: tuple[str, ...] = ()

    @property
    def status(self) -> Status:
        return Status.worst(verdict.status for _, verdict in self.outputs) if self.outputs else Status.PASS

    def verdict(self, name: str) -> Verdict:
        return dict(self.outputs)[name]

    def message(self) -> str:
        """Every output that does not pass (all of them when all pass), rendered as a failing case is."""
        shown = [(n, v) for n, v in self.outputs if v.status is not Status.PASS] or list(self.outputs)
        return "\n".join(f"{name}: {render_message(verdict)}" for name, verdict in shown)


def check_call(op: str | Callable[..., Any], *args: Any, device: Backend | torch.device | str = "cpu",
               golden: Backend | None = None, baseline: Backend | str | None = None, backward: bool = False,
               reference: Callable[..., Any] | None = None, like: str | None = None, rules: Rules | None = None,
               seed: int = 0, float32: str = DEFAULT_POLICY, **kwargs: Any) -> CallVerdict:
    """Run ``op(*args, **kwargs)`` on ``device`` and on the float64 golden and judge it.

    op: a callable (``torch.matmul``, your kernel) or a name as dumps and op cases write it
    ("Torch.matmul", "Functional.gelu", a registered custom op). The inputs are used as given, in
    their dtype, moved to each side's device. backward: also judge the gradient of every
    floating-point tensor argument, for output gradients drawn from ``seed``. reference: what the
    golden calls instead (in float64), where ``op`` is your own kernel that fixes its dtypes inside;
    where it is an op the catalogue knows (``torch.prod``, a torch_npu op's reference), your kernel is
    judged by that op's record: its standard, reduction and roundings. like: the op whose record judges
    your kernel, where the reference does not say it (a built-in name such as "rms_norm").
    float32: how float32 ops the device ran in TF32 or HF32 are judged: "as-run" (at that format's
    rounding of the inputs) or "ieee" (at float32's own; a fair TF32 kernel then fails, saying so).
    """
    resolved = _resolved(op, like or reference_like(reference))
    if resolved.namesakes:  # "Torch.svd": torch.svd or torch.linalg.svd, as msprobe names both
        try:
            resolved = choose_namesake(resolved, args, kwargs)
        except NoSingleNamesake as exc:
            raise ValueError(f"check_call({op!r}): {exc}; pass the function itself") from None
    requires = (*(i for i, a in enumerate(args) if _float_tensor(a)),
                *(k for k, v in kwargs.items() if _float_tensor(v))) if backward else ()
    baseline = load_backend(baseline, "baseline") if baseline is not None else None
    call = PreparedCall(resolved, args, kwargs, backward=backward, requires_grad=requires, seed=seed,
                        reference=reference, float32=float32)
    run = replay(call, device=device, golden=golden, baseline=baseline)
    if run.error:  # an output the two sides shape differently, or one side lacks: never a silent pass
        raise ValueError(f"check_call({resolved.api_name}): {run.error}")
    return judge_run(resolved, run, resolved.own_rules(rules or Rules.default()), call.float32)


def judge_run(resolved: ResolvedOp, run: RunResult, rules: Rules, float32: str = DEFAULT_POLICY) -> CallVerdict:
    """Each output and input gradient of ``run`` judged against its golden, as check_call judges them."""
    # A gradient is judged as a backward entry: a chain of ops, each free to round (backward_roundings).
    judged = tuple((out.name, judge(out.actual, out.golden, baseline=out.baseline, op=resolved.api_name + _KEYS[direction],
                                    accumulation=out.accumulation or Accumulation(), rules=rules, notes=run.notes,
                                    overflowed=run.overflowed if direction == "backward" else None,
                                    dtype=out.judged_dtype, spread=out.spread, float32=float32))
                   for direction, outs in (("forward", run.outputs), ("backward", run.grads)) for out in outs)
    return CallVerdict(resolved.api_name, judged, tuple(run.notes))


# The tables read a gradient from its key's direction, as in a dump: "Torch.matmul.0.backward".
_KEYS = {"forward": "", "backward": ".0.backward"}


def assert_call_precise(op: str | Callable[..., Any], *args: Any, **kwargs: Any) -> CallVerdict:
    """Like :func:`check_call`, but raise ``AssertionError`` with every failing output's message."""
    verdict = check_call(op, *args, **kwargs)
    if verdict.status is Status.ERROR:
        raise AssertionError(verdict.message())
    return verdict


def _resolved(op: str | Callable[..., Any], like: str | None = None) -> ResolvedOp:
    if callable(op) and not isinstance(op, str):
        name = operator_name(op)
        found = resolve(name) if name is not None else None
        same = found is not None and found.base_name in SAME_FUNCTION  # torch.linalg.det computes torch.det
        if found is not None and (found.func is op or same or any(func is op for _, func in found.namesakes)):
            # a torch operator: its tables' rules apply, to the function given, not a namesake
            return dataclasses.replace(found, func=op, namesakes=())
        return ResolvedOp(api_name=getattr(op, "__qualname__", repr(op)), func=op, like=like)
    custom = registered_op(op)
    found = resolve(custom.api_name if custom is not None else op)
    if found.func is None:
        raise ValueError(f"check_call({op!r}): {found.unsupported}")
    return found


def _float_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()
