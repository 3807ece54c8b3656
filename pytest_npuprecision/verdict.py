"""The records a judgement produces, and the one function that renders them for people."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .metrics import Metrics


class Status(str, enum.Enum):
    PASS = "pass"
    WARNING = "warning"
    ERROR = "error"

    @classmethod
    def worst(cls, statuses) -> "Status":
        order = (cls.PASS, cls.WARNING, cls.ERROR)
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
        if self.status is Status.WARNING:
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


@dataclass(frozen=True)
class Verdict:
    status: Status
    standard: str
    op: str | None
    dtype: str
    shape: tuple[int, ...]
    checks: tuple[Check, ...]
    metrics: Metrics
    baseline_metrics: Metrics | None = None
    worst: Element | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def passed(self) -> bool:
        return self.status is not Status.ERROR

    @property
    def failures(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status is not Status.PASS)


def _number(value: float | None, digits: int = 6) -> str:
    if value is None:
        return "-"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        return str(int(value))
    return f"{value:.{digits}g}"


def _value(value: float | None) -> str:
    """Tensor values with enough digits to tell float32 neighbours apart."""
    return _number(value, 9)


def render_message(verdict: Verdict) -> str:
    """A stable, line-oriented description of a verdict; failing checks first."""
    name = verdict.op or "<tensor>"
    shape = "x".join(map(str, verdict.shape)) or "scalar"
    lines = [f"{name} [{verdict.dtype}, {shape}]: {verdict.status.value} by the {verdict.standard} standard"]
    shown = verdict.failures or verdict.checks
    for check in shown:
        text = f"  {check.describe()}"
        if check.baseline is not None:
            text += f" (baseline {_number(check.baseline)})"
        if check.status is not Status.PASS:
            text += f"  [{check.status.value}]"
        lines.append(text)
    if verdict.worst is not None:
        w = verdict.worst
        where = ", ".join(map(str, w.index)) or "scalar"
        text = f"  worst element [{where}]: actual {_value(w.actual)}, golden {_value(w.golden)}"
        if w.baseline is not None:
            text += f", baseline {_value(w.baseline)}"
        lines.append(text)
    compared = "actual vs golden" + (" and baseline vs golden" if verdict.baseline_metrics else "")
    lines.append(f"  compared: {compared}")
    lines.extend(f"  note: {note}" for note in verdict.notes)
    return "\n".join(lines)
