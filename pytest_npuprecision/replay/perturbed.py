"""The golden run again on inputs moved by their own dtype's rounding: how far each result moves.

The inputs of a dumped call are already rounded to their dtype. Where an op is ill-conditioned at
those inputs (a cancelling difference, a pole, a near tie), a fair kernel's result can differ from
the float64 golden by far more than the standards' bounds, because any rounding inside the kernel
is amplified the same way. The spread of the golden over a few seeded draws of input rounding
measures that amplification for this call, element by element; the second look (precision/second_look.py)
judges a failing output against it. The runs happen only when asked, and at most once per call.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

import torch

from ..bounds import sampling_terms
from ..common import float_format
from ..ops import op_record
from .sides import OpExecutionError, Side, run_side, tensor_paths

# Seeded draws, each moving every input element by a random share in [-u, u] of its own rounding,
# as independent as the roundings inside a fair kernel. (Moving every input up by a whole u at once
# would move a sum of positive terms by u times the sum, as much as summing them in half precision
# errs, and excuse that.) The largest of five uniform shares is 0.83 u on average.
DRAWS = 5
# Where rounding the inputs moves an element by less than this many of the inputs' unit roundoffs
# (relative to the element), the op does not amplify rounding there, the standards' bounds already
# hold what a fair kernel errs, and the spread is set to 0: nothing is excused. (The float32
# statistics of attention over bfloat16 scores move by a few bfloat16 roundings when the inputs do,
# and so they do when the scores are summed in bfloat16: that defect must not hide in the spread.)
AMPLIFIED = 4.0

# Ops whose fair kernels are stable only normwise (OpRecord.normwise): matrix algorithms (a
# backward-stable QR or SVD is exact for a matrix moved by u times its norm, not each entry by u times
# itself), and affine_grid, whose grid is a product of theta with a base grid. Their inputs move by u
# times the larger of the element and the tensor's RMS. (grid_sample's grid moves as its kernel rounds
# coordinates, below.)
# A matrix algorithm is backward stable with a backward error of about its size n times u, not u: a
# Householder QR or an SVD is exact for a matrix moved by n u ||A|| (the bound's length for these ops
# is n^2, bounds/accumulation.py). Its draws move the inputs that far. Its backward reads the factors its
# forward saved (Q and R, U and V, the pseudo-inverse) as the dtype rounded them, and the gradients
# of matrix functions cancel terms as large as ||G|| ||A^+||: the draws round those factors too, as
# far, through autograd's saved-tensor hooks.


@dataclass(frozen=True)
class Jitter:
    """Moves a tensor, raised to the golden's dtype, by a uniform share in [-u, u] of each element
    (or, normwise, of the larger of it and the tensor's RMS), u being the unit roundoff of the
    tensor's own dtype: as far as rounding to that dtype may already have moved it."""

    generator: torch.Generator
    normwise: bool = False
    units: float = 1.0  # how many unit roundoffs the move may reach
    # the unit roundoff, where not the tensor's own dtype's (computed_roundoff; a saved factor)
    unit: float | None = None
    # Paths of sampling coordinates (grid_sample's grid): they also move as far as a fair kernel's
    # rounding misplaces them (bounds/terms/sampling_terms.py), in the compute dtype's unit roundoff.
    coordinates: frozenset[str] = frozenset()

    def __call__(self, t: torch.Tensor, dtype: torch.dtype, path: str | None = None) -> torch.Tensor:
        if t.is_complex() and not dtype.is_complex:
            dtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        if not (t.is_floating_point() or t.is_complex()) or not t.numel():
            return t.to(dtype)
        u = self.units * (self.unit or torch.finfo(t.real.dtype if t.is_complex() else t.dtype).eps / 2)
        wide = t.to(dtype)
        share = torch.rand(t.shape, generator=self.generator, dtype=torch.float64).mul_(2).sub_(1).mul_(u)
        if path in self.coordinates and not t.is_complex():
            placed = sampling_terms.COORDINATE_ROUNDINGS * float_format(t.dtype).accumulator.unit_roundoff / u
            return wide + share.to(wide.dtype) * (wide.abs() + placed * (wide.abs() + 1))
        if not self.normwise or t.is_complex():
            return wide * (1 + share.to(wide.real.dtype))
        size = wide.abs()
        rms = float(torch.where(torch.isfinite(size), size, 0).square().mean().sqrt())
        return wide + share.to(wide.dtype) * size.clamp(min=rms)


class GoldenSpread:
    """Per compared result (``output.0``, ``grad.input_args[0]``), how far the golden moves over the
    draws. Called with a result's name and its unmoved golden; runs the draws on the first call."""

    def __init__(self, op, args: Sequence[Any], kwargs: Mapping[str, Any], golden: Side, grad_paths: Sequence[str],
                 cotangents: Mapping[str, torch.Tensor], seed: int):
        self._run = (op, args, kwargs, golden, grad_paths, cotangents, seed)
        self._unit = computed_roundoff(op.base_name, args, kwargs)  # None: each input's own dtype's
        self._roundoff = self._unit or \
            roundoff([*tensor_paths(args, kwargs).values(), *cotangents.values()], golden.rounds_to)
        self._units = backward_error_units(op.base_name, args, kwargs)
        self._draws: list[dict[str, torch.Tensor]] | None = None
        self.failure: str | None = None  # why the draws could not run, for the verdict's note

    def of(self, name: str, golden: torch.Tensor) -> Callable[[], torch.Tensor | str | None]:
        """The spread of one result, measured when first asked for."""
        return lambda: self(name, golden)

    def __call__(self, name: str, golden: torch.Tensor) -> torch.Tensor | str | None:
        """The spread of result ``name``; a reason string when the draws could not run."""
        if self._draws is None:
            self._draws = self._measure()
        if self.failure is not None:
            return self.failure
        # Amplified past AMPLIFIED units of the dtype's own rounding, however far the draws moved.
        return spread_over([draw[name] for draw in self._draws if name in draw], golden, self._roundoff,
                           normwise=op_record(self._run[0].base_name).matrix_algorithm)

    def _measure(self) -> list[dict[str, torch.Tensor]]:
        op, args, kwargs, golden, grad_paths, cotangents, seed = self._run
        draws = []
        for draw in range(DRAWS):
            record = op_record(op.base_name)
            jitter = Jitter(_generator(seed, draw), normwise=record.normwise, units=self._units, unit=self._unit,
                            coordinates=record.accumulation.coordinates if record.accumulation else frozenset())
            side = replace(golden, jitter=jitter)
            moved_cotangents = {n: jitter(c, golden.float_dtype or c.dtype) for n, c in cotangents.items()}
            try:
                with _rounded_factors(op.base_name, replace(jitter, unit=self._roundoff), bool(grad_paths)):
                    forward, grads, _, _ = run_side(op, args, kwargs, side, grad_paths, moved_cotangents)
            except OpExecutionError as exc:
                self.failure = f"the golden raised on inputs moved by their rounding: {exc}"
                return []
            results = {n: t for n, t in forward.outputs if isinstance(t, torch.Tensor)}
            results.update({f"grad.{p}": g for p, g in grads.items() if g is not None})
            draws.append({n: golden.backend.to_host(t.detach()) for n, t in results.items()})
        return draws



def backward_error_units(op: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> float:
    """How many unit roundoffs a fair kernel's backward error reaches: the size n of a matrix
    algorithm's matrix (sqrt of the length its rule reads), 1 for every other op."""
    record = op_record(op)
    if not record.matrix_algorithm:
        return 1.0
    try:
        return max(math.sqrt(record.accumulation.length(args, kwargs)), 1.0)
    except Exception:  # an argument form the rule cannot read: the plain move
        return 1.0


def _rounded_factors(op: str, jitter: Jitter, backward: bool) -> contextlib.AbstractContextManager:
    """A matrix algorithm's saved factors moved as the dtype's rounding moves them (see OpRecord.normwise)."""
    if not backward or not op_record(op).matrix_algorithm:
        return contextlib.nullcontext()
    def pack(t: torch.Tensor) -> torch.Tensor:
        return jitter(t.detach(), t.dtype) if t.is_floating_point() or t.is_complex() else t
    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


def computed_roundoff(op: str | None, args: Sequence[Any], kwargs: Mapping[str, Any]) -> float | None:
    """float32's unit roundoff where a fair kernel computes ``op`` in float32 for these half-precision
    inputs and rounds once (OpRecord.rounded_once_in_half): its inputs are exact, only float32
    steps round inside it, so the draws move the inputs that far (a bfloat16 sum of cancelling terms
    moved by bfloat16's rounding would excuse a bias the float32 sum cannot make). None elsewhere."""
    if op is None or not op_record(op).is_rounded_once_in_half(args, kwargs):
        return None
    return torch.finfo(torch.float32).eps / 2


def roundoff(tensors: Sequence[Any], rounds_to: torch.dtype | None = None) -> float:
    """The largest unit roundoff of the float tensors' dtypes (of ``rounds_to`` for wider ones)."""
    found = 0.0
    for t in tensors:
        if isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex()):
            dtype = t.real.dtype if t.is_complex() else t.dtype
            if rounds_to is not None and dtype.itemsize > rounds_to.itemsize:
                dtype = rounds_to
            found = max(found, torch.finfo(dtype).eps / 2)
    return found


def spread_over(moved: Sequence[torch.Tensor], golden: torch.Tensor, roundoff: float,
                normwise: bool = False) -> torch.Tensor | None:
    """The largest move of each element of ``golden`` over the draws where the op amplifies the
    inputs' rounding (``roundoff``) more than AMPLIFIED-fold, 0 elsewhere; None unless every draw
    gave the element. normwise: of each matrix (the last two dims) as a whole, for every element of
    it, where the op is stable only normwise (OpRecord.normwise): its error bound holds for the matrix's norm,
    and a few random draws see each element's own sensitivity only by chance."""
    if len(moved) < DRAWS or any(m.shape != golden.shape for m in moved):
        return None
    spread = torch.zeros(golden.shape, dtype=golden.dtype, device=golden.device)
    for value in moved:
        step = (value.to(device=golden.device, dtype=golden.dtype) - golden).abs()
        # A draw that crossed a pole or left the domain: the result is undetermined at these inputs.
        step = torch.where(torch.isfinite(step) | ~torch.isfinite(golden), step, golden.abs())
        torch.maximum(spread, torch.nan_to_num(step, nan=0.0, posinf=0.0), out=spread)
    size = golden.abs()
    if normwise and golden.numel():
        dims = (-2, -1) if golden.dim() >= 2 else tuple(range(golden.dim()))
        spread = spread.amax(dims, keepdim=True).expand(golden.shape)
        size = torch.nan_to_num(size, nan=0.0, posinf=0.0).amax(dims, keepdim=True).expand(golden.shape)
    return torch.where(spread > AMPLIFIED * roundoff * size, spread, 0)


def input_spread(fn: Callable[..., torch.Tensor], args: Sequence[Any], kwargs: Mapping[str, Any] | None = None, *,
                 golden: torch.Tensor | None = None, seed: int = 0, normwise: bool = False,
                 op: str | None = None) -> torch.Tensor | None:
    """How far ``fn``'s float64 result moves, per element, when each float tensor argument moves by
    its own dtype's rounding, where ``fn`` amplifies that rounding (0 elsewhere, see AMPLIFIED): the
    ``spread=`` that :func:`judge` takes for its second look. ``args``
    are the call's arguments in the dtype the device got; golden: ``fn`` on them in float64, when
    the caller has it already; normwise: move them as OpRecord.normwise ops' are; op: the op's bare name
    ("softmax"), where its half-precision inputs move by float32's rounding (computed_roundoff).
    ``fn`` returns one tensor."""
    kwargs = dict(kwargs or {})
    unit = computed_roundoff(op, args, kwargs)

    def run(jitter: Jitter | None) -> torch.Tensor:
        def widen(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and (value.is_floating_point() or value.is_complex()):
                return value.double() if jitter is None else jitter(value, torch.float64)
            return value
        with torch.no_grad():
            return fn(*map(widen, args), **{k: widen(v) for k, v in kwargs.items()})

    golden = run(None) if golden is None else golden
    return spread_over([run(Jitter(_generator(seed, draw), normwise, unit=unit)) for draw in range(DRAWS)],
                       golden.double(), unit or roundoff([*args, *kwargs.values()]))


def _generator(seed: int, draw: int) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 7919 + draw) & 0x7FFF_FFFF_FFFF_FFFF)
