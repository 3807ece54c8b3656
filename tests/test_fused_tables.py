"""Every fused reference has a row in ops.yaml, and the accumulating ones an accumulation rule."""

from __future__ import annotations

from pathlib import Path

import torch
import yaml

import pytest_npuprecision
from pytest_npuprecision.accumulation import ACCUMULATION_RULES
from pytest_npuprecision.fused import FUSED_OPS

TABLE = yaml.safe_load((Path(pytest_npuprecision.__file__).parent / "data" / "ops.yaml").read_text())


def test_every_fused_op_has_a_standard():
    listed = [name for names in TABLE["standards"].values() for name in names]
    assert sorted(set(FUSED_OPS) - set(listed)) == []
    assert len(listed) == len(set(listed)), "an op under two standards"


def test_fusion_attention_lengths_read_every_layout():
    rule = ACCUMULATION_RULES["npu_fusion_attention"]
    q, k = torch.zeros(2, 6, 32), torch.zeros(2, 10, 16)  # BSH: D = 32 / 4 heads
    assert rule.length((q, k, k, 4, "BSH"), {}) == 10 + 8
    assert rule.backward_length((q, k, k, 4, "BSH"), {}) == 6 + 10 + 8
    assert rule.length((q.transpose(0, 1), k.transpose(0, 1), k, 4, "SBH"), {}) == 18
    t = torch.zeros(9, 4, 8)
    assert rule.length((t, t, t), {"head_num": 4, "input_layout": "TND", "actual_seq_qlen": [2, 7, 9],
                                   "actual_seq_kvlen": torch.tensor([2, 7, 9])}) == 5 + 8
    grad = ACCUMULATION_RULES["npu_fusion_attention_grad"]
    assert grad.length((q, k, k, q, 4, "BSH"), {}) == 24


def test_grouped_matmul_sums_over_k():
    assert ACCUMULATION_RULES["npu_grouped_matmul"].length(([torch.zeros(5, 7)], [torch.zeros(3, 7, 2)]), {}) == 7
    assert ACCUMULATION_RULES["npu_gmm"].length((torch.zeros(5, 7), torch.zeros(3, 7, 2)), {}) == 7


def test_the_readme_table_lists_every_reference_with_its_standard_and_gaps():
    """The README's "Ascend fused ops" table is the reference list: one row per op, its standard as the
    tables judge it, and what it does not support."""
    from pathlib import Path

    from pytest_npuprecision.rules import Rules, parse_op_name

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Ascend fused ops", 1)[1].split("\n### ", 1)[0]
    rows = {cells[0].strip("` "): [c.strip() for c in cells[1:]] for cells in (
        line.strip("|").split(" | ") for line in section.splitlines() if line.startswith("| `npu_"))}
    assert rows.keys() == FUSED_OPS.keys()
    rules = Rules.default()
    for name, (outputs, standard, unsupported) in rows.items():
        op = FUSED_OPS[name]
        assert outputs == op.outputs and unsupported == (op.unsupported or "—"), name
        assert standard == rules.op_rule(parse_op_name(f"NPU.{name}")).standard, name
