"""Several dumps at once: case ids name their dump, so baselines, known failures and reports keep them apart.

The three example dumps all have the layout step0/rank0, the case that broke the CI gate (issue 20).
"""

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dumps"
FAULTY = "import torch\nfrom faulty_backend import Fault, FaultyBackend\nbackend = FaultyBackend({'Functional.gelu': Fault('bias', 64)})\n"


@pytest.fixture
def dumps(pytester) -> Path:
    """A copy of the example dumps and of the same MLP dump under another name: four dumps, one layout."""
    target = pytester.path / "dumps"
    for name in ("mlp_tensor", "mlp_statistics", "attention_bf16_tensor"):
        shutil.copytree(EXAMPLES / name, target / name)
    shutil.copytree(EXAMPLES / "mlp_tensor", target / "mlp_tensor_again")
    return target


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "cases.jsonl").read_text().splitlines()]


def test_case_ids_name_their_dump_and_are_unique(pytester, dumps):
    result = pytester.runpytest("--npu-precision", "dumps", "--npu-precision-device", "cpu", "--npu-precision-report",
                                "report", "--junitxml", "junit.xml", "-p", "no:cacheprovider", "-n", "2")
    records = _records(pytester.path / "report")
    ids = [record["case_id"] for record in records]
    assert len(ids) == len(set(ids)) == 72
    assert "mlp_tensor/step0/rank0::Functional.gelu.0.forward" in ids
    assert "mlp_tensor_again/step0/rank0::Functional.gelu.0.forward" in ids
    assert {record["location"] for record in records} == {
        "attention_bf16_tensor/step0/rank0", "mlp_statistics/step0/rank0", "mlp_tensor/step0/rank0",
        "mlp_tensor_again/step0/rank0"}
    junit = [prop.get("value") for prop in ET.parse(pytester.path / "junit.xml").iter("property")
             if prop.get("name") == "npu_precision_case_id"]
    assert sorted(junit) == sorted(ids)
    result.assert_outcomes(passed=72)


def test_one_dump_keeps_the_step_and_rank_ids(pytester, dumps):
    result = pytester.runpytest("--npu-precision", "dumps/mlp_tensor/step0", "--co", "-q", "-p", "no:cacheprovider")
    assert "dumps/mlp_tensor/step0::step0/rank0::Functional.gelu.0.forward" in result.stdout.lines


def test_a_baseline_recorded_from_several_dumps_judges_them_all(pytester, dumps):
    common = ("--npu-precision", "dumps", "--npu-precision-device", "cpu", "-p", "no:cacheprovider")
    pytester.runpytest(*common, "--npu-precision-record", "baseline.json").assert_outcomes(passed=72)
    result = pytester.runpytest(*common, "--npu-precision-baseline", "baseline.json", "--npu-precision-report",
                                "report")
    result.assert_outcomes(passed=72)
    assert {record["baseline_state"] for record in _records(pytester.path / "report")} == {"recorded"}


def test_known_failures_of_several_dumps_round_trip(pytester, dumps):
    pytester.makepyfile(bad_gelu=FAULTY)
    shutil.copy(Path(__file__).parents[1] / "faulty_backend.py", pytester.path)  # importable by xdist's workers too
    common = ("--npu-precision", "dumps", "--npu-precision-device", "bad_gelu:backend",
              "--npu-precision-known-failures", "kf.json", "-p", "no:cacheprovider")
    pytester.runpytest(*common, "--npu-precision-update-known-failures").assert_outcomes(passed=69, failed=3)
    entries = json.loads((pytester.path / "kf.json").read_text())
    assert sorted(entries) == ["mlp_statistics/step0/rank0::Functional.gelu.0.forward",
                               "mlp_tensor/step0/rank0::Functional.gelu.0.forward",
                               "mlp_tensor_again/step0/rank0::Functional.gelu.0.forward"]
    again = pytester.runpytest(*common, "-n", "2")
    assert again.ret == 0 and "regression" not in again.stdout.str()
    again.assert_outcomes(passed=72 - len(entries), xfailed=len(entries))


def test_two_paths_whose_ids_would_collide_are_refused(pytester, dumps):
    result = pytester.runpytest("--npu-precision", "dumps/mlp_tensor", "--npu-precision", "dumps/mlp_tensor_again",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'dumps/mlp_tensor' and 'dumps/mlp_tensor_again' both hold a dump labelled "
                                 "'step0/rank0'*give their common parent folder once instead*"])


def test_the_rerun_line_reruns_the_case_of_its_dump(pytester, dumps):
    pytester.makefile(".yaml", strict="standards:\n  error_bound: {max_bound_ratio: 1.0e-9}\n")
    result = pytester.runpytest("--npu-precision", "dumps", "--npu-precision-device", "cpu", "--npu-precision-rules",
                                "strict.yaml", "-k", "mlp_tensor_again and linear.0.forward", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    rerun = next(line for line in result.stdout.lines if line.startswith("rerun: pytest "))
    assert "--npu-precision-case mlp_tensor_again/step0/rank0::Functional.linear.0.forward" in rerun
    import shlex

    again = pytester.runpytest(*shlex.split(rerun.removeprefix("rerun: pytest ")), "-p", "no:cacheprovider",
                               "-v")
    again.assert_outcomes(failed=1)
    again.stdout.fnmatch_lines(["*dumps::mlp_tensor_again/step0/rank0::Functional.linear.0.forward FAILED*"])


def test_pytest_ignores_python_files_and_op_cases_inside_a_dump(pytester, dumps):
    marker = pytester.path / "PWNED"
    payload = f"open({str(marker)!r}, 'w').write('ran')\n"
    folder = dumps / "mlp_tensor"
    (folder / "conftest.py").write_text(payload)
    (folder / "step0" / "test_payload.py").write_text(payload + "def test_x():\n    pass\n")
    (folder / "op_cases").mkdir()
    (folder / "op_cases" / "cases.yaml").write_text("cases:\n  - op: os.system\n    dtypes: [float32]\n")
    (folder / "step0" / "rank0" / "loop").symlink_to("..")
    result = pytester.runpytest("--npu-precision", "dumps/mlp_tensor", "--npu-precision-device", "cpu",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=16)
    assert not marker.exists()


def test_an_ini_file_inside_a_dump_is_refused(pytester, dumps):
    (dumps / "mlp_tensor" / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    result = pytester.runpytest("--npu-precision", str(dumps / "mlp_tensor"), "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*pytest took its configuration from *pytest.ini, inside the dump*"
                                 "--npu-precision=*"])
    one_word = pytester.runpytest(f"--npu-precision={dumps / 'mlp_tensor'}", "--npu-precision-device", "cpu",
                                  "-p", "no:cacheprovider")
    one_word.assert_outcomes(passed=16)


def test_a_dump_given_as_a_test_path_gets_a_hint(pytester, dumps):
    result = pytester.runpytest("dumps", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["dumps holds 4 msprobe dumps: run them with `pytest --npu-precision=dumps`"])


def test_a_folder_without_a_dump_is_a_usage_error(pytester):
    pytester.mkdir("empty")
    result = pytester.runpytest("--npu-precision", "empty", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npu-precision 'empty' holds no dump.json: give a dump.json, or a rank, step "
                                 "or dump root folder written by msprobe*"])


def test_auto_without_an_accelerator_says_loudly_that_cpu_torch_was_checked(pytester, dumps):
    """A recorded output off by 1.5x still passes: the device side is CPU torch, and the run says so twice."""
    import torch

    data = dumps / "mlp_tensor" / "step0" / "rank0" / "dump_tensor_data"
    name = next(p for p in data.iterdir() if p.name.startswith("Functional.gelu.0.forward.output"))
    torch.save(torch.load(name, weights_only=True) * 1.5, name)
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: auto picks it")
    result = pytester.runpytest("--npu-precision=dumps/mlp_tensor", "-p", "no:cacheprovider")
    note = ("npu-precision: --npu-precision-device auto found no NPU or GPU here, so these verdicts judge CPU torch's "
            "own kernels, not the device the dump was taken on; run on that device (npu, cuda) to check it")
    assert result.stdout.lines.count(note) == 2  # the header and the summary
    result.assert_outcomes(passed=16)
    explicit = pytester.runpytest("--npu-precision=dumps/mlp_tensor", "--npu-precision-device", "cpu",
                                  "-p", "no:cacheprovider")
    assert note not in explicit.stdout.lines


def test_the_rerun_line_of_a_custom_backend_works_as_printed_from_anywhere(pytester, dumps):
    """The backend module sits in the folder pytest ran in, importable without python -m (issue 20)."""
    import os
    import subprocess
    import sys

    pytester.makepyfile(bad_gelu=FAULTY)
    shutil.copy(Path(__file__).parents[1] / "faulty_backend.py", pytester.path)
    bin_dir = str(Path(sys.executable).parent)
    # The parent's PYTHONPATH stays (the plugin may be installed there, with pip --target), less any
    # entry that would make the folder pytest runs in importable by itself.
    kept = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p not in ("", ".")]
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ["PATH"], "PYTHONPATH": os.pathsep.join(kept)}
    first = subprocess.run([str(Path(bin_dir) / "pytest"), "--npu-precision=dumps/mlp_tensor", "--npu-precision-device",
                            "bad_gelu:backend", "-p", "no:cacheprovider", "-k", "gelu.0.forward"],
                           cwd=pytester.path, env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 1, first.stdout[-2000:] + first.stderr[-2000:]
    rerun = next(line for line in first.stdout.splitlines() if line.startswith("rerun: "))
    assert rerun.startswith(f"rerun: cd {pytester.path} && pytest --npu-precision ")
    elsewhere = pytester.mkdir("elsewhere")
    again = subprocess.run(rerun.removeprefix("rerun: ") + " -p no:cacheprovider", shell=True, cwd=elsewhere,
                           env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1 and "1 failed" in again.stdout, again.stdout[-2000:] + again.stderr[-2000:]
