"""A statistics judgement as a record: each statistic checked against where it may lie, and one line per check
that says it in numbers. It stands where a tensor verdict stands (OutputVerdict.verdict): it has no element
metrics, and renders itself."""

from __future__ import annotations

from dataclasses import dataclass

from ...precision import Check, Judged, Status

# The standards a statistics judgement names: what one dump can prove, what two dumps of the same step show,
# and whether two tensors are the same bits.
INVARIANTS = "statistics-invariants"
PAIRED = "statistics-pair"
CHECKSUM = "checksum"


@dataclass(frozen=True)
class Finding:
    """One statistic checked: ``check.value`` is how far it lies past what it may be, in units of what fair
    rounding allows it (limit 1); ``text`` says it in the tensor's own numbers."""

    output: str  # "output.0": the tensor whose statistic it is
    check: Check
    text: str


def finding(output: str, metric: str, excess: float, allowance: float, text: str) -> Finding:
    """A check that fails where ``excess`` (how far past the allowed range) is more than ``allowance``."""
    ratio = excess / allowance if allowance > 0 else (0.0 if excess <= 0 else float("inf"))
    status = Status.ERROR if ratio > 1 else Status.PASS
    return Finding(output, Check(metric, ratio, 1.0, status), text)


@dataclass(frozen=True)
class StatisticsVerdict(Judged):
    status: Status
    standard: str  # INVARIANTS, PAIRED or CHECKSUM, joined by "+" where several judged
    op: str
    dtype: str
    shape: tuple[int, ...]
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = ()
    # What a tensor verdict has and a statistics one has not: the reports read them alike.
    metrics = None
    baseline_metrics = None
    worst = None
    excused = None

    @property
    def checks(self) -> tuple[Check, ...]:
        return tuple(f.check for f in self.findings)

    def render(self) -> str:
        """'[float32, (2, 128, 256)]: error by the statistics-pair standard' and a line per failing check."""
        shape = "(" + ", ".join(map(str, self.shape)) + ")"
        lines = [f"[{self.dtype}, {shape}]: {self.status.value} by the {self.standard} standard"]
        lines += [f"  {f.check.metric} = {f.check.value:.3g} > 1: {f.text}" for f in self.findings
                  if f.check.status is not Status.PASS]
        lines += [f"  note: {note}" for note in self.notes]
        lines.append("  docs: docs/offline.md#statistics-dumps")
        return "\n".join(lines)


def verdict_of(findings: list[Finding], standard: str, op: str, dtype: str, shape: tuple[int, ...],
               notes: tuple[str, ...] = ()) -> StatisticsVerdict:
    status = Status.worst(f.check.status for f in findings)
    return StatisticsVerdict(status, standard, op, dtype, tuple(shape), tuple(findings), notes)
