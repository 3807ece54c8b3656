"""What a run leaves behind: case records, the run's facts, the known-failures gate, the terminal summary and
the report folder (JSON Lines, msprobe CSV, HTML with plots). Imports ``checks`` and everything below it."""
