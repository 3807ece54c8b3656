"""Capture records an in-place or out= call's inputs before the call changes them, as msprobe does:
an optimizer's update is then judged on the parameters the step used. Recorded after the call, every
AdamW or SGD update had input equal to output, and a correct model failed offline."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn as nn

import pytest_npuprecision

OPTIMIZERS = {"adamw": lambda p: torch.optim.AdamW(p, lr=0.05, foreach=False),
              "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False)}


def _captured_step(folder, optimizer: str) -> dict:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.LayerNorm(32), nn.Linear(32, 4))
    step = OPTIMIZERS[optimizer](model.parameters())
    x = torch.randn(8, 16)
    model(x).pow(2).mean().backward()  # a first step outside, so that AdamW's and SGD's state exist
    step.step()
    step.zero_grad()
    with pytest_npuprecision.capture(folder, task="tensor", step=0, rank=0):
        model(x).pow(2).mean().backward()
        step.step()
        total = torch.zeros(4)
        torch.add(total, torch.ones(4), out=total)
    return json.loads((folder / "step0" / "rank0" / "dump.json").read_text())["data"]


def _max(descriptor) -> float:
    return descriptor["Max"]


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
def test_an_in_place_update_is_recorded_with_its_input_before_the_call(tmp_path, optimizer):
    data = _captured_step(tmp_path, optimizer)
    updates = [k for k in data if k.endswith(".forward") and k.split(".")[1].endswith("_")]
    assert updates, sorted(data)
    changed = [k for k in updates if data[k]["input_args"][0] != data[k]["output"][0]]
    assert len(changed) >= len(updates) // 2, f"inputs equal to outputs: {sorted(set(updates) - set(changed))}"
    out = next(k for k in data if k.startswith("Torch.add.") and "out" in data[k]["input_kwargs"])
    assert _max(data[out]["input_kwargs"]["out"]) == 0.0 and _max(data[out]["output"][0]) == 1.0


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.parametrize("device", ["cpu", "dumped"])
def test_a_correct_training_step_passes_replayed_and_offline(pytester, tmp_path, optimizer, device):
    _captured_step(tmp_path / "dump", optimizer)
    result = pytester.runpytest("--npu-precision", str(tmp_path / "dump"), "--npu-precision-device", device,
                                "-p", "no:cacheprovider", "-q")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) > 20 and "failed" not in outcomes and "error" not in outcomes, \
        result.stdout.str()


FIXTURE_STEP = '''
import torch
import torch.nn as nn


def test_model_step(npu_precision_capture):
    torch.manual_seed(0)
    model = nn.Linear(16, 4)
    step = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    with npu_precision_capture():
        model(torch.randn(8, 16)).pow(2).mean().backward()
        step.step()
'''


@pytest.mark.parametrize("device", ["cpu", "dumped"])
def test_the_fixture_passes_a_correct_sgd_step(pytester, device):
    pytester.makepyfile(test_step=FIXTURE_STEP)
    result = pytester.runpytest("-p", "no:cacheprovider", "--npu-precision-device", device)
    result.assert_outcomes(passed=1)
