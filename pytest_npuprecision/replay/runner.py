"""Replay one call (a ``PreparedCall``) on the device under test, on a golden and optionally on a baseline,
forward and backward.

Every side starts from the caller's CPU tensors and never modifies them, and reaches its device
through a ``Backend``. The device side and the baseline keep every dtype; the golden side (CPU by
default, or a GPU) computes with floating inputs raised to ``golden_dtype`` (float64), falling back
to float32 for ops that have no float64 kernel. Each float output also gets an ``Accumulation``
(reduction length, and for ops linear in their inputs the norm of the summed terms), which the
error-bound standard uses to scale its limit. replay/sides.py runs each side; replay/error_bounds.py derives the
Accumulation (from a rule replay/unknown_op_bounds.py measures, for a user's op no table describes); this
module pairs what they give.

Every tensor in a ``RunResult`` is detached and on the golden's device, where the metrics are then
computed: ``actual`` and ``baseline`` in the dtype their device produced, ``golden`` in the golden
dtype. Python numbers become 0-d tensors (float -> float64, int -> int64, bool -> bool) so that they
are compared like tensors, with a tolerance where floating.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Collection, Mapping, Sequence

import torch

from ..backends import Backend, auto_backend, float32_modes_of, load_backend
from ..common import MathMode, aminmax
from ..ops import ResolvedOp, name_of, op_record
from ..dump import RecordedResults, leaf_gradients, positional_gradients
from ..precision import Accumulation
from .cotangents import output_gradients
from .error_bounds import forward_accumulation, grad_accumulations, output_norm
from .perturbed import GoldenSpread
from .prepared import PreparedCall
from .sides import (
    Forward, OpExecutionError, Side, golden_for, is_float, run_backward, run_forward, run_side, side_arguments,
    tensor_paths,
)
from .sign_alignment import aligned
from .tie_alignment import tie_aligned
from .unknown_op_bounds import measured_rule


class GoldenNotWide(ValueError):
    """The golden of a user's op came back narrower than float64: the op fixes its dtype inside, so its
    "golden" is the kernel itself, and every comparison with it would pass."""


# Ops whose golden is torch's own (or our fused references): a float32 result from float64 inputs is a cast.
_TORCH_PREFIXES = frozenset({"Functional", "Tensor", "Torch", "Aten", "NPU", "VF"})


@dataclass(frozen=True)
class RunOutput:
    """One compared tensor: a forward output (``output.1.0``) or an input gradient (``grad.input_args[0]``)."""

    name: str
    actual: torch.Tensor
    golden: torch.Tensor
    accumulation: Accumulation | None = None  # None for integer and bool outputs
    baseline: torch.Tensor | None = None  # the same output from a live baseline, in the device's dtype
    judged_dtype: torch.dtype | None = None  # the precision it was computed in, where autocast cast it up after
    # How far the golden moves when the inputs move by their rounding, measured on first call (the second look).
    spread: Callable[[], torch.Tensor | str | None] | None = None


@dataclass(frozen=True)
class RunResult:
    op: str
    device: torch.device
    golden_dtype: torch.dtype | None  # the dtype the golden really used (float32 after a fallback; None: the inputs')
    outputs: tuple[RunOutput, ...]
    grads: tuple[RunOutput, ...] = ()
    device_seconds: float = 0.0  # the op's forward and backward on the device, synchronized
    golden_seconds: float = 0.0  # the same for the golden; accumulation work is not counted
    baseline_seconds: float = 0.0
    notes: tuple[str, ...] = ()
    error: str | None = None  # device and golden (or dump) disagree on the structure of the results
    overflowed: str | None = None  # the device's forward left its dtype's range where the exact result does
    # The device's float32 mode for this op ("ieee", "tf32", "hf32"; "unknown" where nothing records
    # it), where the op is a matmul, conv or rnn; None for the other ops.
    float32_mode: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def default_device() -> torch.device:
    """npu when torch_npu imports and sees a device, else cuda when available, else cpu."""
    return auto_backend().device


def _fitting(norm: torch.Tensor | None, shape: torch.Size) -> torch.Tensor | None:
    """``norm`` where it describes an output of ``shape`` (the same elements, or broadcast onto them)."""
    if norm is None or norm.shape == shape:
        return norm
    if norm.numel() == math.prod(shape):
        return norm.reshape(shape)
    try:
        return norm if torch.broadcast_shapes(norm.shape, shape) == torch.Size(shape) else None
    except RuntimeError:  # not broadcastable at all
        return None


# ---------------------------------------------------------------- pairing device and golden


def _pair(device: Side, actual: Mapping[str, Any], golden: Side, expected: Mapping[str, Any],
          notes: list[str], accumulation: Callable[[str, torch.Tensor], Accumulation | None],
          ) -> tuple[list[RunOutput], str | None]:
    paired, error = [], None
    where = golden.device  # the metrics run where the golden already is
    for name in list(actual) + [n for n in expected if n not in actual]:
        if name not in expected or name not in actual:
            side, missing = ("device", "golden") if name in actual else ("golden", "device")
            error = error or f"{name} is produced on the {side} but not by the {missing}"
            continue
        a, g = device.to_compared(actual[name], where), golden.to_compared(expected[name], where)
        if a is None or g is None:
            notes.append(f"{name} is a {type(actual[name]).__name__}, not a number or tensor; not compared")
        elif a.shape != g.shape and name != "output.0" and 0 in (a.numel(), g.numel()):
            # a workspace the backend defines: native_batch_norm's saved statistics in eval mode are
            # empty on the CPU and the running ones on CUDA
            notes.append(f"{name} has shape {tuple(a.shape)} on the device but {tuple(g.shape)} in the golden: an "
                         f"auxiliary output one backend leaves empty; not compared")
        elif a.shape != g.shape:
            error = error or (f"{name} has shape {tuple(a.shape)} on the device but {tuple(g.shape)} "
                              f"in the golden")
        else:
            paired.append(RunOutput(name, a, g, accumulation(name, a) if is_float(a) else None))
    return paired, error


def _with_baseline(outputs: list[RunOutput], side: Side, values: Mapping[str, Any],
                   notes: list[str]) -> list[RunOutput]:
    """Attach the baseline's value of each output; an output it lacks or shapes differently is noted."""
    joined = []
    for out in outputs:
        value = side.to_compared(values[out.name], out.actual.device) if out.name in values else None
        if value is None or value.shape != out.actual.shape:
            shape = "missing" if value is None else f"shape {tuple(value.shape)}"
            notes.append(f"{out.name}: the baseline's result is {shape}; judged without a baseline")
            joined.append(out)
        else:
            joined.append(replace(out, baseline=value))
    return joined


# ---------------------------------------------------------------- the public entry point


def _input_path(where: int | str) -> str:
    """3 -> input_args[3]; 'weight' -> input_kwargs['weight']; a path such as input_args[0][1] stays."""
    if isinstance(where, int):
        return f"input_args[{where}]"
    return where if where.startswith(("input_args[", "input_kwargs[")) else f"input_kwargs[{where!r}]"


def _grad_paths(args, kwargs, backward: bool, requires_grad: Collection[int | str], op: ResolvedOp,
                notes: list[str]) -> list[str]:
    if not backward:
        return []
    if kwargs.get("out") is not None:
        notes.append("out= arguments do not support autograd; backward skipped")
        return []
    tensors = {p: t for p, t in tensor_paths(args, kwargs).items() if is_float(t)}
    flagged = {_input_path(where) for where in requires_grad}
    paths = [p for p, t in tensors.items()
             if t.requires_grad or any(p == f or p.startswith(f + "[") for f in flagged)]
    if not paths:  # guessing would be wrong for buffers such as batch_norm's running statistics
        notes.append(f"no float input of {op.api_name} requires grad; backward skipped: "
                     f"set requires_grad on the inputs or pass their positions")
    return paths


def _autocast_precision(grads: list[RunOutput], rounds_to: torch.dtype | None, notes: list[str]) -> list[RunOutput]:
    """A float32 input that autocast cast to bfloat16 gets its gradient computed in bfloat16 and cast
    back: it holds bfloat16 precision in float32, and is judged as bfloat16."""
    if rounds_to is None:
        return grads
    judged = []
    for out in grads:
        if out.actual.is_floating_point() and out.actual.dtype.itemsize > rounds_to.itemsize:
            low = str(rounds_to).removeprefix("torch.")
            notes.append(f"{out.name} is judged as {low}: autocast computed it in {low} before casting it to "
                         f"{str(out.actual.dtype).removeprefix('torch.')}")
            out = replace(out, judged_dtype=rounds_to)
        judged.append(out)
    return judged


def _autocast_rounding(autocast: torch.dtype | None, output_dtypes: Sequence[torch.dtype]) -> torch.dtype | None:
    """What autocast rounded the call's inputs to: its output's dtype. A bfloat16 op (linear) casts
    every input to bfloat16 first; a float32 op (cross_entropy) raises them, which rounds nothing."""
    if autocast is None:
        return None
    floats = [d for d in output_dtypes if d.is_floating_point]
    return min(floats, key=lambda d: d.itemsize) if floats else None


def _baseline_op(op: ResolvedOp, golden_op: ResolvedOp) -> ResolvedOp:
    """A torch_npu op's peer on a GPU or CPU is its reference in the case's dtype: the NPU-versus-GPU
    ratio msprobe cannot give. Every other op's baseline runs the op itself."""
    return golden_op if op.prefix == "NPU" and op.reference is not None else op


def golden_runs(op: ResolvedOp, args: Sequence[Any], kwargs: Mapping[str, Any], golden: Backend) -> bool:
    """Whether the golden side runs the op's forward on these inputs without raising."""
    golden_op = op if op.reference is None else replace(op, func=op.reference)
    for dtype in (torch.float64, torch.float32):  # as run_call, which falls back where float64 has no kernel
        try:
            run_forward(golden_op, args, dict(kwargs), golden_for(golden, dtype, 0), (), [])
            return True
        except OpExecutionError:
            continue
    return False


def _mentions_double(exc: BaseException) -> bool:
    text = str(exc.__cause__ or exc).lower()
    kernel_error = isinstance(exc.__cause__, (NotImplementedError, RuntimeError))
    return kernel_error and ("double" in text or "float64" in text)


def run_call(op: ResolvedOp, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, *,
             device: Backend | torch.device | str, golden: Backend | None = None, baseline: Backend | None = None,
             backward: bool = False, grad_outputs: Sequence[torch.Tensor | None] | None = None,
             requires_grad: Collection[int | str] = (), seed: int = 0,
             golden_dtype: torch.dtype | None = torch.float64, autocast: torch.dtype | None = None,
             reference: Callable[..., Any] | None = None, recorded: RecordedResults | None = None) -> RunResult:
    """Run ``op`` on ``device``, on the golden (default: the CPU) and on ``baseline`` if given: :func:`replay`
    of the call these arguments prepare (replay.prepared.PreparedCall says what each one means)."""
    call = PreparedCall(op, args, kwargs or {}, backward=backward, grad_outputs=grad_outputs,
                        requires_grad=requires_grad, seed=seed, autocast=autocast, golden_dtype=golden_dtype,
                        reference=reference, recorded=recorded)
    return replay(call, device=device, golden=golden, baseline=baseline)


def replay(call: PreparedCall, *, device: Backend | torch.device | str, golden: Backend | None = None,
           baseline: Backend | None = None) -> RunResult:
    """Replay ``call`` on ``device``, on the golden (default: the CPU) and on ``baseline`` if given.

    Raise OpExecutionError when the op raises on the device or the golden; a baseline that raises
    is noted and the case is judged without it. Where ``call.recorded`` holds the device's results as a
    dump recorded them, the device side runs nothing, and the op itself need not exist here when it has a
    reference (``call.reference``, else ``op.reference``: a registered custom op's or a torch_npu op's).
    """
    op, args, backward, grad_outputs, seed = call.op, call.args, call.backward, call.grad_outputs, call.seed
    autocast, golden_dtype, reference, recorded = call.autocast, call.golden_dtype, call.reference, call.recorded
    if op.func is None and (recorded is None or (reference is None and op.reference is None)):
        raise ValueError(f"{op.api_name} cannot run ({op.unsupported}): skip the case instead of calling run_call")
    kwargs = dict(call.kwargs)
    device_backend = load_backend(device)
    golden_backend = golden if golden is not None else Backend("cpu")
    notes: list[str] = []
    grad_paths = _grad_paths(args, kwargs, backward, call.requires_grad, op, notes)
    reference = reference if reference is not None else op.reference
    golden_op = op if reference is None else replace(op, func=reference)
    family_mode, float32_mode = _float32_mode(device_backend, golden_op, args, kwargs, notes)
    math_mode = family_mode if family_mode is not None and family_mode.reduced else None

    device_side = Side(f"device ({device_backend.name})", device_backend, autocast=autocast, seed=seed)
    if recorded is None:
        dev = run_forward(op, args, kwargs, device_side, grad_paths, notes)
        cotangents, error = output_gradients(dev.outputs, grad_outputs, seed, notes) if grad_paths else ({}, None)
        dev_grads, dev_backward_seconds = run_backward(op, dev, cotangents, device_side) if not error else ({}, 0.0)
    else:
        dev, dev_grads, dev_backward_seconds = Forward(list(recorded.outputs), {}, 0.0), {}, 0.0
        cotangents, error = {}, None

    def golden_cotangents(outputs: list[tuple[str, Any]]) -> dict:
        """Offline no device output says which outputs a gradient flows into: the golden's forward does."""
        nonlocal cotangents, error
        cotangents, error = output_gradients(outputs, grad_outputs, seed, notes)
        return cotangents

    offline_grads = recorded is not None and bool(grad_paths)
    output_dtypes = recorded.output_dtypes if recorded is not None else [t.dtype for _, t in dev.outputs
                                                                          if isinstance(t, torch.Tensor)]
    golden_side = golden_for(golden_backend, golden_dtype, seed, _autocast_rounding(autocast, output_dtypes))
    if golden_dtype is None:
        notes.append(f"golden computed on {golden_backend.name} in the inputs' dtype: {op.api_name} is defined on "
                     f"its dtype's grid, where a float64 golden would step by float64's ulp")
    try:
        gold, gold_grads, golden_seconds, golden_notes = run_side(
            golden_op, args, kwargs, golden_side, grad_paths, golden_cotangents if offline_grads else cotangents)
    except OpExecutionError as exc:
        if golden_dtype != torch.float64 or not _mentions_double(exc):
            raise
        golden_side = golden_for(golden_backend, torch.float32, seed, golden_side.rounds_to)
        gold, gold_grads, golden_seconds, golden_notes = run_side(
            golden_op, args, kwargs, golden_side, grad_paths, golden_cotangents if offline_grads else cotangents)
        notes.append(f"golden computed in float32: no float64 kernel for {op.api_name} "
                     f"({type(exc.__cause__).__name__}: {exc.__cause__})")
    if grad_paths and not cotangents and not error:
        notes.append(f"no output of {op.api_name} requires grad; backward skipped")
    notes.extend(golden_notes)
    if golden_side.float_dtype == torch.float64 and op.prefix not in _TORCH_PREFIXES:
        _check_wide(op, gold.outputs)
    rule = measured_rule(golden_op, golden_side, notes) if _unknown(op) else None

    base_side = base = None
    base_grads: dict = {}
    baseline_seconds = 0.0
    if baseline is not None:
        base_side = Side(f"baseline ({baseline.name})", baseline, autocast=autocast, seed=seed)
        try:
            base, base_grads, baseline_seconds, base_notes = run_side(_baseline_op(op, golden_op), args, kwargs,
                                                                       base_side, grad_paths, cotangents)
            notes.extend(base_notes)
        except OpExecutionError as exc:
            notes.append(f"{exc}; judged without a baseline")

    forward_acc: list[Accumulation] = []  # computed on first use: integer-only results never need it

    def accumulation(name: str, actual: torch.Tensor) -> Accumulation:
        if not forward_acc:
            forward_acc.append(replace(forward_accumulation(golden_op, args, kwargs, golden_side, notes, rule),
                                       math_mode=math_mode))
        acc = forward_acc[0]
        own = output_norm(golden_op, args, kwargs, golden_side, name, actual.shape, notes, rule)
        if name == "output.0":
            return acc if own is None else replace(acc, term_norm=_fitting(own, actual.shape))
        # A norm's rows share their factor in its result, not in the statistics it also returns; nor
        # do result-shaped term norms describe a per-channel mean or invstd (native_batch_norm's).
        term_norm = _fitting(acc.term_norm if own is None else own, actual.shape)
        return replace(acc, shared=False, correlated=False, term_norm=term_norm,
                       sensitivity=_fitting(acc.sensitivity, actual.shape))

    expected = dict(gold.outputs)
    if recorded is not None:  # the dump keeps tensor files only: a golden result it lacks is not compared
        for name in [n for n in expected if n not in dict(dev.outputs)]:
            if not backward:  # a backward case reads its forward's outputs only to find an overflow
                notes.append(f"{name} is not among the dump's recorded tensors; not compared")
            del expected[name]
    outputs, forward_error = _pair(device_side, dict(dev.outputs), golden_side, expected, notes, accumulation)
    overflowed = _fair_overflow(outputs)
    if base is not None:
        outputs = _with_baseline(outputs, base_side, dict(base.outputs), notes)
    outputs = tie_aligned(op, outputs, lambda: side_arguments(args, kwargs, golden_side, []), (args, kwargs))
    outputs = _complex_split(aligned(op, outputs))

    if recorded is not None and backward:  # a gradient the dump did not record is not the device's fault
        placed = positional_gradients(recorded.grads, tensor_paths(args, kwargs), notes) if op.prefix == "NPU" \
            else leaf_gradients(recorded.grads, gold.outputs, gold.leaves, notes)
        dev_grads = {p: placed[p] for p in grad_paths if p in placed}
        gold_grads = {p: (g if p in dev_grads else None) for p, g in gold_grads.items()}
    grads: list[RunOutput] = []
    if dev_grads or gold_grads:
        for path in grad_paths:
            if dev_grads.get(path) is None and gold_grads.get(path) is None and recorded is None:
                notes.append(f"grad.{path} is None: {path} does not reach a differentiated output; omitted")
        out_numel = sum(t.numel() for n, t in gold.outputs if n in cotangents and isinstance(t, torch.Tensor))
        accs = {name: replace(acc, math_mode=math_mode) for name, acc in
                grad_accumulations(golden_op, args, kwargs, golden_side, grad_paths, cotangents, out_numel,
                                   notes, rule).items()}
        grads, grad_error = _pair(device_side, _named_grads(dev_grads), golden_side, _named_grads(gold_grads),
                                  notes, lambda n, t: accs.get(n))
        if base is not None:
            grads = _with_baseline(grads, base_side, _named_grads(base_grads), notes)
        grads = _complex_split(_autocast_precision(grads, golden_side.rounds_to, notes))
        error = error or grad_error
    spread = GoldenSpread(golden_op, args, kwargs, golden_side, grad_paths if grads else (), cotangents, seed)
    outputs = [replace(o, spread=spread.of(o.name, o.golden)) if o.accumulation is not None else o for o in outputs]
    grads = [replace(g, spread=spread.of(g.name, g.golden)) if g.accumulation is not None else g for g in grads]
    return RunResult(
        op=op.api_name, device=device_backend.device, golden_dtype=golden_side.float_dtype, outputs=tuple(outputs),
        grads=tuple(grads), device_seconds=dev.seconds + dev_backward_seconds, golden_seconds=golden_seconds,
        baseline_seconds=baseline_seconds, notes=tuple(dict.fromkeys(notes)), error=forward_error or error,
        overflowed=overflowed, float32_mode=float32_mode)


def _unknown(op: ResolvedOp) -> bool:
    """A user's op (a registered one, or a function given to check_call) that no accumulation rule
    describes, by its name or its like=: its bound is read from its reference (unknown_op_bounds.py)."""
    if op.like is not None or op_record(op.base_name).accumulation is not None:
        return False
    if op.prefix not in _TORCH_PREFIXES:
        return True
    return op.func is not None and name_of(op.func) is not None


def _check_wide(op: ResolvedOp, outputs: Sequence[tuple[str, Any]]) -> None:
    """Raise GoldenNotWide where a user's op (or its reference) returned a float narrower than float64."""
    for name, value in outputs:
        if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()) \
                and value.dtype not in (torch.float64, torch.complex128):
            dtype = str(value.dtype).removeprefix("torch.")
            raise GoldenNotWide(
                f"{op.api_name}: its golden returned {name} in {dtype} from float64 inputs, so it is no more precise "
                f"than the kernel (the op fixes its dtype inside) and every comparison would pass: give a "
                f"reference that computes in its inputs' dtype (check_call(..., reference=...), "
                f"register_op(..., reference=...), or reference: in the op case)")


def _float32_mode(device: Backend, op: ResolvedOp, args, kwargs, notes: list[str]) -> tuple[MathMode | None, str | None]:
    """The device's float32 mode for this op and its recorded name; (None, None) for an op no family
    covers. The bounds widen for a reduced mode only where an output is float32 (Accumulation.input_share)."""
    family = op_record(op.base_name).math_family
    if family is None:
        return None, None
    modes = float32_modes_of(device)
    if not modes.known and any(t.dtype == torch.float32 for t in tensor_paths(args, kwargs).values()):
        notes.append(f"no float32 math mode is recorded for {device.name}: {op.api_name} is judged as IEEE float32 "
                     f"(a float32 conv computed in HF32, torch_npu's default, fails so: tell the run its modes "
                     f"with --npu-precision-fp32-modes, e.g. conv=hf32)")
    mode = modes.for_family(family)
    return mode, mode.name if modes.known else "unknown"


def _complex_split(outputs: list[RunOutput]) -> list[RunOutput]:
    """A complex output as two real ones, ``NAME.real`` and ``NAME.imag``: the metrics and standards
    are real-valued, and each part of a complex64 result is a float32 computed by the kernel."""
    split = []
    for out in outputs:
        if not out.actual.is_complex():
            split.append(out)
            continue
        for part in ("real", "imag"):
            def take(t: torch.Tensor | None, part=part) -> torch.Tensor | None:
                return None if t is None else getattr(t.resolve_conj(), part).contiguous()
            split.append(replace(out, name=f"{out.name}.{part}", actual=take(out.actual), golden=take(out.golden),
                                 baseline=take(out.baseline)))
    return split


def _fair_overflow(outputs: Sequence[RunOutput]) -> str | None:
    """Where the device's forward gave inf because the exact result is past its dtype's largest value."""
    for out in outputs:
        if not out.actual.is_floating_point() or out.actual.dtype == torch.float64:
            continue
        largest = torch.finfo(out.actual.dtype).max
        if not out.actual.numel() or all(math.isfinite(v) for v in aminmax(out.actual)):
            continue  # the common case, found by reductions without an output-sized temporary
        inf = torch.isinf(out.actual.float())  # float8 has no isinf kernel
        count = int((out.golden[inf].abs() > largest).sum())
        if count:
            return (f"the forward's {out.name} overflowed {str(out.actual.dtype).removeprefix('torch.')} fairly at "
                    f"{count} element(s): the exact result is past {largest:.6g}, and the gradient carries the inf")
    return None


def _named_grads(grads: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    return {f"grad.{p}": g for p, g in grads.items() if g is not None}
