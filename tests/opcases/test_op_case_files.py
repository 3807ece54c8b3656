"""Op case files are untrusted input: bounded counts and sizes, regression inputs kept inside their folder.

Each bad case is a broken case naming the file, the case, the field and the fix; the file's other
cases still run, nothing outside the case file's folder is opened, and nothing takes long (issue 18).
"""

import os
import textwrap
import time

import pytest
import yaml

from pytest_npuprecision.config.files import MAX_BYTES
from pytest_npuprecision.opcases.schema import load_case_file
from pytest_npuprecision.opcases.spec import BrokenCase, OpCase

BOMB = "\n".join(["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)])
GOOD = "  - {id: good, op: Functional.relu, dtypes: [float32], inputs: [{shape: [4]}]}\n"


def _load(tmp_path, text: str):
    path = tmp_path / "op_cases" / "cases.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return load_case_file(path, tmp_path)


def _secret(tmp_path):
    secret = tmp_path / "_secret" / "secret.pt"
    secret.parent.mkdir()
    secret.write_bytes(b"not for the harness")
    return secret


BAD_FIELDS = {
    "max_examples past the cap": ("max_examples: 1000000000", "field max_examples: 1000000000 is more than the 10000 "
                                                              "this harness runs for one case: write at most 10000"),
    "a rank past the cap": ("inputs: [{shape: {rank: [1, 1000000000]}}]",
                            "field inputs[0].shape.rank: [1, 1000000000] reaches past 16 dims: keep tensors within 16 "
                            "dims"),
    "a shape past the rank cap": ("inputs: [{shape: [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}]",
                                  "field inputs[0].shape: has 17 dims: keep tensors within 16 dims"),
    "a huge dim": ("dims: {K: [1, 1000000000]}\n    inputs: [{shape: [K]}]",
                   "field inputs[0].shape: may hold 1000000000 elements: keep tensors within 65536 "
                   "elements (smaller dims, or fewer of them)"),
    "a seed past torch's range": ("seed: 100000000000000000000", "field seed: 100000000000000000000 is more than the "
                                  "18446744073709551615 torch.manual_seed takes: write at most 18446744073709551615"),
    "roundings past the cap": ("roundings: 100000\n    reason: fused", "field roundings: 100000 is more than the 64 "
                               "intermediate roundings a precision standard allows: write at most 64"),
    "an index count past int32": ("inputs: [{shape: [4], indices: 100000000000}]",
                                  "field inputs[0].indices: 100000000000 is not a count: give a whole number from 1 "
                                  "to 2147483647 or a dim symbol"),
    "an integer range past int64": ("inputs: [{shape: [4], dtype: int64, range: [0, 100000000000000000000]}]",
                                    "field inputs[0].range: [0, 100000000000000000000] reaches past what a tensor "
                                    "holds: keep both ends within ±2**63 - 1"),
    "an infinite range": ("inputs: [{shape: [4], range: [-.inf, .inf]}]",
                          "field inputs[0].range: [-inf, inf] reaches past what a tensor holds: keep both ends within "
                          "±1.8e308"),
    "a negative limit": ("limits: {ulp: {max_ulp_err: -1}}\n    reason: why",
                         "field limits.ulp.max_ulp_err: expected a finite number >= 0, got -1"),
    "a NaN limit in a pair": ("limits: {ulp: {max_ulp_err: {error: .nan}}}\n    reason: why",
                              "field limits.ulp.max_ulp_err.error: expected a finite number >= 0, got nan"),
    "a metric of another standard": ("limits: {error_bound: {max_ulp_err: 16}}\n    reason: why",
                                     "field limits.error_bound.max_ulp_err: is not a metric of error_bound: use "
                                     "bound_bias, magnitude_bound_bias, max_bound_ratio, max_residual_ratio, mean_bound_ratio, mean_residual_ratio, order_rmse_ratio, row_order_ratio"),
    "the benchmark standard": ("limits: {benchmark: {rmse_ratio: 2}}\n    reason: why",
                               "field limits.benchmark: is not a standard op cases use: use one of binary, quantized, absolute, "
                               "ulp, thousandth, error_bound"),
    "a regression input above the folder": ("inputs: [{file: ../../_secret/secret.pt}]",
                                            "field inputs[0].file: '../../_secret/secret.pt' leads out of the case "
                                            "file's folder: keep regression inputs next to the case file"),
    "an absolute regression input": ("inputs: [{file: SECRET}]", "field inputs[0].file: 'SECRET' leads out of the "
                                     "case file's folder: keep regression inputs next to the case file"),
    "a link out of the folder": ("inputs: [{file: link.pt}]", "field inputs[0].file: 'link.pt' leads out of the case "
                                 "file's folder: keep regression inputs next to the case file"),
    "a FIFO for a regression input": ("inputs: [{file: fifo.pt}]", "field inputs[0].file: 'fifo.pt' is not a regular "
                                      "file (a folder, a FIFO or a device): write it again with torch.save"),
    "a huge regression input": ("inputs: [{file: huge.pt}]", f"field inputs[0].file: 'huge.pt' is {MAX_BYTES + 1} "
                                f"bytes, more than the {MAX_BYTES} a regression input may have: op case tensors hold "
                                f"at most 65536 elements"),
}


@pytest.mark.parametrize("problem", BAD_FIELDS)
def test_a_bad_field_is_a_broken_case_naming_the_file_case_and_field(tmp_path, problem, monkeypatch):
    line, message = BAD_FIELDS[problem]
    secret = _secret(tmp_path)
    folder = tmp_path / "op_cases"
    folder.mkdir()
    (folder / "link.pt").symlink_to(secret)
    os.mkfifo(folder / "fifo.pt")
    with open(folder / "huge.pt", "wb") as handle:
        handle.truncate(MAX_BYTES + 1)
    line = line.replace("SECRET", str(secret))
    message = message.replace("SECRET", str(secret))
    opened = []
    monkeypatch.setattr("torch.load", lambda *a, **k: opened.append(a))
    fields = {"id": "bad", "op": "Functional.gelu", "dtypes": "[float32]", "inputs": "[{shape: [4]}]"}
    given = yaml.safe_load(textwrap.dedent("    " + line))
    body = "\n".join([f"    {k}: {v}" for k, v in fields.items() if k not in given] + [f"    {line}"])
    started = time.perf_counter()
    bad, good = _load(tmp_path, f"cases:\n  - {body.strip()}\n{GOOD}")
    assert time.perf_counter() - started < 10  # a rank of a billion once meant computing 8 ** 10**9
    assert isinstance(bad, BrokenCase) and isinstance(good, OpCase)
    assert bad.problem == f"op_cases/cases.yaml, case 'bad', {message}"
    assert not opened


BAD_FILES = {
    "an alias bomb in a fixed kwarg": (
        BOMB + "\ncases:\n  - {op: Functional.gelu, dtypes: [float32], inputs: [{shape: [4]}], "
               "kwargs: {approximate: *i}}\n",
        "op_cases/cases.yaml expands to more than 1000000 values through YAML aliases (an alias bomb?): write the "
        "values out"),
    "an alias bomb under an unknown key": (
        "junk:\n" + textwrap.indent(BOMB, "  ") + "\ncases: []\n",
        "op_cases/cases.yaml expands to more than 1000000 values through YAML aliases (an alias bomb?): write the "
        "values out"),
    "a python tag in a value": (
        "cases:\n  - {op: Functional.gelu, dtypes: [float32], inputs: [!!python/name:os.system ]}\n",
        "op_cases/cases.yaml has the tag '!!python/name:os.system' at line 2, column 55, which is not plain data: "
        "write a string, number, list or mapping"),
    "nesting past the cap": ("cases: " + "[" * 100 + "]" * 100,
                             "op_cases/cases.yaml nests deeper than 64 levels at line 1, column 71: flatten it"),
    "nesting through aliases": (
        "a: &a " + "[" * 40 + "]" * 40 + "\nb: &b " + "[" * 30 + "*a" + "]" * 30 + "\ncases: []\n",
        "op_cases/cases.yaml nests deeper than 64 levels through YAML aliases at line 2, column 12: write the values "
        "out"),
    "too many cases": ("cases:\n" + "  - {op: Functional.relu, dtypes: [float32], inputs: [4]}\n" * 1001,
                       "op_cases/cases.yaml holds 1001 cases, more than the 1000 one file may hold: split it into "
                       "several files"),
}


@pytest.mark.parametrize("problem", BAD_FILES)
def test_a_bad_file_is_one_broken_case_found_quickly(tmp_path, problem):
    text, message = BAD_FILES[problem]
    started = time.perf_counter()
    [broken] = _load(tmp_path, text)
    assert time.perf_counter() - started < (1 if "alias" in problem else 10)  # 1001 cases take a while to parse
    assert isinstance(broken, BrokenCase) and broken.problem == message


def test_a_regression_input_inside_the_folder_is_read_with_weights_only(tmp_path):
    import torch

    folder = tmp_path / "op_cases" / "case-float32-0000"
    folder.mkdir(parents=True)
    torch.save(torch.ones(4), folder / "input0.pt")
    [case] = _load(tmp_path, "cases:\n  - {op: Functional.relu, dtypes: [float32], "
                             "inputs: [{file: case-float32-0000/input0.pt}]}\n")
    assert isinstance(case, OpCase) and case.inputs[0].path == folder / "input0.pt"


OP_CASE_RUNS = {
    "max_examples past the cap": ("cases:\n  - op: Functional.gelu\n    dtypes: [float32]\n"
                                  "    max_examples: 1000000000\n    inputs: [{shape: [4]}]\n",
                                  "field max_examples: 1000000000 is more than the 10000 this harness runs for one "
                                  "case: write at most 10000"),
    "an alias bomb in a fixed kwarg": ("bomb:\n" + "\n".join("  " + line for line in BOMB.splitlines()) +
                                       "\ncases:\n  - op: Functional.gelu\n    dtypes: [float32]\n"
                                       "    inputs: [{shape: [4]}]\n    kwargs: {approximate: *i}\n",
                                       "expands to more than 1000000 values through YAML aliases"),
    "a regression input outside the folder": ("cases:\n  - op: Functional.gelu\n    dtypes: [float32]\n"
                                              "    inputs: [{file: ../../_secret/secret.pt}]\n",
                                              "field inputs[0].file: '../../_secret/secret.pt' leads out of the case "
                                              "file's folder: keep regression inputs next to the case file"),
    "an op that is not an operator": ("cases:\n  - op: os.system\n    dtypes: [float32]\n    inputs: [{value: ls}]\n",
                                      "field op: 'os.system' is not an op (only torch and torch_npu operators and "
                                      "registered ops run from a case file"),
}


@pytest.mark.parametrize("problem", OP_CASE_RUNS)
def test_a_bad_op_case_file_fails_alone_quickly_and_reads_nothing_outside(pytester, problem):
    text, message = OP_CASE_RUNS[problem]
    pytester.mkdir("op_cases")
    (pytester.path / "op_cases" / "bad.yaml").write_text(text)
    (pytester.path / "op_cases" / "good.yaml").write_text(
        "cases:\n  - op: Functional.relu\n    dtypes: [float32]\n    inputs: [{shape: [4]}]\n")
    started = time.perf_counter()
    result = pytester.runpytest("op_cases", "-p", "no:cacheprovider", "--npu-precision-device", "cpu")
    assert time.perf_counter() - started < 60
    assert message in result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed") == 1 and outcomes.get("passed", 0) >= 1
