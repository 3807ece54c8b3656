"""Every configuration file is untrusted input: a usage error naming the file and the key, never a crash or a hang.

Rules YAML, known failures and recorded baselines go through one reader (config_files) that refuses
FIFOs, folders, huge files, alias bombs, deep nesting and bytes that are not UTF-8, then one schema
layer (config/schemas.py, pydantic) whose messages read ``FILE: key.path: problem`` (issue 18).
"""

import json
import os
import subprocess
import sys
import time
from importlib import resources

import pytest
import torch
from fixtures import FIXTURES

from pytest_npuprecision.config.files import MAX_BYTES, load_yaml, validate
from pytest_npuprecision.precision.rules import OpRule, Rules

DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
BOMB = "\n".join(["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)])
DTYPE_CONSTANTS = "rtol, ulp_threshold, thousandth_rtol, benchmark_floor"
STANDARDS = "binary, quantized, absolute, ulp, thousandth, error_bound, benchmark"

BAD_RULES = {
    "dtype constants that are a number": (
        "dtypes: {float32: 5}", f"dtypes.float32: expected a mapping of the dtype's constants ({DTYPE_CONSTANTS}), "
                                f"got 5"),
    "ops as a list": ("ops: [a, b]", "ops: expected a mapping of op names to their rules, got a list"),
    "a standard that is a number": ("standards: {error_bound: 5}", "standards.error_bound: expected a list of op "
                                                                   "names or a mapping of limits, got 5"),
    "a negative limit": ("standards: {error_bound: {max_bound_ratio: -1}}",
                         "standards.error_bound.max_bound_ratio: expected a finite number >= 0, got -1"),
    "a NaN limit": ("standards: {error_bound: {max_bound_ratio: .nan}}",
                    "standards.error_bound.max_bound_ratio: expected a finite number >= 0, got nan"),
    "an infinite limit": ("standards: {ulp: {float16: {max_ulp_err: .inf}}}",
                          "standards.ulp.float16.max_ulp_err: expected a finite number >= 0, got inf"),
    "a string limit": ("ops: {gelu: {limits: {ulp: {max_ulp_err: lots}}}}",
                       "ops.gelu.limits.ulp.max_ulp_err: expected a finite number >= 0, got 'lots'"),
    "a null limit": ("standards: {ulp: {default: {max_ulp_err: null}}}",
                     "standards.ulp.default.max_ulp_err: expected a finite number >= 0, got None"),
    "msprobe's small-value threshold": ("dtypes: {float32: {small_value: 1.0e-6}}",
                                        "dtypes.float32.small_value: is not a constant of a dtype (the small-value "
                                        f"rule follows the dtype's range): use {DTYPE_CONSTANTS}"),
    "a null dtype constant": ("dtypes: {float32: {rtol: null}}",
                              "dtypes.float32.rtol: expected a finite number >= 0, got None"),
    "a null standard section": ("standards: {ulp: null}",
                                "standards.ulp: expected a list of op names or a mapping of limits, got None"),
    "a warning that is no number": ("standards: {error_bound: {max_bound_ratio: {error: 8, warning: x}}}",
                                    "standards.error_bound.max_bound_ratio.warning: expected a finite number >= 0, "
                                    "got 'x'"),
    "a limit pair without error": ("standards: {error_bound: {max_bound_ratio: {warning: 4}}}",
                                   "standards.error_bound.max_bound_ratio.error: is missing"),
    "an unknown standard of an op": ("ops: {gelu: {standard: exactish}}",
                                     f"ops.gelu.standard: 'exactish' is not a standard: use {STANDARDS}"),
    "an unknown standard section": ("standards: {exactish: [gelu]}",
                                    f"standards.exactish: is unknown: use {STANDARDS}"),
    "a misspelt metric": ("standards: {error_bound: {max_bound_ratoi: 3}}",
                          "standards.error_bound.max_bound_ratoi: is unknown: use a metric of error_bound "
                          "(bound_bias, magnitude_bound_bias, max_bound_ratio, max_residual_ratio, mean_bound_ratio, mean_residual_ratio, order_rmse_ratio, row_order_ratio) or a float dtype "
                          "or default"),
    "a metric of another standard": ("ops: {gelu: {limits: {error_bound: {max_ulp_err: 3}}}}",
                                     "ops.gelu.limits.error_bound.max_ulp_err: is not a metric of error_bound: use "
                                     "bound_bias, magnitude_bound_bias, max_bound_ratio, max_residual_ratio, mean_bound_ratio, mean_residual_ratio, order_rmse_ratio, row_order_ratio"),
    "a dtype alias": ("dtypes: {fp16: {rtol: 0.001}}", "dtypes.fp16: is not a float dtype: use float16"),
    "a dtype table under a misspelt dtype": ("standards: {ulp: {fp32: {max_ulp_err: 8}}}",
                                             "standards.ulp.fp32: is unknown: use a metric of ulp (max_ulp_err, "
                                             "mean_ulp_err, ulp_over_ratio) or a float dtype or default"),
    "a new dtype without every constant": ("dtypes: {float8_e8m0fnu: {rtol: 0.5}}",
                                           "dtypes.float8_e8m0fnu: lacks ulp_threshold, "
                                           "thousandth_rtol: give every constant of a dtype the shipped table does "
                                           "not have"),
    "an unknown level": ("levels: {L9: [gelu]}", "levels.L9: is not a level: use L0, L1, L2"),
    "an op list that is a name": ("levels: {L1: gelu}", "levels.L1: expected a list of op names, got 'gelu'"),
    "a number among op names": ("standards: {ulp: [gelu, 5]}", "standards.ulp[1]: expected a name, got 5"),
    "roundings past the cap": ("ops: {gelu: {roundings: 1000}}",
                               "ops.gelu.roundings: expected a whole number from 0 to 64, got 1000"),
    "an unknown key": ("tolerance: 3", "tolerance: is unknown: use dtypes, standards, levels, ops, backward_roundings, dtype_grid_golden"),
    "an unknown key of an op": ("ops: {gelu: {tolerance: 3}}",
                                "ops.gelu.tolerance: is unknown: use standard, backward, level, roundings, limits"),
    "an op name with a dot": ("ops: {'Functional.gelu': {level: L7}}",
                              "ops['Functional.gelu'].level: 'L7' is not a level: use L0, L1, L2"),
    "an empty file": ("", "the top level: expected a mapping with dtypes, standards, levels, ops, "
                          "backward_roundings or dtype_grid_golden, got None"),
    "a key given twice": ("ops: {}\nops: {}", "the rules file gives the key 'ops' twice in one mapping at line 2, "
                                              "column 1: keep one"),
    "a python tag": ("x: !!python/object/apply:os.system [touch PWNED]",
                     "the rules file has the tag '!!python/object/apply:os.system' at line 1, column 4, which is not "
                     "plain data: write a string, number, list or mapping"),
    "an alias bomb": (BOMB, "the rules file expands to more than 1000000 values through YAML aliases (an alias "
                            "bomb?): write the values out"),
    "nesting 10,000 deep": ("x: " + "[" * 10_000 + "]" * 10_000, "the rules file nests deeper than 64 levels at "
                                                                 "line 1, column 67: flatten it"),
}


def _skip_without_fixtures():
    if not DUMP.is_file():
        pytest.skip(f"the msprobe fixture dump {DUMP} is not here")


@pytest.mark.parametrize("problem", BAD_RULES)
def test_a_bad_rules_file_is_a_usage_error_naming_the_file_and_key(pytester, problem):
    _skip_without_fixtures()
    text, message = BAD_RULES[problem]
    pytester.makefile(".yaml", rules=text)
    started = time.perf_counter()
    result = pytester.runpytest(f"--npu-precision={DUMP}", "--npu-precision-rules", "rules.yaml",
                                "-p", "no:cacheprovider")
    assert time.perf_counter() - started < 30
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: rules.yaml: {message}" in result.stderr.lines
    assert not (pytester.path / "PWNED").exists()


def test_msprobes_small_value_constants_from_python_are_an_error_not_ignored():
    with pytest.raises(ValueError, match="^dtypes.float32: small_value_atol is not a constant of a dtype: use rtol, "
                                         "ulp_threshold, thousandth_rtol or benchmark_floor$"):
        Rules.default().merged({"dtypes": {"float32": {"small_value_atol": 1e-9}}})


def _file_of_kind(path, kind):
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it would block until a writer comes
    elif kind == "not UTF-8":
        path.write_bytes(b"\xff\xfe{}")
    elif kind == "huge":
        with open(path, "wb") as handle:  # sparse: the size is refused before a byte is read
            handle.truncate(MAX_BYTES + 1)
    elif kind == "nested 100,000 deep":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "a key given twice":
        path.write_text('{"a::b": {}, "a::b": {}}')


FILE_KINDS = {
    "folder": "is not a regular file (a folder, a FIFO or a device): give a file",
    "fifo": "is not a regular file (a folder, a FIFO or a device): give a file",
    "not UTF-8": "is not UTF-8 text (byte 0): save it as UTF-8",
    "huge": f"is {MAX_BYTES + 1} bytes, more than the CAP MiB this harness reads: give the right file",
    "nested 100,000 deep": "nests deeper than 64 levels",
    "a key given twice": "gives the key 'a::b' twice in one object: keep one",
}
OPTIONS = {"--npu-precision-rules": "rules file", "--npu-precision-known-failures": "known-failures file",
           "--npu-precision-baseline": "baseline"}


@pytest.mark.parametrize("kind", FILE_KINDS)
@pytest.mark.parametrize("option", OPTIONS)
def test_a_configuration_path_that_is_no_usable_file_is_refused_without_hanging(pytester, option, kind):
    _skip_without_fixtures()
    if option == "--npu-precision-rules" and kind in ("nested 100,000 deep", "a key given twice"):
        pytest.skip("JSON contents: the YAML forms are in BAD_RULES")
    _file_of_kind(pytester.path / "config.json", kind)
    started = time.perf_counter()
    result = pytester.runpytest(f"--npu-precision={DUMP}", option, "config.json", "-p", "no:cacheprovider")
    assert time.perf_counter() - started < 30
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    cap = "1" if option == "--npu-precision-rules" else "64"
    assert f"config.json: the {OPTIONS[option]} {FILE_KINDS[kind].replace('CAP', cap)}" in result.stderr.str()


def _record(change) -> str:
    data = {"format": "pytest-npuprecision record", "version": 1, "device": {"name": "cpu"}, "golden": "cpu float64",
            "cases": {"s/r::Functional.gelu.0.forward": {"fingerprint": {"digest": "0", "inputs": {}}, "outputs": {}}}}
    change(data["cases"]["s/r::Functional.gelu.0.forward"])
    return json.dumps(data)


BAD_RECORDS = {
    "a shape that is a number": (
        _record(lambda case: case["outputs"].update({"output.0": {"dtype": "float32", "shape": 8, "metrics": {}}})),
        "base.json: cases['s/r::Functional.gelu.0.forward'].outputs['output.0'].shape: expected a list of sizes, "
        "got 8: record the file again"),
    "a fingerprint without digest": (
        _record(lambda case: case.update(fingerprint={"inputs": {}})),
        "base.json: cases['s/r::Functional.gelu.0.forward'].fingerprint.digest: is missing: record the file again"),
    "an unknown key": (
        _record(lambda case: case.update(verdict="pass")),
        "base.json: cases['s/r::Functional.gelu.0.forward'].verdict: is unknown: use fingerprint, outputs: record "
        "the file again"),
}


@pytest.mark.parametrize("problem", BAD_RECORDS)
def test_a_bad_recorded_baseline_names_the_file_and_key(pytester, problem):
    _skip_without_fixtures()
    text, message = BAD_RECORDS[problem]
    (pytester.path / "base.json").write_text(text)
    result = pytester.runpytest(f"--npu-precision={DUMP}", "--npu-precision-baseline", "base.json",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message}" in result.stderr.lines


def test_report_and_record_paths_of_the_wrong_kind_are_usage_errors(pytester):
    _skip_without_fixtures()
    pytester.makefile(".txt", report="not a folder")
    pytester.mkdir("records")
    report = pytester.runpytest(f"--npu-precision={DUMP}", "--npu-precision-report", "report.txt")
    assert report.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --npu-precision-report 'report.txt' is a file, not a folder: name a folder for the reports "
            "(it is created if missing)") in report.stderr.lines
    record = pytester.runpytest(f"--npu-precision={DUMP}", "--npu-precision-record", "records")
    assert record.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --npu-precision-record 'records' is a folder: name the file to write, such as "
            "records/baseline.json") in record.stderr.lines


# ---------------------------------------------------------------- the schema itself


def test_the_shipped_tables_are_valid_rules_files():
    from pytest_npuprecision.precision.rules import schema_vocabulary
    from pytest_npuprecision.precision.rules_schema import rules_file

    data = resources.files("pytest_npuprecision") / "data"
    validate(rules_file(schema_vocabulary()), load_yaml(data / "thresholds.yaml", "table"), "thresholds.yaml")


def test_a_per_dtype_entry_under_a_flat_standard_overrides_only_that_dtype(tmp_path):
    """Once a crash in every case (a flat table with a dtype key); now the dtype's entry sits on the flat limits."""
    path = tmp_path / "rules.yaml"
    path.write_text("standards:\n  error_bound: {float16: {max_bound_ratio: 4}}\n  ulp: {float32: {max_ulp_err: 8}}\n")
    rules = Rules.default().merged(path)
    half = rules.limits_for("error_bound", torch.float16, OpRule())
    single = rules.limits_for("error_bound", torch.float32, OpRule())
    assert half["max_bound_ratio"].error == 4 and single["max_bound_ratio"].error == 8
    assert half["mean_bound_ratio"] == single["mean_bound_ratio"]
    ulp = rules.limits_for("ulp", torch.float32, OpRule())
    assert ulp["max_ulp_err"].error == 8 and set(ulp) == {"max_ulp_err", "mean_ulp_err", "ulp_over_ratio"}


def test_a_mapping_override_is_checked_by_the_old_code_path():
    """Python callers (with_op, register_op) keep their ValueErrors; only files go through the schema."""
    with pytest.raises(ValueError, match="standard 'exactish' in op 'gelu' is unknown"):
        Rules.default().with_op("gelu", standard="exactish")


def test_importing_the_plugin_does_not_import_pydantic():
    code = "import sys, pytest_npuprecision.plugin; print('pydantic' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
