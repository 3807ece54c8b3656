"""scaled_dot_product_attention judged with its conditioning: scores in the tens make each
probability fairly off by tens of ulps (exp of a rounded argument), and the gradients of Q and K sum
terms that cancel to nothing. torch's own kernel passes forward and backward at score spreads of 1,
4 and 8 in every dtype, causal or not; planted defects still fail."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import Status, check_call, judge
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.replay.runner import run_call

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
OP = "Functional.scaled_dot_product_attention"


def attention_inputs(dtype: torch.dtype, spread: float, seed: int = 0):
    generator = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(2, 4, 64, 32, generator=generator) for _ in range(3))
    return (q * spread).to(dtype), (k * spread).to(dtype), v.to(dtype)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("spread", [1, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_s_attention_passes_forward_and_backward(dtype, spread, causal):
    verdict = check_call(F.scaled_dot_product_attention, *attention_inputs(dtype, spread), backward=True,
                         is_causal=causal)
    assert verdict.status is Status.PASS, verdict.message()


@pytest.mark.parametrize("spread", [1, 4, 8])
@pytest.mark.parametrize("dtype", DTYPES)
def test_one_wrong_element_fails_in_every_output_and_gradient(dtype, spread):
    q, k, v = attention_inputs(dtype, spread)
    run = run_call(resolve(OP), (q, k, v), {}, device="cpu", backward=True, requires_grad=(0, 1, 2), seed=5)
    for out in (*run.outputs, *run.grads):
        key = f"{OP}.0.{'forward' if out.name == 'output.0' else 'backward'}"
        assert judge(out.actual, out.golden, op=key, accumulation=out.accumulation).status is Status.PASS
        wrong = out.actual.contiguous().clone()
        wrong.view(-1)[int(out.golden.abs().argmax())] *= 1.5
        assert judge(wrong, out.golden, op=key, accumulation=out.accumulation).status is Status.ERROR, out.name


@pytest.mark.parametrize("spread", [1, 8])
def test_probabilities_times_values_summed_in_bfloat16_fail_in_float32(spread):
    q, k, v = attention_inputs(torch.float32, spread)
    run = run_call(resolve(OP), (q, k, v), {}, device="cpu")
    (out,) = run.outputs
    p = torch.softmax(q @ k.transpose(-2, -1) / 32 ** 0.5, -1)
    sloppy = (p.bfloat16() @ v.bfloat16()).float()
    assert judge(sloppy, out.golden, op=OP, accumulation=out.accumulation).status is Status.ERROR


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_an_eight_eps_offset_fails_in_half_precision(dtype):
    q, k, v = attention_inputs(dtype, 4)
    run = run_call(resolve(OP), (q, k, v), {}, device="cpu")
    (out,) = run.outputs
    biased = (out.actual.float() + out.actual.float().abs() * 8 * torch.finfo(dtype).eps).to(dtype)
    assert judge(biased, out.golden, op=OP, accumulation=out.accumulation).status is Status.ERROR
