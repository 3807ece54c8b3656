"""multi_head_attention_forward projects query, key and value over E, scores each head over E / heads,
normalizes over S keys, sums over them and projects the result: bounded as one rounding, fair
float32 calls failed max_bound_ratio at up to 16.5 and mean_bound_ratio at 2.4. Its rule now counts
3 E + 2 S + E / heads terms (accumulation._multi_head_attention), and planted defects still fail."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from faulty_backend import Fault, FaultyBackend

from pytest_npuprecision import Status, capture
from pytest_npuprecision.checks.case_run import Settings, run_case
from pytest_npuprecision.dump.dump_cases import load_dump

API = "Functional.multi_head_attention_forward"


def _attention(tmp_path, embed: int, keys: int):
    """The forward and backward cases of one nn.MultiheadAttention call in a training step."""
    torch.manual_seed(3)
    module = nn.MultiheadAttention(embed, 4, batch_first=True)
    x = torch.randn(4, keys, embed)
    with capture(str(tmp_path), task="tensor", rank=0):
        output, weights = module(x, x, x)
        (output.square().mean() + weights.sum()).backward()
    dump = load_dump(next(tmp_path.rglob("dump.json")))
    return dump, {c.direction: c for c in dump.cases if c.key.startswith(API + ".")}


@pytest.mark.parametrize("embed, keys", [(64, 16), (96, 50), (256, 128)])
def test_fair_multi_head_attention_passes(tmp_path, embed, keys):
    dump, cases = _attention(tmp_path, embed, keys)
    assert set(cases) == {"forward", "backward"}
    for case in cases.values():
        result = run_case(case, dump.data_dir, Settings(device="cpu"))
        assert result.status is Status.PASS, result


@pytest.mark.parametrize("fault", [Fault("bias", 8), Fault("noise", 64), Fault("low_precision", dtype=torch.bfloat16),
                                   Fault("bias", 8, backward=True), Fault("noise", 64, backward=True)],
                         ids=Fault.describe)
def test_planted_defects_of_multi_head_attention_fail(tmp_path, fault):
    dump, cases = _attention(tmp_path, 96, 50)
    case = cases["backward" if fault.backward else "forward"]
    result = run_case(case, dump.data_dir, Settings(device=FaultyBackend({API: fault})))
    assert result.status is Status.ERROR, result
