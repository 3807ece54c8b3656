"""What the harness says of each collective case of a multi-rank dump, read offline from the dumped outputs:
its status, or its skip reason, or "input-error", with its message. Shared by tests/checks/test_collectives.py
and tests/checks/test_collectives_fused.py."""

from __future__ import annotations

from pathlib import Path

from pytest_npuprecision.backends import DumpedOutputs
from pytest_npuprecision.checks.case_run import CaseInputError, CaseSkipped, Settings, run_case
from pytest_npuprecision.checks.collectives.fused import FUSED
from pytest_npuprecision.checks.collectives.ranks import DumpIndex
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.dump.locations import find_dumps


def outcomes(root: Path) -> dict[str, tuple[str, str]]:
    """Each collective case of the dump under ``root``: (status or skip reason or "input-error", message)."""
    dumps = [load_dump(source.path, label=source.label, root=root) for source in find_dumps(root)]
    index = DumpIndex()
    for dump in dumps:
        index.add(dump)
    found = {}
    for dump in dumps:
        for case in dump.cases:
            if case.prefix != "Distributed" and case.name not in FUSED:
                continue
            try:
                result = run_case(case, dump.data_dir, Settings(device=DumpedOutputs()), index)
            except CaseSkipped as skipped:
                found[case.case_id] = (skipped.reason, str(skipped))
            except CaseInputError as bad:
                found[case.case_id] = ("input-error", str(bad))
            else:
                found[case.case_id] = (result.status.value, "; ".join(result.notes))
    return found
