"""Gating merges on known failures: strict xfail, regressions, stale entries, the update, exit status.

Failures are planted with limits nobody meets: the six linear cases of one real dump fail
max_bound_ratio at a limit of 0.05 (their values lie between 0.1 and 0.6). Moving that limit moves
every case's value/limit ratio, which is how a regression is planted without touching the data.
"""

from __future__ import annotations

import datetime
import json
import shutil

import pytest
from fixtures import FIXTURES, needs_dumps

from pytest_npuprecision.reports.known_failures import REASON_PLACEHOLDER

DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
pytestmark = needs_dumps(DUMP)
LINEAR = [f"step0/rank0::Functional.linear.{i}.{d}" for i in range(3) for d in ("backward", "forward")]


def run(pytester, *args, limit: float | str = 0.05, select: str = "linear"):
    """The linear cases of one dump, with max_bound_ratio limited to ``limit`` for linear."""
    pytester.makefile(".yaml", rules=f"ops:\n  linear: {{limits: {{error_bound: {{max_bound_ratio: {limit}}}}}}}\n")
    return pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-device", "cpu",
                              "--npu-precision-rules", "rules.yaml", "-k", select, "-p", "no:cacheprovider", *args)


def accept(pytester, *args, **kwargs):
    """Record the current failures in kf.json."""
    return run(pytester, "--npu-precision-known-failures", "kf.json", "--npu-precision-update-known-failures",
               *args, **kwargs)


def known(pytester, *args, **kwargs):
    return run(pytester, "--npu-precision-known-failures", "kf.json", *args, **kwargs)


def entries(pytester) -> dict:
    return json.loads((pytester.path / "kf.json").read_text())


def edit(pytester, change) -> None:
    data = entries(pytester)
    change(data)
    (pytester.path / "kf.json").write_text(json.dumps(data, indent=2))


def test_update_writes_a_sorted_reviewable_file_of_the_failures(pytester):
    result = accept(pytester)
    result.assert_outcomes(failed=6)  # judged against the (empty) file, then the file is written
    text = (pytester.path / "kf.json").read_text()
    data = json.loads(text)
    assert list(data) == sorted(LINEAR)
    entry = data["step0/rank0::Functional.linear.0.forward"]
    assert entry["accepted"] == datetime.date.today().isoformat()
    assert entry["reason"] == REASON_PLACEHOLDER and entry["status"] == "error"
    [check] = entry["outputs"]["output.0"]
    assert check["metric"] == "max_bound_ratio" and check["limit"] == 0.05 and 0.05 < check["value"] < 8
    assert f'        {json.dumps(check)}\n' in text  # one check per line
    result.stdout.fnmatch_lines(["*rewrote kf.json: 6 entries; 6 added, 0 changed, 0 removed as fixed, "
                                 "0 stale removed"])
    accept(pytester)
    assert (pytester.path / "kf.json").read_text() == text  # nothing changed, nothing rewritten differently


def test_entries_without_a_reason_are_warned_about_until_someone_writes_one(pytester):
    accept(pytester).stdout.fnmatch_lines([
        f"  warning: 6 entries have no reason yet (step0/rank0::Functional.linear.0.backward, ...): replace "
        f"'{REASON_PLACEHOLDER}' in kf.json with why each failure is accepted, and commit it"])
    known(pytester).stdout.fnmatch_lines(["  warning: 6 entries have no reason yet *"])

    def explain_all_but_one(data: dict) -> None:
        for entry in data.values():
            entry["reason"] = "vendor GEMM, ticket 7"
        data["step0/rank0::Functional.linear.0.forward"]["reason"] = ""

    edit(pytester, explain_all_but_one)
    known(pytester).stdout.fnmatch_lines([
        "  warning: 1 entries have no reason yet (step0/rank0::Functional.linear.0.forward): *"])
    edit(pytester, lambda d: d["step0/rank0::Functional.linear.0.forward"].update(reason="ticket 8"))
    assert "no reason yet" not in known(pytester).stdout.str()


def test_listed_cases_run_as_strict_xfail_and_the_run_passes(pytester):
    accept(pytester)
    edit(pytester, lambda d: d["step0/rank0::Functional.linear.0.forward"].update(reason="vendor GEMM, ticket 7"))
    result = known(pytester, "-rx")
    result.assert_outcomes(xfailed=6)
    assert result.ret == 0
    result.stdout.fnmatch_lines([
        "known failures (kf.json): 6 xfail",
        "*Functional.linear.0.forward - known failure step0/rank0::Functional.linear.0.forward (error, accepted *): "
        "vendor GEMM, ticket 7",
    ])


def test_a_listed_case_that_passes_fails_so_that_the_fix_shows_up(pytester):
    accept(pytester)
    result = known(pytester, limit=8)
    result.assert_outcomes(failed=6)
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "*[[]XPASS(strict)[]] known failure step0/rank0::Functional.linear.* (error, accepted *)*",
        "known failures (kf.json): 6 fixed",
        "  fixed: step0/rank0::Functional.linear.0.backward: now passes: remove it, or rerun with "
        "--npu-precision-update-known-failures",
    ])


def test_worse_than_accepted_beyond_the_margin_is_a_regression(pytester):
    accept(pytester)
    result = known(pytester, limit=0.04)  # every value/limit ratio grows by 25 %
    result.assert_outcomes(failed=6)
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        "worse than the accepted known failure:",
        "output.0: max_bound_ratio = * (limit 0.04) is 1.25x as far past its limit as accepted (*, limit 0.05); "
        "the margin is 10%",
        "output.0: Functional.linear.0.forward [[]float32, 8x32[]]: error by the error_bound standard",
        "known failures (kf.json): 6 regression",
    ])
    assert "harness error" not in result.stdout.str()


def test_worse_within_the_margin_is_still_the_accepted_failure(pytester):
    accept(pytester)
    known(pytester, "--npu-precision-known-failures-margin", "30%", limit=0.04).assert_outcomes(xfailed=6)
    known(pytester, "--npu-precision-known-failures-margin", "0.2", limit=0.04).assert_outcomes(failed=6)


def test_a_check_that_did_not_fail_when_accepted_is_a_regression(pytester):
    accept(pytester)

    def rename(data):
        data["step0/rank0::Functional.linear.0.forward"]["outputs"]["output.0"][0]["metric"] = "mean_bound_ratio"

    edit(pytester, rename)
    result = known(pytester)
    result.assert_outcomes(failed=1, xfailed=5)
    result.stdout.fnmatch_lines(["output.0: max_bound_ratio = * (limit 0.05) fails, but it did not when the "
                                 "failure was accepted"])


def test_a_case_that_fails_differently_than_accepted_fails(pytester):
    accept(pytester)
    edit(pytester, lambda d: d["step0/rank0::Functional.linear.0.forward"].update(status="input-error"))
    result = known(pytester)
    result.assert_outcomes(failed=1, xfailed=5)
    result.stdout.fnmatch_lines(["  changed: step0/rank0::Functional.linear.0.forward: accepted as input-error, "
                                 "now error"])


def test_a_case_with_broken_dump_data_can_be_accepted_as_an_input_error(pytester):
    folder = pytester.path / "dump" / "step0" / "rank0"
    shutil.copytree(DUMP.parent, folder)
    for path in folder.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    (folder / "dump_tensor_data" / "Functional.relu.0.forward.input.0.pt").unlink()
    args = ["--npu-precision", str(pytester.path / "dump"), "-k", "relu", "--npu-precision-known-failures", "kf.json",
            "-p", "no:cacheprovider"]
    pytester.runpytest(*args, "--npu-precision-update-known-failures").assert_outcomes(failed=2)
    entry = entries(pytester)["step0/rank0::Functional.relu.0.forward"]
    assert entry["status"] == "input-error" and entry["outputs"] == {}
    assert "Functional.relu.0.forward.input.0.pt" in entry["message"]
    result = pytester.runpytest(*args)
    result.assert_outcomes(xfailed=2)
    assert result.ret == 0


STALE = "step0/rank0::Functional.gone.0.forward"


def add_stale(pytester) -> None:
    edit(pytester, lambda d: d.update({STALE: {"accepted": "2026-01-01", "reason": "old", "status": "error",
                                              "outputs": {}}}))


def test_stale_entries_fail_the_run_unless_warned(pytester):
    accept(pytester)
    add_stale(pytester)
    result = known(pytester)
    result.assert_outcomes(xfailed=6)
    assert result.ret == 1
    result.stdout.fnmatch_lines([
        f"  stale: {STALE}: matches no collected case",
        "  stale entries fail the run: remove them, rerun with --npu-precision-update-known-failures, "
        "or pass --npu-precision-warn-stale",
    ])
    warned = known(pytester, "--npu-precision-warn-stale")
    assert warned.ret == 0
    warned.stdout.fnmatch_lines([f"  stale: {STALE}: matches no collected case",
                                 "  stale entries are only warned about"])


def test_deselected_and_unselected_cases_are_not_stale(pytester):
    accept(pytester)
    result = known(pytester, select="linear and forward")
    result.assert_outcomes(xfailed=3)
    assert result.ret == 0 and "stale" not in result.stdout.str()
    one = pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-case", "step0/rank0::Functional.linear.1.forward",
                             "--npu-precision-rules", "rules.yaml",
                             "--npu-precision-known-failures", "kf.json", "-p", "no:cacheprovider")
    one.assert_outcomes(xfailed=1)
    assert one.ret == 0 and "stale" not in one.stdout.str()


def test_update_keeps_reasons_and_unrun_entries_drops_fixed_and_stale_entries(pytester):
    accept(pytester)
    edit(pytester, lambda d: d["step0/rank0::Functional.linear.2.forward"].update(reason="accepted by Ana",
                                                                                   accepted="2026-01-01"))
    add_stale(pytester)
    before = entries(pytester)
    # linear.0 now passes (a loose limit), linear.1 and .2 are deselected.
    result = accept(pytester, select="linear.0", limit=8)
    result.stdout.fnmatch_lines(["*rewrote kf.json: 4 entries; 0 added, 0 changed, 2 removed as fixed, "
                                 "1 stale removed"])
    after = entries(pytester)
    assert sorted(after) == sorted(LINEAR[2:])
    assert all(after[case_id] == before[case_id] for case_id in after)  # untouched, reason and date kept
    # A tighter limit refreshes the numbers of the cases that ran, and keeps their reasons.
    accept(pytester, select="linear.2", limit=0.04).stdout.fnmatch_lines(["*0 added, 2 changed, 0 removed*"])
    entry = entries(pytester)["step0/rank0::Functional.linear.2.forward"]
    assert entry["reason"] == "accepted by Ana" and entry["outputs"]["output.0"][0]["limit"] == 0.04
    assert entry["accepted"] == datetime.date.today().isoformat()


def test_warnings_show_in_the_summary_and_fail_only_when_strict(pytester):
    warn_only = "{error: 8, warning: 0.05}"
    result = run(pytester, limit=warn_only)
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["cases: 6 warning",
                                 "warning: step0/rank0::Functional.linear.0.backward: grad.input_args[[]*[]]: "
                                 "max_bound_ratio * > warning limit 0.05"])
    strict = run(pytester, "--npu-precision-strict-warnings", limit=warn_only)
    strict.assert_outcomes(failed=6)
    assert strict.ret == 1
    strict.stdout.fnmatch_lines(["*max_bound_ratio = * > warning limit 0.05 (error limit 8)  [[]warning[]]",
                                 "warnings fail this run: --npu-precision-strict-warnings"])


def test_harness_errors_fail_the_run_and_are_counted(pytester, monkeypatch):
    import pytest_npuprecision.plugin.collecting as plugin

    real = plugin.run_case

    def broken(case, *args):
        if case.key == "Functional.relu.0.forward":
            raise RuntimeError("planted harness bug")
        return real(case, *args)

    monkeypatch.setattr(plugin, "run_case", broken)
    result = pytester.runpytest("--npu-precision", str(DUMP), "-k", "relu", "-p", "no:cacheprovider")
    result.assert_outcomes(failed=1, passed=1)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["harness error (please report it with this case):", "cases: 1 harness-error, 1 pass",
                                 "worst: step0/rank0::Functional.relu.0.forward: RuntimeError: planted harness bug"])


BAD_FILES = {
    "not JSON": ("{", "kf.json: the known-failures file is not valid JSON (Expecting property name enclosed in double "
                      "quotes"),
    "nested 100,000 deep": ("[" * 100_000 + "]" * 100_000, "kf.json: the known-failures file nests deeper than 64 "
                                                           "levels"),
    "a list": ("[]", "kf.json: the top level: expected a mapping of case ids to accepted failures, "
                     "got a list"),
    "entry without status": ('{"a::b": {"reason": "", "accepted": "2026-01-01"}}', "kf.json: a::b.status: is missing"),
    "unknown status": ('{"a::b": {"reason": "", "accepted": "x", "status": "bad"}}',
                       "kf.json: a::b.status: 'bad' is not a status a known failure has: use error, warning, "
                       "input-error"),
    "checks without numbers": ('{"a::b": {"reason": "", "accepted": "x", "status": "error", '
                               '"outputs": {"output.0": [{"metric": "m"}]}}}',
                               "kf.json: a::b.outputs['output.0'][0].value: is missing: fix the entry, or rewrite the "
                               "file with --npu-precision-update-known-failures"),
    "a string for a number": ('{"a::b": {"reason": "", "accepted": "x", "status": "error", '
                              '"outputs": {"output.0": [{"metric": "m", "value": "big", "limit": 1}]}}}',
                              "kf.json: a::b.outputs['output.0'][0].value: expected a number, got 'big'"),
}


@pytest.mark.parametrize("problem", BAD_FILES)
def test_a_bad_known_failures_file_is_a_usage_error_naming_the_problem(pytester, problem):
    text, message = BAD_FILES[problem]
    (pytester.path / "kf.json").write_text(text)
    result = pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-known-failures", "kf.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --npu-precision-known-failures: " in result.stderr.str()
    assert "kf.json" in result.stderr.str() and message in result.stderr.str()


def test_bad_gating_options_are_usage_errors(pytester):
    result = pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-known-failures", "missing.json")
    result.stderr.fnmatch_lines(["*known-failures file 'missing.json' does not exist: create it with "
                                 "--npu-precision-update-known-failures*"])
    result = pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-update-known-failures")
    result.stderr.fnmatch_lines(["*--npu-precision-update-known-failures needs a file to write: "
                                 "add --npu-precision-known-failures FILE*"])
    for margin in ("ten", "-5%"):
        result = pytester.runpytest("--npu-precision", str(DUMP), f"--npu-precision-known-failures-margin={margin}")
        result.stderr.fnmatch_lines([f"*margin {margin!r} is not a non-negative number: give a fraction such as "
                                     f"0.1 or a percentage such as 10%*"])
