"""A backend that runs on the CPU and corrupts chosen ops: the test suite's fault injector.

It is also the smallest useful example of a backend (docs/backends.md, "Writing a backend"). A backend
subclasses ``pytest_npuprecision.Backend`` and overrides only what differs from a plain torch
device; this one overrides two methods and inherits the rest (to_device, synchronize, to_host,
running):

    call(api, func, args, kwargs)                  runs the op, then corrupts its outputs
    gradients(api, outputs, inputs, grad_outputs)  computes the gradients, then corrupts them
    info()                                         names the faults in the run's header line

Faults are keyed by msprobe's API name without call index ("Functional.linear", "Tensor.__add__"),
so every call of that API is corrupted. Write the backend into a module and name it on the
command line:

    # faults.py, beside faulty_backend.py
    from faulty_backend import Fault, FaultyBackend
    backend = FaultyBackend({"Functional.gelu": Fault("bias", 8),
                             "Functional.linear": Fault("nan", backward=True)})

    pytest --npu-precision dump/ --npu-precision-device faults:backend

A corrupted forward output keeps the true output's autograd graph: its values are replaced and its
gradient passes straight through. So a forward fault fails the op's forward cases only, and a
backward fault (``backward=True``) its backward cases only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence, get_args

import torch

from pytest_npuprecision import Backend, BackendInfo
from pytest_npuprecision.common.dtypes import float_format

Kind = Literal["nan", "inf", "saturation", "bias", "noise", "low_precision", "wrong_element", "sign_flip"]
KINDS: tuple[str, ...] = get_args(Kind)

# What ``amount`` means for each kind, and its value when a Fault does not give one.
AMOUNTS: dict[str, tuple[str, float]] = {
    "nan": ("unused", 0.0),
    "inf": ("unused", 0.0),
    "saturation": ("unused", 0.0),
    "bias": ("relative bias in eps of the output dtype", 8.0),
    "noise": ("ulp of random sign on every element", 64.0),
    "low_precision": ("unused", 0.0),
    "wrong_element": ("factor on one float element (integers get +1)", 1.5),
    "sign_flip": ("share of the nonzero elements negated", 0.01),
}


@dataclass(frozen=True)
class Fault:
    """One defect, planted in every forward output (or, with backward, every input gradient) of an API."""

    kind: Kind
    amount: float | None = None  # see AMOUNTS; None takes the kind's default
    dtype: torch.dtype | None = None  # low_precision: the dtype the op is computed in
    backward: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"fault kind {self.kind!r} is unknown: use one of {', '.join(KINDS)}")
        if self.kind == "low_precision":
            if self.dtype is None or not self.dtype.is_floating_point:
                raise ValueError(f"low_precision needs the float dtype to compute in, not {self.dtype}: "
                                 f"pass dtype=torch.bfloat16, for example")
            if self.backward:
                raise ValueError("low_precision is a forward fault (the backward has no op to recompute): "
                                 "drop backward=True")
        if self.amount is None:
            object.__setattr__(self, "amount", AMOUNTS[self.kind][1])

    def describe(self) -> str:
        """'bias 8', 'low_precision bfloat16', 'nan (backward)'."""
        detail = {"low_precision": str(self.dtype).removeprefix("torch.")}.get(
            self.kind, "" if AMOUNTS[self.kind][0] == "unused" else f"{self.amount:g}")
        return " ".join(filter(None, [self.kind, detail, "(backward)" if self.backward else ""]))


# ---------------------------------------------------------------- the corruptions: tensor in, tensor out


def _ulp(x: torch.Tensor) -> torch.Tensor:
    """One unit in the last place of each element, on x's own grid, in float64."""
    fmt = float_format(x.dtype)
    smallest_normal = math.ldexp(1.0, fmt.min_exponent)
    exponent = torch.frexp(x.double().abs().clamp(min=smallest_normal)).exponent - 1
    return torch.exp2((exponent - fmt.mantissa_bits).double())


def _victim(x: torch.Tensor) -> int:
    """The flat index of the finite element of largest magnitude: where one wrong element shows most."""
    magnitude = x.detach().reshape(-1).double().abs()
    return int(magnitude.nan_to_num(nan=-1.0, posinf=-1.0).argmax())


def _with_one(x: torch.Tensor, value: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor:
    """A copy of x whose victim element is value(old element), computed in float64."""
    flat = x.detach().clone().reshape(-1)
    i = _victim(x)
    flat[i] = value(flat[i].double()).to(x.dtype)
    return flat.reshape(x.shape)


def one_nan(x: torch.Tensor, amount: float) -> torch.Tensor:
    return _with_one(x, lambda v: torch.full_like(v, math.nan))


def one_inf(x: torch.Tensor, amount: float) -> torch.Tensor:
    return _with_one(x, lambda v: torch.where(v < 0, -math.inf, math.inf))


def saturation(x: torch.Tensor, amount: float) -> torch.Tensor:
    """NPU saturation mode: one element overflows, then every overflow becomes ±max and NaN becomes 0."""
    top = torch.finfo(x.dtype).max
    overflowed = _with_one(x, lambda v: torch.where(v < 0, -2.0, 2.0) * top)  # inf once rounded to x.dtype
    return overflowed.nan_to_num(nan=0.0, posinf=top, neginf=-top)


def bias(x: torch.Tensor, amount: float) -> torch.Tensor:
    """Every element scaled by 1 + amount·eps: a kernel that rounds the same way every time."""
    return (x.double() * (1 + amount * torch.finfo(x.dtype).eps)).to(x.dtype)


def noise(x: torch.Tensor, amount: float) -> torch.Tensor:
    """Every element off by ±amount ulp, the sign drawn at random (seeded)."""
    sign = torch.randint(0, 2, x.shape, generator=torch.Generator().manual_seed(0)) * 2 - 1
    return (x.double() + sign * amount * _ulp(x)).to(x.dtype)


def wrong_element(x: torch.Tensor, amount: float) -> torch.Tensor:
    if not x.is_floating_point():
        return _with_one(x, lambda v: ~v.bool() if x.dtype == torch.bool else v + 1)
    return _with_one(x, lambda v: v * amount)


def sign_flip(x: torch.Tensor, amount: float) -> torch.Tensor:
    """A share of the nonzero elements negated (at least one), chosen at random (seeded)."""
    flat = x.detach().clone().reshape(-1)
    nonzero = torch.nonzero(flat != 0).reshape(-1)
    count = max(1, math.ceil(amount * nonzero.numel()))
    chosen = nonzero[torch.randperm(nonzero.numel(), generator=torch.Generator().manual_seed(0))[:count]]
    flat[chosen] = -flat[chosen]
    return flat.reshape(x.shape)


CORRUPTIONS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "nan": one_nan, "inf": one_inf, "saturation": saturation, "bias": bias, "noise": noise,
    "wrong_element": wrong_element, "sign_flip": sign_flip,
}
FLOAT_ONLY = {"nan", "inf", "saturation", "bias", "noise"}  # an integer output is left as it is


def corrupt(x: torch.Tensor, fault: Fault) -> torch.Tensor:
    if fault.kind in FLOAT_ONLY and not x.is_floating_point():
        return x
    return CORRUPTIONS[fault.kind](x.detach(), fault.amount)


# ---------------------------------------------------------------- keeping autograd working


class _StraightThrough(torch.autograd.Function):
    """Forward: the corrupted values. Backward: the true output's gradient, untouched.

    ``out + (bad - out).detach()`` would do the same but turns an inf that both share (masked_fill
    with -inf) into NaN, since inf - inf is NaN.
    """

    @staticmethod
    def forward(ctx, true: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
        return corrupted.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad, None


def _paired(true: Any, other: Any, fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Any:
    """The result structure of ``true`` (a tensor, or tuples and lists of them), each tensor fn(true, other)."""
    if isinstance(true, torch.Tensor):
        return fn(true, other)
    if isinstance(true, (list, tuple)):
        items = [_paired(t, o, fn) for t, o in zip(true, other)]
        return type(true)(items) if type(true) in (list, tuple) else tuple(items)
    return true


def _straight_through(true: torch.Tensor, corrupted: torch.Tensor) -> torch.Tensor:
    return _StraightThrough.apply(true, corrupted) if true.requires_grad else corrupted


def _map_tensors(value: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)) and not isinstance(value, torch.Size):
        items = [_map_tensors(v, fn) for v in value]
        return type(value)(items) if type(value) in (list, tuple) else tuple(items)
    if isinstance(value, dict):
        return {k: _map_tensors(v, fn) for k, v in value.items()}
    return value


def computed_in(dtype: torch.dtype, func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """func with every float input more precise than dtype cast down to it, as a kernel that computes
    a float32 op in bfloat16 would. Every tensor is copied, so an in-place op writes into the copies."""
    eps = torch.finfo(dtype).eps

    def lowered(t: torch.Tensor) -> torch.Tensor:
        lower = t.is_floating_point() and torch.finfo(t.dtype).eps < eps
        return t.detach().to(dtype if lower else t.dtype, copy=True)

    with torch.no_grad():
        return func(*_map_tensors(list(args), lowered), **_map_tensors(kwargs, lowered))


# ---------------------------------------------------------------- the backend


class FaultyBackend(Backend):
    """The CPU, with the given faults planted in the named APIs; every other API runs as torch does."""

    def __init__(self, faults: Mapping[str, Fault] | None = None, *, name: str = "faulty-cpu"):
        super().__init__("cpu", name=name)
        self.faults = dict(faults or {})
        for api, fault in self.faults.items():
            if not isinstance(fault, Fault):
                raise TypeError(f"the fault for {api!r} is a {type(fault).__name__}: give a Fault, "
                                f"such as Fault('nan')")
            if api.count(".") != 1:
                raise ValueError(f"API name {api!r} is not msprobe's Prefix.name: use 'Functional.linear', "
                                 f"without call index or direction")

    def info(self) -> BackendInfo:
        planted = "; ".join(f"{api} {fault.describe()}" for api, fault in sorted(self.faults.items()))
        return BackendInfo(self.name, super().info().device_name, (("torch", torch.__version__),),
                           (("faults", planted or "none"),))

    def call(self, api: str, func: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
        fault = self.faults.get(api)
        if fault is None or fault.backward:
            return func(*args, **kwargs)
        if fault.kind == "low_precision":  # before the true call, which an in-place op runs on its inputs
            low = computed_in(fault.dtype, func, args, kwargs)
            out = func(*args, **kwargs)
            return _paired(out, low, lambda t, l: _straight_through(t, l.to(t.dtype)))
        out = func(*args, **kwargs)
        return _paired(out, out, lambda t, _: _straight_through(t, corrupt(t, fault)))

    def gradients(self, api: str, outputs: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor],
                  grad_outputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
        grads = super().gradients(api, outputs, inputs, grad_outputs)
        fault = self.faults.get(api)
        if fault is None or not fault.backward:
            return grads
        return tuple(None if g is None else corrupt(g, fault) for g in grads)
