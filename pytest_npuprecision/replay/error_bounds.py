"""What bounds a fair kernel's error in each output and input gradient: the reduction length, the
norms of the summed terms and the sensitivities that each op's catalogue record gives (ops/catalogue.py), computed on the
golden side from the call's own arguments.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Collection, Mapping, Sequence

import torch

from ..backends import Backend
from ..bounds import AccumulationRule, term_repeats
from ..ops import ResolvedOp, op_record
from ..precision import Accumulation
from .sides import Side, blocked_matmul, flatten_outputs, golden_for, prepare, side_arguments, tensor_paths


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


def _squared_outputs(op: ResolvedOp, args, kwargs, side: Side, cotangents=None,
                     grad_paths: Collection[str] = ()) -> dict[str, torch.Tensor]:
    """The op on squared inputs (forward), or its vector-Jacobian product with squared cotangents."""
    leaves: dict[str, torch.Tensor] = {}
    call_args, call_kwargs = side_arguments(args, kwargs, side, [], square=True, grad_paths=grad_paths,
                                        leaves=leaves if cotangents is not None else None)
    with (torch.enable_grad() if leaves else torch.no_grad()), side.context():
        outputs = dict(flatten_outputs(op.func(*call_args, **call_kwargs)))
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
    side = golden_for(golden or Backend("cpu"), torch.float64, 0)
    return forward_accumulation(op, list(args), dict(kwargs or {}), side, [])


def output_norm(op, args, kwargs, golden: Side, name: str, shape: torch.Size, notes: list[str],
                rule: AccumulationRule | None = None) -> torch.Tensor | None:
    """The term norms of output ``name`` of ``shape`` where the rule gives them by output
    (AccumulationRule.output_norms); None where it does not."""
    rule = rule or op_record(op.base_name).accumulation
    if rule is None or rule.output_norms is None:
        return None
    try:
        norm = rule.output_norms(_rule_args(op, args), kwargs, name, shape)
    except Exception as exc:
        notes.append(f"term norms of {op.api_name}'s {name} unavailable ({type(exc).__name__}: {exc})")
        return None
    return None if norm is None else norm.to(golden.device)


def forward_accumulation(op, args, kwargs, golden: Side, notes: list[str],
                         rule: AccumulationRule | None = None) -> Accumulation:
    """rule: the op's (unknown_op_bounds.measured_rule for a user's op no table describes); default: the table's."""
    record = op_record(op.base_name)
    rule = rule or record.accumulation
    accumulation = _forward_sums(op, rule, args, kwargs, golden, notes)
    accumulation = _with_repeats(op, accumulation, _summed_factors(rule, args, kwargs), notes)
    if record.is_rounded_once(args, kwargs):
        accumulation = replace(accumulation, rounded_once=True, exactly_rounded=record.is_exactly_rounded(args, kwargs))
    elif record.is_rounded_once_in_half(args, kwargs):
        accumulation = replace(accumulation, rounded_once_in_half=True)
    if record.plain_sum and accumulation.term_norm is not None:
        accumulation = replace(accumulation, plain_sum=True)
    if rule is not None and (rule.correlated or rule.shared is not False):
        accumulation = replace(accumulation, correlated=True)
    if rule is not None and rule.shared:
        try:
            shared = rule.shared(_rule_args(op, args), kwargs) if callable(rule.shared) else rule.shared
        except Exception:  # an argument the rule cannot read: no shared factor assumed
            shared = False
        accumulation = replace(accumulation, shared=bool(shared), shared_dim=rule.shared_dim if shared else None,
                               row_sum=rule.row_sum if shared else None)
        if shared and rule.shared_affine is not None:
            try:
                weight, bias = rule.shared_affine(_rule_args(op, args), kwargs)
                accumulation = replace(accumulation, shared_offset=weight, shared_origin=bias)
            except Exception as exc:  # then a norm's rows carry no residual check: the weight is unknown
                notes.append(f"affine parameters of {op.api_name} unreadable ({type(exc).__name__}: {exc})")
                accumulation = replace(accumulation, shared=False, shared_dim=None, row_sum=None)
    if accumulation.row_sum is not None and rule.row_offset_size is not None:
        try:
            size = rule.row_offset_size(_rule_args(op, args), kwargs).to(golden.device)
            accumulation = replace(accumulation, row_offset_size=size)
        except Exception as exc:  # then no ceiling: what the rows subtract (log-sum-exp, mean) is unknown
            notes.append(f"row offsets of {op.api_name} (its log-sum-exp or mean) unavailable "
                         f"({type(exc).__name__}: {exc})")
            accumulation = replace(accumulation, row_sum=None)
    if rule is not None and rule.sensitivity is not None:
        try:
            sensitivity = rule.sensitivity(_rule_args(op, args), kwargs).to(golden.device)
            accumulation = replace(accumulation, sensitivity=sensitivity)
        except Exception as exc:
            notes.append(f"sensitivity of {op.api_name} unavailable ({type(exc).__name__}: {exc})")
    return accumulation


def _summed_factors(rule: AccumulationRule | None, args, kwargs, cotangent: torch.Tensor | None = None,
                    path: str | None = None) -> list[torch.Tensor]:
    """The tensors whose values multiply into each term of the op's sums (or of input ``path``'s
    gradient, given the output's gradient): every operand of an op linear in each (a matmul's two, a
    sum's one), or the first input of one that is not (a softmax's scores); never the bias it adds,
    nor, for a gradient, the input it is of. A bias's gradient sums the output gradient alone."""
    if rule is None:
        return []
    added = _added_path(rule, args, kwargs)
    tensors = {p: t for p, t in tensor_paths(args, kwargs).items() if t.is_floating_point() and p != added}
    if path is not None and path == added:
        return [cotangent] if cotangent is not None else []
    if rule.squared:
        factors = [t for p, t in tensors.items() if p != path]
    else:
        factors = list(tensors.values())[:1]
    return factors + ([cotangent] if cotangent is not None else [])


def _with_repeats(op: ResolvedOp, accumulation: Accumulation, factors: list[torch.Tensor],
                  notes: list[str], counted_before: dict | None = None) -> Accumulation:
    """The accumulation with its terms' repetition counted (bounds/terms/repeated_terms.py), said in a note."""
    repeats = term_repeats(factors, accumulation.length, counted_before) if factors else 1.0
    if repeats < REPEATS_NOTED:
        return accumulation
    note = (f"the terms of {op.api_name}'s sums repeat (each value about {repeats:.0f} times in a sum of "
            f"{accumulation.length}): adding one value again errs alike, so the bound counts those roundings "
            f"as correlated, sqrt(K·{repeats:.0f}) of them")
    if note not in notes:
        notes.append(note)
    return replace(accumulation, repeats=repeats)


# Below this, terms repeat as seldom as distinct values collide by chance: counted as independent.
REPEATS_NOTED = 1.5


def _forward_sums(op, rule: AccumulationRule | None, args, kwargs, golden: Side, notes: list[str]) -> Accumulation:
    length = _forward_length(op, rule, args, kwargs, notes)
    if rule is not None and rule.term_norm is not None:
        try:
            norm = rule.term_norm(_rule_args(op, args), kwargs).to(golden.device)
        except Exception as exc:
            notes.append(f"term norms of {op.api_name} unavailable ({type(exc).__name__}: {exc})")
            norm = None
        return Accumulation(length, norm)
    if rule is None or not rule.squared:
        return Accumulation(length)
    try:
        norm = blocked_matmul(op, args, kwargs, golden, square=True)
        if norm is None:
            norm = _squared_outputs(op, args, kwargs, golden)["output.0"].detach()
        norm = norm.abs_().sqrt_()  # in place: the op's result on our own squared copies, used once
    except Exception as exc:
        notes.append(f"term norms of {op.api_name} unavailable ({type(exc).__name__}: {exc})")
        return Accumulation(length)
    return Accumulation(length, norm / math.sqrt(length) if rule.mean else norm)


def grad_accumulations(op, args, kwargs, golden: Side, grad_paths, cotangents, out_numel: int,
                        notes: list[str], rule: AccumulationRule | None = None) -> dict[str, Accumulation]:
    """K per input gradient; exact for the matmul family, a safe upper estimate elsewhere.

    For an op linear in each input (y = x @ w), an element of grad_x sums over every output element
    it fed, times the forward length, divided by the input's size: N for x [M,K] @ w [K,N], M for w,
    and the batch too when w was broadcast over it. Other reductions take the larger of their forward
    length and the broadcast ratio; elementwise ops just the broadcast ratio (a bias added over a batch).
    rule: as forward_accumulation's.
    """
    rule = rule or op_record(op.base_name).accumulation
    added = _added_path(rule, args, kwargs)
    k_forward = _forward_length(op, rule, args, kwargs, notes) - (added is not None)
    inputs = tensor_paths(args, kwargs)
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
    counted: dict = {}  # the factors' distinct values, which every gradient of the call shares
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
        accumulation = Accumulation(max(int(length), 1), norm,
                                    sensitivity=None if sensitivity is None else sensitivity.to(golden.device))
        factors = _summed_factors(rule, args, kwargs, cotangents.get("output.0"), path) if rule is not None \
            else [cotangents["output.0"]] if "output.0" in cotangents else []
        result[f"grad.{path}"] = _with_repeats(op, accumulation, factors, notes, counted)
    return result


def _broadcast_term_norm(op, args, kwargs, side: Side, path: str, shape: torch.Size,
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
        expanded_args, expanded_kwargs = prepare(
            args, kwargs, lambda p, t: t.expand(target).contiguous() if p == path else t, lambda v: v, None)
        leaves: dict[str, torch.Tensor] = {}
        call_args, call_kwargs = side_arguments(expanded_args, expanded_kwargs, side, [], grad_paths=(path,),
                                            leaves=leaves)
        with torch.enable_grad(), side.context():
            outputs = dict(flatten_outputs(op.func(*call_args, **call_kwargs)))
            pairs = [(outputs.get(n), g) for n, g in cotangents.items()]
            if not all(isinstance(t, torch.Tensor) and t.shape == g.shape and t.requires_grad for t, g in pairs):
                return None
            terms, = torch.autograd.grad([t for t, _ in pairs], [leaves[path]],
                                         [g.to(device=t.device, dtype=t.dtype) for t, g in pairs])
    except Exception:  # not elementwise in this input: no term norms, as before
        return None
    return (terms.detach().abs() ** 2).sum_to_size(shape).sqrt()

