"""What a user sees, round 4 (issue 56): skips counted by reason, a baseline that fails or pairs nothing said,
node ids that paste back, messages that blame the right thing, one entry per API across ranks."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from fixtures import fixture_dump
from planted_dumps import forward_dump
from pytest_npuprecision import capture
from pytest_npuprecision.common.math_modes import declared_modes
from pytest_npuprecision.dump.descriptors import DumpDataError
from pytest_npuprecision.dump.dump_cases import load_dump
from pytest_npuprecision.reports.known_failures import KnownFailure, lookup, stale_entries, updated

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "dumps"


# ---------------------------------------------------------------- 1. what went unjudged


def test_the_summary_counts_skips_by_reason_and_rs_names_the_dump(pytester):
    result = pytester.runpytest("--npu-precision", str(EXAMPLES / "npu_llm_tensor"), "-rs", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["cases: * pass, 14 skip (14 unsupported-op)"])
    skipped = [line for line in result.stdout.lines if line.startswith("SKIPPED")]
    assert skipped and all("npu_llm_tensor/step0/rank0/dump.json: [unsupported-op] NPU." in line for line in skipped)
    assert not any("collecting.py" in line for line in skipped)
    assert any(".forward: unsupported: NPU." in line for line in skipped)  # each line names its entry


# ---------------------------------------------------------------- 2. a baseline that fails its own standard


def test_a_baseline_dump_that_fails_its_own_standard_is_named(pytester, tmp_path):
    fair, planted = forward_dump(tmp_path / "fair"), forward_dump(tmp_path / "planted", planted=True)
    result = pytester.runpytest("--npu-precision", str(fair), "--npu-precision-device", "dumped",
                                "--npu-precision-baseline", str(planted), "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "pairing: * judged entries paired with the baseline dump; the baseline dump's own entry fails its standard "
        "in 4 pairs (step0/rank0::*)",
        "where the dumps part: nowhere; *; but the baseline dump fails its own standard in 4 pairs, first "
        "step0/rank0::*: where both err, the pair does not part"])


# ---------------------------------------------------------------- 3. declared modes on a live device


def test_declared_float32_modes_are_a_usage_error_on_a_live_device(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_tensor")), "--npu-precision-device", "cpu",
                                "--npu-precision-fp32-modes", "conv=tf32", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npu-precision-fp32-modes declares the modes of a device that cannot tell them*"
                                 "device cpu runs here and reads its own: drop the option"])


# ---------------------------------------------------------------- 4. messages that say what is true


def test_a_mix_dump_s_module_entries_do_not_advise_dumping_mix():
    dump = load_dump(fixture_dump("transformer_mix_statistics") / "step0" / "rank0" / "dump.json")
    module = next(case for case in dump.cases if case.prefix == "Module")
    assert "this mix dump also holds the API calls inside the module" in module.skip_message
    assert "dump with level L1 or mix" not in module.skip_message


@pytest.mark.parametrize("text, family, switch", [
    ("conv=hf32", "conv", "torch.npu.conv.allow_hf32 = False"),
    ("matmul=hf32", "matmul", "torch.npu.matmul.allow_hf32 = False"),
    ("matmul=tf32", "matmul", "torch.backends.cuda.matmul.allow_tf32 = False"),
    ("rnn=tf32", "rnn", "torch.backends.cudnn.allow_tf32 = False"),
    ("conv=float16", "conv", "torch_npu.npu.set_option({'ACL_PRECISION_MODE': 'must_keep_origin_dtype'})"),
])
def test_a_declared_mode_names_the_switch_that_turns_it_off(text, family, switch):
    assert getattr(declared_modes(text), family).switch_off == switch


def test_a_tensor_folder_linked_out_of_the_dump_is_named_as_the_link(tmp_path):
    dump_dir = tmp_path / "dump" / "step0" / "rank0"
    shutil.copytree(fixture_dump("mlp_tensor/step0/rank0"), dump_dir)
    outside = tmp_path / "elsewhere"
    (dump_dir / "dump_tensor_data").rename(outside)
    (dump_dir / "dump_tensor_data").symlink_to(outside, target_is_directory=True)
    from pytest_npuprecision.dump.arguments import materialize

    dump = load_dump(dump_dir / "dump.json")
    case = next(c for c in dump.cases if c.key == "Functional.gelu.0.forward")
    with pytest.raises(DumpDataError) as info:
        materialize(case, dump.data_dir)
    assert f"{dump_dir / 'dump_tensor_data'} is a link to {outside.resolve()}, outside the dump" in str(info.value)
    assert "data_name must be" not in str(info.value)


def test_an_empty_output_msprobe_wrote_no_file_for_is_judged_offline_by_its_shape(pytester, tmp_path):
    with capture(tmp_path / "dump", rank=0):
        torch.index_select(torch.randn(4, 3), 0, torch.tensor([], dtype=torch.long))
    path = tmp_path / "dump" / "step0" / "rank0" / "dump.json"
    document = json.loads(path.read_text())
    entry = document["data"]["Torch.index_select.0.forward"]
    del entry["output"][0]["data_name"]  # msprobe saves no file for an empty tensor
    path.write_text(json.dumps(document))
    result = pytester.runpytest("--npu-precision", str(tmp_path / "dump"), "--npu-precision-device", "dumped",
                                "-k", "index_select", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_a_mistyped_baseline_folder_is_named_missing(pytester):
    result = pytester.runpytest("--npu-precision", str(fixture_dump("mlp_tensor")), "--npu-precision-device", "dumped",
                                "--npu-precision-baseline", "gpu_dumps/step0", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--npu-precision-baseline 'gpu_dumps/step0' does not exist: give a dump folder*"])


# ---------------------------------------------------------------- 6. node ids that paste back


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_a_node_id_pytest_prints_pastes_back(tmp_path, workers):
    dumps = shutil.copytree(EXAMPLES / "mlp_tensor", tmp_path / "dumps" / "mlp_tensor")
    listed = subprocess.run([sys.executable, "-m", "pytest", "--npu-precision", "dumps", "--collect-only", "-q",
                             "-p", "no:cacheprovider"], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    node_id = next(line for line in listed.stdout.splitlines() if "Functional.gelu.0.backward" in line)
    assert node_id == "dumps::mlp_tensor/step0/rank0::Functional.gelu.0.backward"
    again = subprocess.run([sys.executable, "-m", "pytest", node_id, "-v", "-p", "no:cacheprovider", *workers],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert "1 passed" in again.stdout and node_id in again.stdout
    assert dumps.exists()


def test_a_pasted_id_beside_its_own_option_runs_once(pytester):
    root = str(EXAMPLES / "mlp_tensor")
    result = pytester.runpytest("--npu-precision", root, f"{root}::step0/rank0::Functional.layer_norm.0.forward",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


# ---------------------------------------------------------------- 8. one known failure for every rank


def _failing_record(case_id: str, value: float = 40.0, status: str = "error") -> dict:
    return {"case_id": case_id, "status": status, "message": "", "outputs": [
        {"name": "output.0", "checks": [{"metric": "max_bound_ratio", "value": value, "limit": 8.0,
                                         "status": status, "upper": True}]}]}


def test_a_wildcard_entry_covers_every_rank_and_step():
    entries = {"step*/rank*::Functional.gelu.0.forward": KnownFailure("step*/rank*::Functional.gelu.0.forward",
                                                                       "ticket 1", "error", "2026-11-29"),
               "step0/rank3::Functional.gelu.0.forward": KnownFailure("step0/rank3::Functional.gelu.0.forward",
                                                                       "its own", "error", "2026-11-29")}
    assert lookup(entries, "step1/rank7::Functional.gelu.0.forward").reason == "ticket 1"
    assert lookup(entries, "step0/rank3::Functional.gelu.0.forward").reason == "its own"
    assert lookup(entries, "step1/rank7::Functional.gelu.1.forward") is None
    assert stale_entries(entries, {"step0/rank0::Functional.gelu.1.forward"}) == sorted(entries)
    assert stale_entries(entries, {"step2/rank0::Functional.gelu.0.forward"}) == ["step0/rank3::Functional.gelu.0.forward"]


def test_an_update_keeps_a_wildcard_while_a_case_it_covers_fails_and_drops_it_when_all_pass():
    key = "step*/rank*::Functional.gelu.0.forward"
    old = {key: KnownFailure(key, "ticket 1", "error", "2026-11-01")}
    ids = [f"step0/rank{rank}::Functional.gelu.0.forward" for rank in range(4)]
    still = updated(old, [_failing_record(ids[0])] + [{**_failing_record(i), "status": "pass"} for i in ids[1:]],
                    set(ids), "2026-11-29")
    assert still.entries == old and not still.added and not still.fixed
    fixed = updated(old, [{**_failing_record(i), "status": "pass"} for i in ids], set(ids), "2026-11-29")
    assert fixed.entries == {} and fixed.fixed == (key,)


def test_a_wildcard_known_failure_gates_every_rank(pytester, tmp_path):
    """The planted gelu fails on both ranks of a two-rank dump; one wildcard entry accepts both."""
    planted = forward_dump(tmp_path / "planted", planted=True)
    shutil.copytree(planted / "step0" / "rank0", planted / "step0" / "rank1")
    known = tmp_path / "known.json"
    common = ("--npu-precision", str(planted), "--npu-precision-device", "dumped", "-p", "no:cacheprovider")
    first = pytester.runpytest(*common, "--npu-precision-known-failures", str(known),
                               "--npu-precision-update-known-failures")
    assert first.ret == pytest.ExitCode.TESTS_FAILED
    entries = json.loads(known.read_text())
    wild = {}
    for case_id, entry in entries.items():
        wild[case_id.replace("step0/rank0", "step*/rank*").replace("step0/rank1", "step*/rank*")] = entry
    assert len(wild) == len(entries) // 2
    known.write_text(json.dumps(wild))
    gated = pytester.runpytest(*common, "--npu-precision-known-failures", str(known))
    assert gated.ret == pytest.ExitCode.OK, gated.stdout.str()[-3000:]
    assert gated.parseoutcomes()["xfailed"] == len(entries)


# ---------------------------------------------------------------- 10. the tests where users run them


def test_an_empty_fixtures_variable_counts_as_unset():
    done = subprocess.run([sys.executable, "-c", "import fixtures; print(fixtures.FIXTURES)"],
                          cwd=ROOT / "tests", env={**os.environ, "NPU_PRECISION_FIXTURES": ""},
                          capture_output=True, text=True, timeout=120)
    assert Path(done.stdout.strip()) == ROOT / "tests" / "data" / "msprobe-dumps", done.stderr


# ---------------------------------------------------------------- 13. a package people can find


def test_the_package_metadata_is_release_ready():
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11's tomllib reads pyproject.toml")

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "Framework :: Pytest" in project["project"]["classifiers"]  # pytest's plugin list reads it
    assert project["project"]["dynamic"] == ["version"] and "version" not in project["project"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pytest_npuprecision.__version__"}
    changelog = (ROOT / "CHANGELOG.md").read_text()
    import pytest_npuprecision

    assert f"## {pytest_npuprecision.__version__} (" in changelog and "## Unreleased" in changelog
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m build" in ci and "twine check --strict" in ci and "pytest_npuprecision-*.whl" in ci


# ---------------------------------------------------------------- 9. long work says what it is doing


def test_a_long_op_case_search_says_what_it_is_doing(pytester, monkeypatch):
    from pytest_npuprecision.opcases import search

    monkeypatch.setattr(search, "PROGRESS_SECONDS", 0.0)  # every example counts as long here
    pytester.makeini("[pytest]\n")
    pytester.makefile(".yaml", **{"op_cases/slow": """
cases:
  - op: Torch.neg
    dtypes: [float32]
    inputs: [{shape: [3]}]
"""})
    result = pytester.runpytest("op_cases", "-p", "no:cacheprovider", "--npu-precision-device", "cpu",
                                "--npu-precision-regressions", "none")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["npu-precision op case *: searching, the worst example so far at *x its limit; "
                                 "* examples run (the profile asks for 25) in * s"])
