"""Nothing of a run lands in the user's dump: pytest's cache goes beside it (issue 42)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dumps"


@pytest.mark.parametrize("start, dump", [("dumps/mlp/step0", "rank0"), ("dumps/mlp", "."), ("dumps", "mlp")])
def test_pytests_cache_never_lands_in_a_dump(pytester, monkeypatch, start, dump):
    shutil.copytree(EXAMPLES / "mlp_tensor", pytester.path / "dumps" / "mlp")
    monkeypatch.chdir(pytester.path / start)
    result = pytester.runpytest("--npu-precision", dump, "--npu-precision-device", "cpu", "-p", "cacheprovider")
    result.assert_outcomes(passed=16)
    assert not list((pytester.path / "dumps" / "mlp").rglob(".pytest_cache"))
    assert (pytester.path / start / ".pytest_cache").is_dir() == (start == "dumps")
    # --lf reads the cache where the last run wrote it: the failed-first bookkeeping still works.
    again = pytester.runpytest("--npu-precision", dump, "--npu-precision-device", "cpu", "--lf")
    again.assert_outcomes(passed=16)
    assert not list((pytester.path / "dumps" / "mlp").rglob(".pytest_cache"))
