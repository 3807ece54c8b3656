"""interpolate sums the taps around each source point with weights it computes in the dtype's
compute type: bicubic sums 16 with weights of both signs, so a fair float32 kernel errs by a few
units of roundoff of the taps, not of the result (OpInfo's float32 bicubic align_corners case
failed mean_bound_ratio at 1.19 with a length of 1). The taps are the reduction length; a wrong
element, a bias and a kernel that computes in bfloat16 still fail."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import Status, judge, render_message
from pytest_npuprecision.ops.catalogue import op_record

CALLS = {
    "bicubic, align_corners": ((2, 3, 4, 5), dict(size=(3, 4), mode="bicubic", align_corners=True)),
    "bicubic up": ((1, 2, 6, 7), dict(scale_factor=2.5, mode="bicubic")),
    "bilinear down, antialias": ((1, 3, 16, 12), dict(size=(5, 7), mode="bilinear", antialias=True)),
    "bilinear": ((2, 2, 5, 6), dict(size=(9, 4), mode="bilinear", align_corners=False)),
    "trilinear": ((1, 2, 4, 5, 6), dict(scale_factor=1.7, mode="trilinear")),
    "linear": ((2, 3, 9), dict(size=20, mode="linear", align_corners=True)),
    "area": ((2, 3, 11, 13), dict(size=(4, 5), mode="area")),
    "nearest": ((2, 3, 5, 5), dict(scale_factor=3, mode="nearest")),
}
DTYPES = [torch.float16, torch.bfloat16, torch.float32]


def _call(name, dtype, seed):
    shape, kwargs = CALLS[name]
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3).to(dtype)
    return (x,), kwargs, F.interpolate(x.double(), **kwargs)


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_torch_s_interpolation_passes_and_planted_defects_fail(name, dtype):
    if CALLS[name][1].get("antialias") and dtype != torch.float32:
        pytest.skip("torch's CPU antialias has no half-precision kernel")
    for seed in range(3):
        args, kwargs, golden = _call(name, dtype, seed)
        fair = F.interpolate(*args, **kwargs)
        verdict = judge(fair, golden, op="Functional.interpolate", inputs=(args, kwargs))
        assert verdict.status is Status.PASS, render_message(verdict)
    eps = torch.finfo(dtype).eps
    wrong = fair.clone()
    i = int(golden.abs().flatten().argmax())
    wrong.view(-1)[i] = (golden.view(-1)[i] * (1 + 256 * eps)).to(dtype)
    defects = {"one element 256 eps off": wrong, "a 16-eps bias": (golden * (1 + 16 * eps)).to(dtype)}
    if dtype == torch.float32:
        defects["inputs read as bfloat16"] = F.interpolate(args[0].bfloat16().float(), **kwargs)
    for defect, actual in defects.items():
        verdict = judge(actual, golden, op="Functional.interpolate", inputs=(args, kwargs))
        assert verdict.status is Status.ERROR, f"{defect}: {render_message(verdict)}"


@pytest.mark.parametrize("name, length", [("bicubic, align_corners", 16), ("bilinear", 4), ("trilinear", 8),
                                          ("linear", 2), ("nearest", 1), ("area", 4 * 4),
                                          ("bilinear down, antialias", 2 * 5 * 2 * 3)])
def test_the_length_is_the_taps_of_the_mode(name, length):
    args, kwargs, _ = _call(name, torch.float32, 0)
    assert op_record("interpolate").accumulation.length(args, kwargs) == length


def test_the_upsample_functionals_take_their_fixed_mode():
    x = torch.randn(1, 1, 4, 4)
    assert op_record("upsample_bilinear").accumulation.length((x,), {"size": 8}) == 4
    assert op_record("upsample_nearest").accumulation.length((x, 8), {}) == 1
    assert op_record("upsample").accumulation.length((x, None, 2, "bicubic"), {}) == 16
    terms = op_record("upsample_bilinear").accumulation.term_norm((x,), {"size": 8})
    assert terms.shape == (1, 1, 8, 8) and bool((terms > 0).all())


@pytest.mark.parametrize("mode", ["bilinear", "bicubic"])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("scale", [3.3, 2.0, 1.7, 0.37])
def test_far_source_points_are_misplaced_by_their_rounding_and_pass(mode, align_corners, scale):
    """Source points 40 pixels out: a fair float32 kernel misplaces them by ~u 40 pixels, and on
    rough data that moves the result by up to 280x the rounding of the taps' weighted sum."""
    kwargs = dict(scale_factor=scale, mode=mode, align_corners=align_corners)
    for seed in range(3):
        x = torch.randn(1, 2, 48, 40, generator=torch.Generator().manual_seed(seed)) * 3
        golden = F.interpolate(x.double(), **kwargs)
        verdict = judge(F.interpolate(x, **kwargs), golden, op="Functional.interpolate", inputs=((x,), kwargs))
        assert verdict.status is Status.PASS, render_message(verdict)
    coarse = F.interpolate(x.bfloat16().float(), **kwargs)
    wrong = F.interpolate(x, **kwargs)
    wrong.view(-1)[7] = golden.view(-1)[7] * (1 + 4096 * torch.finfo(torch.float32).eps) + 1e-3
    for defect, actual in (("inputs read as bfloat16", coarse), ("one element 4096 eps off", wrong)):
        verdict = judge(actual, golden, op="Functional.interpolate", inputs=((x,), kwargs))
        assert verdict.status is Status.ERROR, f"{defect}: {render_message(verdict)}"
