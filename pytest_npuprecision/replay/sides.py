"""One side of a call (the device, the golden or a baseline): its arguments moved and cast to where
and how it computes, its forward and its backward, and the errors that name the side that raised.

Every side starts from the caller's CPU tensors and never modifies them, and reaches its device
through a ``Backend``. The golden side raises floating inputs to its dtype (float64).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterator, Mapping, Sequence

import torch

from ..backends import Backend
from ..common import default_device, quantized_grid, rms_norm_eps
from ..ops import ResolvedOp


class OpExecutionError(RuntimeError):
    """The op itself raised: names the op, the side (device or golden) and the phase."""

    def __init__(self, op: str, side: str, phase: str, cause: BaseException):
        self.op, self.side, self.phase = op, side, phase
        super().__init__(f"{op} raised {type(cause).__name__} on the {side} during {phase}: {cause}")


@dataclass(frozen=True)
class Side:
    label: str  # "device (cuda:0)" or "golden (cpu, float64)"
    backend: Backend
    float_dtype: torch.dtype | None = None  # golden only: every floating input and dtype argument
    autocast: torch.dtype | None = None  # device and baseline only
    seed: int = 0
    rounds_to: torch.dtype | None = None  # golden of an autocast call: wider float inputs first rounded to this
    # The second look only (replay/perturbed.py): moves each float input by a share of its own dtype's rounding.
    jitter: Callable[..., torch.Tensor] | None = None  # (tensor, dtype, path)

    @property
    def device(self) -> torch.device:
        return self.backend.device

    def place(self, t: torch.Tensor, path: str | None = None) -> torch.Tensor:
        dtype = t.dtype
        if self.float_dtype is not None and t.is_floating_point():
            dtype = self.float_dtype
        elif self.float_dtype is not None and t.is_complex():
            dtype = torch.complex128 if self.float_dtype == torch.float64 else torch.complex64
        source = t.detach()
        if self.rounds_to is not None and t.is_floating_point() and t.dtype.itemsize > self.rounds_to.itemsize:
            source = source.to(self.rounds_to)  # as autocast casts a float32 weight before a bfloat16 matmul
        source = source.to(dtype) if self.jitter is None else self.jitter(source, dtype, path)
        placed = self.backend.to_device(source)
        # In-place ops and methods must never write into the caller's tensors, whatever the backend does.
        if placed.device == t.device and placed.data_ptr() == t.data_ptr() and t.numel():
            placed = placed.clone()
        return placed

    def factory_device(self) -> contextlib.AbstractContextManager:
        """This side's device as factory calls' default; nothing where it already is, as a device
        context adds a Python hop to every op."""
        return contextlib.nullcontext() if self.device == default_device() else self.device

    @contextlib.contextmanager
    def context(self) -> Iterator[None]:
        """Factory calls inside the op (arange, zeros) land on this side's device and float dtype."""
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.factory_device())
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


def tensor_paths(args: Sequence[Any], kwargs: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    found: dict[str, torch.Tensor] = {}

    def leaf(path: str, t: torch.Tensor) -> torch.Tensor:
        found[path] = t
        return t

    prepare(args, kwargs, leaf, lambda v: v, None)
    return found


def prepare(args, kwargs, leaf, other, device) -> tuple[tuple, dict]:
    call_args = tuple(_rebuild(a, f"input_args[{i}]", leaf, other) for i, a in enumerate(args))
    call_kwargs = {}
    for key, value in kwargs.items():
        # A dumped device is the dump machine's; the result belongs on this side's device.
        call_kwargs[key] = device if key == "device" and device is not None else \
            _rebuild(value, f"input_kwargs[{key!r}]", leaf, other)
    return call_args, call_kwargs


# Arguments a kernel holds in a type of its own, by op: (position, keyword, the value it uses for its
# first input's dtype and the given value or None). A golden raised to float64 must be given that
# value, or it computes another function (rms_norm's default eps of 2e-16 against float32's 1.2e-7:
# a 1e-3 error at a mean square of 1e-4). Which type depends on the torch (torch_compat.rms_norm_eps).
KERNEL_SCALARS = {"rms_norm": (3, "eps", rms_norm_eps)}


def side_arguments(args, kwargs, side: Side, notes: list[str], square: bool = False,
               grad_paths: Collection[str] = (), leaves: dict[str, torch.Tensor] | None = None,
               op_name: str | None = None) -> tuple[tuple, dict]:
    """The call's arguments for one side; tensors in ``grad_paths`` become leaves that require grad."""

    def leaf(path: str, t: torch.Tensor) -> torch.Tensor:
        placed = side.place(t, path)
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
        # A float8 dtype names a format to quantize into (npu_dynamic_mx_quant's dst_type), not one to compute in.
        if isinstance(value, torch.dtype) and side.float_dtype is not None and value.is_floating_point \
                and value != side.float_dtype and not quantized_grid(value):
            notes.append(f"golden computes the dtype argument {value} as {side.float_dtype}")
            return side.float_dtype
        return value

    call_args, call_kwargs = prepare(args, kwargs, leaf, other, side.device)
    if scalar_dtype is not None and op_name in KERNEL_SCALARS and args and isinstance(args[0], torch.Tensor):
        index, name, kernel_value = KERNEL_SCALARS[op_name]
        given = args[index] if len(args) > index else kwargs.get(name)  # as given, before any rounding
        call_args = call_args[:index]
        call_kwargs[name] = kernel_value(args[0].dtype, given)
    if square:  # addmm/baddbmm scale their terms by alpha and beta: the squared terms by their squares
        call_kwargs.update({k: v * v for k, v in call_kwargs.items()
                            if k in ("alpha", "beta") and isinstance(v, (int, float))})
    return call_args, call_kwargs


def _scalar_dtype(args, kwargs) -> torch.dtype | None:
    """float32 where the call's widest float tensor is at most 32 bits: the type a kernel computes
    Python scalars in. None for float64 calls and calls without float tensors."""
    widths = [t.dtype.itemsize for t in tensor_paths(args, kwargs).values() if t.is_floating_point()]
    return torch.float32 if widths and max(widths) <= 4 else None


@dataclass(frozen=True)
class Forward:
    outputs: list[tuple[str, Any]]  # flattened, still on the side's device, graph attached
    leaves: dict[str, torch.Tensor]
    seconds: float


@contextlib.contextmanager
def _op_errors(op: ResolvedOp, side: Side, direction: str) -> Iterator[None]:
    """What the op raises is an OpExecutionError of the case; running out of memory is the machine's."""
    try:
        yield
    except MemoryError:
        raise
    except Exception as exc:
        raise OpExecutionError(op.api_name, side.label, direction, exc) from exc


def run_forward(op: ResolvedOp, args, kwargs, side: Side, grad_paths: Collection[str],
             notes: list[str]) -> Forward:
    if not grad_paths and side.float_dtype == torch.float64:  # the golden of a large matmul: in blocks
        with _op_errors(op, side, "forward"):
            start = time.perf_counter()
            result = blocked_matmul(op, args, kwargs, side)
            side.backend.synchronize()
            if result is not None:
                return Forward(flatten_outputs(result), {}, time.perf_counter() - start)
    leaves: dict[str, torch.Tensor] = {}
    call_args, call_kwargs = side_arguments(args, kwargs, side, notes, grad_paths=grad_paths, leaves=leaves,
                                            op_name=op.base_name)
    grad_mode = torch.enable_grad() if grad_paths else torch.no_grad()
    with _op_errors(op, side, "forward"), grad_mode, side.context():
        start = time.perf_counter()
        result = side.backend.call(op.api_name, op.func, call_args, call_kwargs)
        side.backend.synchronize()
        seconds = time.perf_counter() - start
    if result is None and op.inplace and call_args:  # __setitem__ returns None; its result is args[0]
        result = call_args[0]
    return Forward(flatten_outputs(result), leaves, seconds)


# A large 2-D matmul is made block by block on the golden side: this many bytes of each operand at a time.
BLOCK_BYTES = 8 * 2**20


def blocked_matmul(op: ResolvedOp, args, kwargs, side: Side, square: bool = False) -> torch.Tensor | None:
    """``op(a, b)`` of a large 2-D matmul or mm on ``side`` (``op(a * a, b * b)`` with ``square``, the
    terms' norms), made block by block: whole, the side's float64 copies of both operands would sit
    beside the result. Each output element still sums all its K terms in one call. None for any other
    call (small, batched, with keywords, on moved inputs), which the side runs whole."""
    if op.base_name not in ("matmul", "mm") or op.reflected or op.func is None or kwargs or len(args) != 2 \
            or side.jitter is not None:
        return None
    a, b = args
    if not all(isinstance(t, torch.Tensor) and t.dim() == 2 and t.is_floating_point() for t in (a, b)) \
            or a.shape[1] != b.shape[0]:
        return None
    itemsize = (side.float_dtype or torch.promote_types(a.dtype, b.dtype)).itemsize
    (m, k), n = a.shape, b.shape[1]
    if (m + n) * k * itemsize <= 2 * BLOCK_BYTES:
        return None
    step = max(1, BLOCK_BYTES // (k * itemsize))
    out = None
    with torch.no_grad(), side.context():
        for c in range(0, n, step):
            right = side.place(b[:, c:c + step])  # a copy in the side's dtype, never the caller's tensor
            if square:
                right.mul_(right)
            for r in range(0, m, step):
                left = side.place(a[r:r + step])
                if square:
                    left.mul_(left)
                block = side.backend.call(op.api_name, op.func, (left, right), {})
                if out is None:
                    out = torch.empty((m, n), dtype=block.dtype, device=block.device)
                out[r:r + step, c:c + step] = block
                del left, block
    return out


def flatten_outputs(result: Any) -> list[tuple[str, Any]]:
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


def run_backward(op: ResolvedOp, run: Forward, cotangents: Mapping[str, torch.Tensor],
              side: Side) -> tuple[dict[str, torch.Tensor | None], float]:
    pairs = [(t, cotangents[n]) for n, t in run.outputs
             if n in cotangents and isinstance(t, torch.Tensor) and t.requires_grad]
    if not pairs or not run.leaves:
        return {}, 0.0
    outputs = [t for t, _ in pairs]
    grads_in = [g.to(device=side.device, dtype=t.dtype) for t, g in pairs]
    with _op_errors(op, side, "backward"), side.factory_device(), side.backend.running(side.seed):
        start = time.perf_counter()
        grads = side.backend.gradients(op.api_name, outputs, list(run.leaves.values()), grads_in)
        side.backend.synchronize()
        seconds = time.perf_counter() - start
    return dict(zip(run.leaves, grads)), seconds


def is_float(t: torch.Tensor) -> bool:
    return t.is_floating_point() or t.is_complex()


def run_side(op, args, kwargs, side: Side, grad_paths, cotangents) -> tuple[Forward, dict, float, list[str]]:
    """Forward, then backward with ``cotangents``: the output gradients by output name, or a function
    of this side's forward outputs that gives them."""
    notes: list[str] = []
    forward = run_forward(op, args, kwargs, side, grad_paths, notes)
    if callable(cotangents):
        cotangents = cotangents(forward.outputs)
    grads, seconds = run_backward(op, forward, cotangents, side) if grad_paths else ({}, 0.0)
    return forward, grads, forward.seconds + seconds, notes


def golden_for(golden: Backend, dtype: torch.dtype | None, seed: int, rounds_to: torch.dtype | None = None) -> Side:
    """The golden side; ``dtype`` None runs it in the inputs' own dtypes (an op defined on its dtype's grid)."""
    shown = "inputs' dtype" if dtype is None else str(dtype).removeprefix('torch.')
    return Side(f"golden ({golden.name}, {shown})", golden, float_dtype=dtype, seed=seed, rounds_to=rounds_to)

