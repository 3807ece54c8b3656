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

# An empty value counts as unset: Path("") would be the current folder, where no fixture is.
FIXTURES = Path(os.environ.get("NPU_PRECISION_FIXTURES") or Path(__file__).resolve().parent / "data" / "msprobe-dumps")
# The seven msprobe dumps the tests read (tests/data/msprobe-dumps/README.md describes them).
DUMP_FOLDERS = ("mlp_statistics", "mlp_tensor", "mlp_fp16_tensor", "transformer_tensor", "transformer_bf16_tensor",
                "transformer_mix_statistics", "mlp_L0_tensor")


def _missing(relative: str | Path) -> str | None:
    path = FIXTURES / relative
    if path.exists():
        return None
    where = ("$NPU_PRECISION_FIXTURES" if os.environ.get("NPU_PRECISION_FIXTURES")
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


def judged_here(records: dict[str, dict]) -> dict[str, dict]:
    """The case records this torch could judge: all but the cases it has no kernel for (torch 2.1's CPU
    has no float16 addmm or softmax), which skip as no-kernel, saying so. Where every kernel exists
    (the pinned torch, a GPU, an NPU) nothing is left out."""
    kept = {k: r for k, r in records.items() if r.get("reason") != "no-kernel"}
    if not kept:
        import torch

        pytest.skip(f"torch {torch.__version__} has no kernel for any of these cases")
    return kept


def needs_kernel(what: str, probe) -> pytest.MarkDecorator:
    """Skips a test where this torch has no kernel for ``probe()`` (torch 2.1's CPU has no float16 addmm),
    saying which; any other error of the probe is raised."""
    import torch

    from pytest_npuprecision.common.torch_compat import kernel_gap

    try:
        probe()
        gap = None
    except (RuntimeError, NotImplementedError) as exc:
        gap = kernel_gap(exc)
        if gap is None:
            raise
    reason = "" if gap is None else f"torch {torch.__version__} has no {gap[1]} kernel for {what} (\"{gap[0]}\")"
    return pytest.mark.skipif(gap is not None, reason=reason)


# The committed example dumps (examples/dumps) were made with this torch release: another one's
# kernels round differently, so a fresh run of the generators matches them only on this one.
DUMPS_MADE_WITH = (2, 13)


def made_with_this_torch() -> pytest.MarkDecorator:
    import torch

    from pytest_npuprecision.common.torch_compat import TORCH

    made = ".".join(map(str, DUMPS_MADE_WITH))
    return pytest.mark.skipif(TORCH != DUMPS_MADE_WITH, reason=f"the example dumps were made with torch {made}; "
                                                                f"torch {torch.__version__}'s kernels round differently")
