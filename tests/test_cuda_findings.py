"""What the shipped op cases find on a GPU: CUDA kernels that err past their dtype's bound.

The project's own test run judges the shipped op cases on the CPU (the root conftest.py pins the
device), so these findings are kept here, on the GPU they are about. They skip, saying so, without
one.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(),
                                  reason="needs an NVIDIA GPU: torch.cuda.is_available() is False")
REDUCTIONS = Path(__file__).resolve().parents[1] / "op_cases" / "reductions.yaml"


@requires_gpu
def test_cuda_half_cumsum_errs_past_its_bound(pytester):
    """CUDA's cumsum keeps its running sum in the half type itself (torch 2.11 on an H200: 43 to 46
    times the error bound of a float32 accumulation), where the CPU's sums in float32."""
    (pytester.path / "op_cases").mkdir()
    shutil.copy(REDUCTIONS, pytester.path / "op_cases" / "reductions.yaml")
    result = pytester.runpytest("op_cases", "-k", "cumsum and not float32", "--npu-precision-device", "cuda",
                                "--npu-precision-regressions", "none", "--npu-precision-report", "report",
                                "-p", "no:cacheprovider")
    records = {r["key"]: r for r in map(json.loads, (pytester.path / "report" / "cases.jsonl").read_text().splitlines())}
    assert {key: r["status"] for key, r in records.items()} == {"cumsum[float16]": "error", "cumsum[bfloat16]": "error"}, \
        result.stdout.str()[-3000:]
    assert result.stdout.str().count("error by the error_bound standard") >= 2
