"""The checks a user runs: judge an output against its golden, check one call from Python, and run one dump case
from its entry to its verdicts (``case_run.run_case``). Imports ``replay`` and everything below it; never pytest."""
