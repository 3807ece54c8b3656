"""The checks a user runs: judge an output against its golden, check one call from Python, and run one dump case
from its entry to its verdicts (``case_run.run_case``). Imports ``replay`` and everything below it; never pytest."""

from __future__ import annotations

from ..common import lazy_exports

# What other layers use, by the module that defines it: loaded on first use.
__getattr__, __dir__, __all__ = lazy_exports(__name__, {
    "baseline_dump": ("BaselineDump", "BaselineDumpError", "is_dump_path"),
    "case_run": (
        "CaseInputError", "CaseResult", "CaseSkipped", "OutputVerdict", "ReplayError", "Settings", "baseline_label",
        "golden_label", "run_case",
    ),
    "collectives.ranks": ("DumpIndex",),
    "judging": ("judge",),
    "recorded_baseline": ("BaselineFileError", "RecordedBaseline", "write_record"),
})
