"""A run that checks no dump and no op case pays nothing for the plugin: no torch, no Hypothesis."""

from __future__ import annotations

import subprocess
import sys

PROBE = '''
import sys

def pytest_sessionfinish(session):
    heavy = sorted(m for m in ("torch", "hypothesis", "numpy", "yaml") if m in sys.modules)
    print("HEAVY=" + ",".join(heavy))
'''


def _heavy(tmp_path, *args: str) -> str:
    (tmp_path / "conftest.py").write_text(PROBE)
    (tmp_path / "test_plain.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return next("HEAVY=" + line.split("HEAVY=")[1] for line in done.stdout.splitlines() if "HEAVY=" in line)


def test_an_unrelated_test_run_imports_neither_torch_nor_hypothesis(tmp_path):
    # Compared with the same run without the plugin: other installed plugins may import numpy or torch.
    for args in ((), ("--co",)):
        assert _heavy(tmp_path, *args) == _heavy(tmp_path, "-p", "no:npuprecision", *args)


def test_an_op_case_file_puts_the_plugin_in_play(tmp_path):
    (tmp_path / "op_cases").mkdir()
    (tmp_path / "op_cases" / "relu.yaml").write_text(
        "cases:\n  - op: Functional.relu\n    dtypes: [float32]\n    inputs:\n      - shape: [8]\n")
    assert "torch" in _heavy(tmp_path, "--co")


def test_the_profile_names_are_the_searchs_profiles():
    from pytest_npuprecision.opcases.search import PROFILES
    from pytest_npuprecision.plugin.options import PROFILE_NAMES

    assert sorted(PROFILE_NAMES) == sorted(PROFILES)
