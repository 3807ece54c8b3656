"""Centring normalizations are judged with their conditioning: torch's own kernels pass where x - mean
cancels (2 values per channel, a row far from zero), and planted defects in the same ops still fail."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision.checks.judging import judge
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.precision.verdict import Status
from pytest_npuprecision.replay.runner import run_call


def _verdicts(api, args, kwargs, requires_grad, device_op=None):
    op = resolve(api)
    reference = None
    if device_op is not None:  # the device runs a defective copy; the golden the real op
        reference, op = op.func, dataclasses.replace(op, func=device_op)
    run = run_call(op, args, kwargs, device="cpu", backward=True, requires_grad=requires_grad, reference=reference)
    judged = {}
    for out in run.outputs + run.grads:
        name = api if out.name.startswith("output") else f"{api}.0.backward"
        judged[out.name] = judge(out.actual, out.golden, op=name, accumulation=out.accumulation)
    return judged


def _conv_like(per_channel: int, seed: int, dtype=torch.float32, offset: float = 2.0):
    """Post-conv activations: a per-channel offset of a few sigma over few values per channel."""
    g = torch.Generator().manual_seed(seed)
    channels, batch = 64, 2
    x = torch.randn(batch, channels, per_channel // batch, 1, generator=g)
    x = (x + offset + torch.randn(1, channels, 1, 1, generator=g).abs() * offset).to(dtype)
    weight, bias = torch.randn(channels, generator=g).to(dtype), torch.randn(channels, generator=g).to(dtype)
    stats = torch.zeros(channels, dtype=dtype), torch.ones(channels, dtype=dtype)
    return (x, *stats, weight, bias, True, 0.1, 1e-5)


def _far_rows(seed: int, dtype, offset: float):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(4, 128, generator=g) + offset).to(dtype)
    return x, [128], torch.randn(128, generator=g).to(dtype), torch.randn(128, generator=g).to(dtype), 1e-5


def _margin(verdicts) -> float:
    """The largest share of its limit any check used."""
    return max(c.value / c.limit for v in verdicts.values() for c in v.checks[1:] if c.limit)


@pytest.mark.parametrize("per_channel", [2, 4, 8, 32])
def test_batch_norm_of_few_values_per_channel_passes(per_channel):
    for seed in range(5):
        verdicts = _verdicts("Functional.batch_norm", _conv_like(per_channel, seed), {}, (0, 3, 4))
        assert all(v.status is Status.PASS for v in verdicts.values()), {n: v.status for n, v in verdicts.items()}
        assert _margin(verdicts) < 0.8


@pytest.mark.parametrize("dtype, offset", [(torch.float32, 100.0), (torch.bfloat16, 30.0), (torch.bfloat16, 100.0)])
def test_layer_norm_of_rows_far_from_zero_passes(dtype, offset):
    for seed in range(5):
        verdicts = _verdicts("Functional.layer_norm", _far_rows(seed, dtype, offset), {}, (0, 2, 3))
        assert all(v.status is Status.PASS for v in verdicts.values())
        assert _margin(verdicts) < 0.8


def test_group_and_instance_norm_far_from_zero_pass():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 8, 2, 1, generator=g) + 50
    w, b = torch.randn(8, generator=g), torch.randn(8, generator=g)
    group = _verdicts("Functional.group_norm", (x, 4, w, b, 1e-5), {}, (0, 2, 3))
    instance = _verdicts("Functional.instance_norm", (x, None, None, w, b, True, 0.1, 1e-5), {}, (0, 3, 4))
    for verdicts in (group, instance):
        assert all(v.status is Status.PASS for v in verdicts.values())


def _biased(op, ulps: float):
    def device(*args, **kwargs):
        out = op(*args, **kwargs)
        return out + ulps * torch.finfo(out.dtype).eps * out.abs()
    return device


def _one_wrong(op):
    def device(*args, **kwargs):
        out = op(*args, **kwargs).clone()
        out.view(-1)[7] = out.view(-1)[7] * 1.01 + 0.01
        return out
    return device


def _half_precision_statistics(x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                               eps=1e-5):
    """batch_norm whose mean and variance are accumulated in bfloat16."""
    low = x.to(torch.bfloat16)
    mean = low.mean(dim=(0, 2, 3), keepdim=True).to(x.dtype)
    var = ((low - mean.to(torch.bfloat16)) ** 2).mean(dim=(0, 2, 3), keepdim=True).to(x.dtype)
    y = (x - mean) / torch.sqrt(var + eps)
    return y * weight.view(1, -1, 1, 1) + bias.view(1, -1, 1, 1)


def _nan_at_one(op):
    def device(*args, **kwargs):
        out = op(*args, **kwargs).clone()
        out.view(-1)[3] = float("nan")
        return out
    return device


@pytest.mark.parametrize("defect", ["bias", "one_wrong", "half_statistics", "nan"])
@pytest.mark.parametrize("per_channel", [2, 32])
def test_batch_norm_defects_still_fail(defect, per_channel):
    make = {"bias": lambda: _biased(F.batch_norm, 64), "one_wrong": lambda: _one_wrong(F.batch_norm),
            "half_statistics": lambda: _half_precision_statistics, "nan": lambda: _nan_at_one(F.batch_norm)}[defect]
    # Data centred near zero: the defects must show where no cancellation excuses them.
    args = _conv_like(per_channel, 0, offset=0.0)
    verdicts = _verdicts("Functional.batch_norm", args, {}, (0, 3, 4), device_op=make())
    assert verdicts["output.0"].status is Status.ERROR, verdicts["output.0"].checks


@pytest.mark.parametrize("defect", ["bias", "one_wrong", "nan"])
def test_layer_norm_defects_still_fail_far_from_zero(defect):
    make = {"bias": lambda: _biased(F.layer_norm, 256), "one_wrong": lambda: _one_wrong(F.layer_norm),
            "nan": lambda: _nan_at_one(F.layer_norm)}[defect]
    verdicts = _verdicts("Functional.layer_norm", _far_rows(0, torch.float32, 100.0), {}, (0, 2, 3),
                         device_op=make())
    assert verdicts["output.0"].status is Status.ERROR
