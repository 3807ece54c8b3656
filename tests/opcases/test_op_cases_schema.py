"""Op case YAML: every schema error names the file, the case and the field, and fails only that case."""

from __future__ import annotations

import textwrap

import pytest
import torch

from pytest_npuprecision.opcases.schema import load_case_file
from pytest_npuprecision.opcases.spec import BrokenCase, Fixed, OneOf, OpCase, TensorSpec

GOOD = """
  - id: good
    op: Functional.gelu
    dtypes: [float16]
    inputs:
      - shape: [4]
"""


def load(tmp_path, text: str):
    path = tmp_path / "op_cases" / "cases.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return load_case_file(path, tmp_path)


def test_a_complete_case_reads_into_records(tmp_path):
    [case] = load(tmp_path, """
        defaults:
          dtypes: [float16, bfloat16]
        cases:
          - id: mm
            op: Torch.matmul
            dims: {M: [1, 8], K: 16}
            inputs:
              - shape: [M, K]
                range: [-2, 2]
                special: [zero, nan]
              - shape: [K, [1, 4]]
            kwargs:
              out: {one_of: [null]}
            backward: true
            max_examples: 10
    """)
    assert isinstance(case, OpCase)
    assert (case.id, case.op, case.dtypes, case.source) == ("mm", "Torch.matmul", (torch.float16, torch.bfloat16),
                                                            "op_cases/cases.yaml")
    assert case.dims == {"M": (1, 8), "K": (16, 16)}
    assert case.inputs == (TensorSpec(shape=("M", "K"), range=(-2, 2), special=("zero", "nan")),
                           TensorSpec(shape=("K", (1, 4))))
    assert case.kwargs == {"out": OneOf((None,))}
    assert case.backward and case.max_examples == 10 and not case.fixed


def test_the_id_defaults_to_the_op_name_and_plain_values_are_fixed(tmp_path):
    [case] = load(tmp_path, """
        cases:
          - op: Functional.softmax
            dtypes: float32
            inputs: [{shape: [2, 3]}, -1]
    """)
    assert case.id == "softmax" and case.inputs[1] == Fixed(-1)


BAD_CASES = [
    ("op: 3", "field op: 3 is not an op name: write an msprobe name (Functional.gelu), a dotted path "
              "(torch.nn.functional.gelu) or a registered name"),
    ("dtypes: [fp16]", "field dtypes: dtype 'fp16' is not a torch dtype: use float16"),
    ("dtypes: [int32]", "field dtypes: 'int32' is not a float dtype a case can draw: use float16, bfloat16, "
                        "float32, float64"),
    ("inputs: [{shape: [4], range: [4, -4]}]", "field inputs[0].range: [4, -4] is empty: give [low, high] "
                                               "with low <= high"),
    ("dims: {K: [8, 4]}", "field dims.K: [8, 4] is empty: give [low, high] with low <= high"),
    ("inputs: [{shape: [K]}]", "field inputs[0].shape[0]: 'K' is not a dim of this case: declare it under dims, "
                               "e.g. {K: [1, 16]}"),
    ("inputs: [{shape: {rank: [1, 2], sides: [5, 2]}}]", "field inputs[0].shape.sides: [5, 2] is empty: give "
                                                         "[low, high] with low <= high"),
    ("inputs: [{shape: [4], special: [huge]}]", "field inputs[0].special: 'huge' is unknown: use some of zero, "
                                                "subnormal, max, near_overflow, inf, nan"),
    ("inputs: [{shape: [4], sides: 3}]", "field inputs[0].sides: is unknown: a tensor takes shape, dtype, range, "
                                         "min_magnitude, indices, special, grad"),
    ("inputs: [{shape: [4]}, {shape: {broadcasts_to: 3}}]", "field inputs[1].shape.broadcasts_to: 3 is not the "
                                                            "position of an earlier tensor input: give its index, e.g. 0"),
    ("inputs: [{shape: [1024, 1024]}]", "field inputs[0].shape: may hold 1048576 elements: keep tensors within "
                                        "65536 elements (smaller dims, or fewer of them)"),
    ("inputs: [{shape: [4], file: x.pt}]", "field inputs[0]: {'shape': [4], 'file': 'x.pt'} is not a file input: "
                                           "write file: name.pt and optionally grad:"),
    ("inputs: [{file: missing.pt}]", "field inputs[0].file: 'missing.pt' does not exist next to the case file: "
                                     "restore it or delete the case"),
    ("limits: {error_bound: {max_bound_ratio: 16}}", "field reason: is missing: a case with its own limits must "
                                                     "say why, in reason:"),
    ("limits: {error_bound: {max_ulp_err: 16}}\n    reason: why", "field limits.error_bound.max_ulp_err: is not a "
     "metric of error_bound: use bound_bias, magnitude_bound_bias, max_bound_ratio, max_residual_ratio, mean_bound_ratio, mean_residual_ratio, order_rmse_ratio, row_order_ratio"),
    ("standard: benchmark", "field standard: 'benchmark' is not a standard op cases use: use one of binary, quantized, "
                            "absolute, ulp, thousandth, error_bound (benchmark is no case's own standard: it "
                            "judges beside one when the run has a live --npu-precision-baseline)"),
    ("roundings: 1", "field reason: is missing: a case that sets roundings must say which intermediates its kernel "
                     "rounds, in reason:"),
    ("backward: yes please", "field backward: 'yes please' is not true or false: write true or false"),
    ("max_examples: 0", "field max_examples: 0 is not a whole number >= 1: write one"),
    ("inputz: []", "field inputz: is unknown: use id, op, dtypes, dims, inputs, kwargs, reference, standard, "
                   "limits, roundings, reason, backward, max_examples, seed, found_by"),
]


@pytest.mark.parametrize("line, message", BAD_CASES, ids=[line.split(":")[0] for line, _ in BAD_CASES])
def test_a_bad_field_names_the_file_the_case_and_the_field(tmp_path, line, message):
    fields = {"op": "Functional.gelu", "dtypes": "[float16]", "inputs": "[{shape: [4]}]"}
    key = line.split(":")[0]
    fields[key] = line.split(":", 1)[1].strip()
    body = "\n".join(f"    {k}: {v}" for k, v in fields.items())
    bad, good = load(tmp_path, f"cases:\n  - id: bad\n{body}\n{GOOD}")
    assert isinstance(bad, BrokenCase) and isinstance(good, OpCase)
    assert bad.problem == f"op_cases/cases.yaml, case 'bad', {message}"


@pytest.mark.parametrize("text, problem", [
    ("cases: [", "op_cases/cases.yaml is not valid YAML at line 1, column 9 (expected the node content, but "
                 "found '<stream end>'): fix the syntax"),
    ("- op: Functional.gelu", "op_cases/cases.yaml holds no 'cases' list: write a mapping with cases: [...] "
                              "(and optionally defaults: {...})"),
    ("cases: []\ntests: []", "op_cases/cases.yaml: top-level keys ['tests'] are unknown: use cases and defaults"),
])
def test_a_broken_file_is_one_broken_case(tmp_path, text, problem):
    [broken] = load(tmp_path, text)
    assert isinstance(broken, BrokenCase) and broken.problem == problem


def test_two_cases_with_one_id_are_an_error_of_the_second(tmp_path):
    first, second = load(tmp_path, f"cases:{GOOD}{GOOD}")
    assert isinstance(first, OpCase)
    assert second.problem == "op_cases/cases.yaml, case 'good', field id: 'good' is also the id of case #1: " \
                             "give each case its own id"


def test_bad_cases_fail_alone_and_the_others_run(pytester):
    pytester.makeini("[pytest]\n")
    pytester.makefile(".yaml", **{"op_cases/mixed": """
cases:
  - id: unknown-op
    op: Functional.gelux
    dtypes: [float32]
    inputs: [{shape: [4]}]
  - id: impossible-shape
    op: Functional.gelu
    dtypes: [float32]
    dims: {D: [9, 3]}
    inputs: [{shape: [D]}]
  - id: inputs-that-do-not-fit
    op: Torch.matmul
    dtypes: [float32]
    inputs: [{shape: [2, 3]}, {shape: [4, 5]}]
  - id: fine
    op: Functional.relu
    dtypes: [float16, float32]
    inputs: [{shape: {rank: [1, 2], sides: [1, 4]}}]
"""})
    pytester.makefile(".yaml", **{"op_cases/broken": "cases: ["})
    result = pytester.runpytest("op_cases", "-p", "no:cacheprovider", "--npu-precision-device", "cpu")
    result.assert_outcomes(failed=4, passed=2)
    result.stdout.fnmatch_lines([
        "*_ op case op_cases/broken.yaml::broken.yaml (unreadable) _*",
        "op_cases/broken.yaml is not valid YAML at line 1, column 9 (expected the node content, but found "
        "'<stream end>'): fix the syntax",
        "*_ op case op_cases/mixed.yaml::unknown-op[[]float32[]] _*",
        "op_cases/mixed.yaml, case 'unknown-op', field op: 'Functional.gelux' cannot run here (Functional.gelux: "
        "not a known operator: torch.nn.functional.gelux is not a known operator of this torch *): use an msprobe name (Functional.gelu), a dotted path "
        "(torch.nn.functional.gelu) or a name registered with register_op",
        "*_ op case op_cases/mixed.yaml::impossible-shape (unreadable) _*",
        "op_cases/mixed.yaml, case 'impossible-shape', field dims.D: [[]9, 3[]] is empty: give [[]low, high[]] "
        "with low <= high",
        "*_ op case op_cases/mixed.yaml::inputs-that-do-not-fit[[]float32[]] _*",
        "Torch.matmul [[]float32[]]: op_cases/mixed.yaml, case 'inputs-that-do-not-fit': the drawn inputs do not "
        "fit the op: Torch.matmul raised RuntimeError on the device (cpu) during forward: mat1 and mat2 shapes "
        "cannot be multiplied (2x3 and 4x5): fix the case's shapes, dtypes or values",
        "  the inputs that showed it:",
        "  input 0: float32 tensor (2, 3) = *",
    ])
    assert not (pytester.path / "op_cases" / "regressions").exists()  # usage errors are not regressions
