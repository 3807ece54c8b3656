"""Each case's status and key metrics reach --junitxml as properties, in serial and parallel runs."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from fixtures import FIXTURES, needs_dumps

DUMP = FIXTURES / "mlp_tensor" / "step0" / "rank0" / "dump.json"
pytestmark = needs_dumps(DUMP)
RULES = "ops:\n  linear: {limits: {error_bound: {max_bound_ratio: 0.05}}}\n"


def junit_cases(path) -> dict[str, tuple[dict[str, str], ET.Element]]:
    """testcase name -> (its properties, the element)."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cases[case.get("name")] = props, case
    return cases


@pytest.mark.parametrize("parallel", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_each_case_carries_its_status_and_key_metrics(pytester, parallel):
    pytester.makefile(".yaml", rules=RULES)
    common = ["--npu-precision", str(DUMP), "--npu-precision-device", "cpu", "--npu-precision-rules", "rules.yaml",
              "--npu-precision-known-failures", "kf.json", "-p", "no:cacheprovider"]
    pytester.runpytest(*common, "-k", "linear.0.forward", "--npu-precision-update-known-failures")
    result = pytester.runpytest(*common, "-k", "linear.0.forward or linear.1.forward or relu",
                                "--junitxml", "junit.xml", *parallel)
    result.assert_outcomes(failed=1, passed=2, xfailed=1)
    cases = junit_cases(pytester.path / "junit.xml")
    assert set(cases) == {"Functional.linear.0.forward", "Functional.linear.1.forward",
                          "Functional.relu.0.forward", "Functional.relu.0.backward"}

    failing, element = cases["Functional.linear.1.forward"]
    assert element.find("failure") is not None
    assert failing["npu_precision_case_id"] == "step0/rank0::Functional.linear.1.forward"
    assert failing["npu_precision_status"] == "error"
    assert failing["npu_precision_standard"] == "error_bound" and failing["npu_precision_dtype"] == "float32"
    assert failing["npu_precision_worst_output"] == "output.0"
    assert failing["npu_precision_worst_metric"] == "max_bound_ratio"
    assert failing["npu_precision_worst_limit"] == "0.05" and float(failing["npu_precision_worst_value"]) > 0.05
    assert float(failing["npu_precision_seconds"]) > 0

    known, element = cases["Functional.linear.0.forward"]
    assert element.find("skipped").get("type") == "pytest.xfail"
    assert known["npu_precision_status"] == "error" and known["npu_precision_known_failure"] == "xfail"

    passing, element = cases["Functional.relu.0.forward"]
    assert element.find("failure") is None and element.find("skipped") is None
    assert passing["npu_precision_status"] == "pass" and passing["npu_precision_standard"] == "binary"
    assert "npu_precision_known_failure" not in passing


def test_without_junit_xml_reports_carry_no_properties(pytester):
    """Every report xdist sends is serialized on the worker and decoded on the controller: the
    properties ride along only when JUnit XML is written."""
    pytester.makepyfile(show_properties="""
        def pytest_runtest_logreport(report):
            if report.when == "teardown":
                print(f"PROPERTIES {len(report.user_properties)}")
    """)
    pytester.syspathinsert()
    result = pytester.runpytest("--npu-precision", str(DUMP), "--npu-precision-device", "cpu", "-p",
                                "no:cacheprovider", "-p", "show_properties", "-k", "relu.0.forward", "-s")
    result.stdout.fnmatch_lines(["*PROPERTIES 0*"])
