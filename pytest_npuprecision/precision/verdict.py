"""The records a judgement produces, and the one function that renders them for people."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Protocol

import torch

from .meanings import failure_sections, meaning
from .metrics import FIT_ELEMENTS, Metrics
from .second_look import Excused


class Status(str, enum.Enum):
    PASS = "pass"
    WARNING = "warning"
    # The device's result left the dtype's range where the exact one did not, and nothing else is
    # wrong: the dtype's limit reached by these inputs (an intermediate overflowed), not a precision
    # error. Reported and counted apart, never a failure: users hunting overflow look for these.
    OVERFLOW = "overflow"
    ERROR = "error"

    @classmethod
    def worst(cls, statuses) -> "Status":
        order = (cls.PASS, cls.WARNING, cls.OVERFLOW, cls.ERROR)
        return max(statuses, key=order.index, default=cls.PASS)


@dataclass(frozen=True)
class Check:
    """One metric judged against its limit. ``upper`` limits are maxima, others minima."""

    metric: str
    value: float
    limit: float
    status: Status
    upper: bool = True
    baseline: float | None = None  # the baseline's own value of the metric (or of the ratio's numerator)
    warning: float | None = None  # the warning limit, where the table gives one

    @property
    def relation(self) -> str:
        ok = self.status is Status.PASS
        if self.upper:
            return "<=" if ok else ">"
        return ">=" if ok else "<"

    def describe(self) -> str:
        """'rmse_ratio = 1.3 > warning limit 1.1 (error limit 4)'."""
        if self.status is Status.WARNING and self.warning is None:  # a ratio the benchmark excuses
            bound = f"limit {_number(self.limit)}, a warning: the device meets its own error bound"
        elif self.status is Status.WARNING:
            bound = f"warning limit {_number(self.warning)} (error limit {_number(self.limit)})"
        else:
            bound = f"limit {_number(self.limit)}"
        return f"{self.metric} = {_number(self.value)} {self.relation} {bound}"


@dataclass(frozen=True)
class Element:
    """The element that decided the verdict, with what each side computed there."""

    index: tuple[int, ...]
    actual: float
    golden: float
    baseline: float | None = None
    allowed: float | None = None  # the absolute error the standard allows here


class Judged:
    """What every verdict tells from its status and checks, whatever it judged (a tensor here; a statistics
    dump's in checks/statistics/verdicts.py)."""

    status: Status
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return self.status is not Status.ERROR

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status is not Status.PASS)


class Judge(Protocol):
    """What a verdict asks of the standards that judged it (precision/standards, whose ``Standard`` says
    what each attribute means): the verdict tells their decisions, it does not decide by their names."""

    name: str
    metrics: tuple[str, ...]
    exact: bool
    discrete: bool
    needs_baseline: bool
    noise_in_bounds: bool

    def mismatched(self, m: Metrics) -> tuple[int, int, str] | None: ...


@dataclass(frozen=True)
class Verdict(Judged):
    status: Status
    # The standards that judged it: one, or the benchmark and then the op's own standard beside it.
    judged_by: tuple[Judge, ...]
    op: str | None
    dtype: str
    shape: tuple[int, ...]
    checks: tuple[Check, ...]
    metrics: Metrics
    baseline_metrics: Metrics | None = None
    worst: Element | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    excused: Excused | None = None  # what the second look excused, where it turned a failure into a pass

    @property
    def standard(self) -> str:
        """The standards' names as reports print them: 'error_bound', 'benchmark+error_bound'."""
        return "+".join(s.name for s in self.judged_by)

    @property
    def own(self) -> Judge:
        """The op's own standard: the last that judged it (the benchmark's, where it judged alone)."""
        return self.judged_by[-1]


# Metrics that a mean over every element decides: the worst element may lie well within what the
# standard allows there, so a message led by one of them says what decided instead.
MEAN_DECIDED = frozenset({"bound_bias", "magnitude_bound_bias", "rounding_bias", "mean_bound_ratio", "mean_ulp_err",
                          "mean_residual_ratio", "order_rmse_ratio", "row_order_ratio"})
_SIGNED_MEANS = frozenset({"bound_bias", "magnitude_bound_bias"})


def _brief(check: Check) -> str:
    """'mean_bound_ratio 27476.8 > 1': a failing check on part of one line."""
    text = f"{check.metric} {_number(check.value)} {check.relation} {_number(check.limit)}"
    return text if check.status is Status.ERROR else f"{text} [{check.status.value}]"


def _decided_by_all(check: Check, m: Metrics) -> str:
    """What decided a verdict that no single element decides, in place of the worst element (which may
    lie well within what the standard allows there, and would point the wrong way)."""
    if check.metric in _SIGNED_MEANS:
        lean = "grows |actual| over |golden|" if check.metric == "magnitude_bound_bias" else "leans one way"
        return (f"  decided by the mean signed error, not by one element: the device {lean} by "
                f"{_number(check.value, 3)} of each element's error bound on average, where "
                f"{_number(check.limit, 3)} is allowed (mean relative error {_number(m.mean_rel_err, 3)}): "
                f"a scaling or an offset, though each element may lie within its own bound")
    if check.metric == "rounding_bias":
        return (f"  decided by the direction of the errors, not by one element: {_share_of(check.value)} more "
                f"elements err one way than the other, where {_share_of(check.limit)} is allowed")
    return f"  decided by the mean over all {m.numel} elements ({check.metric}), not by one element"


def _share_of(value: float) -> str:
    return f"{100 * value:.3g}%"


def _number(value: float | None, digits: int = 6) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.{digits}g}"


def _share(part: int, whole: int) -> str:
    share = 100 * part / whole if whole else 0.0
    return f"{share:.2g}%" if share < 1 else f"{share:.1f}%"


def _relative(error: float, golden: float) -> str:
    return _number(error / abs(golden), 3) if golden else "inf"


def _value(value: float | None) -> str:
    """Tensor values with enough digits to tell float32 neighbours apart."""
    return _number(value, 9)


def mismatched(verdict: Verdict) -> tuple[int, int, str] | None:
    """(elements past the standard's per-element allowance, elements compared, what they are past): those
    whose inf or nan disagrees with the golden, or else those the op's own standard counts."""
    m = verdict.metrics
    if m.nonfinite_mismatch:
        return m.nonfinite_mismatch, m.numel, "whose inf or nan disagrees with the golden"
    return verdict.own.mismatched(m)


def overflow_line(verdict: Verdict) -> str:
    """What overflowed, where, and the dtype's largest finite value."""
    m, w = verdict.metrics, verdict.worst
    where = "" if w is None else (f"; first at [{', '.join(map(str, w.index)) or 'scalar'}]: device "
                                  f"{_value(w.actual)}, golden {_value(w.golden)}")
    what = "The result" if m.range_overflow else "An intermediate of this op"
    return (f"  overflow: {m.overflow + m.range_overflow} / {m.numel} elements are inf on the device where the "
            f"exact result is finite; {verdict.dtype} holds at most {_number(_dtype_max(verdict.dtype))}{where}. "
            f"{what} leaves {verdict.dtype}'s range with these inputs: the dtype's limit, not a precision "
            f"error of the kernel")


def _dtype_max(dtype: str) -> float:
    return float(torch.finfo(getattr(torch, dtype)).max)


# A fit of the error as a scale and an offset of the golden that explains this share of its squares
# calls it a scaling or an offset; past their allowance in at most this share of the elements (and at
# least one), a few elements far off.
SYSTEMATIC = 0.5
FEW = 1e-3
# Over fewer than FIT_ELEMENTS the fit is a scale or an offset alone, which must explain nearly all of it.
SYSTEMATIC_IN_FEW = 0.9


def error_shape(verdict: Verdict) -> tuple[str, str] | None:
    """What the error of a failing verdict is, in a user's words: (kind, description), the kind one of
    scaling, offset, elements, leaning, noise. None where it passed, or the header says it (inf and nan,
    bits, quantized integers: a discrete standard's)."""
    m = verdict.metrics
    failed = {c.metric for c in verdict.failures}
    if not failed or m.nonfinite_mismatch or not m.finite or verdict.own.discrete:
        return None
    systematic = m.fit_share >= (SYSTEMATIC if m.finite >= FIT_ELEMENTS else SYSTEMATIC_IN_FEW)
    if systematic and abs(m.fitted_scale) * m.golden_rms >= abs(m.fitted_offset):
        way = "larger" if m.fitted_scale > 0 else "smaller"
        return "scaling", (f"a scaling: the device's output is {_relative_size(abs(m.fitted_scale), verdict.dtype)} "
                           f"{way} than the golden throughout (that explains {_share_of(m.fit_share)} of the "
                           f"squared error)")
    if systematic:
        return "offset", (f"an offset: the device's output is shifted by {_number(m.fitted_offset, 3)} throughout, "
                          f"{_relative_size(abs(m.fitted_offset) / m.golden_rms, verdict.dtype)} of the golden's "
                          f"RMS (that explains {_share_of(m.fit_share)} of the squared error)")
    count = mismatched(verdict)
    if count is not None and 0 < count[0] <= max(1.0, FEW * count[1]):
        if count[0] == 1:
            return "elements", "one element far off: the rest lie within what the standard allows them"
        return "elements", (f"a few elements far off: {count[0]} of {count[1]} {count[2]}, no common scale or "
                            f"offset; the rest lie within it")
    if "rounding_bias" in failed:
        return "leaning", ("a rounding that leans: the elements a fair kernel rounds once err one way more often "
                           "than the other (truncation, or a wrong rounding mode)")
    spread = f", {_number(m.mean_bound_ratio, 3)} times a fair kernel's bound on average" \
        if verdict.own.noise_in_bounds else ""
    return "noise", f"noise: errors of either sign, no common scale or offset{spread}"


def _relative_size(relative: float, dtype: str) -> str:
    """0.004 -> '0.4 %'; those under 0.1 % and 64 eps in the dtype's eps: '4 eps of float32'."""
    eps = float(torch.finfo(getattr(torch, dtype)).eps) if hasattr(torch, dtype) else 0.0
    if eps and relative < min(1e-3, 64 * eps):
        return f"{_number(relative / eps, 3)} eps of {dtype}"
    return f"{_number(100 * relative, 2)} %"


# The check that measures each systematic error: where it failed, it leads a message that names that error.
_MEASURED_BY = {"scaling": ("magnitude_bound_bias", "bound_bias"), "offset": ("bound_bias", "magnitude_bound_bias")}


def _leading(failures: tuple[Check, ...], kind: str | None) -> tuple[Check, ...]:
    """The failures in the standard's order, except that a scaling or an offset leads with the bias
    check that measures it (a 0.4 % scaling with its magnitude bias at 5.8 times the limit, not its
    mean bound ratio at 1.7). Beside a baseline the benchmark's ratios lead, as its standard orders them."""
    for metric in _MEASURED_BY.get(kind, ()):
        first = next((c for c in failures if c.metric == metric and c.status is Status.ERROR), None)
        if first is not None:
            return (first, *(c for c in failures if c is not first))
    return failures


def render_message(verdict: Verdict) -> str:
    """A stable, line-oriented description of a verdict; what the error is, then failing checks. A verdict of
    another kind (a statistics dump's, checks/statistics/verdicts.py) renders itself."""
    if not isinstance(verdict, Verdict):
        return verdict.render()
    name = verdict.op or "<tensor>"
    shape = "x".join(map(str, verdict.shape)) or "scalar"
    lines = [f"{name} [{verdict.dtype}, {shape}]: {verdict.status.value} by the {verdict.standard} standard"]
    described = error_shape(verdict)
    if described is not None:
        lines.append(f"  the error: {described[1]}")
    # The first failing check, in the standard's order (or the bias that measures a scaling or an
    # offset), decides: it leads in full, the rest share one line.
    kind = None if described is None or verdict.judged_by[0].needs_baseline else described[0]
    failures = _leading(verdict.failures, kind)
    for check in failures[:1] or verdict.checks:
        text = f"  {check.describe()}"
        if check.baseline is not None:
            text += f" (baseline {_number(check.baseline)})"
        if check.status is not Status.PASS:
            text += f"  [{check.status.value}]"
        lines.append(text)
        if meaning(check.metric):
            lines.append(f"      = {meaning(check.metric)}")
    if len(failures) > 1:
        lines.append("  also failing: " + ", ".join(_brief(check) for check in failures[1:]))
    if verdict.status is Status.OVERFLOW:
        lines.append(overflow_line(verdict))
    count = mismatched(verdict) if failures else None
    if count is not None:
        bad, total, what = count
        lines.append(f"  mismatched elements: {bad} / {total} ({_share(bad, total)}) {what}")
    if failures and failures[0].metric in MEAN_DECIDED:
        lines.append(_decided_by_all(failures[0], verdict.metrics))
    elif verdict.worst is not None:
        w = verdict.worst
        where = ", ".join(map(str, w.index)) or "scalar"
        text = f"  worst element [{where}]: actual {_value(w.actual)}, golden {_value(w.golden)}"
        if w.baseline is not None:
            text += f", baseline {_value(w.baseline)}"
        lines.append(text)
        error = abs(w.actual - w.golden)
        if verdict.failures and error == error:  # not nan
            text = f"    error there: {_number(error, 3)} absolute, {_relative(error, w.golden)} relative"
            if w.allowed is not None:
                text += f"; the standard allows {_number(w.allowed, 3)}"
            lines.append(text)
    compared = "actual vs golden" + (" and baseline vs golden" if verdict.baseline_metrics else "")
    lines.append(f"  compared: {compared}")
    lines.extend(f"  note: {note}" for note in verdict.notes)
    if verdict.status in (Status.ERROR, Status.WARNING):  # where to read what the failed checks mean
        lines.append(f"  docs: {', '.join(failure_sections(verdict.standard, (c.metric for c in verdict.failures)))}")
    return "\n".join(lines)
