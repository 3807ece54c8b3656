"""What a run's end says: a run that judged nothing is not green, one line per failing API name, and
why a run exits 1 or 5 on its very last line (issue 42).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures import FIXTURES, needs_dumps

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "dumps"
DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
pytestmark = needs_dumps(DUMP)
TWO_DEFECTS = ("from faulty_backend import Fault, FaultyBackend\n"
               "backend = FaultyBackend({'Functional.linear': Fault('nan'), 'Functional.gelu': Fault('bias', 64)})\n")


def last_line(result) -> str:
    return [line for line in result.outlines if line.strip()][-1]


def test_dumped_on_a_statistics_dump_judges_what_its_statistics_prove(pytester):
    """Once one usage error; now each call is judged by its invariants, and one without says why (issue 55)."""
    shutil.copytree(EXAMPLES / "mlp_statistics", pytester.path / "stats")
    result = pytester.runpytest("--npu-precision", "stats", "--npu-precision-device", "dumped",
                                "-p", "no:cacheprovider")
    assert result.ret == 0
    cases = next(line for line in result.outlines if line.startswith("cases:"))
    assert cases.startswith("cases: 9 pass, 7 skip (7 no-invariant)"), cases


def test_a_run_where_every_case_skips_says_so_and_exits_5(pytester):
    result = pytester.runpytest("--npu-precision", str(FIXTURES / "mlp_L0_tensor"), "--npu-precision-device", "cpu",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=28)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["NOTHING JUDGED: every one of the 28 cases skipped (28 module-entry), so this run "
                                 "checked no precision and exits 5*"])
    assert last_line(result) == "npu-precision: exit status 5: no case was judged, all 28 skipped (28 module-entry)"


def test_one_worst_line_per_api_name_so_the_second_defect_shows(pytester):
    pytester.makepyfile(faults=TWO_DEFECTS)
    result = pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-device", "faults:backend",
                                "-k", "forward", "-p", "no:cacheprovider")
    worst = [line for line in result.outlines if line.startswith("worst: ")]
    assert [line.split("::")[1].split(":")[0].rsplit(".", 2)[0] for line in worst] == [
        "Functional.linear", "Functional.gelu"]
    assert worst[0].endswith("(the worst of 3 failing Functional.linear cases)")
    assert last_line(result) == "npu-precision: exit status 1: 4 cases failed"


def test_a_failing_run_with_a_green_looking_last_line_says_why(pytester):
    rules = "ops:\n  linear: {limits: {error_bound: {max_bound_ratio: LIMIT}}}\n"
    common = ("--npu-precision", str(DUMP), "--npu-precision-device", "cpu", "--npu-precision-rules", "rules.yaml",
              "-k", "linear", "-p", "no:cacheprovider", "--npu-precision-known-failures", "kf.json")
    pytester.makefile(".yaml", rules=rules.replace("LIMIT", "0.05"))
    pytester.runpytest(*common, "--npu-precision-update-known-failures")
    entries = json.loads((pytester.path / "kf.json").read_text())
    entries["step0/rank0::Functional.linear.9.forward"] = entries["step0/rank0::Functional.linear.0.forward"]
    (pytester.path / "kf.json").write_text(json.dumps(entries))
    stale = pytester.runpytest(*common)
    stale.assert_outcomes(xfailed=6)
    assert stale.ret == pytest.ExitCode.TESTS_FAILED
    assert last_line(stale) == "npu-precision: exit status 1: 1 stale known-failure entries match no collected case"

    pytester.makefile(".yaml", rules=rules.replace("LIMIT", "8"))
    fixed = pytester.runpytest(*common, "--npu-precision-update-known-failures")
    fixed.assert_outcomes(failed=6)
    assert last_line(fixed) == ("npu-precision: exit status 1: 6 known failures now pass (XPASS strict) "
                                "(the update removed them: the next run passes)")
    assert pytester.runpytest(*common).ret == pytest.ExitCode.OK
