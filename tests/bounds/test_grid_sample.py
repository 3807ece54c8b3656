"""grid_sample places each sample at ((g + 1) W - 1) / 2, a few roundings of the pixel coordinate: a
fair float32 kernel misplaces samples 40 pixels out by ~40 u pixels, and its result and input gradient
move by that times their slope. The forward bound carries it as a sensitivity, the input gradient's
second look moves the grid as far; a grid read in bfloat16 or one wrong element still fails."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import Status, check_call, judge, render_message

EPS = torch.finfo(torch.float32).eps


def _inputs(seed: int):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 3, 30, 40, generator=gen)
    grid = torch.rand(2, 9, 11, 2, generator=gen) * 2.2 - 1.1  # a few samples past the border
    return x, grid


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_torch_s_float32_grid_sample_passes_forward_and_backward(mode, padding_mode, align_corners):
    kwargs = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    for seed in range(3):
        verdict = check_call(F.grid_sample, *_inputs(seed), backward=True, seed=seed, **kwargs)
        assert verdict.status is Status.PASS, verdict.message()


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
def test_a_coarse_grid_and_a_wrong_element_fail(mode):
    x, grid = _inputs(0)
    kwargs = dict(mode=mode, padding_mode="border", align_corners=False)
    golden = F.grid_sample(x.double(), grid.double(), **kwargs)
    coarse = F.grid_sample(x, grid.bfloat16().float(), **kwargs)
    wrong = F.grid_sample(x, grid, **kwargs)
    wrong.view(-1)[5] += 4096 * EPS * float(golden.abs().max())
    for defect, actual in (("grid read as bfloat16", coarse), ("one element 4096 eps of the max off", wrong)):
        verdict = judge(actual, golden, op="Functional.grid_sample", inputs=((x, grid), kwargs))
        assert verdict.status is Status.ERROR, f"{defect}: {render_message(verdict)}"
