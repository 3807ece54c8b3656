"""Recorded baselines end to end: `--npu-precision-record FILE` on one run, `--npu-precision-baseline FILE` on the next."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from fixtures import FIXTURES, fixture_dump, needs_dumps

from pytest_npuprecision.backends import Backend
from pytest_npuprecision.dump.arguments import CallInputs
from pytest_npuprecision.dump.fingerprints import fingerprint

DUMP = FIXTURES / "mlp_tensor"  # two steps, 46 cases, every one judged
pytestmark = needs_dumps(DUMP)
CPU = Backend("cpu").info().device_name
BENCHMARK_RATIOS = ("small_value_err_ratio", "rmse_ratio", "max_scaled_err_ratio", "mean_scaled_err_ratio",
                    "error_balance_ratio")
GELU = ["step0/rank0::Functional.gelu.0.backward", "step0/rank0::Functional.gelu.0.forward",
        "step1/rank0::Functional.gelu.0.backward", "step1/rank0::Functional.gelu.0.forward"]

WORSE_DEVICE = '''
from pytest_npuprecision.backends import Backend


class BiasedGelu(Backend):
    """A CPU whose gelu comes out 2**-18 too large, relatively: some 32 float32 ulp, forward and backward."""

    def __init__(self):
        super().__init__("cpu", name="biased-gelu")

    def call(self, api, func, args, kwargs):
        result = func(*args, **kwargs)
        return result * (1 + 2**-18) if api == "Functional.gelu" else result
'''


def run(pytester, *args, dump: Path = DUMP, device: str = "cpu"):
    # no:benchmark: pytest-benchmark, where installed, warns in every run under xdist
    return pytester.runpytest("--npu-precision", str(dump), "--npu-precision-device", device,
                              "-p", "no:cacheprovider", "-p", "no:benchmark", *args)


def records(folder: Path) -> dict[str, dict]:
    return {r["case_id"]: r for r in map(json.loads, (folder / "cases.jsonl").read_text().splitlines())}


def failed_ids(folder: Path) -> list[str]:
    return sorted(cid for cid, r in records(folder).items() if r["status"] not in ("pass", "skip"))


def record(pytester, name: str = "base.json", *args, **kwargs) -> dict:
    result = run(pytester, "--npu-precision-record", name, *args, **kwargs)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()[-2000:]
    return json.loads((pytester.path / name).read_text())


_CLEAN: list[str] = []  # the text of a clean CPU recording of DUMP, made once per process


def clean_recording(pytester) -> None:
    """base.json as a clean CPU run of DUMP records it: it is the same file every time, so it is recorded once."""
    if not _CLEAN:
        record(pytester)
        _CLEAN.append((pytester.path / "base.json").read_text())
    (pytester.path / "base.json").write_text(_CLEAN[0])


def edit(pytester, change, name: str = "base.json") -> None:
    path = pytester.path / name
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def copy_step0(pytester) -> Path:
    """A writable copy of mlp_tensor's first step: its case ids are those of the fixture's step0."""
    target = pytester.path / "dump" / "step0" / "rank0"
    shutil.copytree(DUMP / "step0" / "rank0", target)
    for path in target.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    return target


# ---------------------------------------------------------------- recording


def test_the_record_holds_every_judged_case_sorted_one_a_line(pytester):
    folder = copy_step0(pytester)
    (folder / "dump_tensor_data" / "Functional.relu.0.forward.input.0.pt").unlink()  # two input errors
    data = json.loads((folder / "dump.json").read_text())
    data["data"]["Functional.linear.0.forward"]["input_args"] = "oops"  # a skip (and its backward)
    (folder / "dump.json").write_text(json.dumps(data))
    result = run(pytester, "--npu-precision-record", "base.json", "--npu-precision-report", "r",
                 dump=pytester.path / "dump")
    result.assert_outcomes(passed=19, failed=2, skipped=2)
    result.stdout.fnmatch_lines(["baseline recorded: 19 judged cases with their input fingerprints"])

    text = (pytester.path / "base.json").read_text()
    recorded = json.loads(text)
    assert {k: v for k, v in recorded.items() if k != "cases"} == {
        "format": "pytest-npuprecision record", "version": 1, "golden": "cpu float64",
        "device": {"name": "cpu", "device_name": CPU, "settings": {}, "versions": {"torch": torch.__version__}}}
    lines = text.splitlines()
    case_lines = lines[lines.index(' "cases": {') + 1:lines.index(" }")]
    assert len(case_lines) == 19 and all(line.startswith('  "step0/rank0::') for line in case_lines)
    assert [line.split('"')[1] for line in case_lines] == sorted(recorded["cases"])

    cases = records(pytester.path / "r")
    judged = {cid: r for cid, r in cases.items() if r["status"] in ("pass", "warning", "error")}
    assert sorted(recorded["cases"]) == sorted(judged)
    assert {r["status"] for cid, r in cases.items() if cid not in judged} == {"skip", "input-error"}
    for case_id, entry in recorded["cases"].items():
        assert entry["fingerprint"] == judged[case_id]["fingerprint"]
        assert entry["fingerprint"]["digest"] and entry["fingerprint"]["inputs"]
        assert entry["outputs"] == {o["name"]: {"dtype": o["dtype"], "shape": o["shape"], "metrics": o["metrics"]}
                                    for o in judged[case_id]["outputs"]}
    backward = recorded["cases"]["step0/rank0::Functional.gelu.0.backward"]
    assert list(backward["outputs"]) == ["grad.input_args[0]"]
    assert sorted(backward["fingerprint"]["inputs"]) == ["grad_outputs[0]", "input_args[0]"]


@pytest.mark.parametrize("dump", ["mlp_tensor", "mlp_statistics"])
def test_a_run_compared_with_its_own_recording_passes_by_the_benchmark_standard(pytester, dump):
    """mlp_statistics has no tensor files: its synthetic inputs must fingerprint the same in both runs."""
    first = record(pytester, "base.json", "--npu-precision-report", "rec", dump=fixture_dump(dump))
    result = run(pytester, "--npu-precision-baseline", "base.json", "--npu-precision-report", "cmp",
                 dump=fixture_dump(dump))
    cases = records(pytester.path / "cmp")
    result.assert_outcomes(passed=len(first["cases"]))
    label = f"base.json (recorded on cpu, {CPU}, {len(first['cases'])} cases)"
    result.stdout.fnmatch_lines([f"npu-precision: device cpu (*), golden cpu float64, baseline {label}, seed *"])

    recording = records(pytester.path / "rec")
    standards = {"benchmark+error_bound": 0, "binary": 0}
    for case_id, case in cases.items():
        assert (case["baseline"], case["baseline_state"]) == (label, "recorded")
        assert case["fingerprint"] == first["cases"][case_id]["fingerprint"]
        for output, before in zip(case["outputs"], recording[case_id]["outputs"], strict=True):
            # binary ops stay bit-exact checks; every other float output is judged against the recording
            # the benchmark ratios, next to the error bound the recording met too
            assert output["standard"] == ("binary" if before["standard"] == "binary" else "benchmark+error_bound")
            standards[output["standard"]] += 1
            if output["standard"] != "binary":
                ratios = [c for c in output["checks"] if c["metric"] in BENCHMARK_RATIOS]
                assert len(ratios) == 5 and all(c["baseline"] is not None and c["value"] <= 1 for c in ratios)
                own = {c["metric"] for c in output["checks"]} - set(BENCHMARK_RATIOS) - {"nonfinite_mismatch"}
                # the residual: a norm's rows; the fair order's ceiling: a plain sum's (linear)
                rows_and_sums = {"mean_residual_ratio", "max_residual_ratio", "order_rmse_ratio", "row_order_ratio"}
                assert own - rows_and_sums == {
                    "max_bound_ratio", "mean_bound_ratio", "bound_bias", "magnitude_bound_bias"}
    assert standards["benchmark+error_bound"] > 50
    result.stdout.fnmatch_lines([f"outputs by standard: benchmark+error_bound {standards['benchmark+error_bound']} pass; "
                                 f"binary {standards['binary']} pass"])


def test_a_parallel_run_compares_with_and_records_the_file_a_serial_one_does(pytester, monkeypatch):
    """Each worker reads the baseline; the controller writes the record, byte for byte the serial one."""
    # One intra-op thread on both sides: torch's reductions sum in another order with more threads,
    # which moves the metrics' last bits (the serial run here has the test process's own threads).
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _parallel_run_records_the_serial_file(pytester)
    finally:
        torch.set_num_threads(threads)


def _parallel_run_records_the_serial_file(pytester):
    dump = fixture_dump("mlp_statistics")
    record(pytester, "serial.json", dump=dump)
    result = run(pytester, "--npu-precision-baseline", "serial.json", "--npu-precision-record", "parallel.json",
                 "-n", "2", dump=dump)
    result.assert_outcomes(passed=69)
    result.stdout.fnmatch_lines(["outputs by standard: benchmark+error_bound 84 pass; binary 6 pass"])
    assert (pytester.path / "parallel.json").read_text() == (pytester.path / "serial.json").read_text()


# ---------------------------------------------------------------- comparing devices


def test_a_recorded_baseline_catches_a_worse_device(pytester):
    clean_recording(pytester)
    pytester.makepyfile(worse=WORSE_DEVICE)
    pytester.syspathinsert()
    result = run(pytester, "--npu-precision-baseline", "base.json", "--npu-precision-report", "r",
                 device="worse:BiasedGelu")
    result.assert_outcomes(passed=42, failed=4)
    result.stdout.fnmatch_lines(["npu-precision: device biased-gelu (*), golden cpu float64, baseline base.json *"])
    assert failed_ids(pytester.path / "r") == GELU
    for case_id in GELU:
        (output,) = records(pytester.path / "r")[case_id]["outputs"]
        assert output["standard"] == "benchmark+error_bound"
        failing = {c["metric"] for c in output["checks"] if c["status"] == "error"}
        assert "rmse_ratio" in failing and "mean_scaled_err_ratio" in failing
    result.stdout.fnmatch_lines([
        "output.0: Functional.gelu.0.forward [[]float32, 8x32]: error by the benchmark+error_bound standard",
        "  rmse_ratio = * > limit 1.2 (baseline *)  [[]error]",
        "*compared: actual vs golden and baseline vs golden",
        "case step0/rank0::Functional.gelu.0.forward, seed *, device biased-gelu vs golden cpu float64, "
        f"baseline base.json (recorded on cpu, {CPU}, 46 cases)",
    ])


def test_the_worse_device_compared_with_its_own_recording_passes(pytester):
    pytester.makepyfile(worse=WORSE_DEVICE)
    pytester.syspathinsert()
    recorded = record(pytester, device="worse:BiasedGelu")
    assert recorded["device"]["name"] == "biased-gelu" and len(recorded["cases"]) == 46  # its failures too
    result = run(pytester, "--npu-precision-baseline", "base.json", device="worse:BiasedGelu")
    result.assert_outcomes(passed=46)
    result.stdout.fnmatch_lines(["*baseline base.json (recorded on biased-gelu, *, 46 cases)*"])


# ---------------------------------------------------------------- refusing other inputs


def test_a_changed_input_tensor_is_refused_naming_case_file_and_input(pytester):
    folder = copy_step0(pytester)
    record(pytester, dump=pytester.path / "dump")
    path = folder / "dump_tensor_data" / "Functional.gelu.0.forward.input.0.pt"
    before = torch.load(path)
    after = before.clone()
    after[0, 0] = torch.nextafter(after[0, 0], torch.tensor(2.0))  # one ulp
    torch.save(after, path)
    result = run(pytester, "--npu-precision-baseline", "base.json", "--npu-precision-report", "r",
                 dump=pytester.path / "dump")
    result.assert_outcomes(passed=21, failed=2)  # the gelu forward and its backward read this tensor
    assert failed_ids(pytester.path / "r") == GELU[:2]
    source = folder.resolve() / "dump.json"
    old, new = (dict(fingerprint(CallInputs((t,), {})).inputs)["input_args[0]"] for t in (before, after))
    for key in ("Functional.gelu.0.forward", "Functional.gelu.0.backward"):
        assert records(pytester.path / "r")[f"step0/rank0::{key}"]["message"] == (
            f"{key} ({source}): the baseline base.json was recorded from other inputs: "
            f"input_args[0] is {new} requires grad here but was {old} requires grad when recorded. Compare runs "
            f"of the same dump, with the same torch version (synthetic inputs come from torch's generators), "
            f"or record the baseline again")
    assert "harness error" not in result.stdout.str()


def test_an_edited_fingerprint_in_the_file_is_refused(pytester):
    clean_recording(pytester)
    case = "step1/rank0::Functional.cross_entropy.0.forward"

    def change(data):
        prints = data["cases"][case]["fingerprint"]
        prints["digest"] = "0" * 32
        prints["inputs"]["input_args[1]"] = "int64[8] 0123456789abcdef"

    edit(pytester, change)
    result = run(pytester, "--npu-precision-baseline", "base.json", "--npu-precision-report", "r")
    result.assert_outcomes(passed=45, failed=1)
    message = records(pytester.path / "r")[case]["message"]
    assert message.startswith("Functional.cross_entropy.0.forward (")
    assert ("the baseline base.json was recorded from other inputs: input_args[1] is int64[8] "
            in message)
    assert " here but was int64[8] 0123456789abcdef when recorded. " in message
    result.stdout.fnmatch_lines(["cases: 1 input-error, 45 pass"])


OUTPUT_EDITS = {
    "dtype": (lambda out: out.update(dtype="float16") or out["metrics"].update(dtype="float16"),
              "output.0 is float32[8, 32] here but float16[8, 32] in the baseline base.json"),
    "shape": (lambda out: out.update(shape=[32, 8]) or out["metrics"].update(shape=[32, 8]),
              "output.0 is float32[8, 32] here but float32[32, 8] in the baseline base.json"),
}


@pytest.mark.parametrize("what", OUTPUT_EDITS)
def test_an_output_recorded_with_another_dtype_or_shape_is_refused(pytester, what):
    clean_recording(pytester)
    change, expected = OUTPUT_EDITS[what]
    edit(pytester, lambda data: change(data["cases"]["step0/rank0::Functional.gelu.0.forward"]["outputs"]["output.0"]))
    result = run(pytester, "--npu-precision-baseline", "base.json", "--npu-precision-report", "r")
    result.assert_outcomes(passed=45, failed=1)
    source = DUMP / "step0" / "rank0" / "dump.json"  # as the user gave it, not resolved
    assert records(pytester.path / "r")["step0/rank0::Functional.gelu.0.forward"]["message"] == (
        f"Functional.gelu.0.forward ({source}): {expected}: the recording ran another op or another dtype; "
        f"record it again")


def test_an_output_the_recording_lacks_is_refused(pytester):
    clean_recording(pytester)

    def rename(data):
        outputs = data["cases"]["step0/rank0::Functional.gelu.0.forward"]["outputs"]
        outputs["output.1"] = outputs.pop("output.0")

    edit(pytester, rename)
    result = run(pytester, "--npu-precision-baseline", "base.json")
    result.assert_outcomes(passed=45, failed=1)
    result.stdout.fnmatch_lines(["*: output.0 is float32[[]8, 32[]] here but absent in the baseline base.json: "
                                 "the recording ran another op or another dtype; record it again"])


# ---------------------------------------------------------------- cases the file lacks


def test_a_case_the_file_lacks_is_judged_without_it_and_reported(pytester):
    clean_recording(pytester)
    gone = "step1/rank0::Functional.layer_norm.0.forward"
    edit(pytester, lambda data: data["cases"].pop(gone))
    result = run(pytester, "--npu-precision-baseline", "base.json", "--npu-precision-report", "r")
    result.assert_outcomes(passed=46)
    label = f"base.json (recorded on cpu, {CPU}, 45 cases)"
    result.stdout.fnmatch_lines([f"missing from the baseline {label}: 1 cases, judged without it: {gone}"])
    cases = records(pytester.path / "r")
    assert cases[gone]["baseline_state"] == "missing"
    assert [o["standard"] for o in cases[gone]["outputs"]] == ["error_bound"]
    assert {r["baseline_state"] for cid, r in cases.items() if cid != gone} == {"recorded"}


# ---------------------------------------------------------------- unusable files


def _recorded_text(pytester, change) -> str:
    data = {"format": "pytest-npuprecision record", "version": 1, "device": {"name": "cpu"}, "golden": "cpu float64",
            "cases": {"a::b": {"fingerprint": {"digest": "0", "inputs": {}}, "outputs": {}}}}
    change(data)
    return json.dumps(data)


BAD_FILES = {
    "not JSON": (lambda pytester: "{", "base.json: the baseline is not valid JSON (Expecting property name enclosed "
                 "in double quotes: line 1 column 2 (char 1)): give a file written by --npu-precision-record"),
    "nested 100,000 deep": (lambda pytester: "[" * 100_000 + "]" * 100_000,
                            "base.json: the baseline nests deeper than 64 levels: give a file written by "
                            "--npu-precision-record"),
    "not UTF-8": (lambda pytester: "\udcff", "base.json: the baseline is not UTF-8 text (byte 0): save it as UTF-8: "
                                             "give a file written by --npu-precision-record"),
    "a known-failures file": (
        lambda pytester: '{"a::b": {"status": "error"}}',
        "baseline base.json is not a pytest-npuprecision record: write one with --npu-precision-record on the "
        "trusted machine"),
    "a list": (lambda pytester: "[]", "baseline base.json is not a pytest-npuprecision record: write one with "
               "--npu-precision-record on the trusted machine"),
    "another version": (
        lambda pytester: _recorded_text(pytester, lambda d: d.update(version=2)),
        "baseline base.json has record version 2, this plugin reads version 1: record it again with this version"),
    "no version": (
        lambda pytester: _recorded_text(pytester, lambda d: d.pop("version")),
        "baseline base.json has record version None, this plugin reads version 1: record it again with this "
        "version"),
    "cases not an object": (
        lambda pytester: _recorded_text(pytester, lambda d: d.update(cases=[])),
        "base.json: cases: expected a mapping of case ids to their recorded outputs, got a list: record the file "
        "again"),
    "no device": (
        lambda pytester: _recorded_text(pytester, lambda d: d.pop("device")),
        "base.json: device: is missing: record the file again"),
    "case without outputs": (
        lambda pytester: _recorded_text(pytester, lambda d: d["cases"]["a::b"].pop("outputs")),
        "base.json: cases.a::b.outputs: is missing: record the file again"),
    "case that is a string": (
        lambda pytester: _recorded_text(pytester, lambda d: d["cases"].update({"a::b": "pass"})),
        "base.json: cases.a::b: expected a mapping with fingerprint and outputs, got 'pass': record the file again"),
    "metrics missing a field": (
        lambda pytester: _recorded_text(pytester, lambda d: d["cases"]["a::b"]["outputs"].update(
            {"output.0": {"dtype": "float32", "shape": [2], "metrics": {"dtype": "float32"}}})),
        "base.json: cases.a::b.outputs['output.0'].metrics: lack 'shape': record the file again"),
}


@pytest.mark.parametrize("problem", BAD_FILES)
def test_an_unusable_baseline_file_is_a_usage_error_naming_the_problem(pytester, problem):
    text, message = BAD_FILES[problem]
    (pytester.path / "base.json").write_bytes(text(pytester).encode("utf-8", "surrogateescape"))
    result = run(pytester, "--npu-precision-baseline", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message}" in result.stderr.lines


def test_metrics_that_disagree_with_their_output_are_refused(pytester):
    """Hand edits of one copy of dtype or shape and not the other: refused when read, not a harness error later."""
    clean_recording(pytester)
    case = "step0/rank0::Functional.gelu.0.forward"
    edit(pytester, lambda data: data["cases"][case]["outputs"]["output.0"].update(dtype="float16"))
    result = run(pytester, "--npu-precision-baseline", "base.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"ERROR: base.json: cases['{case}'].outputs['output.0']: is float16[8, 32] but its metrics are "
            f"float32[8, 32]: record the file again") in result.stderr.lines


def test_a_baseline_file_that_does_not_exist_is_a_usage_error(pytester):
    result = run(pytester, "--npu-precision-baseline", "nosuch.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --npu-precision-baseline 'nosuch.json' does not exist: give a file written by "
            "--npu-precision-record, a device, or none") in result.stderr.lines
