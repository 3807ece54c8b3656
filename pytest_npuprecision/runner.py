"""Run one API call on the device under test, on a golden and optionally on a baseline, forward and backward.

Every side starts from the caller's CPU tensors and never modifies them, and reaches its device
through a ``Backend``. The device side and the baseline keep every dtype; the golden side (CPU by
default, or a GPU) computes with floating inputs raised to ``golden_dtype`` (float64), falling back
to float32 for ops that have no float64 kernel. Each float output also gets an ``Accumulation``
(reduction length, and for ops linear in their inputs the norm of the summed terms), which the
error-bound standard uses to scale its limit.

Every tensor in a ``RunResult`` is detached and on the golden's device, where the metrics are then
computed: ``actual`` and ``baseline`` in the dtype their device produced, ``golden`` in the golden
dtype. Python numbers become 0-d tensors (float -> float64, int -> int64, bool -> bool) so that they
are compared like tensors, with a tolerance where floating.
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

import torch

from .accumulation import ACCUMULATION_RULES, AccumulationRule
from .backends import Backend, auto_backend, load_backend
from .metrics import Accumulation
from .ops import ResolvedOp
from .recorded import RecordedResults, leaf_gradients, positional_gradients


@dataclass(frozen=True)
class RunOutput:
    """One compared tensor: a forward output (``output.1.0``) or an input gradient (``grad.input_args[0]``)."""

    name: str
    actual: torch.Tensor
    golden: torch.Tensor
    accumulation: Accumulation | None = None  # None for integer and bool outputs
    baseline: torch.Tensor | None = None  # the same output from a live baseline, in the device's dtype
    judged_dtype: torch.dtype | None = None  # the precision it was computed in, where autocast cast it up after


@dataclass(frozen=True)
class RunResult:
    op: str
    device: torch.device
    golden_dtype: torch.dtype  # the dtype the golden really used (float32 after a fallback)
    outputs: tuple[RunOutput, ...]
    grads: tuple[RunOutput, ...] = ()
    device_seconds: float = 0.0  # the op's forward and backward on the device, synchronized
    golden_seconds: float = 0.0  # the same for the golden; accumulation work is not counted
    baseline_seconds: float = 0.0
    notes: tuple[str, ...] = ()
    error: str | None = None  # device and golden (or dump) disagree on the structure of the results
    overflowed: str | None = None  # the device's forward left its dtype's range where the exact result does

    @property
    def ok(self) -> bool:
        return self.error is None


class OpExecutionError(RuntimeError):
    """The op itself raised: names the op, the side (device or golden) and the phase."""

    def __init__(self, op: str, side: str, phase: str, cause: BaseException):
        self.op, self.side, self.phase = op, side, phase
        super().__init__(f"{op} raised {type(cause).__name__} on the {side} during {phase}: {cause}")


def default_device() -> torch.device:
    """npu when torch_npu imports and sees a device, else cuda when available, else cpu."""
    return auto_backend().device


# ---------------------------------------------------------------- one side of a run


@dataclass(frozen=True)
class _Side:
    label: str  # "device (cuda:0)" or "golden (cpu, float64)"
    backend: Backend
    float_dtype: torch.dtype | None = None  # golden only: every floating input and dtype argument
    autocast: torch.dtype | None = None  # device and baseline only
    seed: int = 0
    rounds_to: torch.dtype | None = None  # golden of an autocast call: wider float inputs first rounded to this


    @property
    def device(self) -> torch.device:
        return self.backend.device

    def place(self, t: torch.Tensor) -> torch.Tensor:
        dtype = t.dtype
        if self.float_dtype is not None and t.is_floating_point():
            dtype = self.float_dtype
        elif self.float_dtype is not None and t.is_complex():
            dtype = torch.complex128 if self.float_dtype == torch.float64 else torch.complex64
        source = t.detach()
        if self.rounds_to is not None and t.is_floating_point() and t.dtype.itemsize > self.rounds_to.itemsize:
            source = source.to(self.rounds_to)  # as autocast casts a float32 weight before a bfloat16 matmul
        source = source.to(dtype)
        placed = self.backend.to_device(source)
        # In-place ops and methods must never write into the caller's tensors, whatever the backend does.
        if placed.device == t.device and placed.data_ptr() == t.data_ptr() and t.numel():
            placed = placed.clone()
        return placed

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """Factory calls inside the op (arange, zeros) land on this side's device and float dtype."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.device)
            stack.enter_context(self.backend.running(self.seed))
            if self.float_dtype in (torch.float32, torch.float64):
                previous = torch.get_default_dtype()
                torch.set_default_dtype(self.float_dtype)
                stack.callback(torch.set_default_dtype, previous)
            if self.autocast is not None:
                stack.enter_context(torch.autocast(self.device.type, dtype=self.autocast))
            yield

    def to_compared(self, value: Any, where: torch.device) -> torch.Tensor | None:
        """An output as a detached tensor on ``where``; None for what is neither number nor tensor."""
        if isinstance(value, torch.Tensor):
            return self.backend.to_host(value.detach()).to(where)
        if isinstance(value, bool):
            return torch.tensor(value, device=where)
        if isinstance(value, int):
            return torch.tensor(value, dtype=torch.int64, device=where)
        if isinstance(value, float):
            return torch.tensor(value, dtype=torch.float64, device=where)
        if isinstance(value, complex):
            return torch.tensor(value, dtype=torch.complex128, device=where)
        return None


def _rebuild(value: Any, path: str, leaf: Callable[[str, torch.Tensor], torch.Tensor],
             other: Callable[[Any], Any]) -> Any:
    """Copy an argument structure, replacing tensors with ``leaf(path, t)`` and other values with ``other``."""
    if isinstance(value, torch.Tensor):
        return leaf(path, value)
    if isinstance(value, torch.Size):
        return value
    if isinstance(value, (list, tuple)):
        items = [_rebuild(v, f"{path}[{i}]", leaf, other) for i, v in enumerate(value)]
        return type(value)(items) if type(value) in (list, tuple) else tuple(items)
    if isinstance(value, dict):
        return {k: _rebuild(v, f"{path}[{k!r}]", leaf, other) for k, v in value.items()}
    return other(value)


def _tensor_paths(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}

    def leaf(path: str, t: torch.Tensor) -> torch.Tensor:
        found[path] = t
        return t

    _prepare(args, kwargs, leaf, lambda v: v, None)
    return found


def _prepare(args, kwargs, leaf, other, device) -> tuple[tuple, dict]:
    call_args = tuple(_rebuild(a, f"input_args[{i}]", leaf, other) for i, a in enumerate(args))
    call_kwargs = {}
    for key, value in kwargs.items():
        # A dumped device is the dump machine's; the result belongs on this side's device.
        call_kwargs[key] = device if key == "device" and device is not None else \
            _rebuild(value, f"input_kwargs[{key!r}]", leaf, other)
    return call_args, call_kwargs


def _arguments(args, kwargs, side: _Side, notes: list[str], square: bool = False,
               grad_paths: Collection[str] = (), leaves: dict[str, torch.Tensor] | None = None,
               ) -> tuple[tuple, dict]:
    """The call's arguments for one side; tensors in ``grad_paths`` become leaves that require grad."""

    def leaf(path: str, t: torch.Tensor) -> torch.Tensor:
        placed = side.place(t)
        if square and (placed.is_floating_point() or placed.is_complex()):
            placed = placed * placed.conj() if placed.is_complex() else placed * placed
        if leaves is None or path not in grad_paths:
            return placed
        placed.requires_grad_(True)
        leaves[path] = placed
        # The op gets a copy of the leaf: in-place ops (add_, inplace=True) may not write into a leaf
        # that requires grad, and a copy is cheaper than working out which ops write where.
        return placed.clone()

    scalar_dtype = _scalar_dtype(args, kwargs) if side.float_dtype is not None else None

    def other(value: Any) -> Any:
        if isinstance(value, torch.device):
            return side.device
        if scalar_dtype is not None and type(value) is float:
            # The kernel rounds a Python float to its compute type (float32, also for half types):
            # an exact 0.001 in the golden would charge the kernel with 0.5 ulp on every element.
            return torch.tensor(value, dtype=scalar_dtype).item()
        if isinstance(value, torch.dtype) and side.float_dtype is not None and value.is_floating_point \
                and value != side.float_dtype:
            notes.append(f"golden computes the dtype argument {value} as {side.float_dtype}")
            return side.float_dtype
        return value

    call_args, call_kwargs = _prepare(args, kwargs, leaf, other, side.device)
    if square:  # addmm/baddbmm scale their terms by alpha and beta: the squared terms by their squares
        call_kwargs.update({k: v * v for k, v in call_kwargs.items()
                            if k in ("alpha", "beta") and isinstance(v, (int, float))})
    return call_args, call_kwargs


def _scalar_dtype(args, kwargs) -> torch.dtype | None:
    """float32 where the call's widest float tensor is at most 32 bits: the type a kernel computes
    Python scalars in. None for float64 calls and calls without float tensors."""
    widths = [t.dtype.itemsize for t in _tensor_paths(args, kwargs).values() if t.is_floating_point()]
    return torch.float32 if widths and max(widths) <= 4 else None


@dataclass(frozen=True)
class _Forward:
    outputs: list[tuple[str, Any]]  # flattened, still on the side's device, graph attached
    leaves: dict[str, torch.Tensor]
    seconds: float


@contextlib.contextmanager
def _op_errors(op: ResolvedOp, side: _Side, direction: str) -> Iterator[None]:
    """What the op raises is an OpExecutionError of the case; running out of memory is the machine's."""
    try:
        yield
    except MemoryError:
        raise
    except Exception as exc:
        raise OpExecutionError(op.api_name, side.label, direction, exc) from exc


def _forward(op: ResolvedOp, args, kwargs, side: _Side, grad_paths: Collection[str],
             notes: list[str]) -> _Forward:
    leaves: dict[str, torch.Tensor] = {}
    call_args, call_kwargs = _arguments(args, kwargs, side, notes, grad_paths=grad_paths, leaves=leaves)
    grad_mode = torch.enable_grad() if grad_paths else torch.no_grad()
    with _op_errors(op, side, "forward"), grad_mode, side.context():
        start = time.perf_counter()
        result = side.backend.call(op.api_name, op.func, call_args, call_kwargs)
        side.backend.synchronize()
        seconds = time.perf_counter() - start
    if result is None and op.inplace and call_args:  # __setitem__ returns None; its result is args[0]
        result = call_args[0]
    return _Forward(_flatten(result), leaves, seconds)


def _flatten(result: Any) -> list[tuple[str, Any]]:
    """Name every leaf of a result: output.0, output.1.0 for nested tuples, output.<key> for dicts."""
    out: list[tuple[str, Any]] = []

    def walk(value: Any, name: str) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{name}.{key}")
        elif isinstance(value, (list, tuple)) and not isinstance(value, torch.Tensor):
            for i, item in enumerate(value):  # includes torch.return_types named tuples
                walk(item, f"{name}.{i}")
        elif value is not None:
            out.append((name, value))

    walk(result if isinstance(result, (list, tuple, dict)) else (result,), "output")
    return out


def _backward(op: ResolvedOp, run: _Forward, cotangents: Mapping[str, torch.Tensor],
              side: _Side) -> tuple[dict[str, torch.Tensor | None], float]:
    pairs = [(t, cotangents[n]) for n, t in run.outputs
             if n in cotangents and isinstance(t, torch.Tensor) and t.requires_grad]
    if not pairs or not run.leaves:
        return {}, 0.0
    outputs = [t for t, _ in pairs]
    grads_in = [g.to(device=side.device, dtype=t.dtype) for t, g in pairs]
    with _op_errors(op, side, "backward"), side.device, side.backend.running(side.seed):
        start = time.perf_counter()
        grads = side.backend.gradients(op.api_name, outputs, list(run.leaves.values()), grads_in)
        side.backend.synchronize()
        seconds = time.perf_counter() - start
    return dict(zip(run.leaves, grads)), seconds


def _cotangents(outputs: list[tuple[str, Any]], grad_outputs: Sequence[torch.Tensor | None] | None,
                seed: int, notes: list[str]) -> tuple[dict[str, torch.Tensor], str | None]:
    """The gradient flowing into each differentiable output, on the CPU, plus a structure error if any."""
    tensors = [(n, t) for n, t in outputs if isinstance(t, torch.Tensor)]
    wanted = {n for n, t in tensors if t.requires_grad}
    if grad_outputs is None:
        generator = torch.Generator().manual_seed(seed)
        cotangents = {}
        for name, t in tensors:
            if name in wanted:  # drawn in float64 and rounded once, so both sides get the same values
                dtype = torch.complex128 if t.is_complex() else torch.float64
                cotangents[name] = torch.randn(t.shape, generator=generator, dtype=dtype).to(t.dtype)
        return cotangents, None
    if len(grad_outputs) == len(outputs) > len(tensors) and all(
            g is None for (_, o), g in zip(outputs, grad_outputs) if not isinstance(o, torch.Tensor)):
        # One entry per output, null for the ints (msprobe's backward input for seed, offset, numels).
        grad_outputs = [g for (_, o), g in zip(outputs, grad_outputs) if isinstance(o, torch.Tensor)]
    if len(grad_outputs) > len(tensors):
        return {}, (f"grad_outputs has {len(grad_outputs)} entries but the op returned {len(tensors)} "
                    f"tensor outputs: pass one gradient (or None) per tensor output")
    if len(grad_outputs) < len(tensors):
        notes.append(f"grad_outputs has {len(grad_outputs)} entries for {len(tensors)} tensor outputs; "
                     f"the rest get no gradient")
    cotangents = {}
    for (name, t), grad in zip(tensors, grad_outputs):
        if grad is None or name not in wanted:
            continue
        if tuple(grad.shape) != tuple(t.shape):
            return {}, (f"the gradient for {name} has shape {tuple(grad.shape)} but {name} has shape "
                        f"{tuple(t.shape)}: pass a gradient of the output's shape")
        cotangents[name] = grad.detach().cpu()
    return cotangents, None


# ---------------------------------------------------------------- accumulation


def _is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def _rule_args(op: ResolvedOp, args: Sequence[Any]) -> Sequence[Any]:
    # __rmatmul__(self, other) computes other @ self: the rules read the operands in math order.
    return (args[1], args[0], *args[2:]) if op.reflected and len(args) >= 2 else args


def _added_path(rule: AccumulationRule | None, args, kwargs) -> str | None:
    """The input path of the bias the rule adds to every sum, when the call passed one."""
    if rule is None or rule.added is None:
        return None
    index, name = rule.added
    if kwargs.get(name) is not None:
        return f"input_kwargs[{name!r}]"
    return f"input_args[{index}]" if index < len(args) and args[index] is not None else None


def _forward_length(op: ResolvedOp, rule: AccumulationRule | None, args, kwargs, notes: list[str]) -> int:
    """Terms per sum, counting a bias as one more term."""
    if rule is None:
        return 1
    try:
        bias = _added_path(rule, args, kwargs) is not None
        return max(int(rule.length(_rule_args(op, args), kwargs)), 1) + bias
    except Exception as exc:  # an argument form the table does not know: say so rather than guess
        notes.append(f"reduction length of {op.api_name} unknown ({type(exc).__name__}: {exc}); using 1")
        return 1


def _squared_outputs(op: ResolvedOp, args, kwargs, side: _Side, cotangents=None,
                     grad_paths: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """The op on squared inputs (forward), or its vector-Jacobian product with squared cotangents."""
    leaves: dict[str, torch.Tensor] = {}
    call_args, call_kwargs = _arguments(args, kwargs, side, [], square=True, grad_paths=grad_paths,
                                        leaves=leaves if cotangents is not None else None)
    with (torch.enable_grad() if leaves else torch.no_grad()), side.context():
        outputs = dict(_flatten(op.func(*call_args, **call_kwargs)))
        if cotangents is None:
            return {n: t for n, t in outputs.items() if isinstance(t, torch.Tensor)}
        pairs = [(outputs[n], g) for n, g in cotangents.items()
                 if isinstance(outputs.get(n), torch.Tensor) and outputs[n].requires_grad]
        if not pairs or not leaves:
            return {}
        grads = torch.autograd.grad([t for t, _ in pairs],
                                    list(leaves.values()),
                                    [(g.to(t.dtype) * g.to(t.dtype)) for t, g in pairs], allow_unused=True)
    return {f"grad.{p}": g for p, g in zip(leaves, grads) if g is not None}


def accumulation_for(op: ResolvedOp, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None,
                     golden: Backend | None = None) -> Accumulation:
    """The reduction length and term norms of ``op(*args, **kwargs)``, as dump cases derive them."""
    side = _golden_side(golden or Backend("cpu"), torch.float64, 0)
    return _forward_accumulation(op, list(args), dict(kwargs or {}), side, [])


def _forward_accumulation(op, args, kwargs, golden: _Side, notes: list[str]) -> Accumulation:
    rule = ACCUMULATION_RULES.get(op.base_name)
    accumulation = _forward_sums(op, rule, args, kwargs, golden, notes)
    if rule is not None and rule.sensitivity is not None:
        try:
            sensitivity = rule.sensitivity(_rule_args(op, args), kwargs).to(golden.device)
            accumulation = replace(accumulation, sensitivity=sensitivity)
        except Exception as exc:
            notes.append(f"sensitivity of {op.api_name} unavailable ({type(exc).__name__}: {exc})")
    return accumulation


def _forward_sums(op, rule: AccumulationRule | None, args, kwargs, golden: _Side, notes: list[str]) -> Accumulation:
    length = _forward_length(op, rule, args, kwargs, notes)
    if rule is not None and rule.term_norm is not None:
        try:
            norm = rule.term_norm(_rule_args(op, args), kwargs).to(golden.device)
        except Exception as exc:
            notes.append(f"term norms of {op.api_name} unavailable ({type(exc).__name__}: {exc})")
            norm = None
        return Accumulation(length, norm, roundings=rule.roundings)
    if rule is None or not rule.squared:
        return Accumulation(length, roundings=rule.roundings) if rule and rule.roundings \
            else Accumulation(length)
    try:
        squared = _squared_outputs(op, args, kwargs, golden)
        norm = squared["output.0"].detach().abs().sqrt()
    except Exception as exc:
        notes.append(f"term norms of {op.api_name} unavailable ({type(exc).__name__}: {exc})")
        return Accumulation(length)
    return Accumulation(length, norm / math.sqrt(length) if rule.mean else norm)


def _grad_accumulations(op, args, kwargs, golden: _Side, grad_paths, cotangents, out_numel: int,
                        notes: list[str]) -> dict[str, Accumulation]:
    """K per input gradient; exact for the matmul family, a safe upper estimate elsewhere.

    For an op linear in each input (y = x @ w), an element of grad_x sums over every output element
    it fed, times the forward length, divided by the input's size: N for x [M,K] @ w [K,N], M for w,
    and the batch too when w was broadcast over it. Other reductions take the larger of their forward
    length and the broadcast ratio; elementwise ops just the broadcast ratio (a bias added over a batch).
    """
    rule = ACCUMULATION_RULES.get(op.base_name)
    added = _added_path(rule, args, kwargs)
    k_forward = _forward_length(op, rule, args, kwargs, notes) - (added is not None)
    inputs = _tensor_paths(args, kwargs)
    norms: dict[str, torch.Tensor] = {}
    if rule is not None and rule.squared:
        try:
            norms = {n: g.detach().abs().sqrt() for n, g in
                     _squared_outputs(op, args, kwargs, golden, cotangents, grad_paths).items()}
        except Exception as exc:
            notes.append(f"gradient term norms of {op.api_name} unavailable ({type(exc).__name__}: {exc})")
    named: dict[str, torch.Tensor] = {}
    moved: dict[str, torch.Tensor] = {}
    for found, terms, what in ((named, rule and rule.grad_term_norms, "gradient term norms"),
                               (moved, rule and rule.grad_sensitivities, "gradient sensitivities")):
        if terms is not None and "output.0" in cotangents:
            try:
                found.update(terms(_rule_args(op, args), kwargs, cotangents["output.0"]))
            except Exception as exc:
                notes.append(f"{what} of {op.api_name} unavailable ({type(exc).__name__}: {exc})")
    result = {}
    for path in grad_paths:
        numel = max(inputs[path].numel(), 1)
        if rule is not None and rule.backward_length is not None:
            try:
                length = rule.backward_length(_rule_args(op, args), kwargs)
            except Exception as exc:
                notes.append(f"gradient reduction length of {op.api_name} unknown "
                             f"({type(exc).__name__}: {exc}); using the forward length")
                length = k_forward
        elif path == added:  # a bias's gradient sums the output gradient over what it was added to
            length = math.ceil(out_numel / numel)
        elif rule is not None and rule.squared:
            length = math.ceil(out_numel * k_forward / numel)
        else:
            length = max(k_forward if rule else 1, math.ceil(out_numel / numel))
        norm = norms.get(f"grad.{path}")
        if norm is None and rule is not None and rule.argument(path) in named:
            norm = named[rule.argument(path)].to(golden.device)
        if norm is None and length > 1:
            norm = _broadcast_term_norm(op, args, kwargs, golden, path, inputs[path].shape, cotangents)
        sensitivity = moved.get(rule.argument(path)) if rule is not None else None
        result[f"grad.{path}"] = Accumulation(max(int(length), 1), norm,
                                              sensitivity=None if sensitivity is None else sensitivity.to(golden.device))
    return result


def _broadcast_term_norm(op, args, kwargs, side: _Side, path: str, shape: torch.Size,
                         cotangents: Mapping[str, torch.Tensor]) -> torch.Tensor | None:
    """Term norms of a broadcast input's gradient, or None when the input was not broadcast.

    The gradient of an input broadcast over the output (a bias, a scalar) sums the output gradient
    over the broadcast dims, and those terms may cancel: a sum near zero of terms near one is only
    as exact as the terms are large. Run the op once more with the input expanded to the output's
    shape, so that autograd hands back each term before the sum. An op that is not elementwise in
    that input refuses the expanded shape or returns another shape, and the bound keeps |g| as scale.
    """
    try:
        target = torch.broadcast_shapes(*(g.shape for g in cotangents.values()))
        if shape.numel() == target.numel() or torch.broadcast_shapes(shape, target) != target:
            return None
        expanded_args, expanded_kwargs = _prepare(
            args, kwargs, lambda p, t: t.expand(target).contiguous() if p == path else t, lambda v: v, None)
        leaves: dict[str, torch.Tensor] = {}
        call_args, call_kwargs = _arguments(expanded_args, expanded_kwargs, side, [], grad_paths=(path,),
                                            leaves=leaves)
        with torch.enable_grad(), side.context():
            outputs = dict(_flatten(op.func(*call_args, **call_kwargs)))
            pairs = [(outputs.get(n), g) for n, g in cotangents.items()]
            if not all(isinstance(t, torch.Tensor) and t.shape == g.shape and t.requires_grad for t, g in pairs):
                return None
            terms, = torch.autograd.grad([t for t, _ in pairs], [leaves[path]],
                                         [g.to(device=t.device, dtype=t.dtype) for t, g in pairs])
    except Exception:  # not elementwise in this input: no term norms, as before
        return None
    return (terms.detach().abs() ** 2).sum_to_size(shape).sqrt()


# ---------------------------------------------------------------- pairing device and golden


def _pair(device: _Side, actual: Mapping[str, Any], golden: _Side, expected: Mapping[str, Any],
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
        elif a.shape != g.shape:
            error = error or (f"{name} has shape {tuple(a.shape)} on the device but {tuple(g.shape)} "
                              f"in the golden")
        else:
            paired.append(RunOutput(name, a, g, accumulation(name, a) if _is_float(a) else None))
    return paired, error


def _with_baseline(outputs: list[RunOutput], side: _Side, values: Mapping[str, Any],
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
    tensors = {p: t for p, t in _tensor_paths(args, kwargs).items() if _is_float(t)}
    flagged = {_input_path(where) for where in requires_grad}
    paths = [p for p, t in tensors.items()
             if t.requires_grad or any(p == f or p.startswith(f + "[") for f in flagged)]
    if not paths:  # guessing would be wrong for buffers such as batch_norm's running statistics
        notes.append(f"no float input of {op.api_name} requires grad; backward skipped: "
                     f"set requires_grad on the inputs or pass their positions")
    return paths


def _run_side(op, args, kwargs, side: _Side, grad_paths, cotangents) -> tuple[_Forward, dict, float, list[str]]:
    """Forward, then backward with ``cotangents``: the output gradients by output name, or a function
    of this side's forward outputs that gives them."""
    notes: list[str] = []
    forward = _forward(op, args, kwargs, side, grad_paths, notes)
    if callable(cotangents):
        cotangents = cotangents(forward.outputs)
    grads, seconds = _backward(op, forward, cotangents, side) if grad_paths else ({}, 0.0)
    return forward, grads, forward.seconds + seconds, notes


def _golden_side(golden: Backend, dtype: torch.dtype, seed: int, rounds_to: torch.dtype | None = None) -> _Side:
    return _Side(f"golden ({golden.name}, {str(dtype).removeprefix('torch.')})", golden, float_dtype=dtype, seed=seed,
                 rounds_to=rounds_to)


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
            _forward(golden_op, args, dict(kwargs), _golden_side(golden, dtype, 0), (), [])
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
             golden_dtype: torch.dtype = torch.float64, autocast: torch.dtype | None = None,
             reference: Callable[..., Any] | None = None, recorded: RecordedResults | None = None) -> RunResult:
    """Run ``op`` on ``device``, on the golden (default: the CPU) and on ``baseline`` if given.

    Raise OpExecutionError when the op raises on the device or the golden; a baseline that raises
    is noted and the case is judged without it. requires_grad: inputs to differentiate besides
    tensors whose ``requires_grad`` is already True: positions (3), keyword names ('weight') or paths
    ("input_args[0][1]", "input_kwargs['weight']"). seed: seeds each side's random ops and draws the
    output gradients when ``grad_outputs`` is None. autocast: run the device side (and the baseline)
    under autocast to this dtype (AMP dumps). reference: what the golden side calls, with the same
    arguments, instead of the op itself (default: ``op.reference``, a registered custom op's
    reference, else the op). recorded: the device's results as a dump recorded them; the device
    side then runs nothing, and the op itself need not exist here when it has a reference.
    """
    if op.func is None and (recorded is None or (reference is None and op.reference is None)):
        raise ValueError(f"{op.api_name} cannot run ({op.unsupported}): skip the case instead of calling run_call")
    kwargs = dict(kwargs or {})
    device_backend = load_backend(device)
    golden_backend = golden if golden is not None else Backend("cpu")
    notes: list[str] = []
    grad_paths = _grad_paths(args, kwargs, backward, requires_grad, op, notes)
    reference = reference if reference is not None else op.reference
    golden_op = op if reference is None else replace(op, func=reference)

    device_side = _Side(f"device ({device_backend.name})", device_backend, autocast=autocast, seed=seed)
    if recorded is None:
        dev = _forward(op, args, kwargs, device_side, grad_paths, notes)
        cotangents, error = _cotangents(dev.outputs, grad_outputs, seed, notes) if grad_paths else ({}, None)
        dev_grads, dev_backward_seconds = _backward(op, dev, cotangents, device_side) if not error else ({}, 0.0)
    else:
        dev, dev_grads, dev_backward_seconds = _Forward(list(recorded.outputs), {}, 0.0), {}, 0.0
        cotangents, error = {}, None

    def golden_cotangents(outputs: list[tuple[str, Any]]) -> dict:
        """Offline no device output says which outputs a gradient flows into: the golden's forward does."""
        nonlocal cotangents, error
        cotangents, error = _cotangents(outputs, grad_outputs, seed, notes)
        return cotangents

    offline_grads = recorded is not None and bool(grad_paths)
    output_dtypes = recorded.output_dtypes if recorded is not None else [t.dtype for _, t in dev.outputs
                                                                          if isinstance(t, torch.Tensor)]
    golden_side = _golden_side(golden_backend, golden_dtype, seed, _autocast_rounding(autocast, output_dtypes))
    try:
        gold, gold_grads, golden_seconds, golden_notes = _run_side(
            golden_op, args, kwargs, golden_side, grad_paths, golden_cotangents if offline_grads else cotangents)
    except OpExecutionError as exc:
        if golden_dtype != torch.float64 or not _mentions_double(exc):
            raise
        golden_side = _golden_side(golden_backend, torch.float32, seed, golden_side.rounds_to)
        gold, gold_grads, golden_seconds, golden_notes = _run_side(
            golden_op, args, kwargs, golden_side, grad_paths, golden_cotangents if offline_grads else cotangents)
        notes.append(f"golden computed in float32: no float64 kernel for {op.api_name} "
                     f"({type(exc.__cause__).__name__}: {exc.__cause__})")
    if grad_paths and not cotangents and not error:
        notes.append(f"no output of {op.api_name} requires grad; backward skipped")
    notes.extend(golden_notes)

    base_side = base = None
    base_grads: dict = {}
    baseline_seconds = 0.0
    if baseline is not None:
        base_side = _Side(f"baseline ({baseline.name})", baseline, autocast=autocast, seed=seed)
        try:
            base, base_grads, baseline_seconds, base_notes = _run_side(_baseline_op(op, golden_op), args, kwargs,
                                                                       base_side, grad_paths, cotangents)
            notes.extend(base_notes)
        except OpExecutionError as exc:
            notes.append(f"{exc}; judged without a baseline")

    forward_acc: list[Accumulation] = []  # computed on first use: integer-only results never need it

    def accumulation(name: str, actual: torch.Tensor) -> Accumulation:
        if not forward_acc:
            forward_acc.append(_forward_accumulation(golden_op, args, kwargs, golden_side, notes))
        return forward_acc[0]

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

    if recorded is not None and backward:  # a gradient the dump did not record is not the device's fault
        placed = positional_gradients(recorded.grads, _tensor_paths(args, kwargs), notes) if op.prefix == "NPU" \
            else leaf_gradients(recorded.grads, gold.outputs, gold.leaves, notes)
        dev_grads = {p: placed[p] for p in grad_paths if p in placed}
        gold_grads = {p: (g if p in dev_grads else None) for p, g in gold_grads.items()}
    grads: list[RunOutput] = []
    if dev_grads or gold_grads:
        for path in grad_paths:
            if dev_grads.get(path) is None and gold_grads.get(path) is None and recorded is None:
                notes.append(f"grad.{path} is None: {path} does not reach a differentiated output; omitted")
        out_numel = sum(t.numel() for n, t in gold.outputs if n in cotangents and isinstance(t, torch.Tensor))
        accs = _grad_accumulations(golden_op, args, kwargs, golden_side, grad_paths, cotangents, out_numel, notes)
        grads, grad_error = _pair(device_side, _named_grads(dev_grads), golden_side, _named_grads(gold_grads),
                                  notes, lambda n, t: accs.get(n))
        if base is not None:
            grads = _with_baseline(grads, base_side, _named_grads(base_grads), notes)
        grads = _autocast_precision(grads, golden_side.rounds_to, notes)
        error = error or grad_error
    return RunResult(
        op=op.api_name, device=device_backend.device, golden_dtype=golden_side.float_dtype, outputs=tuple(outputs),
        grads=tuple(grads), device_seconds=dev.seconds + dev_backward_seconds, golden_seconds=golden_seconds,
        baseline_seconds=baseline_seconds, notes=tuple(dict.fromkeys(notes)), error=forward_error or error,
        overflowed=overflowed)


def _fair_overflow(outputs: Sequence[RunOutput]) -> str | None:
    """Where the device's forward gave inf because the exact result is past its dtype's largest value."""
    for out in outputs:
        if not out.actual.is_floating_point() or out.actual.dtype == torch.float64:
            continue
        largest = torch.finfo(out.actual.dtype).max
        fair = torch.isinf(out.actual) & (out.golden.abs() > largest)
        count = int(fair.sum())
        if count:
            return (f"the forward's {out.name} overflowed {str(out.actual.dtype).removeprefix('torch.')} fairly at "
                    f"{count} element(s): the exact result is past {largest:.6g}, and the gradient carries the inf")
    return None


def _named_grads(grads: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    return {f"grad.{p}": g for p, g in grads.items() if g is not None}
