"""Which docs section explains a failed verdict, so a failure points at the page that explains it.

The sections are headings of docs/standards.md; tests/test_docs.py checks that each one exists.
"""

from __future__ import annotations

from typing import Iterable

STANDARDS_PAGE = "docs/standards.md"
GATE_SECTION = f"{STANDARDS_PAGE}#the-infnan-gate"
_GATE_METRIC = "nonfinite_mismatch"


def standard_section(standard: str) -> str:
    """'error_bound' -> 'docs/standards.md#error-bound': the heading's anchor as MkDocs and GitHub write it."""
    return f"{STANDARDS_PAGE}#{standard.replace('_', '-')}"


def failure_sections(standard: str, failed_metrics: Iterable[str]) -> tuple[str, ...]:
    """The sections for a verdict by ``standard`` ('benchmark+ulp' names two) whose checks ``failed_metrics`` failed.

    An inf or nan that disagrees with the golden fails before any standard judges: its section is the gate's.
    """
    failed = set(failed_metrics)
    if failed == {_GATE_METRIC}:
        return (GATE_SECTION,)
    sections = tuple(standard_section(name) for name in standard.split("+"))
    return ((GATE_SECTION,) if _GATE_METRIC in failed else ()) + sections
