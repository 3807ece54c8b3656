"""Every configuration file is untrusted input: a usage error naming the file and the key, never a crash or a hang.

Rules YAML, op case YAML, known failures and baselines go through one reader (config_files) that
refuses FIFOs, folders, huge files, alias bombs, deep nesting and bytes that are not UTF-8; the
rules file is checked by a schema (issue 18).
"""

import os
import time

import pytest

from fixtures import FIXTURES

DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
BOMB = "\n".join(["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"] + [
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]" for i in range(8)])

BAD_RULES = {
    "dtype constants that are a number": ("dtypes: {float32: 5}", "dtypes.float32: input should be a valid "
                                                                  "dictionary, got 5"),
    "ops as a list": ("ops: [a, b]", "ops: input should be a valid dictionary, got list"),
    "a standard that is a number": ("standards: {error_bound: 5}", "standards.error_bound: expected a list of op "
                                                                   "names or a mapping of limits, got 5"),
    "a negative limit": ("standards: {error_bound: {max_bound_ratio: -1}}",
                         "standards.error_bound.max_bound_ratio: expected a finite number >= 0, got -1"),
    "a NaN limit": ("standards: {error_bound: {max_bound_ratio: .nan}}",
                    "standards.error_bound.max_bound_ratio: expected a finite number >= 0, got nan"),
    "a string limit": ("ops: {gelu: {limits: {ulp: {max_ulp_err: lots}}}}",
                       "ops.gelu.limits.ulp.max_ulp_err: expected a finite number >= 0, got 'lots'"),
    "an unknown standard": ("ops: {gelu: {standard: exactish}}",
                            "ops.gelu.standard: input should be 'binary', 'absolute', 'ulp', 'thousandth', "
                            "'error_bound' or 'benchmark', got 'exactish'"),
    "an unknown key": ("tolerance: 3", "tolerance: extra inputs are not permitted, got 3"),
    "a python tag": ("x: !!python/object/apply:os.system [touch PWNED]",
                     "the rules file is not valid YAML at line 1, column 4 (could not determine a constructor for "
                     "the tag 'tag:yaml.org,2002:python/object/apply:os.system'): fix the syntax"),
    "an alias bomb": (BOMB, "the rules file expands to more than 1000000 values through YAML aliases (an alias "
                            "bomb?): write the values out"),
    "nesting 10,000 deep": ("x: " + "[" * 10_000 + "]" * 10_000, "the rules file nests deeper than YAML can be read "
                                                                 "here"),
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


@pytest.mark.parametrize("kind", ["folder", "fifo", "not utf-8"])
@pytest.mark.parametrize("option", ["--npu-precision-rules", "--npu-precision-known-failures",
                                    "--npu-precision-baseline"])
def test_a_configuration_path_that_is_no_text_file_is_refused_without_hanging(pytester, option, kind):
    _skip_without_fixtures()
    path = pytester.path / "config.json"
    if kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)  # opening it would block until a writer comes
    else:
        path.write_bytes(b"\xff\xfe{}")
    result = pytester.runpytest(f"--npu-precision={DUMP}", option, "config.json", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    expected = {"folder": "is not a regular file", "fifo": "is not a regular file", "not utf-8": "is not UTF-8 text"}
    assert "config.json" in result.stderr.str() and expected[kind] in result.stderr.str()


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


OP_CASES = {
    "max_examples past the cap": ("cases:\n  - op: Functional.gelu\n    dtypes: [float32]\n    max_examples: 1000000000\n"
                                  "    inputs: [{shape: [4]}]\n",
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


@pytest.mark.parametrize("problem", OP_CASES)
def test_a_bad_op_case_file_fails_alone_quickly_and_reads_nothing_outside(pytester, problem):
    text, message = OP_CASES[problem]
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
