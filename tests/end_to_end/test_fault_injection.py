"""Each standard catches its defect end to end: a fault-injecting backend under ``pytest --npu-precision``.

The backend (faulty_backend.py) runs on the CPU and corrupts the outputs, or the input gradients,
of chosen APIs. Each run below names it on the command line as a user names a backend
(``--npu-precision-device module:object``), runs msprobe's transformer dump, and then reads the
run's cases.jsonl: every case of a corrupted API in the corrupted direction must fail by the
expected standard and metrics, and every other case must pass, the corrupted API's other
direction included. Standards the dump's ops do not use by default (ulp, thousandth) are applied
through ``--npu-precision-rules``, as a user would; the benchmark standard through a live cpu baseline.
"""

from __future__ import annotations

import collections
import itertools
import json
from dataclasses import dataclass

import pytest

from fixtures import FIXTURES, fixture_dump

DUMP = FIXTURES / "transformer_tensor"
STATISTICS_DUMP = FIXTURES / "mlp_statistics"
_module_names = (f"planted_faults_{i}" for i in itertools.count())


@dataclass(frozen=True)
class Planted:
    api: str  # msprobe's name without call index: every call of it is corrupted
    fault: str  # a Fault(...) expression, written into the backend's module
    standard: str  # the standard that must catch it
    metrics: frozenset[str]  # checks that must fail (others may fail too)

    @property
    def direction(self) -> str:
        return "backward" if "backward=True" in self.fault else "forward"


def planted(api: str, fault: str, standard: str, *metrics: str) -> Planted:
    return Planted(api, fault, standard, frozenset(metrics))


BESIDE = "benchmark+error_bound"

# One run per entry; the APIs of a run differ, so each fault's cases are its own.
RUNS: dict[str, tuple[list[Planted], tuple[str, ...]]] = {
    "default standards": ([
        planted("Functional.linear", 'Fault("nan")', "error_bound", "nonfinite_mismatch"),
        planted("Torch.softmax", 'Fault("inf")', "error_bound", "nonfinite_mismatch"),
        planted("Tensor.masked_fill", 'Fault("saturation")', "binary", "nonfinite_mismatch"),
        planted("Functional.layer_norm", 'Fault("bias", 8)', "error_bound", "magnitude_bound_bias"),
        planted("Functional.gelu", 'Fault("noise", 64)', "error_bound", "max_bound_ratio"),
        planted("Torch.matmul", 'Fault("low_precision", dtype=torch.bfloat16)', "error_bound", "max_bound_ratio"),
        planted("Functional.scaled_dot_product_attention", 'Fault("sign_flip")', "error_bound", "max_bound_ratio"),
        planted("Tensor.__truediv__", 'Fault("wrong_element")', "absolute", "rel_err_ratio"),
        planted("Tensor.transpose", 'Fault("wrong_element")', "binary", "binary_mismatch"),
        planted("Torch.triu", 'Fault("wrong_element")', "binary", "binary_mismatch"),  # a bool mask
        planted("Torch.bmm", 'Fault("nan", backward=True)', "error_bound", "nonfinite_mismatch"),
        planted("Tensor.__add__", 'Fault("bias", 8, backward=True)', "error_bound", "magnitude_bound_bias"),
        planted("Functional.embedding", 'Fault("wrong_element", backward=True)', "error_bound", "max_bound_ratio"),
    ], ()),
    "ulp and thousandth by the user's rules": ([
        planted("Tensor.__truediv__", 'Fault("noise", 16)', "ulp", "max_ulp_err", "mean_ulp_err"),
        planted("Functional.linear", 'Fault("sign_flip")', "thousandth", "thousandth_ratio"),
    ], ("--npu-precision-rules", "rules.yaml")),
    # Against a baseline the ratios judge next to the op's own standard. A bias of 4 eps stays within
    # the error bound's fair error: only the baseline's own error exposes it, in the RMSE. (Unbiased
    # noise that small only warns there: a fair kernel summing in another order errs as much. So does
    # a 4-eps bias of layer_norm: its rows err together, and this dump's few rows leave chance wide.)
    "benchmark against a live cpu baseline": ([
        planted("Functional.linear", 'Fault("bias", 4)', BESIDE, "rmse_ratio"),
        planted("Functional.layer_norm", 'Fault("bias", 16)', BESIDE, "rmse_ratio"),
        planted("Functional.gelu", 'Fault("low_precision", dtype=torch.float16)', BESIDE, "max_scaled_err_ratio"),
        planted("Torch.bmm", 'Fault("bias", 4, backward=True)', BESIDE, "rmse_ratio"),
    ], ("--npu-precision-baseline", "cpu")),
}
RULES = "ops:\n  Tensor.__truediv__: {standard: ulp}\n  linear: {standard: thousandth}\n"


def run_with_faults(pytester, faults: list[Planted], *options: str, dump=DUMP):
    """Run the dump on a FaultyBackend holding ``faults``; returns the result and its case records."""
    module = next(_module_names)
    planted_faults = ", ".join(f"{p.api!r}: {p.fault}" for p in faults)
    pytester.makepyfile(**{module: f"import torch\nfrom faulty_backend import Fault, FaultyBackend\n"
                                   f"backend = FaultyBackend({{{planted_faults}}})\n"})
    pytester.makefile(".yaml", rules=RULES)
    pytester.syspathinsert()
    result = pytester.runpytest("--npu-precision", str(fixture_dump(dump)), "--npu-precision-device", f"{module}:backend",
                                "--npu-precision-report", "report", "-p", "no:cacheprovider", *options)
    lines = (pytester.path / "report" / "cases.jsonl").read_text().splitlines()
    return result, [json.loads(line) for line in lines]


def failing_checks(record: dict) -> dict[str, set[str]]:
    """standard -> the metrics that failed, over the case's failing outputs."""
    found = collections.defaultdict(set)
    for output in record["outputs"]:
        for check in output["checks"]:
            if check["status"] == "error":
                found[output["standard"]].add(check["metric"])
    return found


def api_of(record: dict) -> str:
    return record["api"].rsplit(".", 1)[0]


@pytest.mark.parametrize("run", RUNS)
def test_every_planted_defect_fails_its_cases_and_nothing_else(pytester, run):
    faults, options = RUNS[run]
    result, records = run_with_faults(pytester, faults, *options)
    by_target = {(p.api, p.direction): p for p in faults}
    missed, wrong, false_alarms = [], [], []
    hit = collections.Counter()
    for record in records:
        target = by_target.get((api_of(record), record["direction"]))
        if target is None:
            if record["status"] != "pass":
                false_alarms.append(f"{record['case_id']}: {record['status']} {dict(failing_checks(record))}")
            continue
        hit[target] += 1
        failed = failing_checks(record)
        if record["status"] != "error":
            missed.append(f"{record['case_id']} ({target.fault}): {record['status']}")
        elif set(failed) != {target.standard} or not target.metrics <= failed[target.standard]:
            wrong.append(f"{record['case_id']} ({target.fault}): failed {dict(failed)}, expected "
                         f"{target.standard} {sorted(target.metrics)}")
    assert not missed and not wrong and not false_alarms, "\n".join(missed + wrong + false_alarms)
    assert set(hit) == set(faults), f"planted in APIs the dump lacks: {set(faults) - set(hit)}"
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes()["failed"] == sum(hit.values())


@pytest.mark.parametrize("options", [(), ("--npu-precision-baseline", "cpu")], ids=["alone", "with-baseline"])
def test_the_fault_free_backend_passes_every_case(pytester, options):
    result, records = run_with_faults(pytester, [], *options)
    assert result.ret == pytest.ExitCode.OK
    assert len(records) == 125 and {r["status"] for r in records} == {"pass"}
    result.stdout.fnmatch_lines(["npu-precision: device faulty-cpu (*faults none)*"])


def test_faults_reach_synthesized_statistics_inputs_too(pytester):
    faults = [planted("Functional.linear", 'Fault("nan", backward=True)', "error_bound", "nonfinite_mismatch"),
              planted("Functional.gelu", 'Fault("bias", 16)', "error_bound", "magnitude_bound_bias")]
    result, records = run_with_faults(pytester, faults, dump=STATISTICS_DUMP)
    failed = {(api_of(r), r["direction"]) for r in records if r["status"] != "pass"}
    assert failed == {("Functional.linear", "backward"), ("Functional.gelu", "forward")}
    assert result.parseoutcomes()["failed"] == sum(1 for r in records if r["status"] == "error")


def test_the_failure_message_names_the_fault_standard_and_a_rerun_with_the_backend(pytester):
    faults = [planted("Tensor.__truediv__", 'Fault("wrong_element")', "absolute", "rel_err_ratio")]
    result, _ = run_with_faults(pytester, faults, "-k", "__truediv__.0.forward")
    text = result.stdout.str()
    assert "error by the absolute standard" in text
    result.stdout.fnmatch_lines([
        "npu-precision: device faulty-cpu (*faults Tensor.__truediv__ wrong_element 1.5)*",
        "case step0/rank0::Tensor.__truediv__.0.forward, seed *, device faulty-cpu vs golden cpu float64, "
        "baseline none",
        "rerun: cd * && pytest --npu-precision */transformer_tensor --npu-precision-device planted_faults_*:backend "
        "--npu-precision-case step0/rank0::Tensor.__truediv__.0.forward",
    ])
