"""Which docs section explains a failed verdict, so a failure points at the page that explains it.

The sections are headings of docs/standards.md; tests/test_docs.py checks that each one exists.
"""

from __future__ import annotations

from typing import Iterable

STANDARDS_PAGE = "docs/standards.md"
GATE_SECTION = f"{STANDARDS_PAGE}#the-infnan-gate"
ROUNDING_SECTION = f"{STANDARDS_PAGE}#the-rounding-gate"
_GATES = {"nonfinite_mismatch": GATE_SECTION, "rounding_bias": ROUNDING_SECTION}


def standard_section(standard: str) -> str:
    """'error_bound' -> 'docs/standards.md#error-bound': the heading's anchor as MkDocs and GitHub write it."""
    return f"{STANDARDS_PAGE}#{standard.replace('_', '-')}"


def failure_sections(standard: str, failed_metrics: Iterable[str]) -> tuple[str, ...]:
    """The sections for a verdict by ``standard`` ('benchmark+ulp' names two) whose checks ``failed_metrics`` failed.

    The gates (an inf or nan that disagrees with the golden, a rounding that leans) judge beside every
    standard: a failure of a gate alone points at the gate's section only.
    """
    failed = set(failed_metrics)
    gates = tuple(section for metric, section in _GATES.items() if metric in failed)
    if failed and failed <= _GATES.keys():
        return gates
    return gates + tuple(standard_section(name) for name in standard.split("+"))
