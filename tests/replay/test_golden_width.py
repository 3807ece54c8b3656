"""A golden narrower than float64 is an error wherever a golden is made: a user's kernel that fixes its
dtype inside makes its own "golden", and every comparison with it would pass (issue 37, point 2)."""

from __future__ import annotations

import pytest
import torch

from pytest_npuprecision import check_call, register_op
from pytest_npuprecision.ops import registry
from pytest_npuprecision.replay.runner import GoldenNotWide


def half_running_sum_matmul(a, b):
    """A float16 matmul that keeps a float16 running sum whatever its inputs: the defect, and its own golden."""
    a, b = a.half(), b.half()
    total = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float16)
    for k in range(a.shape[1]):
        total = total + a[:, k:k + 1] * b[k:k + 1, :]
    return total


@pytest.fixture
def fresh_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", {})


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(8, 256, generator=g, dtype=torch.float16), torch.randn(256, 8, generator=g, dtype=torch.float16)


def test_check_call_refuses_a_golden_that_is_the_kernel_itself():
    with pytest.raises(GoldenNotWide, match=r"half_running_sum_matmul: its golden returned output\.0 in float16 from "
                                            r"float64 inputs.*reference="):
        check_call(half_running_sum_matmul, *_inputs())
    verdict = check_call(half_running_sum_matmul, *_inputs(), reference=torch.matmul)
    assert verdict.status.value == "error"  # with a real reference the float16 running sum fails


def test_torch_casts_keep_their_narrow_golden():
    x = torch.randn(16, dtype=torch.float64)
    assert check_call("Tensor.float", x).status.value == "pass"


NARROW_OP = """
import torch
from torch.overrides import wrap_torch_function
from pytest_npuprecision import register_op


@wrap_torch_function(lambda x: (x,))  # lets capture see the op as one call
def narrow_scale(x):
    return (x.half() * 3).half()  # fixes float16 inside: its float64 run is no golden


register_op("narrow_scale", narrow_scale)
"""


def test_a_dump_case_and_an_op_case_of_a_narrow_custom_op_fail_naming_the_fix(pytester, fresh_registry):
    pytester.makeconftest(NARROW_OP)
    pytester.makepyfile(make_dump="""
import torch, pytest_npuprecision
from conftest import narrow_scale
with pytest_npuprecision.capture("dump", task="tensor", step=0, rank=0):
    narrow_scale(torch.randn(16, dtype=torch.float16))
""")
    pytester.runpython(pytester.path / "make_dump.py")
    dump = pytester.runpytest("--npu-precision", "dump", "--npu-precision-device", "cpu", "-p", "no:cacheprovider")
    dump.assert_outcomes(failed=1)
    dump.stdout.fnmatch_lines(["*Custom.narrow_scale: its golden returned output.0 in float16 from float64 inputs*"])
    pytester.makefile(".yaml", **{"op_cases/narrow": """
cases:
  - op: narrow_scale
    dtypes: [float16]
    inputs:
      - shape: [4]
"""})
    case = pytester.runpytest("op_cases", "-p", "no:cacheprovider")
    case.assert_outcomes(failed=1)
    case.stdout.fnmatch_lines(["*Custom.narrow_scale: its golden returned output.0 in float16 from float64 inputs*"])


def test_a_registered_op_with_a_float64_reference_is_fine(fresh_registry):
    register_op("scaled", lambda x: x * 3, reference=lambda x: x * 3)
    x = torch.randn(32, dtype=torch.float16)
    assert check_call("scaled", x).status.value == "pass"
