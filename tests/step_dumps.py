"""One training step of tests/capture_step.py's models, dumped by msprobe (run as a script in a child process,
so its patching of torch never reaches this one; ``needs_msprobe`` skips where it is absent) and by capture
in this process. Shared by tests/capturing/test_capture_msprobe.py and tests/checks/test_dump_pairs.py."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from capture_step import build, step
from pytest_npuprecision import capture

HERE = Path(__file__).parent  # tests/, where capture_step.py is
needs_msprobe = pytest.mark.skipif(importlib.util.find_spec("msprobe") is None,
                                   reason="mindstudio-probe is not installed (pip install 'pytest-npuprecision[msprobe]')")


def msprobe_dump(tmp_path: Path, model: str, task: str) -> Path:
    out = tmp_path / "msprobe"
    result = subprocess.run([sys.executable, str(HERE / "capture_step.py"), model, task, str(out),
                             str(torch.get_num_threads())],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return out / "step0" / "rank0"


def captured_dump(tmp_path: Path, model: str, task: str) -> Path:
    net, x, y, classes = build(model)
    with capture(tmp_path / "capture", task=task, rank=0) as recorded:
        step(net, x, y, classes)
    return recorded.folder
