"""Skip and warning texts in the user's words, not autograd's or the plugin's (issue 42)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import torch.nn.functional as F
from dump_writer import DumpWriter
from fixtures import fixture_dump

REAL = Path(__file__).parents[1] / "data" / "real-models" / "fp16_overflow_mlp"


def test_a_3d_linear_backward_offline_says_msprobe_recorded_a_reshape(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump("transformer_tensor")), "--npu-precision-device",
                                "dumped", "-k", "linear and backward", "-rs", "-p", "no:cacheprovider")
    skips = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert skips, result.stdout.str()[-2000:]
    for line in skips:
        assert "msprobe recorded the gradient of a reshape inside this call" in line, line
        assert "a reshape holds no arithmetic to judge" in line and "the forward case judges" in line
        assert "computed inside the call" not in line


def test_an_inline_bool_output_is_compared_offline(pytester):
    dump = pytester.path / "mlp"
    shutil.copytree(REAL, dump)
    common = ("--npu-precision", "mlp", "--npu-precision-device", "dumped", "-k", "__bool__", "-p", "no:cacheprovider")
    pytester.runpytest(*common).assert_outcomes(passed=1)
    path = dump / "step0" / "rank0" / "dump.json"
    document = json.loads(path.read_text())
    [key] = [k for k in document["data"] if k.startswith("Tensor.__bool__")]
    assert document["data"][key]["output"] == [{"type": "bool", "value": False}]
    document["data"][key]["output"] = [{"type": "bool", "value": True}]  # the device said True: wrong
    path.write_text(json.dumps(document))
    result = pytester.runpytest(*common)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*binary_mismatch = 1 > limit 0*"])


def test_a_judged_dtype_warning_points_at_the_users_dump_and_the_docs(pytester):
    writer = DumpWriter(pytester.path / "dump")
    x = torch.randn(8).bfloat16()
    writer.call("Functional.gelu.0", (x,), outputs=(F.gelu(x).float(),))  # a float32 output no autocast explains
    writer.load()
    result = pytester.runpytest("--npu-precision", "dump", "--npu-precision-device", "cpu", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert ("  dump/step0/rank0/dump.json:0: JudgedDtypeWarning: step0/rank0::Functional.gelu.0.forward: "
            "output.0 is judged") in out
    assert "docs/real-models.md" in out and "plugin/collecting.py" not in out
