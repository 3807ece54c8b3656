"""Where the msprobe-written dumps live: tests/data/msprobe-dumps in this repository, or $NPU_PRECISION_FIXTURES.

A test that reads one of them asks for it by its path relative to FIXTURES: ``fixture_dump(relative)``
inside the test (or a helper it calls), or ``@needs_dumps(relative, ...)`` / ``pytestmark = needs_dumps(...)``
where a module-level constant names it. Either way a missing dump skips the test, saying which path is
missing and how to get it back, instead of failing with a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

FIXTURES = Path(os.environ.get("NPU_PRECISION_FIXTURES", Path(__file__).resolve().parent / "data" / "msprobe-dumps"))
# The seven msprobe dumps the tests read (tests/data/msprobe-dumps/README.md describes them).
DUMP_FOLDERS = ("mlp_statistics", "mlp_tensor", "mlp_fp16_tensor", "transformer_tensor", "transformer_bf16_tensor",
                "transformer_mix_statistics", "mlp_L0_tensor")


def _missing(relative: str | Path) -> str | None:
    path = FIXTURES / relative
    if path.exists():
        return None
    where = ("$NPU_PRECISION_FIXTURES" if "NPU_PRECISION_FIXTURES" in os.environ
             else "tests/data/msprobe-dumps (restore it with git checkout, or set $NPU_PRECISION_FIXTURES)")
    return f"msprobe fixture dump {path} is missing: the dumps come from {where}"


def fixture_dump(relative: str | Path = "") -> Path:
    """FIXTURES / relative (an absolute path under FIXTURES is taken as it is); when that is missing,
    skip the calling test, saying what is missing."""
    reason = _missing(relative)
    if reason:
        pytest.skip(reason)
    return FIXTURES / relative


def needs_dumps(*relative: str | Path) -> pytest.MarkDecorator:
    """A skipif mark for tests (or, as pytestmark, a module) that read these paths under FIXTURES."""
    reasons = [r for r in map(_missing, relative or ("",)) if r]
    return pytest.mark.skipif(bool(reasons), reason="; ".join(reasons) or "the fixture dumps are present")


def dump_params(*folders: str) -> list:
    """One pytest.param per dump.json under these folders, its id the path under FIXTURES; a folder with
    none is one skipped param that says so, not a silently shorter list."""
    params = []
    for folder in folders:
        files = sorted((FIXTURES / folder).glob("step*/*/dump.json"))
        reason = _missing(folder) or f"no step*/*/dump.json in {FIXTURES / folder}"
        params += [pytest.param(p, id=p.relative_to(FIXTURES).as_posix()) for p in files] or [
            pytest.param(FIXTURES / folder, id=folder, marks=pytest.mark.skip(reason=reason))]
    return params
