"""OpInfo samples that torch's fair CPU kernels computed past the bound (triage round 3), and planted
defects in the same ops that must still fail.

The inputs are the full OpInfo run's own (tests/data/opinfo/round3/inputs.pt, from msprobe's dumps):
- tensordot whose contracted dims of 1 meet dims of 2: four products, and torch sums the longer
  operand over those dims first, rounded (bounds/accumulation.py's length, its record's roundings);
- binary_cross_entropy_with_logits and multilabel_soft_margin_loss, composed op by op in the
  dtype: each element's loss rounds before the mean (its record's roundings);
- local_response_norm, whose denominator rounds at each of its four steps (its record's roundings);
- logsumexp's gradient g exp(x - out), which reads the rounded out (bounds/terms/softmax_terms.py);
- cosine_similarity's gradient, whose two autograd paths cancel (bounds/terms/composite_terms.py).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from pytest_npuprecision.checks.judging import judge
from pytest_npuprecision.ops.resolution import resolve
from pytest_npuprecision.precision.verdict import Status
from pytest_npuprecision.replay.runner import run_call

_LOADED = torch.load(Path(__file__).resolve().parents[1] / "data" / "opinfo" / "round3" / "inputs.pt", weights_only=True)
SAMPLES, REAL = _LOADED["fair"], _LOADED["real"]
FORWARD = [k for k in SAMPLES if k.endswith(".forward")]
BACKWARD = [k for k in SAMPLES if k.endswith(".backward")]


def _verdicts(key: str, device_op=None) -> dict[str, object]:
    sample = SAMPLES.get(key) or REAL[key]
    op = resolve(sample["api"])
    reference = None
    if device_op is not None:  # the device runs a defective copy; the golden the real op
        reference, op = op.func, dataclasses.replace(op, func=device_op(op.func))
    backward = key.endswith(".backward")
    run = run_call(op, [a.clone() if isinstance(a, torch.Tensor) else a for a in sample["args"]],
                   dict(sample["kwargs"]), device="cpu", backward=backward, requires_grad=sample["requires_grad"],
                   grad_outputs=sample["grad_outputs"] if backward else None, reference=reference)
    name = key.split("/", 1)[1].rsplit(".", 2)[0]
    return {out.name: judge(out.actual, out.golden, op=f"{name}.0.backward" if out.name.startswith("grad") else name,
                            accumulation=out.accumulation)
            for out in (run.grads if backward else run.outputs)}


def _failures(verdicts) -> dict[str, list[str]]:
    return {n: [c.describe() for c in v.failures] for n, v in verdicts.items() if v.status is not Status.PASS}


@pytest.mark.parametrize("key", FORWARD + BACKWARD)
def test_torchs_fair_kernel_passes(key):
    verdicts = _verdicts(key)
    assert verdicts and not _failures(verdicts)


def _eps(t: torch.Tensor) -> float:
    return torch.finfo(t.dtype).eps


def _biased(op, eps: float = 4):
    return lambda *a, **k: (lambda out: out + eps * _eps(out) * out.abs())(op(*a, **k))


def _one_wrong(op):
    def device(*a, **k):
        out = op(*a, **k).clone()
        out.view(-1)[-1] += 1000 * _eps(out) * out.view(-1)[-1].abs().clamp_min(1.0)
        return out
    return device


@pytest.mark.parametrize("defect", [_biased, _one_wrong])
@pytest.mark.parametrize("key", FORWARD)
def test_planted_defects_in_those_outputs_fail(key, defect):
    assert _failures(_verdicts(key, defect)), key


def _gradient_defect(change):
    """The op with ``change`` applied to every input gradient autograd computes through it."""
    def wrap(op):
        def device(*a, **k):
            for x in a:
                if isinstance(x, torch.Tensor) and x.requires_grad:
                    x.register_hook(change)
            return op(*a, **k)
        return device
    return wrap


def _grad_one_wrong(g):
    g = g.clone()
    g.view(-1)[-1] += 1000 * _eps(g) * g.abs().max()
    return g


@pytest.mark.parametrize("change", [lambda g: g + 4 * _eps(g) * g.abs().max(), _grad_one_wrong],
                         ids=["bias", "one_wrong"])
@pytest.mark.parametrize("key", BACKWARD)
def test_planted_defects_in_those_gradients_fail(key, change):
    assert _failures(_verdicts(key, _gradient_defect(change))), key


# torch's CPU kernels that err past what their dtype explains: they must keep failing.
# - adaptive_avg_pool3d in float16 and bfloat16 sums each window in the dtype (scalar_t sum += x,
#   then / kT / kH / kW, each rounded: an emulation matches torch bit for bit), the float16
#   accumulation the planted defects plant; a float32 sum rounded once errs 2.7x less on average.
# - grid_sample (grid_sampler_2d) in float16 and bfloat16 computes the sampling coordinates in the
#   dtype: an error of u |(x + 1) (W - 1) / 2| pixels, 10-30x what a float32 evaluation rounded once errs.
@pytest.mark.parametrize("key", list(REAL))
def test_torchs_real_imprecisions_fail(key):
    assert _failures(_verdicts(key)), key
