"""A failure block is headed by its case id, and a known failure that now passes says which case it is.

Without a domain in reportinfo, pytest heads every block "test session" (issue 42). Failures are
planted as in test_gating.py: linear's max_bound_ratio limited to 0.05, which its fair calls exceed.
"""

from __future__ import annotations

from fixtures import FIXTURES, needs_dumps

DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
pytestmark = needs_dumps(DUMP)


def run(pytester, *args, limit: float = 0.05):
    pytester.makefile(".yaml", rules=f"ops:\n  linear: {{limits: {{error_bound: {{max_bound_ratio: {limit}}}}}}}\n")
    return pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-device", "cpu",
                              "--npu-precision-rules", "rules.yaml", "-k", "linear", "-p", "no:cacheprovider", *args)


def test_each_failure_block_is_headed_by_its_case_id(pytester):
    result = run(pytester, "-v")
    result.assert_outcomes(failed=6)
    out = result.stdout.str()
    assert "_ test session _" not in out
    for index in range(3):
        for direction in ("forward", "backward"):
            result.stdout.fnmatch_lines([f"*_ dump case step0/rank0::Functional.linear.{index}.{direction} _*"])
    # The verbose line keeps the node id as it is (a bare case id as domain would print Functional::linear::0).
    result.stdout.fnmatch_lines(["*dump.json::step0/rank0::Functional.linear.0.forward FAILED*"])


def test_a_fixed_known_failure_names_its_case(pytester):
    run(pytester, "--npu-precision-known-failures", "kf.json", "--npu-precision-update-known-failures")
    result = run(pytester, "--npu-precision-known-failures", "kf.json", limit=8)
    result.assert_outcomes(failed=6)
    out = result.stdout.str()
    assert "_ test session _" not in out
    for index in range(3):
        case_id = f"step0/rank0::Functional.linear.{index}.forward"
        result.stdout.fnmatch_lines([f"*_ dump case {case_id} _*", f"[[]XPASS(strict)[]] known failure {case_id} (error, *"])
