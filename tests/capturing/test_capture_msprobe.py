"""Capture against msprobe's own dump of the same step: the same keys in the same order, the same
descriptors, equal tensors and equal values. msprobe (mindstudio-probe, the ``msprobe`` extra) runs in a
child process, so its patching of torch never reaches this one; the test skips where it is absent."""

from __future__ import annotations

import json
import math
from xml.etree import ElementTree
from pathlib import Path

import pytest
import torch

from step_dumps import captured_dump, msprobe_dump, needs_msprobe


def dump_differences(ours: Path, theirs: Path) -> list[str]:
    """Every difference between two dumps, key by key; statistics may differ in the last bits."""
    a = json.loads((ours / "dump.json").read_text())["data"]
    b = json.loads((theirs / "dump.json").read_text())["data"]
    if list(a) != list(b):
        only = [k for k in a if k not in b], [k for k in b if k not in a]
        return [f"keys differ: capture only {only[0]}, msprobe only {only[1]}; "
                f"first order difference at {next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)}"]
    found: list[str] = []
    for key in a:
        _compare(a[key], b[key], key, ours, theirs, found)
    return found


def _compare(x, y, where: str, ours: Path, theirs: Path, found: list[str]) -> None:
    if isinstance(x, dict) and x.get("type") == "torch.Tensor" and isinstance(y, dict):
        for field in ("dtype", "shape", "requires_grad", "data_name"):
            if x.get(field) != y.get(field):
                found.append(f"{where}.{field}: capture {x.get(field)!r}, msprobe {y.get(field)!r}")
        for stat in ("Max", "Min", "Mean", "Norm"):
            if not _close(x.get(stat), y.get(stat)):
                found.append(f"{where}.{stat}: capture {x.get(stat)!r}, msprobe {y.get(stat)!r}")
        if "data_name" not in x or "data_name" not in y:
            return
        left, right = ours / "dump_tensor_data" / x["data_name"], theirs / "dump_tensor_data" / y["data_name"]
        if left.exists() != right.exists():
            found.append(f"{where}: tensor file in {'capture' if left.exists() else 'msprobe'} only")
        elif left.exists():
            t, u = torch.load(left, weights_only=True), torch.load(right, weights_only=True)
            if not torch.equal(t, u) and not torch.allclose(t, u, rtol=0, atol=0, equal_nan=True):
                found.append(f"{where}: tensors differ (max |diff| {(t.double() - u.double()).abs().max().item()})")
    elif isinstance(x, dict) and isinstance(y, dict):
        if list(x) != list(y):
            found.append(f"{where}: fields {list(x)} vs msprobe {list(y)}")
        for k in x.keys() & y.keys():
            _compare(x[k], y[k], f"{where}.{k}", ours, theirs, found)
    elif isinstance(x, list) and isinstance(y, list):
        if len(x) != len(y):
            found.append(f"{where}: {len(x)} items vs msprobe {len(y)}")
        for i, (p, q) in enumerate(zip(x, y)):
            _compare(p, q, f"{where}[{i}]", ours, theirs, found)
    elif x != y:
        found.append(f"{where}: capture {x!r}, msprobe {y!r}")


def _close(p, q) -> bool:
    if isinstance(p, (int, float)) and isinstance(q, (int, float)) and not isinstance(p, bool):
        return (math.isnan(p) and math.isnan(q)) or math.isclose(p, q, rel_tol=1e-5, abs_tol=1e-6)
    return p == q


@needs_msprobe
@pytest.mark.parametrize("model", ["mlp", "transformer"])
@pytest.mark.parametrize("task", ["tensor", "statistics"])
def test_capture_matches_msprobe(tmp_path, model, task):
    theirs = msprobe_dump(tmp_path, model, task)
    ours = captured_dump(tmp_path, model, task)
    assert dump_differences(ours, theirs) == []


def _outcomes(pytester, dump: Path, name: str) -> dict[str, str]:
    """Each case's outcome under ``pytest --npu-precision``, read from its JUnit XML."""
    xml = pytester.path / f"{name}.xml"
    pytester.runpytest("--npu-precision", str(dump), "-p", "no:cacheprovider", f"--junitxml={xml}")
    outcomes = {}
    for case in ElementTree.parse(xml).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("skipped", "failure", "error")]
        outcomes[case.get("name")] = kinds[0] if kinds else "passed"
    return outcomes


@needs_msprobe
@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_the_captured_dump_checks_like_msprobes(pytester, tmp_path, model):
    theirs = _outcomes(pytester, msprobe_dump(tmp_path, model, "tensor"), "msprobe")
    ours = _outcomes(pytester, captured_dump(tmp_path, model, "tensor"), "capture")
    assert list(ours) == list(theirs) and len(ours) >= 12
    assert {name for name, kind in ours.items() if kind == "skipped"} <= \
        {name for name, kind in theirs.items() if kind == "skipped"}
    assert ours == theirs
