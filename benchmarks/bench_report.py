"""Each benchmark figure against its target, kept for the README's speed table (`--markdown`).

A figure records the machine's load average when it was taken: on a shared machine the same code
measures differently from one hour to the next, and the table says under what load it was made.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Figure:
    what: str
    value: float
    unit: str
    target: str  # "<= 1.2"
    verdict: str
    detail: str
    load: str  # /proc/loadavg's 1-minute figure when it was taken


FIGURES: list[Figure] = []
MISSES: list[str] = []  # the figures missed by more than 2x


def report(what: str, value: float, target: float, unit: str, higher_is_better: bool = False, detail: str = "") -> None:
    """Prints one figure against its target, and keeps it."""
    ratio = (target / value if higher_is_better else value / target) if value and target else 0.0
    verdict = "ok" if ratio <= 1 else ("missed" if ratio <= 2 else "MISSED BY MORE THAN 2x")
    if ratio > 2:
        MISSES.append(what)
    bound = f"{'>=' if higher_is_better else '<='} {target:g}"
    FIGURES.append(Figure(what, value, unit, bound, verdict, detail, load_average().split()[0]))
    print(f"{what:58s} {value:9.3g} {unit:4s} target {bound}: {verdict}" + (f" ({detail})" if detail else ""))


def load_average() -> str:
    """The 1, 5 and 15-minute load averages ("" where /proc is not there)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def markdown(command: str, load_before: str) -> str:
    """The README speed table: every figure kept, with the machine and its load."""
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    lines = [f"Measured with `{command}` at commit {commit.strip() or '?'} on a {os.cpu_count()}-core machine, "
             f"load average (1, 5, 15 min) {load_before} before and {load_average()} after:", "",
             "| what | measured | target | load |", "| --- | --- | --- | --- |"]
    for figure in FIGURES:
        measured = f"{figure.value:.3g} {figure.unit}" + (f" ({figure.detail})" if figure.detail else "")
        verdict = "" if figure.verdict == "ok" else f" ({figure.verdict})"
        lines.append(f"| {figure.what} | {measured} | {figure.target.replace('<=', '≤').replace('>=', '≥')} "
                     f"{figure.unit}{verdict} | {figure.load} |")
    return "\n".join(lines)
