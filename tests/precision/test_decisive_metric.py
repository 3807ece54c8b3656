"""A failure message leads with the check that decided it and keeps the rest to one line; where a mean
decides (a bias, a scaling), it shows that mean and its limit, not a worst element that lies within
what the standard allows there (issue 42)."""

from __future__ import annotations

import torch

from pytest_npuprecision import judge, render_message

GOLDEN = torch.linspace(-3, 3, 2048, dtype=torch.float64)


def test_a_scaling_is_shown_by_its_mean_signed_error_not_by_the_worst_element():
    actual = (torch.nn.functional.gelu(GOLDEN) * 1.01).bfloat16()  # every element 1 % too large
    verdict = judge(actual, torch.nn.functional.gelu(GOLDEN), op="Functional.gelu")
    lines = render_message(verdict).splitlines()
    assert lines[1].startswith("  the error: a scaling: the device's output is 1 % larger than the golden")
    check = next(c for c in verdict.failures if c.metric == "magnitude_bound_bias")  # what measures a scaling
    assert lines[2].startswith(f"  {check.metric} = ") and lines[2].endswith("[error]")
    assert not any(line.lstrip().startswith(("worst element", "error there")) for line in lines)
    [decided] = [line for line in lines if line.startswith("  decided by ")]
    assert decided.startswith("  decided by the mean signed error, not by one element: the device ")
    assert (f"by {check.value:.3g} of each element's error bound on average, where {check.limit:.3g} is allowed "
            f"(mean relative error ") in decided
    assert 0.009 < float(decided.split("mean relative error ")[1].split(")")[0]) < 0.011


def test_one_wrong_element_leads_with_it_and_lists_the_rest_on_one_line():
    golden = torch.nn.functional.gelu(GOLDEN)
    actual = golden.float()
    actual[100] += 1.0
    verdict = judge(actual, golden, op="Functional.gelu")
    assert len(verdict.failures) > 2
    lines = render_message(verdict).splitlines()
    assert lines[1] == "  the error: one element far off: the rest lie within what the standard allows them"
    assert lines[2].startswith("  max_bound_ratio = ") and lines[3].startswith("      = largest error")
    others = ", ".join(f"{c.metric} " for c in verdict.failures[1:])
    assert lines[4].startswith("  also failing: ") and lines[4].count(",") == len(verdict.failures) - 2, others
    assert sum(line.startswith("      = ") for line in lines) == 1
    assert any(line.startswith("  worst element [100]: ") for line in lines)
