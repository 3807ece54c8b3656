"""Standards are objects, not names: each owns its metrics, its allowance and its count of failing elements,
and one registry says which exist. A new standard is one class, one registration, its limits and its docs
section; judging and verdicts need no change, and compare no standard's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import pytest_npuprecision
from pytest_npuprecision import Rules, Status, judge, render_message
from pytest_npuprecision.precision.metrics import Limit
from pytest_npuprecision.precision.rules import metric_names, schema_vocabulary
from pytest_npuprecision.precision.standards import STANDARDS, Standard, check

PACKAGE = Path(pytest_npuprecision.__file__).parent


class MaxAbs(Standard):
    """A toy standard: the largest absolute error, against one limit."""

    name, worst = "max_abs", "abs"
    metrics = ("max_abs_err",)

    def checks(self, m, limits, baseline, floor):
        return [check("max_abs_err", m.max_abs_err, limits["max_abs_err"])]

    def mismatched(self, m):
        return m.binary_mismatch, m.numel, "that differ from the golden"

    def allowed(self, element, m, params, limits, dtype, roundings):
        return limits["max_abs_err"].error


@pytest.fixture
def max_abs():
    standard = STANDARDS.register(MaxAbs())
    yield standard
    STANDARDS.unregister("max_abs")


GOLDEN = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
ACTUAL = torch.tensor([1.0, 2.0, 3.25], dtype=torch.float32)
LIMITS = {"standards": {"max_abs": {"max_abs_err": 0.1}}}


def test_a_new_standard_judges_by_name_once_registered(max_abs):
    verdict = judge(ACTUAL, GOLDEN, standard="max_abs", rules=Rules.default().merged(LIMITS))
    assert verdict.status is Status.ERROR and verdict.judged_by == (max_abs,)
    assert render_message(verdict) == (
        "<tensor> [float32, 3]: error by the max_abs standard\n"
        "  the error: one element far off: the rest lie within what the standard allows them\n"
        "  max_abs_err = 0.25 > limit 0.1  [error]\n"
        "  mismatched elements: 1 / 3 (33.3%) that differ from the golden\n"
        "  worst element [2]: actual 3.25, golden 3\n"
        "    error there: 0.25 absolute, 0.0833 relative; the standard allows 0.1\n"
        "  compared: actual vs golden\n"
        "  docs: docs/standards.md#max-abs"
    )
    assert max_abs.section == "docs/standards.md#max-abs"


def test_an_op_table_may_name_a_new_standard_and_it_chooses_itself_before_the_fallback(max_abs, tmp_path):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text("standards:\n  max_abs:\n    max_abs_err: 0.5\nops:\n  gelu: {standard: max_abs}\n")
    rules = Rules.default().merged(rules_file)
    verdict = judge(ACTUAL, GOLDEN, op="Functional.gelu", rules=rules)
    assert (verdict.standard, verdict.status) == ("max_abs", Status.PASS)
    assert [c.metric for c in verdict.checks] == ["nonfinite_mismatch", "max_abs_err"]
    # Where the table does not name it, the standards choose as before.
    for op in ("Functional.silu", "Torch.add"):
        assert judge(ACTUAL, GOLDEN, op=op, rules=rules).standard == judge(ACTUAL, GOLDEN, op=op).standard


def test_the_registry_is_what_users_may_write(max_abs):
    assert STANDARDS.names[-1] == "max_abs" and "max_abs" in schema_vocabulary().standards
    assert dict(metric_names())["max_abs"] == ("max_abs_err",)
    with pytest.raises(ValueError, match="standard 'max_abs' is already registered"):
        STANDARDS.register(MaxAbs())


def test_without_registration_the_name_is_unknown():
    with pytest.raises(ValueError, match="standard 'max_abs' is unknown: use one of binary, quantized, absolute"):
        judge(ACTUAL, GOLDEN, standard="max_abs")


def test_each_standard_names_the_metrics_of_its_limits_table():
    shipped = Rules.default().limits
    for standard in STANDARDS.listed:
        table = shipped[standard.name]
        found = {metric for key, value in table.items()
                 for metric in (value if isinstance(value, dict) and not {"error", "warning"} & set(value) else [key])}
        assert set(standard.metrics) == found, standard.name


def test_the_standards_choose_in_their_documented_order(max_abs):
    chosen = [s.name for s in STANDARDS.choosing]
    # docs/standards.md, "Choosing a standard"; a new one goes just before the fallback.
    assert chosen == ["quantized", "binary", "benchmark", "absolute", "ulp", "thousandth", "max_abs", "error_bound"]
    STANDARDS.unregister("max_abs")
    STANDARDS.register(max_abs, before="quantized")
    assert STANDARDS.choosing[0] is max_abs
    assert STANDARDS.names == ("binary", "quantized", "absolute", "ulp", "thousandth", "error_bound", "benchmark",
                               "max_abs")


def _names_written(path: Path) -> list[str]:
    """Each string literal in ``path`` that is a standard's name: a name compared, or kept in a set or a
    table, to decide what to do."""
    names = set(STANDARDS.names)
    found = [node for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(node, ast.Constant) and node.value in names]
    return [f"{path.name}:{node.lineno} {node.value!r}" for node in sorted(found, key=lambda n: n.lineno)]


@pytest.mark.parametrize("module", ["checks/judging.py", "precision/verdict.py", "precision/rules.py",
                                    "precision/rules_schema.py", "ops/catalogue.py", "ops/registry.py",
                                    "opcases/schema.py", "checks/statistics/checksums.py"])
def test_no_module_outside_the_standards_decides_by_a_standards_name(module):
    assert _names_written(PACKAGE / module) == []


def test_the_scan_finds_a_name_compared_or_kept_in_a_set(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text("a = s == 'binary'\nb = s in frozenset({'ulp'})\nc = v.startswith('benchmark')\n"
                       "d = f'standard {s!r} is unknown'\n")
    assert _names_written(planted) == ["planted.py:1 'binary'", "planted.py:2 'ulp'", "planted.py:3 'benchmark'"]
