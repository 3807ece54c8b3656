"""A sum that cancels to about zero: its golden's sign is within the bound, so an error there grows
|actual| whichever way it goes, and says nothing of a kernel that scales its results."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pytest_npuprecision import capture
from pytest_npuprecision.checks.case_run import Settings, run_case
from pytest_npuprecision.dump.dump_cases import load_dump


def _conv_bias_gradients(seed: int, folder: Path) -> dict:
    """Two conv2d + training batch norm blocks of a small CNN step, their conv2d calls dumped as tensors.
    Each batch norm takes its channels' means out, so each conv bias's gradient, a sum of N x H x W
    terms, is zero but for rounding. {conv2d key: that gradient's verdict}."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(16, 3, 32, 32, generator=g)
    w1, b1 = (torch.randn(32, 3, 3, 3, generator=g) * 0.2).requires_grad_(), (torch.randn(32, generator=g) * 0.1).requires_grad_()
    w2, b2 = (torch.randn(64, 32, 3, 3, generator=g) * 0.06).requires_grad_(), (torch.randn(64, generator=g) * 0.05).requires_grad_()
    with capture(folder, task="tensor", rank=0, step=0, list=["conv2d"]):
        h = F.max_pool2d(F.relu(F.batch_norm(F.conv2d(x, w1, b1, padding=1), None, None, training=True)), 2)
        h = F.silu(F.batch_norm(F.conv2d(h, w2, b2, padding=1, stride=2), None, None, training=True))
        (F.adaptive_avg_pool2d(h, 1).flatten(1) @ torch.randn(64, 10, generator=g)).logsumexp(1).mean().backward()
    assert max(b1.grad.abs().max(), b2.grad.abs().max()) < 1e-6  # the sums did cancel
    dump = load_dump(next(folder.rglob("dump.json")))
    verdicts = {}
    for case in dump.cases:
        if case.direction == "backward":
            result = run_case(case, dump.data_dir, Settings(device=torch.device("cpu")))
            verdicts[case.key] = next(out.verdict for out in result.outputs if out.name == "grad.input_args[2]")
    return verdicts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_cancelled_conv_bias_gradient_shows_no_growth_in_magnitude(tmp_path, seed):
    # Before the golden's sign had to be settled: magnitude_bound_bias 0.29-1.04 and magnitude_balance up
    # to 1.0 on these six fair gradients, five of them failing on it.
    for key, verdict in _conv_bias_gradients(seed, tmp_path).items():
        m = verdict.metrics
        assert abs(m.magnitude_bound_bias) < 0.1 and abs(m.magnitude_balance) < 0.1, (key, m)
        assert not any(c.metric.startswith("magnitude") and c.status.value != "pass" for c in verdict.checks)


@pytest.mark.xfail(strict=True, reason="known false alarm (docs/blind-spots.md): a cancelled sum's partial sums "
                                       "in a kernel's order can be far larger than its terms' norm, which the "
                                       "bound assumes; 2 of these 6 fair gradients reach mean_bound_ratio 1.1-1.2")
def test_every_cancelled_conv_bias_gradient_passes(tmp_path):
    verdicts = [v for seed in (0, 1, 2) for v in _conv_bias_gradients(seed, tmp_path / str(seed)).values()]
    assert all(v.status.value == "pass" for v in verdicts)
