"""What a run leaves behind: case records, the run's facts, the known-failures gate, the terminal summary and
the report folder (JSON Lines, msprobe CSV, HTML with plots). Imports ``checks`` and everything below it."""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "gating": ("GATE", "KnownFailureRegression"),
    "records": ("RECORD", "carried", "case_record", "junit_properties", "new_record", "output_record"),
    "report_files": ("Collector",),
    "run_facts": ("RunFacts", "from_workers"),
    "summary": ("STRICT_WARNINGS_NOTE", "excess", "failing_outputs"),
})
