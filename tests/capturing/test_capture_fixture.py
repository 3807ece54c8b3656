"""The npu_precision_capture fixture end to end: a model step recorded inside a test and every captured
call checked, live or offline. The planted defect is a custom row sum whose float16 path accumulates in
float16; captured inside a model step it fails the test with its API name, and the correct op passes."""

from __future__ import annotations

import pytest

STEP = '''
import torch
import torch.nn as nn
from torch.overrides import wrap_torch_function

from pytest_npuprecision import register_op


def _sequential(x):
    total = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for k in range(x.shape[-1]):
        total = total + x[..., k]
    return total


@wrap_torch_function(lambda x, dim=-1: (x,))  # lets torch's function mode see the op as one call
def row_sum(x, dim=-1):
    x = x.movedim(dim, -1)
    if {defect} and x.dtype == torch.float16:
        return _sequential(x)  # the defect: a float16 accumulator
    return x.float().sum(-1).to(x.dtype)


register_op("capture_row_sum", row_sum, reference=lambda x, dim=-1: x.sum(dim), like="sum")


def test_model_step(npu_precision_capture):
    torch.manual_seed(0)
    model = nn.Linear(64, 512)
    x = torch.rand(16, 64)
    with npu_precision_capture():
        loss = row_sum(model(x).half()).float().pow(2).mean()
        loss.backward()
'''


@pytest.mark.parametrize("device", ["cpu", "dumped"])
def test_the_planted_float16_accumulation_fails_with_the_api_name(pytester, device):
    pytester.makepyfile(test_step=STEP.format(defect=True))
    result = pytester.runpytest("-p", "no:cacheprovider", "--npu-precision-device", device)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_step.py::test_model_step: * captured call(s) not precise enough*",
                                 "*Custom.capture_row_sum.0.forward (fail)*"])


@pytest.mark.parametrize("device", ["cpu", "dumped"])
def test_the_correct_op_passes(pytester, device):
    pytester.makepyfile(test_step=STEP.format(defect=False))
    result = pytester.runpytest("-p", "no:cacheprovider", "--npu-precision-device", device)
    result.assert_outcomes(passed=1)


def test_a_failure_is_one_message_without_a_library_frame_and_says_the_dump_is_temporary(pytester):
    pytester.makepyfile(test_step=STEP.format(defect=True))
    result = pytester.runpytest("-p", "no:cacheprovider", "--npu-precision-device", "cpu")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "contextlib.py" not in output and "next(self.gen)" not in output
    result.stdout.fnmatch_lines(["*dump: * (a temporary folder: pytest removes it after three more runs; "
                                 "--npu-precision-report DIR keeps a copy)*"])


def test_with_a_report_folder_the_failing_dump_is_kept_and_the_rerun_line_works(pytester):
    pytester.makepyfile(test_step=STEP.format(defect=True))
    result = pytester.runpytest("-p", "no:cacheprovider", "--npu-precision-device", "cpu",
                                "--npu-precision-report", "reports")
    result.assert_outcomes(failed=1)
    kept = pytester.path / "reports" / "captured" / "test_step.py_test_model_step"
    assert (kept / "step0" / "rank0" / "dump.json").is_file()
    rerun = next(line for line in result.stdout.lines if "rerun one: pytest" in line)
    words = rerun.split("rerun one: pytest ", 1)[1].split()
    assert words[1] == str(kept)
    again = pytester.runpytest("-p", "no:cacheprovider", "--npu-precision-device", "cpu", *words)
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*Custom.capture_row_sum.0.forward*"])
