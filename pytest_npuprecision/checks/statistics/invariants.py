"""What one statistics dump proves on its own: the bounds an op's definition puts on its outputs' Max, Min, Mean
and Norm given its inputs', each widened by the output dtype's fair rounding and by msprobe's own rounding of
the statistics (summaries.Summary.slack).

Each family is one function of the call's summaries; the op catalogue says which family an op belongs to
(``OpRecord.statistics``). A call no family describes has no invariant, and says so.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch

from ...common import float_format
from ...dump import DecodedCall, TensorSpec
from .summaries import CallSummaries, Summary
from .verdicts import Finding, finding

# An elementwise op's output is within this many unit roundoffs of its exact value: one rounding of a float32
# computation for half types, a few ulps of a vectorized float32 or float64 function otherwise.
_ELEMENT_ROUNDINGS = {True: 2.0, False: 8.0}  # keyed by "computed wider" (float16, bfloat16)
_GRID = 4096


class NoInvariant(Exception):
    """The call has no invariant its statistics can check; the message says why."""


def check_invariants(family: str | None, op: Any, call: DecodedCall, summaries: CallSummaries,
                     backward: bool) -> list[Finding]:
    """The invariant checks of one call of ``op`` (ops.resolution.ResolvedOp); raise NoInvariant with the
    reason where none applies."""
    name, func = op.base_name, op.func
    if family is None:
        raise NoInvariant(f"{name} has no invariant its statistics can check (its outputs' statistics are no "
                          f"function of its inputs')")
    if backward and family != "same_values":
        raise NoInvariant(f"the gradients of {name} have no invariant their statistics can check")
    check = _FAMILIES[family]
    outputs = [s for s in summaries.outputs if s.floating and s.max is not None]
    if not outputs:
        raise NoInvariant(f"{name}: no float output with statistics")
    if not all(s.finite for s in summaries.inputs):
        raise NoInvariant(f"{name}: an inf or nan among its inputs' statistics, which bound nothing")
    return check(name=name, func=func, call=call, summaries=summaries, outputs=outputs,
                 reflected=bool(getattr(op, "reflected", False)))


def _output_allowance(out: Summary, value: float) -> float:
    """How far a fair kernel's output element (or a statistic of them) may sit from the exact value."""
    fmt = float_format(out.dtype)
    return _ELEMENT_ROUNDINGS[fmt.computed_wider] * fmt.unit_roundoff * abs(value) + fmt.smallest_subnormal


def _range(metric: str, out: Summary, statistic: str, low: float, high: float, allowance: float,
           why: str, output: str | None = None) -> Finding:
    value = out.value(statistic)
    # An inf or nan where every input is finite and the op cannot leave the dtype's range (each family says
    # NoInvariant where it can): as far past the range as a number gets.
    excess = math.inf if not math.isfinite(value) else max(low - value, value - high, 0.0)
    shown = f"[{low:.9g}, {high:.9g}]" if low != high else f"{low:.9g}"
    return finding(output or out.name, metric, excess, allowance,
                   f"{out.name} {statistic} {value:.9g} where {why} puts it at {shown}; fair rounding allows "
                   f"{allowance:.3g}")


def _unary_input(call: DecodedCall, summaries: CallSummaries) -> tuple[Summary, TensorSpec]:
    specs = list(call.specs())
    floats = [s for s in specs if s.dtype.is_floating_point]
    if len(specs) != 1 or len(floats) != 1:
        raise NoInvariant("not one float tensor argument: its output is no function of one tensor's elements")
    return summaries.input(floats[0].where), floats[0]


def elementwise(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """f applied to each element: every output element is f of an input element in [Min, Max], and the
    elements at Min and Max are among them. So Max lies between max(f(Min), f(Max)) and f's largest value on
    the interval, Min between f's least value there and min(f(Min), f(Max)); a monotone f pins both."""
    source, spec = _unary_input(call, summaries)
    out = outputs[0]
    if func is None or out.shape != source.shape or source.max is None:
        raise NoInvariant(f"{name}: its output is not its input's shape")
    low, high = source.min, source.max
    grid = torch.linspace(low, high, _GRID + 1, dtype=torch.float64)
    grid = torch.cat([grid, torch.tensor([low, high], dtype=torch.float64)])
    values = _evaluated(func, call, spec, grid)
    _within_range(out, float(values.abs().max()), name)
    ends = values[-2:]
    inner = values[:-2]
    top, bottom = int(inner.argmax()), int(inner.argmin())
    # Between grid points a smooth f moves by no more than to its neighbours near an extreme.
    top_slack = _neighbour_step(inner, top)
    bottom_slack = _neighbour_step(inner, bottom)
    findings = [
        _range("elementwise_max", out, "Max", float(ends.max()), float(inner[top]) + top_slack,
               _output_allowance(out, out.max), f"{name} on [{low:.6g}, {high:.6g}]"),
        _range("elementwise_min", out, "Min", float(inner[bottom]) - bottom_slack, float(ends.min()),
               _output_allowance(out, out.min), f"{name} on [{low:.6g}, {high:.6g}]"),
    ]
    return findings


def _evaluated(func, call: DecodedCall, spec: TensorSpec, grid: torch.Tensor) -> torch.Tensor:
    """f at each grid point, in float64, with the call's other arguments."""
    def put(value):
        if value is spec:
            return grid
        if isinstance(value, (list, tuple)):
            return type(value)(put(v) for v in value)
        return value

    try:
        with torch.no_grad():
            values = func(*put(list(call.args)), **{k: put(v) for k, v in call.kwargs.items()})
    except Exception as exc:  # an op that cannot take a float64 vector: no invariant, not a failure
        raise NoInvariant(f"its function cannot be evaluated in float64 ({type(exc).__name__}: {exc})") from None
    if not isinstance(values, torch.Tensor) or values.shape != grid.shape:
        raise NoInvariant("its function does not map each element to one")
    return values.double()


def _within_range(out: Summary, largest: float, name: str) -> None:
    """Raise NoInvariant where an exact result this large may round to inf in the output's dtype: an overflow
    there is the dtype's limit, which the replay of a tensor dump tells apart."""
    if not largest < torch.finfo(out.dtype).max / 2:
        raise NoInvariant(f"{name}: its exact results reach {largest:.3g}, where {out.dtype_name} may overflow")


def _neighbour_step(values: torch.Tensor, i: int) -> float:
    steps = [abs(float(values[j] - values[i])) for j in (i - 1, i + 1) if 0 <= j < values.numel()]
    return max(steps, default=0.0)


def _dim_length(call: DecodedCall, source: Summary, position: int = 1) -> int:
    dim = call.kwargs.get("dim", call.args[position] if len(call.args) > position else None)
    if not isinstance(dim, int) or not source.shape:
        raise NoInvariant("its dim is not recorded as an int")
    return source.shape[dim]


def softmax(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """Each row of L sums to 1, so the Mean is exactly 1/L; every element lies in [0, 1], the largest at 1/L or more."""
    source, _ = _unary_input(call, summaries)
    out = outputs[0]
    length = _dim_length(call, source)
    fmt, acc = float_format(out.dtype), float_format(out.dtype).accumulator
    # Each element rounded once, and the row's shared sum by sqrt(L) roundings of its accumulator.
    mean_allowance = (2 * fmt.unit_roundoff + 2 * math.sqrt(length) * acc.unit_roundoff) / length + out.slack("Mean")
    return [
        _range("softmax_row_sum", out, "Mean", 1 / length, 1 / length, mean_allowance,
               f"rows of {length} summing to 1"),
        _range("softmax_range", out, "Max", 1 / length, 1.0, _output_allowance(out, 1.0), "a probability"),
        _range("softmax_range", out, "Min", 0.0, 1.0, _output_allowance(out, out.min), "a probability"),
    ]


def log_softmax(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """Log-probabilities: none above 0; each row's largest at -log L or more and least at -log L or less."""
    source, _ = _unary_input(call, summaries)
    out = outputs[0]
    bound = -math.log(_dim_length(call, source))
    allowance = _output_allowance(out, bound) + 2 * math.sqrt(source.shape[-1]) * float_format(
        out.dtype).accumulator.unit_roundoff
    return [_range("log_softmax_range", out, "Max", bound, 0.0, allowance, "log-probabilities"),
            _range("log_softmax_range", out, "Min", -math.inf, bound, allowance, "log-probabilities"),
            _range("log_softmax_range", out, "Mean", -math.inf, bound, allowance + out.slack("Mean"),
                   "log-probabilities (the mean of logs is at most the log of the mean)")]


def _constant(summary: Summary | None, default: float) -> float | None:
    """The value every element of an affine parameter holds; the default where there is none; None where they differ."""
    if summary is None:
        return default
    return summary.max if summary.max == summary.min else None


def _argument(call: DecodedCall, summaries: CallSummaries, position: int, keyword: str) -> Summary | None:
    value = call.kwargs.get(keyword, call.args[position] if len(call.args) > position else None)
    return summaries.input(value.where) if isinstance(value, TensorSpec) else None


def _normalized_length(call: DecodedCall, position: int = 1, keyword: str = "normalized_shape") -> int:
    shape = call.kwargs.get(keyword, call.args[position] if len(call.args) > position else None)
    shape = [shape] if isinstance(shape, int) else shape
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) for d in shape):
        raise NoInvariant("its normalized shape is not recorded")
    return math.prod(shape)


def layer_norm(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """With a weight and bias that are constants w and b (or absent), each row of d has mean b and
    sum of squares d·(w²·v/(v+eps) + b²) at most: the Mean is b, the Norm at most sqrt(n·(w² + b²))."""
    source = summaries.input("input_args[0]")
    weight = _constant(_argument(call, summaries, 2, "weight"), 1.0)
    bias = _constant(_argument(call, summaries, 3, "bias"), 0.0)
    if source is None or weight is None or bias is None:
        raise NoInvariant(f"{name}: its weight or bias varies, so its outputs' statistics depend on which "
                          f"elements meet which")
    out = outputs[0]
    d = _normalized_length(call)
    fmt, acc = float_format(out.dtype), float_format(out.dtype).accumulator
    # The row mean and rstd a fair kernel computes are off by sqrt(d) roundings of its accumulator.
    row = 4 * math.sqrt(d) * acc.unit_roundoff + 2 * acc.unit_roundoff
    mean_allowance = abs(weight) * row + 2 * fmt.unit_roundoff * out.rms + out.slack("Mean")
    top = math.sqrt(out.numel * (weight * weight + bias * bias))
    norm_allowance = (abs(weight) * row + 2 * fmt.unit_roundoff) * top + out.slack("Norm")
    return [_range("norm_mean", out, "Mean", bias, bias, mean_allowance, f"rows normalized to mean 0, then {weight:g}·x + {bias:g}"),
            _range("norm_size", out, "Norm", 0.0, top, norm_allowance, f"rows normalized to variance 1 or less, "
                                                                      f"then {weight:g}·x + {bias:g}")]


def rms_norm(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """With a constant weight w, each row's mean square is w²·ms/(ms+eps) at most: the Norm at most |w|·sqrt(n)."""
    weight = _constant(_argument(call, summaries, 2 if name == "rms_norm" else 1,
                                 "weight" if name == "rms_norm" else "gamma"), 1.0)
    if weight is None:
        raise NoInvariant(f"{name}: its weight varies, so its outputs' statistics depend on which elements meet which")
    out = outputs[0]
    fmt, acc = float_format(out.dtype), float_format(out.dtype).accumulator
    top = abs(weight) * math.sqrt(out.numel)
    source = summaries.inputs[0]
    allowance = (4 * math.sqrt(source.shape[-1] if source.shape else 1) * acc.unit_roundoff
                 + 2 * fmt.unit_roundoff) * top + out.slack("Norm")
    return [_range("norm_size", out, "Norm", 0.0, top, allowance, f"rows scaled to mean square 1 or less, times {weight:g}")]


def same_values(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """A view, a copy or a cast (and their gradients): the same elements, each cast where the dtype changes, and
    each repeated alike where it expands. Max and Min stay; the Mean stays; the Norm grows as sqrt of the count."""
    floats = [s for s in summaries.inputs if s.floating]
    if not floats:
        raise NoInvariant("no float input")
    grads = [s for s in floats if s.name.startswith("grad_outputs")]  # a backward case: the gradient passed on
    source, out = (grads or floats)[0], outputs[0]
    if out.numel == 0 or source.numel == 0 or out.numel % source.numel:
        raise NoInvariant(f"{name}: its output does not repeat its input's elements")
    _within_range(out, max(abs(source.max), abs(source.min)), name)
    repeat = math.sqrt(out.numel / source.numel)
    cast = float_format(out.dtype).unit_roundoff if float_format(out.dtype).unit_roundoff > source.unit_roundoff \
        else 0.0
    found = []
    for statistic in ("Max", "Min", "Mean", "Norm"):
        value = source.value(statistic)
        if value is None or out.value(statistic) is None:
            continue
        expected = value * (repeat if statistic == "Norm" else 1.0)
        # A cast rounds each element by up to u of itself: the Mean by u of the elements' size, however they cancel.
        size = source.rms if statistic == "Mean" else abs(expected)
        allowance = cast * size + source.slack(statistic) * (repeat if statistic == "Norm" else 1.0) \
            + out.slack(statistic) + float_format(out.dtype).smallest_subnormal
        found.append(_range("same_values", out, statistic, expected, expected, allowance,
                            f"the same elements as {source.name}"))
    return found


def partition(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """Pieces of one tensor (split, chunk) or one tensor of pieces (cat, stack): the whole's Max is the pieces'
    largest, its Min their least, its Mean their count-weighted mean, its squared Norm the sum of theirs."""
    ins = [s for s in summaries.inputs if s.floating]
    if name in ("split", "chunk", "unbind", "tensor_split", "split_with_sizes"):
        whole, pieces = (ins[0] if ins else None), outputs
    else:
        whole, pieces = outputs[0], ins
    if whole is None or not pieces or sum(p.numel for p in pieces) != whole.numel or \
            any(p.mean is None for p in pieces) or whole.mean is None:
        raise NoInvariant(f"{name}: its pieces do not make up the whole")
    n = whole.numel
    mean = sum(p.numel * p.mean for p in pieces) / n
    norm = math.sqrt(sum(p.norm * p.norm for p in pieces))
    mean_allowance = whole.slack("Mean") + sum(p.numel * p.slack("Mean") for p in pieces) / n
    norm_allowance = whole.slack("Norm") + sum(p.slack("Norm") for p in pieces)
    what = f"the {len(pieces)} pieces of {whole.name}"
    tiny = float_format(whole.dtype).smallest_subnormal
    top, bottom, at = max(p.max for p in pieces), min(p.min for p in pieces), outputs[0].name
    return [_range("partition", whole, "Max", top, top, tiny, what, at),
            _range("partition", whole, "Min", bottom, bottom, tiny, what, at),
            _range("partition", whole, "Mean", mean, mean, mean_allowance + tiny, what, at),
            _range("partition", whole, "Norm", norm, norm, norm_allowance + tiny, what, at)]


def subset(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """Elements picked from a source (indexing, embedding rows): none beyond the source's Max and Min."""
    position = 1 if name == "embedding" else 0
    floats = [s for s in summaries.inputs if s.floating]
    source = _argument(call, summaries, position, "weight" if name == "embedding" else "input") or \
        (floats[0] if floats else None)
    if source is None or not source.floating or source.max is None:
        raise NoInvariant(f"{name}: no float source tensor")
    out = outputs[0]
    tiny = float_format(out.dtype).smallest_subnormal
    why = f"elements of {source.name}"
    return [_range("subset", out, "Max", source.min, source.max, tiny, why),
            _range("subset", out, "Min", source.min, source.max, tiny, why)]


def add_or_sub(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """Two tensors added (or subtracted), broadcast or not: the Mean of the sum is the sum of the Means
    (broadcasting repeats each element alike), Max and Min within the sums of the extremes. One tensor and a
    number: an elementwise op."""
    specs = [s for s in call.specs() if s.dtype.is_floating_point]
    if len(list(call.specs())) == 1 and len(specs) == 1:
        return elementwise(name=name, func=func, call=call, summaries=summaries, outputs=outputs)
    # msprobe records a reflected call (Tensor.__rsub__) with self first: the result is other - self
    alpha = call.kwargs.get("alpha", call.args[2] if len(call.args) > 2 else 1)
    if len(specs) != 2 or not isinstance(alpha, (int, float)) or isinstance(alpha, bool) or len(call.args) < 2:
        raise NoInvariant(f"{name}: not two float tensors added")
    first, second = (summaries.input(s.where) for s in specs)
    sign = -1.0 if name in ("sub", "rsub") else 1.0
    if reflected != (name == "rsub"):
        first, second = second, first
    if alpha != 1:  # self + alpha * other: alpha scales the second's statistics, and its sign may swap its extremes
        sign *= alpha
    out = outputs[0]
    mean = first.mean + sign * second.mean
    top = first.max + max(sign * second.max, sign * second.min)
    bottom = first.min + min(sign * second.max, sign * second.min)
    _within_range(out, max(abs(top), abs(bottom)), name)
    fmt = float_format(out.dtype)
    allowance = 2 * fmt.unit_roundoff * out.rms + out.slack("Mean") + first.slack("Mean") + \
        abs(sign) * second.slack("Mean") + (2 * fmt.unit_roundoff * abs(sign) * second.rms if alpha != 1 else 0.0)
    why = f"{first.name} + {sign:g} * {second.name}"
    return [_range("sum_mean", out, "Mean", mean, mean, allowance + fmt.smallest_subnormal, why),
            _range("sum_range", out, "Max", -math.inf, top, _output_allowance(out, top), why),
            _range("sum_range", out, "Min", bottom, math.inf, _output_allowance(out, bottom), why)]


def reduction(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """A mean over some dims keeps the Mean; a sum over them scales it by the count summed; either keeps each
    output within the input's extremes (a mean) or its count times them (a sum)."""
    floats = [s for s in call.specs() if s.dtype.is_floating_point]
    if len(floats) != 1 or summaries.input(floats[0].where).mean is None:
        raise NoInvariant(f"{name}: not one float tensor reduced")
    source, out = summaries.input(floats[0].where), outputs[0]
    count = source.numel / max(out.numel, 1)
    if count < 1 or not count.is_integer():
        raise NoInvariant(f"{name}: its output does not reduce its input evenly")
    scale = 1.0 if name == "mean" else count
    fmt = float_format(out.dtype)
    summed = 2 * math.sqrt(count) * fmt.accumulator.unit_roundoff * source.rms * scale
    allowance = scale * source.slack("Mean") + out.slack("Mean") + 2 * fmt.unit_roundoff * out.rms + summed
    low, high = (source.min, source.max) if name == "mean" else (count * min(source.min, 0), count * max(source.max, 0))
    _within_range(out, max(abs(low), abs(high)), name)
    why = f"the {'mean' if name == 'mean' else 'sum'} of {count:g} elements of {source.name}"
    return [_range("reduction_mean", out, "Mean", scale * source.mean, scale * source.mean,
                   allowance + fmt.smallest_subnormal, why),
            _range("reduction_range", out, "Max", low, high, _output_allowance(out, high) + summed, why),
            _range("reduction_range", out, "Min", low, high, _output_allowance(out, low) + summed, why)]


def nonnegative(*, name, func, call, summaries, outputs, reflected=False) -> list[Finding]:
    """A loss that sums non-negative terms (cross entropy, squared or absolute error): never below 0."""
    out = outputs[0]
    allowance = 2 * float_format(out.dtype).unit_roundoff * out.rms + float_format(out.dtype).smallest_subnormal
    return [_range("loss_range", out, "Min", 0.0, math.inf, allowance, "a sum of non-negative terms")]


_FAMILIES: dict[str, Callable[..., list[Finding]]] = {
    "elementwise": elementwise, "softmax": softmax, "log_softmax": log_softmax, "layer_norm": layer_norm,
    "rms_norm": rms_norm, "same_values": same_values, "partition": partition, "subset": subset,
    "add_or_sub": add_or_sub, "reduction": reduction, "nonnegative": nonnegative,
}
FAMILIES = frozenset(_FAMILIES)
